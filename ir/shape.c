/* shape.c: shape and dtype inference for the core op set (tensor ops).
 *
 * Runs once after import, in topological order; every later stage assumes
 * static shapes. Each op's function reads its inputs' shapes and the
 * (normalised) attributes and sets its outputs, or adds a diagnostic naming
 * the node and the offending input. Broadcasting is numpy's; negative axes
 * count from the end. All products of dims go through checked arithmetic,
 * so later stages may multiply dims of a single tensor freely.
 * Each op family's shape functions live in its ir/ops_<family>.c.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

const char *shape_const_hint(const Tensor *t)
{
    return t->is_input ? "; it is a graph input: fix its value with --const NAME=FILE" : "";
}

int shape_fail(Diag *d, const Node *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    diag_add(d, "node \"%s\" (%s): %s", n->name, node_op_name(n), msg);
    return -1;
}

int shape_norm_axis(Diag *d, const Node *n, int64_t axis, int rank,
                    const char *what, int *out)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return shape_fail(d, n, "%s %lld is out of range for rank %d", what,
                          (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

int shape_set(Diag *d, const Node *n, Tensor *t, DType dt, int rank,
              const int64_t *dims)
{
    if (!t)
        return 0;
    if (rank > IR_MAX_RANK)
        return shape_fail(d, n, "output \"%s\" would have rank %d (at most %d supported)",
                          t->name, rank, IR_MAX_RANK);
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return shape_fail(d, n, "output \"%s\" dim %d would be negative (%lld)",
                              t->name, i, (long long)dims[i]);
        if (ck_mul_i64(numel, dims[i], &numel) ||
            ck_mul_i64(numel, (int64_t)dtype_size(dt), &(int64_t){0}))
            return shape_fail(d, n, "output \"%s\": element count overflows int64",
                              t->name);
    }
    t->dtype = dt;
    t->rank = rank;
    if (rank) /* a scalar may come with dims NULL */
        memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    return 0;
}

/* Input i, which the frontend guarantees present for i < min_inputs. */
static Tensor *in(const Node *n, int i)
{
    return i < n->ninputs ? n->inputs[i] : NULL;
}

static int need_float(Diag *d, const Node *n, const Tensor *t)
{
    if (!dtype_is_float(t->dtype))
        return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs a float type",
                          t->name, dtype_name(t->dtype), node_op_name(n));
    return 0;
}

static int need_numeric(Diag *d, const Node *n, const Tensor *t)
{
    if (!dtype_is_float(t->dtype) && !dtype_is_int(t->dtype))
        return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs a number type",
                          t->name, dtype_name(t->dtype), node_op_name(n));
    return 0;
}

/* numpy broadcasting of a list of shapes into out/out_rank. */
static int broadcast(Diag *d, const Node *n, Tensor *const *ts, int nt,
                     int64_t *out, int *out_rank)
{
    int r = 0;
    for (int k = 0; k < nt; k++)
        if (ts[k]->rank > r)
            r = ts[k]->rank;
    for (int i = 0; i < r; i++)
        out[i] = 1;
    for (int k = 0; k < nt; k++) {
        const Tensor *t = ts[k];
        for (int i = 0; i < t->rank; i++) {
            int o = r - t->rank + i;
            int64_t v = t->dims[i];
            if (v == out[o] || v == 1)
                continue;
            if (out[o] == 1) {
                out[o] = v;
                continue;
            }
            char a[160], b[160];
            return shape_fail(d, n, "inputs \"%s\" %s and \"%s\" %s do not broadcast (dim %d)",
                              ts[0]->name, shape_str(ts[0]->dims, ts[0]->rank, a, sizeof a),
                              t->name, shape_str(t->dims, t->rank, b, sizeof b), o);
        }
    }
    *out_rank = r;
    return 0;
}

int shape_constant(Graph *g, Node *n, Diag *d)
{
    (void)g;
    if (n->outputs[0]->rank < 0)
        return shape_fail(d, n, "has no value");
    return 0;
}

