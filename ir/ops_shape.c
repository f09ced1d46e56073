/* ops_shape.c: shape and fold functions of the shape family (ops_shape.def).
 *
 * These ops compute with shapes, which are static once --dim binds the
 * symbolic dims, so they always fold at import (ir/fold.c) and never reach
 * the partitioner or the code generators (their rule and emit columns are
 * rule_none and emit_none).
 */
#include "ir.h"

#include <math.h>
#include <string.h>

/* Shape(x) with the opset-15 start/end window: int64 [end - start]. */
static void shape_window(const Node *n, int rank, int *lo, int *hi)
{
    int64_t s = node_attr_int(n, "start", 0), e = node_attr_int(n, "end", rank);
    if (s < 0)
        s += rank;
    if (e < 0)
        e += rank;
    *lo = (int)(s < 0 ? 0 : s > rank ? rank : s);
    *hi = (int)(e < 0 ? 0 : e > rank ? rank : e);
    if (*hi < *lo)
        *hi = *lo;
}

int shape_shape(Graph *g, Node *n, Diag *d)
{
    (void)g;
    int lo, hi;
    shape_window(n, n->inputs[0]->rank, &lo, &hi);
    int64_t len = hi - lo;
    return shape_set(d, n, n->outputs[0], DT_I64, 1, &len);
}

int fold_shape(Graph *g, Node *n, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int lo, hi;
    shape_window(n, x->rank, &lo, &hi);
    int64_t *v = fold_alloc(g, n->outputs[0]);
    for (int i = lo; i < hi; i++)
        v[i - lo] = x->dims[i];
    return 1;
}

/* Size(x): the element count, an int64 scalar. */
int shape_size(Graph *g, Node *n, Diag *d)
{
    (void)g;
    return shape_set(d, n, n->outputs[0], DT_I64, 0, NULL);
}

int fold_size(Graph *g, Node *n, Diag *d)
{
    (void)d;
    int64_t *v = fold_alloc(g, n->outputs[0]);
    v[0] = tensor_numel(n->inputs[0]);
    return 1;
}

/* The values of a constant input, or an error naming it: these ops need
 * them to know their output shape. */
static int need_const(Diag *d, const Node *n, int k)
{
    const Tensor *t = n->inputs[k];
    if (t->data || tensor_numel(t) == 0)
        return 0;
    return shape_fail(d, n, "input \"%s\" must be a constant (computed from shapes or stored in the model): "
                      "its value decides the output shape%s", t->name, shape_const_hint(t));
}

/* Range(start, limit, delta): max(ceil((limit - start) / delta), 0)
 * values, in the inputs' dtype. */
static int64_t range_count(const Node *n)
{
    double s = fold_get(n->inputs[0], 0), l = fold_get(n->inputs[1], 0), dl = fold_get(n->inputs[2], 0);
    if (dl == 0)
        return -1;
    double c = ceil((l - s) / dl);
    if (!(c > 0)) /* also NaN */
        return 0;
    return c > (double)((int64_t)1 << 31) ? ((int64_t)1 << 31) + 1 : (int64_t)c; /* too long: refused */
}

int shape_range(Graph *g, Node *n, Diag *d)
{
    (void)g;
    for (int k = 0; k < 3; k++) {
        if (need_const(d, n, k))
            return -1;
        if (tensor_numel(n->inputs[k]) != 1)
            return shape_fail(d, n, "input \"%s\" must be a scalar", n->inputs[k]->name);
        if (n->inputs[k]->dtype != n->inputs[0]->dtype)
            return shape_fail(d, n, "start, limit and delta must have one dtype");
    }
    int64_t len = range_count(n);
    if (len < 0)
        return shape_fail(d, n, "delta is 0");
    if (len > ((int64_t)1 << 31))
        return shape_fail(d, n, "would have %lld elements", (long long)len);
    return shape_set(d, n, n->outputs[0], n->inputs[0]->dtype, 1, &len);
}

int fold_range(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *y = n->outputs[0];
    fold_alloc(g, y);
    double s = fold_get(n->inputs[0], 0), dl = fold_get(n->inputs[2], 0);
    int64_t len = y->dims[0];
    if (y->dtype == DT_I64) {
        int64_t si = fold_get_i64(n->inputs[0], 0), di = fold_get_i64(n->inputs[2], 0);
        for (int64_t i = 0; i < len; i++)
            ((int64_t *)(uintptr_t)y->data)[i] = si + i * di;
    } else if (dtype_is_int(y->dtype)) {
        int64_t si = fold_get_i64(n->inputs[0], 0), di = fold_get_i64(n->inputs[2], 0);
        for (int64_t i = 0; i < len; i++)
            fold_set(y, i, (double)(si + i * di));
    } else if (y->dtype == DT_F64) {
        for (int64_t i = 0; i < len; i++)
            fold_set(y, i, s + (double)i * dl);
    } else {
        for (int64_t i = 0; i < len; i++)
            fold_set(y, i, (float)s + (float)i * (float)dl); /* as ORT: start + i * delta in float */
    }
    return 1;
}

