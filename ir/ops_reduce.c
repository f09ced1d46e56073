/* ops_reduce.c: shape and fold functions of the reduce family (ops_reduce.def):
 * the Reduce* ops other than Sum and Mean, ArgMax/ArgMin, CumSum, LogSoftmax,
 * TopK and the RMS, instance and group normalizations.
 *
 * Every function reads the normalised attributes: frontend/normalize.c has
 * already turned the opset-18 axes input, CumSum's axis input and TopK's k
 * input into INTS attributes (a one-element list for axis and k, which is
 * why attr_one() below accepts an INT or a one-element INTS). Reductions
 * share one axes reader (range and duplicate checks, noop_with_empty_axes).
 * The fold functions evaluate ReduceMax/Min/Prod and CumSum on constants,
 * which is how exporters compute with shape vectors; everything else runs
 * in the generated kernels.
 */
#include "ir.h"

#include <math.h>
#include <string.h>

/* An INT attribute, or the single entry of an INTS one (a folded input). */
static int attr_one(const Node *n, const char *name, int64_t dflt, int64_t *out)
{
    const Attr *a = node_attr(n, name);
    if (a && a->type == ATTR_INTS && a->n == 1)
        *out = a->ints[0];
    else if (a && a->type == ATTR_INT)
        *out = a->i;
    else if (a)
        return -1;
    else
        *out = dflt;
    return 0;
}

static int need_types(Diag *d, const Node *n, const Tensor *t, int allow_int)
{
    if (dtype_is_float(t->dtype) || (allow_int && dtype_is_int(t->dtype)))
        return 0;
    return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs %s", t->name, dtype_name(t->dtype),
                      node_op_name(n), allow_int ? "a number type" : "a float type");
}

/* The reduced dims as a bit mask: the axes attribute (checked for range
 * and repeats), all dims when it is absent or empty, none when it is
 * empty and noop_with_empty_axes is set. */
static int reduce_mask(Diag *d, const Node *n, int rank, unsigned *mask)
{
    const Attr *axes = node_attr(n, "axes");
    *mask = 0;
    if (!axes || axes->n == 0) {
        *mask = node_attr_int(n, "noop_with_empty_axes", 0) ? 0 : (1u << rank) - 1;
        return 0;
    }
    return shape_axes_mask(d, n, axes, rank, mask);
}

/* Output 0 of a reduction of x over the dims in mask: those dims dropped,
 * or kept as 1 under keepdims (default 1). */
static int reduced_shape(Diag *d, Node *n, const Tensor *x, unsigned mask)
{
    int keep = node_attr_int(n, "keepdims", 1) != 0, r = 0;
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (!(mask & (1u << i)))
            out[r++] = x->dims[i];
        else if (keep)
            out[r++] = 1;
    }
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int shape_reduce_op(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int float_only = n->op == OP_REDUCE_L2 || n->op == OP_REDUCE_LOG_SUM_EXP || n->op == OP_REDUCE_LOG_SUM;
    unsigned mask;
    if (need_types(d, n, x, !float_only) || reduce_mask(d, n, x->rank, &mask))
        return -1;
    return reduced_shape(d, n, x, mask);
}

