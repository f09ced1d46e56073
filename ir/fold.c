/* fold.c: shape arithmetic evaluated at compile time.
 *
 * Exported models compute reshape targets, masks and position tables from
 * the input shapes at run time (Shape -> Gather -> Concat -> Reshape, Range
 * -> Cos, ...). Once --dim has bound every symbolic dim, all of that is
 * constant, so the importer evaluates it node by node in topological order
 * (frontend/load.c: normalize, infer the shape, fold) and the later stages
 * see only the data path. The op table's fold column names each op's
 * evaluator; fold_none means the op never folds.
 *
 * What folds: a node whose evaluator finds every input it reads constant
 * (Shape needs only its input's shape), when the result is shape-derived:
 * its outputs are int64 or bool, or one of its inputs was itself folded.
 * Float arithmetic on weights alone (a Gather from an embedding table by a
 * constant index) is left to run time: it is the model's compute, not its
 * shape arithmetic, and folding it would turn it into a new weight.
 * Folded outputs become constants (is_initializer, data in the graph's
 * arena, `folded` set) and ir_fold_sweep() drops the nodes.
 *
 * The evaluators work on int64, bool and float32 through one generic
 * element accessor (double holds every int64 a shape can have exactly).
 * The STYLE note suggests reusing the C kernels here; they take pointers
 * and strides computed by the emitters, so an evaluator per op family on
 * small constant tensors is simpler and keeps ir/ free of codegen/.
 */
#include "ir.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int fold_none(Graph *g, Node *n, Diag *d)
{
    (void)g;
    (void)n;
    (void)d;
    return 0;
}

/* ---- helpers shared by the evaluators ---------------------------------- */

/* Every present input holds data (an initializer, a Constant's value or a
 * folded result). */
int fold_inputs_const(const Node *n)
{
    for (int i = 0; i < n->ninputs; i++) {
        const Tensor *t = n->inputs[i];
        if (t && !t->data && tensor_numel(t) != 0)
            return 0;
    }
    return 1;
}

/* Whether folding n is shape arithmetic (see the file comment). */
int fold_is_shape_math(const Node *n)
{
    int derived = 0, nonfloat = 1, weight = 0;
    for (int i = 0; i < n->ninputs; i++) {
        const Tensor *t = n->inputs[i];
        if (t && t->folded)
            derived = 1;
        /* A float weight of the model (not a scalar literal) read with a
         * folded index, as BERT's token-type embedding row 0: its result
         * stays compute, so that --train can still train the weight. */
        if (t && t->is_initializer && !t->folded && !t->producer && dtype_is_float(t->dtype) && tensor_numel(t) > 1)
            weight = 1;
    }
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] && dtype_is_float(n->outputs[k]->dtype))
            nonfloat = 0;
    return nonfloat || (derived && !weight);
}

double fold_get(const Tensor *t, int64_t i)
{
    return dtype_load(t->dtype, t->data, i);
}

int64_t fold_get_i64(const Tensor *t, int64_t i)
{
    if (t->dtype == DT_I64) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * i, 8); /* exact beyond 2^53 */
        return v;
    }
    double v = fold_get(t, i);
    /* NaN is 0, out of range saturates (the model's values are untrusted). */
    return v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
}

void fold_set(Tensor *t, int64_t i, double v)
{
    dtype_store(t->dtype, (void *)(uintptr_t)t->data, i, v);
}

/* Gives output t (shape already inferred) a zeroed buffer in the arena. */
void *fold_alloc(Graph *g, Tensor *t)
{
    t->nbytes = tensor_numel(t) * (int64_t)dtype_size(t->dtype);
    void *buf = arena_alloc(&g->arena, (size_t)(t->nbytes ? t->nbytes : 1));
    t->data = buf;
    return buf;
}

/* Offset into input `in` (broadcast right-aligned) of output element i. */
int64_t fold_bcast_index(const Tensor *out, const Tensor *in, int64_t i)
{
    int64_t off = 0, stride = 1;
    for (int o = out->rank - 1, j = in->rank - 1; o >= 0; o--, j--) {
        int64_t coord = i % out->dims[o];
        i /= out->dims[o];
        if (j < 0)
            continue;
        if (in->dims[j] != 1)
            off += coord * stride;
        stride *= in->dims[j];
    }
    return off;
}

/* ---- evaluators for the core ops --------------------------------------- */