/* ConstantOfShape(shape) filled with the `value` tensor (float 0 if none). */
int shape_constant_of_shape(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *s = n->inputs[0];
    if (need_const(d, n, 0))
        return -1;
    if (s->dtype != DT_I64 || s->rank != 1 || s->dims[0] > IR_MAX_RANK)
        return shape_fail(d, n, "shape \"%s\" must be a 1-D int64 constant of at most %d entries", s->name,
                          IR_MAX_RANK);
    int64_t dims[IR_MAX_RANK];
    for (int i = 0; i < s->dims[0]; i++)
        dims[i] = fold_get_i64(s, i);
    const Attr *v = node_attr(n, "value");
    DType dt = DT_F32;
    if (v && v->type == ATTR_TENSOR && v->t) {
        if (tensor_numel(v->t) != 1 || !dtype_size(v->t->dtype))
            return shape_fail(d, n, "value must be a one-element float32, int64 or bool tensor");
        dt = v->t->dtype;
    }
    return shape_set(d, n, n->outputs[0], dt, (int)s->dims[0], dims);
}

int fold_constant_of_shape(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *y = n->outputs[0];
    const Attr *v = node_attr(n, "value");
    fold_alloc(g, y);
    double fill = v && v->type == ATTR_TENSOR && v->t ? fold_get(v->t, 0) : 0.0;
    int64_t count = tensor_numel(y);
    for (int64_t i = 0; i < count; i++)
        fold_set(y, i, fill);
    return 1;
}

/* NonZero(x): the indices of x's non-zero elements, int64 [rank, count].
 * Its size depends on x's values, so it is only supported where x is a
 * constant (a weight, or folded shape arithmetic): then it folds. */
/* Is t computed from a OneHot of TopK's indices (a few steps back)? That
 * is transformers' eager mixture-of-experts loop, which selects each
 * expert's tokens with NonZero: one that frontend/moe_eager.c did not
 * rewrite (it differs from the exported form somewhere). */
static int from_topk_onehot(const Tensor *t, int depth)
{
    const Node *p = t ? t->producer : NULL;
    if (!p || depth > 6)
        return 0;
    if (p->op == OP_ONEHOT && p->inputs[0]->producer && p->inputs[0]->producer->op == OP_TOPK)
        return 1;
    for (int i = 0; i < p->ninputs; i++)
        if (from_topk_onehot(p->inputs[i], depth + 1))
            return 1;
    return 0;
}

int shape_nonzero(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    if (!x->data && tensor_numel(x) != 0 && from_topk_onehot(x, 0))
        return shape_fail(d, n, "input \"%s\" is not a constant: this looks like a mixture of experts' eager loop "
                          "(each expert's tokens picked by NonZero, a run-time size) that differs from the form "
                          "onnx2spmd rewrites (docs/moe.md); export it with transformers' batched form "
                          "(model.set_experts_implementation(\"batched_mm\"))", x->label);
    if (!x->data && tensor_numel(x) != 0)
        return shape_fail(d, n, "input \"%s\" is not a constant: NonZero's output size would depend on run-time "
                          "values%s", x->name, shape_const_hint(x));
    int64_t count = 0, numel = tensor_numel(x);
    for (int64_t i = 0; i < numel; i++)
        count += fold_get(x, i) != 0;
    int64_t dims[2] = {x->rank, count};
    return shape_set(d, n, n->outputs[0], DT_I64, 2, dims);
}

int fold_nonzero(Graph *g, Node *n, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    Tensor *y = n->outputs[0];
    int64_t *v = fold_alloc(g, y), count = y->dims[1], numel = tensor_numel(x), k = 0;
    for (int64_t i = 0; i < numel; i++) {
        if (fold_get(x, i) == 0)
            continue;
        int64_t q = i; /* row-major coordinates of element i */
        for (int a = x->rank - 1; a >= 0; a--) {
            v[a * count + k] = q % x->dims[a];
            q /= x->dims[a];
        }
        k++;
    }
    return 1;
}