int shape_unary(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    if (n->op == OP_RELU && need_numeric(d, n, x))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

int shape_unary_float(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    if (need_float(d, n, x))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* Cast's and BitCast's target type, checked. */
static int attr_to(Diag *d, const Node *n, DType *out)
{
    const Attr *to = node_attr(n, "to");
    if (!to || to->type != ATTR_INT)
        return shape_fail(d, n, "attribute \"to\" is missing");
    if (!dtype_supported((int)to->i))
        return shape_fail(d, n, "attribute \"to\" = %s is not supported (" DTYPE_SUPPORTED_LIST ")",
                          dtype_onnx_name((int)to->i));
    *out = (DType)to->i;
    return 0;
}

int shape_cast(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    DType to;
    if (attr_to(d, n, &to))
        return -1;
    return shape_set(d, n, n->outputs[0], to, x->rank, x->dims);
}

/* BitCast: the same bytes read as another type of the same width. */
int shape_bitcast(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    DType to;
    if (attr_to(d, n, &to))
        return -1;
    if (dtype_size(to) != dtype_size(x->dtype))
        return shape_fail(d, n, "attribute \"to\" = %s is %zu bytes wide but input \"%s\" is %s (%zu bytes)",
                          dtype_name(to), dtype_size(to), x->name, dtype_name(x->dtype), dtype_size(x->dtype));
    return shape_set(d, n, n->outputs[0], to, x->rank, x->dims);
}

int shape_binary(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *ts[2] = {in(n, 0), in(n, 1)};
    int64_t dims[IR_MAX_RANK];
    int r;
    if (need_numeric(d, n, ts[0]) || need_numeric(d, n, ts[1]))
        return -1;
    if (ts[0]->dtype != ts[1]->dtype)
        return shape_fail(d, n, "inputs \"%s\" (%s) and \"%s\" (%s) differ in dtype",
                          ts[0]->name, dtype_name(ts[0]->dtype), ts[1]->name,
                          dtype_name(ts[1]->dtype));
    if (broadcast(d, n, ts, 2, dims, &r))
        return -1;
    return shape_set(d, n, n->outputs[0], ts[0]->dtype, r, dims);
}

int shape_pow(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *ts[2] = {in(n, 0), in(n, 1)};
    int64_t dims[IR_MAX_RANK];
    int r;
    if (need_numeric(d, n, ts[0]) || need_numeric(d, n, ts[1]) ||
        broadcast(d, n, ts, 2, dims, &r))
        return -1;
    return shape_set(d, n, n->outputs[0], ts[0]->dtype, r, dims);
}

int shape_matmul(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *a = in(n, 0), *b = in(n, 1);
    if (need_numeric(d, n, a) || need_numeric(d, n, b))
        return -1;
    if (a->dtype != b->dtype)
        return shape_fail(d, n, "inputs \"%s\" and \"%s\" differ in dtype", a->name, b->name);
    if (a->rank < 1 || b->rank < 1)
        return shape_fail(d, n, "input \"%s\" is a scalar; MatMul needs rank >= 1",
                          a->rank < 1 ? a->name : b->name);
    /* Promote 1-D operands as numpy does, then broadcast the batch dims. */
    int64_t ad[IR_MAX_RANK + 1], bd[IR_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    memcpy(ad, a->dims, (size_t)ar * sizeof(int64_t));
    memcpy(bd, b->dims, (size_t)br * sizeof(int64_t));
    if (ar == 1) {
        ad[1] = ad[0], ad[0] = 1, ar = 2;
    }
    if (br == 1)
        bd[1] = 1, br = 2;
    if (ad[ar - 1] != bd[br - 2])
        return shape_fail(d, n, "inner dims differ: \"%s\" has K=%lld, \"%s\" has K=%lld",
                          a->name, (long long)ad[ar - 1], b->name, (long long)bd[br - 2]);
    Tensor ba = {.name = a->name, .rank = ar - 2}, bb = {.name = b->name, .rank = br - 2};
    memcpy(ba.dims, ad, (size_t)(ar - 2) * sizeof(int64_t));
    memcpy(bb.dims, bd, (size_t)(br - 2) * sizeof(int64_t));
    Tensor *ts[2] = {&ba, &bb};
    int64_t out[IR_MAX_RANK + 2];
    int r;
    if (broadcast(d, n, ts, 2, out, &r))
        return -1;
    if (a->rank > 1)
        out[r++] = ad[ar - 2];
    if (b->rank > 1)
        out[r++] = bd[br - 1];
    return shape_set(d, n, n->outputs[0], a->dtype, r, out);
}

int shape_gemm(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *a = in(n, 0), *b = in(n, 1), *c = in(n, 2);
    if (need_float(d, n, a) || need_float(d, n, b) || (c && need_float(d, n, c)))
        return -1;
    if (a->rank != 2 || b->rank != 2)
        return shape_fail(d, n, "input \"%s\" has rank %d; Gemm needs rank 2",
                          a->rank != 2 ? a->name : b->name, a->rank != 2 ? a->rank : b->rank);
    int ta = node_attr_int(n, "transA", 0) != 0, tb = node_attr_int(n, "transB", 0) != 0;
    int64_t m = a->dims[ta ? 1 : 0], ka = a->dims[ta ? 0 : 1];
    int64_t kb = b->dims[tb ? 1 : 0], nn = b->dims[tb ? 0 : 1];
    if (ka != kb)
        return shape_fail(d, n, "inner dims differ: \"%s\" has K=%lld, \"%s\" has K=%lld",
                          a->name, (long long)ka, b->name, (long long)kb);
    int64_t out[2] = {m, nn};
    if (c) {
        /* C broadcasts unidirectionally to (M, N). */
        for (int i = 0; i < c->rank; i++) {
            int o = 2 - c->rank + i;
            if (o < 0 || (c->dims[i] != 1 && c->dims[i] != out[o])) {
                char s[160];
                return shape_fail(d, n, "input \"%s\" %s does not broadcast to [%lld, %lld]",
                                  c->name, shape_str(c->dims, c->rank, s, sizeof s),
                                  (long long)m, (long long)nn);
            }
        }
    }
    return shape_set(d, n, n->outputs[0], a->dtype, 2, out);
}

int shape_softmax(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    int axis = 0;
    if (need_float(d, n, x) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", -1), x->rank, "axis", &axis))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

int shape_layernorm(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    int axis = 0;
    if (need_float(d, n, x) ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", -1), x->rank, "axis", &axis))
        return -1;
    for (int k = 1; k < n->ninputs; k++) {
        Tensor *p = in(n, k);
        if (!p)
            continue;
        if (need_float(d, n, p))
            return -1;
        /* Scale and bias broadcast to the normalised dims x[axis:]. */
        int nr = x->rank - axis;
        int ok = p->rank <= nr;
        for (int i = 0; ok && i < p->rank; i++) {
            int64_t want = x->dims[x->rank - p->rank + i];
            ok = p->dims[i] == want || p->dims[i] == 1;
        }
        if (!ok) {
            char s[160], t[160];
            return shape_fail(d, n, "input \"%s\" %s does not broadcast to the normalised dims %s",
                              p->name, shape_str(p->dims, p->rank, s, sizeof s),
                              shape_str(x->dims + axis, nr, t, sizeof t));
        }
    }
    if (shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims))
        return -1;
    int64_t stat[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        stat[i] = i < axis ? x->dims[i] : 1;
    for (int k = 1; k < n->noutputs; k++)
        if (shape_set(d, n, n->outputs[k], DT_F32, x->rank, stat))
            return -1;
    return 0;
}

/* Reads a normalised INTS attribute of axes into a bitmask over rank dims. */
int shape_axes_mask(Diag *d, const Node *n, const Attr *a, int rank, unsigned *mask)
{
    *mask = 0;
    for (int i = 0; a && i < a->n; i++) {
        int ax = 0;
        if (shape_norm_axis(d, n, a->ints[i], rank, "axis", &ax))
            return -1;
        if (*mask & (1u << ax))
            return shape_fail(d, n, "axis %lld appears twice", (long long)a->ints[i]);
        *mask |= 1u << ax;
    }
    return 0;
}

int shape_transpose(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *perm = node_attr(n, "perm");
    int64_t out[IR_MAX_RANK];
    unsigned seen = 0;
    if (perm && perm->n != x->rank)
        return shape_fail(d, n, "perm has %d entries but input \"%s\" has rank %d",
                          perm->n, x->name, x->rank);
    for (int i = 0; i < x->rank; i++) {
        int64_t p = perm ? perm->ints[i] : x->rank - 1 - i;
        if (p < 0 || p >= x->rank || (seen & (1u << p)))
            return shape_fail(d, n, "perm is not a permutation of 0..%d", x->rank - 1);
        seen |= 1u << p;
        out[i] = x->dims[p];
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int shape_reshape(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *shape = node_attr(n, "shape");
    int allowzero = node_attr_int(n, "allowzero", 0) != 0;
    if (!shape)
        return shape_fail(d, n, "has no target shape");
    if (shape->n > IR_MAX_RANK)
        return shape_fail(d, n, "target shape has rank %d (at most %d supported)",
                          shape->n, IR_MAX_RANK);
    int64_t out[IR_MAX_RANK], known = 1, total = tensor_numel(x);
    int infer = -1;
    for (int i = 0; i < shape->n; i++) {
        int64_t v = shape->ints[i];
        if (v == 0 && !allowzero) {
            if (i >= x->rank)
                return shape_fail(d, n, "target dim %d is 0 (copy) but input \"%s\" has rank %d",
                                  i, x->name, x->rank);
            v = x->dims[i];
        } else if (v == -1) {
            if (infer >= 0)
                return shape_fail(d, n, "target shape has more than one -1");
            infer = i;
            out[i] = 1;
            continue;
        } else if (v < 0) {
            return shape_fail(d, n, "target dim %d is %lld", i, (long long)v);
        }
        out[i] = v;
        if (ck_mul_i64(known, v, &known))
            return shape_fail(d, n, "target shape element count overflows int64");
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            return shape_fail(d, n, "cannot infer the -1 dim: %lld elements into blocks of %lld",
                              (long long)total, (long long)known);
        out[infer] = total / known;
    } else if (known != total) {
        char s[160];
        return shape_fail(d, n, "target shape has %lld elements but input \"%s\" %s has %lld",
                          (long long)known, x->name, shape_str(x->dims, x->rank, s, sizeof s),
                          (long long)total);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, shape->n, out);
}

int shape_unsqueeze(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *axes = node_attr(n, "axes");
    if (!axes || axes->n == 0)
        return shape_fail(d, n, "has no axes");
    int r = x->rank + axes->n;
    if (r > IR_MAX_RANK)
        return shape_fail(d, n, "output rank %d exceeds %d", r, IR_MAX_RANK);
    unsigned mask;
    if (shape_axes_mask(d, n, axes, r, &mask))
        return -1;
    int64_t out[IR_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++)
        out[i] = (mask & (1u << i)) ? 1 : x->dims[j++];
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int shape_squeeze(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *axes = node_attr(n, "axes");
    unsigned mask = 0;
    if (axes && axes->n) {
        if (shape_axes_mask(d, n, axes, x->rank, &mask))
            return -1;
        for (int i = 0; i < x->rank; i++)
            if ((mask & (1u << i)) && x->dims[i] != 1)
                return shape_fail(d, n, "cannot squeeze dim %d of \"%s\": size %lld, not 1",
                                  i, x->name, (long long)x->dims[i]);
    } else {
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] == 1)
                mask |= 1u << i;
    }
    int64_t out[IR_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!(mask & (1u << i)))
            out[r++] = x->dims[i];
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int shape_concat(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *a = node_attr(n, "axis");
    int axis = 0;
    if (!a)
        return shape_fail(d, n, "attribute \"axis\" is missing");
    if (shape_norm_axis(d, n, a->i, x->rank, "axis", &axis))
        return -1;
    int64_t out[IR_MAX_RANK];
    memcpy(out, x->dims, (size_t)x->rank * sizeof(int64_t));
    for (int k = 1; k < n->ninputs; k++) {
        Tensor *t = in(n, k);
        if (!t)
            continue;
        if (t->dtype != x->dtype || t->rank != x->rank)
            return shape_fail(d, n, "input \"%s\" differs from \"%s\" in dtype or rank",
                              t->name, x->name);
        for (int i = 0; i < x->rank; i++)
            if (i != axis && t->dims[i] != x->dims[i])
                return shape_fail(d, n, "input \"%s\" dim %d is %lld, \"%s\" has %lld",
                                  t->name, i, (long long)t->dims[i], x->name,
                                  (long long)x->dims[i]);
        if (ck_add_i64(out[axis], t->dims[axis], &out[axis]))
            return shape_fail(d, n, "concatenated dim overflows int64");
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int shape_split(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    int axis = 0;
    if (shape_norm_axis(d, n, node_attr_int(n, "axis", 0), x->rank, "axis", &axis))
        return -1;
    const Attr *split = node_attr(n, "split");
    int64_t len = x->dims[axis], sum = 0;
    int nout = n->noutputs;
    int64_t out[IR_MAX_RANK];
    memcpy(out, x->dims, (size_t)x->rank * sizeof(int64_t));
    if (split && split->n) {
        if (split->n != nout)
            return shape_fail(d, n, "split has %d sizes but the node has %d outputs",
                              split->n, nout);
        for (int k = 0; k < nout; k++) {
            if (split->ints[k] < 0 || ck_add_i64(sum, split->ints[k], &sum))
                return shape_fail(d, n, "split size %d is invalid", k);
        }
        if (sum != len)
            return shape_fail(d, n, "split sizes sum to %lld but dim %d of \"%s\" is %lld",
                              (long long)sum, axis, x->name, (long long)len);
    }
    /* Without sizes: equal parts, the last one smaller when uneven (opset 18). */
    int64_t part = (len + nout - 1) / nout;
    if (!(split && split->n) && node_attr(n, "num_outputs") == NULL && len % nout)
        return shape_fail(d, n, "dim %d of \"%s\" (%lld) does not split evenly into %d outputs",
                          axis, x->name, (long long)len, nout);
    for (int k = 0; k < nout; k++) {
        if (split && split->n)
            out[axis] = split->ints[k];
        else
            out[axis] = k < nout - 1 ? part : len - part * (nout - 1);
        if (out[axis] < 0)
            return shape_fail(d, n, "dim %d of \"%s\" (%lld) is too small for %d outputs",
                              axis, x->name, (long long)len, nout);
        if (shape_set(d, n, n->outputs[k], x->dtype, x->rank, out))
            return -1;
    }
    return 0;
}

int shape_slice(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0);
    const Attr *st = node_attr(n, "starts"), *en = node_attr(n, "ends");
    const Attr *ax = node_attr(n, "axes"), *sp = node_attr(n, "steps");
    if (!st || !en || st->n != en->n)
        return shape_fail(d, n, "starts and ends must be given with equal lengths");
    if ((ax && ax->n != st->n) || (sp && sp->n != st->n))
        return shape_fail(d, n, "axes and steps must have as many entries as starts");
    int64_t out[IR_MAX_RANK];
    memcpy(out, x->dims, (size_t)x->rank * sizeof(int64_t));
    unsigned seen = 0;
    for (int i = 0; i < st->n; i++) {
        int axis = 0;
        if (shape_norm_axis(d, n, ax ? ax->ints[i] : i, x->rank, "axis", &axis))
            return -1;
        if (seen & (1u << axis))
            return shape_fail(d, n, "axis %d is sliced twice", axis);
        seen |= 1u << axis;
        int64_t dim = x->dims[axis], step = sp ? sp->ints[i] : 1;
        if (step == 0)
            return shape_fail(d, n, "step for axis %d is 0", axis);
        int64_t s = st->ints[i], e = en->ints[i];
        /* Clamp as the ONNX spec does (INT64 min/max mean "to the end"). */
        if (s < 0)
            s = s < -dim ? 0 : s + dim;
        if (e < 0)
            e = e < -dim ? -1 : e + dim;
        /* A step longer than the dim takes one element at most; clamping
         * it keeps the arithmetic below far from overflow. */
        if (step > dim + 1)
            step = dim + 1;
        if (step < -dim - 1)
            step = -dim - 1;
        if (step > 0) {
            s = s > dim ? dim : s;
            e = e > dim ? dim : (e < 0 ? 0 : e);
            out[axis] = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            s = s > dim - 1 ? dim - 1 : s;
            e = e > dim - 1 ? dim - 1 : e;
            out[axis] = s > e ? (s - e - 1) / (-step) + 1 : 0;
        }
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int shape_gather(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = in(n, 0), *idx = in(n, 1);
    int axis = 0;
    if (idx->dtype != DT_I64 && idx->dtype != DT_I32)
        return shape_fail(d, n, "indices \"%s\" have dtype %s; Gather needs int64 or int32",
                          idx->name, dtype_name(idx->dtype));
    if (shape_norm_axis(d, n, node_attr_int(n, "axis", 0), x->rank, "axis", &axis))
        return -1;
    int r = x->rank - 1 + idx->rank;
    if (r > IR_MAX_RANK)
        return shape_fail(d, n, "output rank %d exceeds %d", r, IR_MAX_RANK);
    int64_t out[IR_MAX_RANK];
    int k = 0;
    for (int i = 0; i < axis; i++)
        out[k++] = x->dims[i];
    for (int i = 0; i < idx->rank; i++)
        out[k++] = idx->dims[i];
    for (int i = axis + 1; i < x->rank; i++)
        out[k++] = x->dims[i];
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int shape_where(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *ts[3] = {in(n, 0), in(n, 1), in(n, 2)};
    if (ts[0]->dtype != DT_BOOL)
        return shape_fail(d, n, "condition \"%s\" has dtype %s; Where needs bool",
                          ts[0]->name, dtype_name(ts[0]->dtype));
    if (ts[1]->dtype != ts[2]->dtype)
        return shape_fail(d, n, "inputs \"%s\" and \"%s\" differ in dtype",
                          ts[1]->name, ts[2]->name);
    int64_t out[IR_MAX_RANK];
    int r;
    if (broadcast(d, n, ts, 3, out, &r))
        return -1;
    return shape_set(d, n, n->outputs[0], ts[1]->dtype, r, out);
}

int shape_unsupported(Graph *g, Node *n, Diag *d)
{
    (void)g;
    (void)n;
    (void)d;
    return 0; /* outputs stay unknown (rank -1) */
}

int ir_infer_node(Graph *g, Node *n, Diag *d)
{
    for (int j = 0; j < n->ninputs; j++) {
        Tensor *t = n->inputs[j];
        IR_ASSERT(!t || t->rank >= 0);
    }
    if (op_table[n->op].infer(g, n, d))
        return -1;
    for (int k = 0; k < n->noutputs; k++) {
        Tensor *t = n->outputs[k];
        if (!t || t->decl_rank < 0)
            continue;
        int same = t->decl_rank == t->rank;
        for (int j = 0; same && j < t->rank; j++)
            same = t->decl_dims[j] < 0 || t->decl_dims[j] == t->dims[j];
        if (!same) {
            char a[160], b[160];
            return shape_fail(d, n, "output \"%s\": inferred shape %s but the model declares %s",
                              t->name, shape_str(t->dims, t->rank, a, sizeof a),
                              shape_str(t->decl_dims, t->decl_rank, b, sizeof b));
        }
    }
    return 0;
}

int ir_infer_shapes(Graph *g, Diag *d)
{
    for (int i = 0; i < g->nnodes; i++)
        if (ir_infer_node(g, g->nodes[i], d))
            return -1;
    return 0;
}

int shape_flatten(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    int64_t axis = node_attr_int(n, "axis", 1);
    if (axis < -(int64_t)x->rank || axis > x->rank)
        return shape_fail(d, n, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
    if (axis < 0)
        axis += x->rank;
    int64_t out[2] = {1, 1};
    for (int i = 0; i < x->rank; i++)
        out[i >= axis] *= x->dims[i]; /* bounded by the input's own numel */
    return shape_set(d, n, n->outputs[0], x->dtype, 2, out);
}