/* Identity, Reshape, Squeeze, Unsqueeze, Flatten: the same bytes. Cast:
 * converted element by element. */
int fold_copy(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    void *buf = fold_alloc(g, y);
    int64_t count = tensor_numel(y);
    if (x->dtype == y->dtype) {
        if (y->nbytes)
            memcpy(buf, x->data, (size_t)y->nbytes);
    } else {
        for (int64_t i = 0; i < count; i++)
            fold_set(y, i, fold_get(x, i));
    }
    return 1;
}

/* Add, Sub, Mul, Div, Pow with broadcasting; integer Div truncates and
 * x / 0 is 0, as the generated kernels do. */
int fold_binary(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *a = n->inputs[0], *b = n->inputs[1], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    fold_alloc(g, y);
    int64_t count = tensor_numel(y);
    for (int64_t i = 0; i < count; i++) {
        int64_t ia = fold_bcast_index(y, a, i), ib = fold_bcast_index(y, b, i);
        if (y->dtype == DT_I64) {
            int64_t x = fold_get_i64(a, ia), z = fold_get_i64(b, ib), r;
            switch (n->op) {
            case OP_ADD: r = (int64_t)((uint64_t)x + (uint64_t)z); break;
            case OP_SUB: r = (int64_t)((uint64_t)x - (uint64_t)z); break;
            case OP_MUL: r = (int64_t)((uint64_t)x * (uint64_t)z); break;
            case OP_DIV: r = z == 0 ? 0 : z == -1 ? (int64_t)(0 - (uint64_t)x) : x / z; break;
            default: return 0; /* integer Pow: left to the kernels */
            }
            memcpy((char *)(uintptr_t)y->data + 8 * i, &r, 8); /* exact beyond 2^53 */
            continue;
        }
        float x = (float)fold_get(a, ia), z = (float)fold_get(b, ib), r;
        switch (n->op) {
        case OP_ADD: r = x + z; break;
        case OP_SUB: r = x - z; break;
        case OP_MUL: r = x * z; break;
        case OP_DIV: r = x / z; break;
        default: r = (float)pow((double)x, (double)z); break;
        }
        ((float *)y->data)[i] = r;
    }
    return 1;
}

/* Concat along `axis`. */
int fold_concat(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int axis = (int)node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += y->rank;
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= y->dims[i];
    for (int i = axis + 1; i < y->rank; i++)
        inner *= y->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n->ninputs; k++) {
            const Tensor *x = n->inputs[k];
            size_t chunk = (size_t)(x->dims[axis] * inner) * es;
            if (chunk)
                memcpy(dst, (const char *)x->data + (size_t)o * chunk, chunk);
            dst += chunk;
        }
    return 1;
}

/* Gather along `axis` with (possibly negative) int64 indices. */
int fold_gather(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *idx = n->inputs[1], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int axis = (int)node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += x->rank;
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t outer = 1, inner = 1, nidx = tensor_numel(idx);
    for (int i = 0; i < axis; i++)
        outer *= x->dims[i];
    for (int i = axis + 1; i < x->rank; i++)
        inner *= x->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < nidx; k++) {
            int64_t j = fold_get_i64(idx, k);
            if (j < 0)
                j += x->dims[axis];
            if (j < 0 || j >= x->dims[axis]) {
                diag_add(d, "node \"%s\" (Gather): index %lld is out of range for dim %lld", n->name,
                         (long long)fold_get_i64(idx, k), (long long)x->dims[axis]);
                return -1;
            }
            if (inner == 0)
                continue; /* an empty row: x->data may be null */
            memcpy(dst, (const char *)x->data + (size_t)((o * x->dims[axis] + j) * inner) * es, (size_t)inner * es);
            dst += (size_t)inner * es;
        }
    return 1;
}