int shape_argreduce(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int axis;
    if (need_types(d, n, x, 1) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", 0), x->rank, "axis", &axis))
        return -1;
    if (x->dims[axis] == 0)
        return shape_fail(d, n, "reduces the empty dim %d", axis);
    int keep = node_attr_int(n, "keepdims", 1) != 0, r = 0;
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        if (i != axis || keep)
            out[r++] = i == axis ? 1 : x->dims[i];
    return shape_set(d, n, n->outputs[0], DT_I64, r, out);
}

int shape_cumsum(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int64_t axis;
    int a;
    if (!node_attr(n, "axis"))
        return shape_fail(d, n, "has no axis input");
    if (attr_one(n, "axis", 0, &axis))
        return shape_fail(d, n, "axis must be a single integer");
    if (need_types(d, n, x, 1) || shape_norm_axis(d, n, axis, x->rank, "axis", &a))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

int shape_log_softmax(Graph *g, Node *n, Diag *d)
{
    if (g->opset < 13)
        return shape_fail(d, n, "the opset-%lld form (flattened to 2-D from axis) is not supported; opset 13 or later",
                          (long long)g->opset);
    int axis;
    Tensor *x = n->inputs[0];
    if (need_types(d, n, x, 0) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", -1), x->rank, "axis", &axis))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

int shape_topk(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int64_t k;
    int axis;
    if (attr_one(n, "k", -1, &k) || k < 0)
        return shape_fail(d, n, "k must be one non-negative integer");
    if (need_types(d, n, x, 1) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", -1), x->rank, "axis", &axis))
        return -1;
    if (k > x->dims[axis])
        return shape_fail(d, n, "k = %lld is larger than dim %d (%lld)", (long long)k, axis,
                          (long long)x->dims[axis]);
    int64_t out[IR_MAX_RANK];
    memcpy(out, x->dims, sizeof(int64_t) * (size_t)x->rank);
    out[axis] = k;
    if (shape_set(d, n, n->outputs[0], x->dtype, x->rank, out))
        return -1;
    return n->noutputs > 1 ? shape_set(d, n, n->outputs[1], DT_I64, x->rank, out) : 0;
}

/* RMSNormalization (opset 23): scale must equal x's trailing dims (after
 * leading 1s), so that the kernels can index it as j % numel(scale). */
int shape_rmsnorm(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0], *s = n->inputs[1];
    int axis;
    if (need_types(d, n, x, 0) || need_types(d, n, s, 0) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", -1), x->rank, "axis", &axis))
        return -1;
    int lead = 0;
    while (lead < s->rank && s->dims[lead] == 1)
        lead++;
    int ok = s->rank - lead <= x->rank - axis;
    for (int i = lead; ok && i < s->rank; i++)
        ok = s->dims[i] == x->dims[x->rank - s->rank + i];
    if (!ok) {
        char a[160], b[160];
        return shape_fail(d, n, "scale \"%s\" %s must equal the trailing normalised dims of %s", s->name,
                          shape_str(s->dims, s->rank, a, sizeof a), shape_str(x->dims, x->rank, b, sizeof b));
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* InstanceNormalization and GroupNormalization: x [N, C, ...]; scale and
 * bias [C] (GroupNormalization-21) or [num_groups] (the opset-18 form). */
int shape_chan_norm(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    if (need_types(d, n, x, 0))
        return -1;
    if (x->rank < 3)
        return shape_fail(d, n, "input \"%s\" has rank %d; needs [N, C, spatial...]", x->name, x->rank);
    int64_t c = x->dims[1], groups = c;
    if (n->op == OP_GROUPNORM) {
        groups = node_attr_int(n, "num_groups", 0);
        if (groups < 1 || c % groups)
            return shape_fail(d, n, "num_groups = %lld does not divide %lld channels", (long long)groups,
                              (long long)c);
    }
    for (int k = 1; k < 3; k++) {
        const Tensor *p = n->inputs[k];
        if (need_types(d, n, p, 0))
            return -1;
        if (p->rank != 1 || (p->dims[0] != c && p->dims[0] != groups))
            return shape_fail(d, n, "%s \"%s\" must have shape [%lld]", k == 1 ? "scale" : "bias", p->name,
                              (long long)c);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* ---- folding ----------------------------------------------------------- */

/* ReduceMax/Min/Prod of a constant (shape vectors): each output element
 * walks its reduced elements; int64 stays exact. */
int fold_reduce_op(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    unsigned mask;
    if (reduce_mask(d, n, x->rank, &mask))
        return -1;
    int64_t xs[IR_MAX_RANK], st = 1, ny = tensor_numel(y), nred = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = st;
        st *= x->dims[i];
        if (mask & (1u << i))
            nred *= x->dims[i];
    }
    fold_alloc(g, y);
    for (int64_t o = 0; o < ny; o++) {
        int64_t base = 0, rem = o;
        for (int i = x->rank - 1; i >= 0; i--)
            if (!(mask & (1u << i))) {
                base += (rem % x->dims[i]) * xs[i];
                rem /= x->dims[i];
            }
        int64_t iacc = n->op == OP_REDUCE_PROD ? 1 : n->op == OP_REDUCE_MAX ? INT64_MIN : INT64_MAX;
        double facc = n->op == OP_REDUCE_PROD ? 1.0 : n->op == OP_REDUCE_MAX ? -INFINITY : INFINITY;
        for (int64_t r = 0; r < nred; r++) {
            int64_t off = base, q = r;
            for (int i = x->rank - 1; i >= 0; i--)
                if (mask & (1u << i)) {
                    off += (q % x->dims[i]) * xs[i];
                    q /= x->dims[i];
                }
            if (x->dtype == DT_I64) {
                int64_t v = fold_get_i64(x, off);
                iacc = n->op == OP_REDUCE_PROD ? (int64_t)((uint64_t)iacc * (uint64_t)v)
                     : n->op == OP_REDUCE_MAX ? (v > iacc ? v : iacc) : (v < iacc ? v : iacc);
            } else {
                double v = (float)fold_get(x, off);
                facc = n->op == OP_REDUCE_PROD ? (double)(float)(facc * v)
                     : n->op == OP_REDUCE_MAX ? (v > facc ? v : facc) : (v < facc ? v : facc);
            }
        }
        if (y->dtype == DT_I64)
            memcpy((char *)(uintptr_t)y->data + 8 * o, &iacc, 8);
        else
            fold_set(y, o, facc);
    }
    return 1;
}

/* CumSum of a constant along its axis (exclusive, reverse). */
int fold_cumsum(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int64_t axis = 0;
    attr_one(n, "axis", 0, &axis);
    if (axis < 0)
        axis += x->rank;
    int excl = node_attr_int(n, "exclusive", 0) != 0, rev = node_attr_int(n, "reverse", 0) != 0;
    int prod = n->op == OP_CUMPROD;
    int64_t len = x->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= x->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++)
        inner *= x->dims[i];
    fold_alloc(g, y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            int64_t iacc = prod;
            float facc = (float)prod;
            for (int64_t j = 0; j < len; j++) {
                int64_t jj = rev ? len - 1 - j : j, off = (o * len + jj) * inner + in;
                if (x->dtype == DT_I64) {
                    uint64_t v = (uint64_t)fold_get_i64(x, off);
                    if (!excl)
                        iacc = (int64_t)(prod ? (uint64_t)iacc * v : (uint64_t)iacc + v);
                    memcpy((char *)(uintptr_t)y->data + 8 * off, &iacc, 8);
                    if (excl)
                        iacc = (int64_t)(prod ? (uint64_t)iacc * v : (uint64_t)iacc + v);
                } else {
                    float v = (float)fold_get(x, off);
                    if (!excl)
                        facc = prod ? facc * v : facc + v;
                    fold_set(y, off, facc);
                    if (excl)
                        facc = prod ? facc * v : facc + v;
                }
            }
        }
    return 1;
}

int shape_reduce(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int mean = n->op == OP_REDUCE_MEAN;
    if (!dtype_is_float(x->dtype) && (mean || !dtype_is_int(x->dtype)))
        return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs a %s type", x->name, dtype_name(x->dtype),
                          node_op_name(n), mean ? "float" : "number");
    const Attr *axes = node_attr(n, "axes");
    unsigned mask;
    if (shape_axes_mask(d, n, axes, x->rank, &mask))
        return -1;
    if (!axes || axes->n == 0)
        mask = node_attr_int(n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    return reduced_shape(d, n, x, mask);
}
