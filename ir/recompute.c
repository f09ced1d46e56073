/* recompute.c: activation recomputation for --train (--recompute).
 *
 * The backward pass reads forward values: a MatMul's gradient its input, a
 * Gelu's its input, a LayerNorm's its input. Kept, each of them lives from
 * its forward node to its last backward reader, which is most of the
 * step's activation memory. With --recompute, backward reads copies made
 * again just before they are needed instead:
 *
 *   selective  (Korthikanti et al.) the outputs of cheap nodes, the
 *              elementwise ops, normalisations and softmax, are computed
 *              again from their inputs; GEMM outputs are kept;
 *   full       every forward value backward reads is computed again, GEMMs
 *              included, from the layers' boundaries on: the values a
 *              normalisation reads (a transformer's residual stream) are
 *              the checkpoints kept (one more forward pass in backward,
 *              layer by layer, the least memory).
 *
 * A recomputed node is a copy of the forward node (same op, attributes,
 * inputs, or the copies of its inputs where those are recomputed too),
 * named "<node>/recompute", marked as backward, and placed right before its
 * first reader, so the forward value dies at its last forward reader.
 * Recomputation repeats the same kernels on the same values: the numbers
 * are the same, bit for bit.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

static int cheap(OpKind op)
{
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_POW: case OP_SQRT: case OP_ERF: case OP_TANH:
    case OP_RELU: case OP_GELU: case OP_SIGMOID: case OP_NEG: case OP_EXP: case OP_LOG: case OP_RECIPROCAL:
    case OP_ABS: case OP_WHERE: case OP_CAST: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_LAYERNORM:
    case OP_RMSNORM: case OP_TRANSPOSE: case OP_RESHAPE: case OP_UNSQUEEZE: case OP_SQUEEZE: case OP_FLATTEN:
    case OP_EXPAND: case OP_IDENTITY: case OP_CONCAT: case OP_SLICE: case OP_GATHER:
        return 1;
    default:
        return 0;
    }
}

typedef struct Recompute {
    Graph *g;
    int full;
    int nt;                /* tensors before the pass */
    Tensor **copy;         /* per forward tensor id: its recomputed copy, or NULL */
    Diag *d;
} Recompute;

/* Should forward node n be run again for backward? */
static int recomputable(const Recompute *rc, const Node *n)
{
    if (!n || n->grad || ir_output_in_place(n, 0) >= 0 || n->op == OP_CONSTANT)
        return 0;
    for (int j = 0; j < n->ninputs; j++)
        if (n->inputs[j] && n->inputs[j]->data && !n->inputs[j]->is_initializer)
            return 0; /* reads a folded value: keep it simple */
    return rc->full || cheap(n->op);
}

/* full: the layers' boundaries are kept as checkpoints: a value a
 * normalisation reads (a transformer's residual stream: each layer starts
 * from one), else the whole forward would be computed again at once, at
 * the start of backward, and held. */
static int checkpoint(const Tensor *t)
{
    for (int c = 0; c < t->nconsumers; c++)
        if (!t->consumers[c]->grad && (t->consumers[c]->op == OP_LAYERNORM || t->consumers[c]->op == OP_RMSNORM ||
                                       t->consumers[c]->op == OP_BATCHNORM))
            return 1;
    return 0;
}

/* The recomputed copy of forward tensor t (t itself when it is kept). */
static Tensor *copy_of(Recompute *rc, Tensor *t)
{
    if (!t || t->id >= rc->nt)
        return t;
    Node *n = t->producer;
    if (!recomputable(rc, n) || (rc->full && checkpoint(t)))
        return t;
    if (rc->copy[t->id])
        return rc->copy[t->id];
    Graph *g = rc->g;
    char name[200];
    snprintf(name, sizeof name, "%.180s/recompute", n->name);
    Node *c = graph_node_add(g, n->op, name);
    c->grad = 1;
    c->recomputed = 1;
    c->fwd = n;
    c->attrs = n->attrs;
    c->nattrs = n->nattrs;
    c->op_type = n->op_type;
    c->ninputs = n->ninputs;
    c->inputs = arena_alloc(&g->arena, (size_t)(n->ninputs ? n->ninputs : 1) * sizeof(Tensor *));
    for (int j = 0; j < n->ninputs; j++)
        c->inputs[j] = copy_of(rc, n->inputs[j]);
    c->noutputs = n->noutputs;
    c->outputs = arena_alloc(&g->arena, (size_t)(n->noutputs ? n->noutputs : 1) * sizeof(Tensor *));
    for (int k = 0; k < n->noutputs; k++) {
        if (!n->outputs[k])
            continue;
        char base[200];
        snprintf(base, sizeof base, "%.170s.recomputed", n->outputs[k]->name);
        Tensor *o = graph_tensor_fresh(g, base);
        o->producer = c;
        c->outputs[k] = o;
    }
    if (ir_infer_node(g, c, rc->d))
        return NULL;
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k])
            rc->copy[n->outputs[k]->id] = c->outputs[k];
    return rc->copy[t->id];
}

int ir_recompute(Graph *g, int mode, Diag *d)
{
    if (mode == RECOMPUTE_NONE)
        return 0;
    Recompute rc = {.g = g, .full = mode == RECOMPUTE_FULL, .nt = g->ntensors, .d = d};
    rc.copy = calloc((size_t)g->ntensors + 1, sizeof(Tensor *));
    if (!rc.copy)
        abort();
    int nn = g->nnodes, rcode = -1;
    for (int i = 0; i < nn; i++) {
        Node *n = g->nodes[i];
        if (!n->grad || n->recomputed)
            continue;
        for (int j = 0; j < n->ninputs; j++) {
            Tensor *t = n->inputs[j];
            if (!t || t->id >= rc.nt || !t->producer || t->producer->grad)
                continue;
            Tensor *c = copy_of(&rc, t);
            if (!c)
                goto out;
            n->inputs[j] = c;
        }
    }
    if (graph_toposort(g, d))
        goto out;
    /* Each copy right before its first reader, the last ones first, so a
     * copy's own copies (its inputs) then go right before it. */
    for (int i = g->nnodes - 1; i >= 0; i--) {
        Node *n = g->nodes[i];
        if (!n->recomputed)
            continue;
        int first = g->nnodes;
        for (int k = 0; k < n->noutputs; k++)
            for (int c = 0; n->outputs[k] && c < n->outputs[k]->nconsumers; c++)
                if (n->outputs[k]->consumers[c]->id < first)
                    first = n->outputs[k]->consumers[c]->id;
        if (first <= i + 1 || first == g->nnodes)
            continue;
        memmove(&g->nodes[i], &g->nodes[i + 1], (size_t)(first - 1 - i) * sizeof(Node *));
        g->nodes[first - 1] = n;
        for (int k = i; k < first; k++)
            g->nodes[k]->id = k;
    }
    rcode = 0;
out:
    free(rc.copy);
    return rcode;
}