/* Slice with the normalised starts/ends/axes/steps attributes. */
int fold_slice(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int64_t start[IR_MAX_RANK] = {0}, step[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        step[i] = 1;
    const Attr *as = node_attr(n, "starts"), *ax = node_attr(n, "axes"), *st = node_attr(n, "steps");
    for (int k = 0; as && k < as->n; k++) {
        int a = ax && k < ax->n ? (int)ax->ints[k] : k;
        if (a < 0)
            a += x->rank;
        int64_t s = as->ints[k], dim = x->dims[a], p = st && k < st->n ? st->ints[k] : 1;
        if (s < 0)
            s += dim;
        /* Clamp as ONNX does: [0, dim] going forward, [-1, dim - 1] backward. */
        s = p > 0 ? (s < 0 ? 0 : s > dim ? dim : s) : (s < -1 ? -1 : s > dim - 1 ? dim - 1 : s);
        start[a] = s;
        step[a] = p;
    }
    char *dst = fold_alloc(g, y);
    int64_t count = tensor_numel(y), xs[IR_MAX_RANK], stride = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = stride;
        stride *= x->dims[i];
    }
    size_t es = dtype_size(y->dtype);
    for (int64_t i = 0; i < count; i++) {
        int64_t rem = i, off = 0;
        for (int k = y->rank - 1; k >= 0; k--) {
            off += (start[k] + (rem % y->dims[k]) * step[k]) * xs[k];
            rem /= y->dims[k];
        }
        memcpy(dst + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
    }
    return 1;
}

/* Where(cond, a, b) with broadcasting. */
int fold_where(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *c = n->inputs[0], *a = n->inputs[1], *b = n->inputs[2], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    char *dst = fold_alloc(g, y);
    int64_t count = tensor_numel(y);
    size_t es = dtype_size(y->dtype);
    for (int64_t i = 0; i < count; i++) {
        const Tensor *src = fold_get(c, fold_bcast_index(y, c, i)) != 0 ? a : b;
        memcpy(dst + (size_t)i * es, (const char *)src->data + (size_t)fold_bcast_index(y, src, i) * es,
               es);
    }
    return 1;
}

/* ---- driver -------------------------------------------------------------- */

/* Folded values live in the graph's arena: shape arithmetic is small, and
 * anything bigger stays a run-time op (or, for an op with no kernel, an
 * error naming it) rather than a huge allocation at import. */
#define FOLD_MAX_BYTES ((int64_t)64 << 20)

int ir_fold_node(Graph *g, Node *n, Diag *d)
{
    if (op_table[n->op].fold == fold_none)
        return 0;
    for (int k = 0; k < n->noutputs; k++) {
        const Tensor *t = n->outputs[k];
        int64_t bytes;
        if (t && (ck_mul_i64(tensor_numel(t), (int64_t)dtype_size(t->dtype), &bytes) || bytes > FOLD_MAX_BYTES))
            return 0;
    }
    int rc = op_table[n->op].fold(g, n, d);
    if (rc <= 0)
        return rc;
    for (int k = 0; k < n->noutputs; k++) {
        Tensor *t = n->outputs[k];
        if (!t)
            continue;
        IR_ASSERT(t->data || tensor_numel(t) == 0);
        t->folded = 1;
        t->is_initializer = 1;
    }
    n->folded = 1;
    return 1;
}

void ir_fold_sweep(Graph *g)
{
    /* A Constant node read only by folded nodes is dead too. */
    graph_link_consumers(g);
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op != OP_CONSTANT || !n->outputs[0] || n->outputs[0]->is_output)
            continue;
        int live = 0;
        for (int c = 0; c < n->outputs[0]->nconsumers; c++)
            live |= !n->outputs[0]->consumers[c]->folded;
        if (!live)
            n->folded = 1;
    }
    int kept = 0;
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->folded) {
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k])
                    n->outputs[k]->producer = NULL;
            g->nfolded++;
            continue;
        }
        n->id = kept;
        g->nodes[kept++] = n;
    }
    if (kept == g->nnodes)
        return;
    g->nnodes = kept;
    graph_link_consumers(g);
}

/* Folds away every node whose outputs nothing live reads and that are
 * not graph outputs, until none is left (a rewrite's leftovers). */
void ir_drop_dead(Graph *g)
{
    int before = g->nfolded, changed = 1;
    while (changed) {
        changed = 0;
        graph_link_consumers(g);
        for (int i = 0; i < g->nnodes; i++) {
            Node *n = g->nodes[i];
            if (n->folded)
                continue;
            int live = 0;
            for (int k = 0; k < n->noutputs; k++) {
                const Tensor *t = n->outputs[k];
                if (!t)
                    continue;
                live |= t->is_output;
                for (int c = 0; c < t->nconsumers; c++)
                    live |= !t->consumers[c]->folded;
            }
            if (!live) {
                n->folded = 1;
                changed = 1;
            }
        }
    }
    ir_fold_sweep(g);
    g->nfolded = before;
}
