/* fuse.c: activations that exporters spell out node by node.
 *
 * PyTorch exports GELU as arithmetic around an Erf (BERT: x * 0.5 *
 * (1 + erf(x / sqrt 2))) or a Tanh (GPT-2's NewGELU: 0.5 x (1 + tanh(
 * sqrt(2/pi) (x + 0.044715 x^3)))), in whatever operand order and constant
 * spelling the exporter chose (Div by 1.4142135 or Mul by 0.70710677, Pow
 * or x*x*x, the 0.5 first or last). Run as written that is five to eight
 * passes over the activation; as one Gelu node it is one, and the bias Add
 * before it then fuses into it too (codegen/views.c).
 *
 * Rather than match operand orders one by one, the pass takes each
 * candidate subgraph — elementwise float32 nodes whose intermediate values
 * feed nothing else, reading one tensor x besides scalar constants, with
 * an Erf or a Tanh among them — and evaluates it in double at probe points
 * spread over [-6, 6]. When it agrees there with GELU (erf form) or with
 * GELU's tanh approximation to within what float32 constants explain
 * (1e-5 relative; the two forms differ by up to 1e-3, so the test tells
 * them apart), the subgraph's last node becomes Gelu(x) (approximate
 * "none" or "tanh"), keeping its name and output tensor, and the others
 * are dropped. The intermediate tensors then exist in no plan: --shard on
 * one of them names an unknown tensor.
 */
#include "ir.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FUSE_MAX_NODES 12

typedef struct Pattern {
    const Node *nodes[FUSE_MAX_NODES]; /* in graph order: inputs before readers */
    int n;
    const Tensor *x;
    int transcendental; /* an Erf or Tanh among the nodes */
} Pattern;

static int elementwise(OpKind op)
{
    return op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_DIV || op == OP_POW || op == OP_ERF ||
           op == OP_TANH || op == OP_SQRT || op == OP_NEG;
}

static int same_shape(const Tensor *a, const Tensor *b)
{
    return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static int scalar_const(const Tensor *t)
{
    return t->data && t->dtype == DT_F32 && t->rank >= 0 && tensor_numel(t) == 1;
}

static int in_pattern(const Pattern *p, const Node *n)
{
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] == n)
            return 1;
    return 0;
}

/* Grows p from node n: an input made by an elementwise node and read by
 * nothing else joins the pattern; any other input must be a scalar
 * constant or the one variable x. 0 when the subgraph does not qualify
 * (depth bounds the recursion: a model's chain of single-use nodes can be
 * as long as the model). */
static int grow(Pattern *p, const Node *n, const Tensor *y, int depth)
{
    if (depth >= FUSE_MAX_NODES || !elementwise(n->op) || n->noutputs != 1 || !n->outputs[0] ||
        n->outputs[0]->dtype != DT_F32 || !same_shape(n->outputs[0], y) || in_pattern(p, n) ||
        p->n == FUSE_MAX_NODES)
        return 0;
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!t)
            return 0;
        const Node *pn = t->producer;
        if (pn && !pn->folded && t->nconsumers == 1 && !t->is_output && elementwise(pn->op) && t->dtype == DT_F32 &&
            same_shape(t, y)) {
            if (!grow(p, pn, y, depth + 1))
                return 0;
        } else if (!scalar_const(t)) {
            if (t->dtype != DT_F32 || !same_shape(t, y) || (p->x && p->x != t))
                return 0;
            p->x = t;
        }
    }
    p->nodes[p->n++] = n; /* after everything it reads */
    p->transcendental |= n->op == OP_ERF || n->op == OP_TANH;
    return 1;
}

static double value_of(const Pattern *p, const Tensor *t, double x, const double *vals)
{
    if (t == p->x)
        return x;
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i]->outputs[0] == t)
            return vals[i];
    return dtype_load(t->dtype, t->data, 0); /* a scalar constant */
}

/* The pattern's output at x, in double. */
static double eval(const Pattern *p, double x)
{
    double vals[FUSE_MAX_NODES];
    for (int i = 0; i < p->n; i++) {
        const Node *n = p->nodes[i];
        double a = value_of(p, n->inputs[0], x, vals), b = n->ninputs > 1 ? value_of(p, n->inputs[1], x, vals) : 0;
        switch (n->op) {
        case OP_ADD: vals[i] = a + b; break;
        case OP_SUB: vals[i] = a - b; break;
        case OP_MUL: vals[i] = a * b; break;
        case OP_DIV: vals[i] = a / b; break;
        case OP_POW: vals[i] = pow(a, b); break;
        case OP_ERF: vals[i] = erf(a); break;
        case OP_TANH: vals[i] = tanh(a); break;
        case OP_SQRT: vals[i] = sqrt(a); break;
        default: vals[i] = -a; break; /* OP_NEG */
        }
    }
    return vals[p->n - 1];
}

/* 1: GELU (erf), 2: GELU (tanh approximation), 0: neither. */
static int which_gelu(const Pattern *p)
{
    int erf_ok = 1, tanh_ok = 1;
    for (int i = 0; i <= 48; i++) {
        double x = -6.0 + 0.25 * i + 0.01; /* off the grid of round numbers */
        double f = eval(p, x);
        double ge = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        double gt = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        if (!(fabs(f - ge) <= 1e-5 * (1.0 + fabs(ge))))
            erf_ok = 0;
        if (!(fabs(f - gt) <= 1e-5 * (1.0 + fabs(gt))))
            tanh_ok = 0;
    }
    return erf_ok ? 1 : tanh_ok ? 2 : 0;
}

int ir_fuse_activations(Graph *g)
{
    int fused = 0;
    graph_link_consumers(g);
    for (int i = g->nnodes - 1; i >= 0; i--) { /* from the end: the widest pattern ends at its last node */
        Node *n = g->nodes[i];
        if (n->folded || !elementwise(n->op) || !n->outputs[0] || n->outputs[0]->rank < 0)
            continue;
        Pattern p = {0};
        if (!grow(&p, n, n->outputs[0], 0) || !p.x || !p.transcendental || p.n < 2)
            continue;
        int kind = which_gelu(&p);
        if (!kind)
            continue;
        for (int k = 0; k < p.n - 1; k++)
            ((Node *)p.nodes[k])->folded = 1;
        fused += p.n - 1;
        n->op = OP_GELU;
        n->op_type = NULL;
        n->inputs[0] = (Tensor *)p.x;
        n->ninputs = 1;
        n->nattrs = 0;
        node_attr_set_str(g, n, "approximate", kind == 2 ? "tanh" : "none");
    }
    if (!fused)
        return 0;
    /* The dropped nodes go as folded ones do, but they are not shape
     * arithmetic: keep the import's folded count as it was. */
    int before = g->nfolded;
    ir_fold_sweep(g);
    g->nfused += g->nfolded - before;
    g->nfolded = before;
    return fused;
}
