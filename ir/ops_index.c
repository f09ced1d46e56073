/* ops_index.c: shape and fold functions of the index family (ops_index.def).
 *
 * Expand, Tile, Trilu, GatherElements, GatherND, ScatterND,
 * ScatterElements, Pad, OneHot, DepthToSpace and SpaceToDepth. Inputs that
 * must be known at compile time arrive either as attributes (Expand's
 * shape and Tile's repeats are folded by frontend/normalize.c)
 * or as constant inputs that keep their data (Pad's pads, constant_value
 * and axes, OneHot's depth and values), read here; shape_pad and
 * shape_onehot leave what they read as plain attributes ("pads" as
 * 2 x rank begin/end values, "depth") so that the rule and the emitter
 * need not parse the inputs again. Trilu's k may be known only at run
 * time: the kernel reads it. Index values are checked where they
 * are known (folding); at run time the kernels check them.
 *
 * The fold functions cover what exporters use on shape vectors and masks
 * (Expand, Tile, GatherElements, GatherND); they work on bytes, so every
 * dtype folds alike.
 */
#include "ir.h"

#include <string.h>

static Tensor *in(const Node *n, int i)
{
    return i < n->ninputs ? n->inputs[i] : NULL;
}

static int need_i64(Diag *d, const Node *n, const Tensor *t, const char *what)
{
    if (t->dtype != DT_I64 && t->dtype != DT_I32)
        return shape_fail(d, n, "%s \"%s\" have dtype %s; %s needs int64 or int32", what, t->name,
                          dtype_name(t->dtype), node_op_name(n));
    return 0;
}

/* Contiguous strides of dims (elements). */
static void strides_of(const int64_t *dims, int rank, int64_t *st)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= dims[i];
    }
}

/* ---- Expand ------------------------------------------------------------- */

/* Bidirectional broadcast of x against the "shape" attribute. */
int shape_expand(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0);
    const Attr *s = node_attr(n, "shape");
    if (!s || s->type != ATTR_INTS)
        return shape_fail(d, n, "input \"shape\" is missing");
    if (s->n > IR_MAX_RANK)
        return shape_fail(d, n, "shape has %d entries (at most %d)", s->n, IR_MAX_RANK);
    int r = x->rank > s->n ? x->rank : s->n;
    int64_t out[IR_MAX_RANK];
    for (int o = 0; o < r; o++) {
        int j = o - (r - x->rank), k = o - (r - s->n);
        int64_t xd = j >= 0 ? x->dims[j] : 1, sd = k >= 0 ? s->ints[k] : 1;
        if (sd < 0)
            return shape_fail(d, n, "shape entry %d is negative (%lld)", k, (long long)sd);
        if (xd == sd || sd == 1)
            out[o] = xd;
        else if (xd == 1)
            out[o] = sd;
        else
            return shape_fail(d, n, "input \"%s\" dim %d (%lld) does not broadcast to %lld", x->name, j,
                              (long long)xd, (long long)sd);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int fold_expand(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t count = tensor_numel(y);
    for (int64_t i = 0; i < count; i++)
        memcpy(dst + (size_t)i * es, (const char *)x->data + (size_t)fold_bcast_index(y, x, i) * es, es);
    return 1;
}

/* ---- Tile --------------------------------------------------------------- */

int shape_tile(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0);
    const Attr *rep = node_attr(n, "repeats");
    if (!rep || rep->type != ATTR_INTS)
        return shape_fail(d, n, "input \"repeats\" is missing");
    if (rep->n != x->rank)
        return shape_fail(d, n, "repeats has %d entries but input \"%s\" has rank %d", rep->n, x->name,
                          x->rank);
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (rep->ints[i] < 0)
            return shape_fail(d, n, "repeats entry %d is negative (%lld)", i, (long long)rep->ints[i]);
        if (ck_mul_i64(x->dims[i], rep->ints[i], &out[i]))
            return shape_fail(d, n, "tiled dim %d overflows int64", i);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int fold_tile(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t count = tensor_numel(y), xs[IR_MAX_RANK];
    strides_of(x->dims, x->rank, xs);
    for (int64_t i = 0; i < count; i++) {
        int64_t rem = i, off = 0;
        for (int k = y->rank - 1; k >= 0; k--) {
            off += (rem % y->dims[k]) % x->dims[k] * xs[k];
            rem /= y->dims[k];
        }
        memcpy(dst + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
    }
    return 1;
}

/* ---- Trilu -------------------------------------------------------------- */

/* k may be a run-time value (a one-element int64 input): the kernel reads
 * it, so only its dtype and size are checked here. */
int shape_trilu(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *k = in(n, 1);
    if (x->rank < 2)
        return shape_fail(d, n, "input \"%s\" has rank %d; Trilu needs at least 2", x->name, x->rank);
    if (k && (k->dtype != DT_I64 || tensor_numel(k) != 1))
        return shape_fail(d, n, "k \"%s\" must hold one int64 value", k->name);
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* ---- GatherElements ----------------------------------------------------- */

int shape_gather_elements(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *idx = in(n, 1);
    int axis = 0;
    if (need_i64(d, n, idx, "indices"))
        return -1;
    if (shape_norm_axis(d, n, node_attr_int(n, "axis", 0), x->rank, "axis", &axis))
        return -1;
    if (idx->rank != x->rank)
        return shape_fail(d, n, "indices \"%s\" have rank %d, data \"%s\" rank %d", idx->name, idx->rank,
                          x->name, x->rank);
    for (int i = 0; i < x->rank; i++)
        if (i != axis && idx->dims[i] > x->dims[i])
            return shape_fail(d, n, "indices dim %d (%lld) exceeds data dim %lld", i, (long long)idx->dims[i],
                              (long long)x->dims[i]);
    return shape_set(d, n, n->outputs[0], x->dtype, idx->rank, idx->dims);
}

/* An index value along a dim of length len, made non-negative; -1 when
 * out of range (after the diagnostic). */
static int64_t fold_index(Diag *d, const Node *n, int64_t v, int64_t len)
{
    int64_t j = v < 0 ? v + len : v;
    if (j < 0 || j >= len) {
        diag_add(d, "node \"%s\" (%s): index %lld is out of range for dim %lld", n->name, node_op_name(n),
                 (long long)v, (long long)len);
        return -1;
    }
    return j;
}

int fold_gather_elements(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *idx = n->inputs[1], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int axis = (int)node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += x->rank;
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t count = tensor_numel(y), xs[IR_MAX_RANK];
    strides_of(x->dims, x->rank, xs);
    for (int64_t i = 0; i < count; i++) {
        int64_t rem = i, off = 0;
        for (int k = y->rank - 1; k >= 0; k--) {
            int64_t c = rem % y->dims[k];
            rem /= y->dims[k];
            if (k == axis) {
                c = fold_index(d, n, fold_get_i64(idx, i), x->dims[axis]);
                if (c < 0)
                    return -1;
            }
            off += c * xs[k];
        }
        memcpy(dst + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
    }
    return 1;
}

/* ---- GatherND ----------------------------------------------------------- */

int shape_gather_nd(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *idx = in(n, 1);
    int64_t b = node_attr_int(n, "batch_dims", 0);
    if (need_i64(d, n, idx, "indices"))
        return -1;
    if (idx->rank < 1 || x->rank < 1)
        return shape_fail(d, n, "data and indices need rank 1 or more");
    if (b < 0 || b >= idx->rank || b >= x->rank)
        return shape_fail(d, n, "batch_dims %lld must be below the ranks of data (%d) and indices (%d)",
                          (long long)b, x->rank, idx->rank);
    int64_t m = idx->dims[idx->rank - 1];
    if (m < 1 || m > x->rank - b)
        return shape_fail(d, n, "indices \"%s\" last dim is %lld; it must be 1 to %lld", idx->name,
                          (long long)m, (long long)(x->rank - b));
    for (int i = 0; i < b; i++)
        if (idx->dims[i] != x->dims[i])
            return shape_fail(d, n, "batch dim %d differs: data %lld, indices %lld", i, (long long)x->dims[i],
                              (long long)idx->dims[i]);
    int64_t out[IR_MAX_RANK];
    int r = 0;
    for (int i = 0; i < idx->rank - 1; i++)
        out[r++] = idx->dims[i];
    for (int i = (int)(b + m); i < x->rank; i++) {
        if (r >= IR_MAX_RANK)
            return shape_fail(d, n, "output rank exceeds %d", IR_MAX_RANK);
        out[r++] = x->dims[i];
    }
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

int fold_gather_nd(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *idx = n->inputs[1], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    int b = (int)node_attr_int(n, "batch_dims", 0), q = idx->rank;
    int m = (int)idx->dims[q - 1];
    int64_t xs[IR_MAX_RANK], nbatch = 1, per = 1, slice = 1;
    strides_of(x->dims, x->rank, xs);
    for (int i = 0; i < b; i++)
        nbatch *= x->dims[i];
    for (int i = b; i < q - 1; i++)
        per *= idx->dims[i];
    for (int i = b + m; i < x->rank; i++)
        slice *= x->dims[i];
    char *dst = fold_alloc(g, y);
    size_t es = dtype_size(y->dtype);
    int64_t xbatch = b > 0 ? xs[b - 1] : 0;
    for (int64_t bi = 0; bi < nbatch; bi++)
        for (int64_t k = 0; k < per; k++) {
            int64_t t = bi * per + k, off = bi * xbatch;
            for (int j = 0; j < m; j++) {
                int64_t c = fold_index(d, n, fold_get_i64(idx, t * m + j), x->dims[b + j]);
                if (c < 0)
                    return -1;
                off += c * xs[b + j];
            }
            if (slice)
                memcpy(dst + (size_t)(t * slice) * es, (const char *)x->data + (size_t)off * es, (size_t)slice * es);
        }
    return 1;
}

/* ---- ScatterND, ScatterElements ----------------------------------------- */

static int check_reduction(Diag *d, const Node *n)
{
    const char *r = node_attr_str(n, "reduction", "none");
    if (strcmp(r, "none") && strcmp(r, "add") && strcmp(r, "mul") && strcmp(r, "max") && strcmp(r, "min"))
        return shape_fail(d, n, "reduction \"%s\" is not supported (none, add, mul, max, min)", r);
    const Tensor *x = in(n, 0);
    if (strcmp(r, "none") && x->dtype == DT_BOOL)
        return shape_fail(d, n, "reduction \"%s\" on bool data is not supported", r);
    return 0;
}

int shape_scatter_nd(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *idx = in(n, 1), *u = in(n, 2);
    if (need_i64(d, n, idx, "indices") || check_reduction(d, n))
        return -1;
    if (u->dtype != x->dtype)
        return shape_fail(d, n, "updates \"%s\" and data \"%s\" differ in dtype", u->name, x->name);
    if (idx->rank < 1)
        return shape_fail(d, n, "indices \"%s\" need rank 1 or more", idx->name);
    int q = idx->rank;
    int64_t m = idx->dims[q - 1];
    if (m < 1 || m > x->rank)
        return shape_fail(d, n, "indices \"%s\" last dim is %lld; it must be 1 to %d", idx->name, (long long)m,
                          x->rank);
    int ur = q - 1 + x->rank - (int)m;
    int ok = u->rank == ur;
    for (int i = 0; ok && i < q - 1; i++)
        ok = u->dims[i] == idx->dims[i];
    for (int i = (int)m; ok && i < x->rank; i++)
        ok = u->dims[q - 1 + i - (int)m] == x->dims[i];
    if (!ok)
        return shape_fail(d, n, "updates \"%s\" must have shape indices.shape[:-1] + data.shape[%lld:]", u->name,
                          (long long)m);
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

int shape_scatter_elements(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *idx = in(n, 1), *u = in(n, 2);
    int axis = 0;
    if (need_i64(d, n, idx, "indices") || check_reduction(d, n))
        return -1;
    if (shape_norm_axis(d, n, node_attr_int(n, "axis", 0), x->rank, "axis", &axis))
        return -1;
    if (u->dtype != x->dtype)
        return shape_fail(d, n, "updates \"%s\" and data \"%s\" differ in dtype", u->name, x->name);
    if (idx->rank != x->rank || u->rank != idx->rank || memcmp(u->dims, idx->dims, sizeof(int64_t) * (size_t)idx->rank))
        return shape_fail(d, n, "indices and updates must have one shape, of the rank of data");
    for (int i = 0; i < x->rank; i++)
        if (i != axis && idx->dims[i] > x->dims[i])
            return shape_fail(d, n, "indices dim %d (%lld) exceeds data dim %lld", i, (long long)idx->dims[i],
                              (long long)x->dims[i]);
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* ---- Pad ---------------------------------------------------------------- */

/* A constant input the op needs at compile time. */
static int need_const(Diag *d, const Node *n, const Tensor *t, const char *what)
{
    if (!t->data && tensor_numel(t) != 0)
        return shape_fail(d, n, "input \"%s\" (%s) must be a constant: dynamic values are not supported%s",
                          t->name, what, shape_const_hint(t));
    return 0;
}

/* Pads from the input (opset 11+, with optional axes since 18) or the
 * attribute (before 11), as begin/end per dim; stored back as the "pads"
 * attribute with 2 x rank entries, which later stages read. */
int shape_pad(Graph *g, Node *n, Diag *d)
{
    const Tensor *x = in(n, 0), *p = in(n, 1), *cv = in(n, 2), *ax = in(n, 3);
    int r = x->rank;
    int64_t pads[2 * IR_MAX_RANK] = {0};
    const char *mode = node_attr_str(n, "mode", "constant");
    if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge") && strcmp(mode, "wrap"))
        return shape_fail(d, n, "mode \"%s\" is not supported (constant, reflect, edge, wrap)", mode);
    if (p) {
        if (need_const(d, n, p, "pads") || need_i64(d, n, p, "pads"))
            return -1;
        int naxes = r;
        int axes[IR_MAX_RANK];
        if (ax) {
            if (need_const(d, n, ax, "axes") || need_i64(d, n, ax, "axes"))
                return -1;
            naxes = (int)tensor_numel(ax);
            if (naxes > r)
                return shape_fail(d, n, "axes has %d entries for rank %d", naxes, r);
            for (int k = 0; k < naxes; k++)
                if (shape_norm_axis(d, n, fold_get_i64(ax, k), r, "axis", &axes[k]))
                    return -1;
        } else {
            for (int k = 0; k < r; k++)
                axes[k] = k;
        }
        if (tensor_numel(p) != 2 * naxes)
            return shape_fail(d, n, "pads has %lld entries; %d expected", (long long)tensor_numel(p), 2 * naxes);
        for (int k = 0; k < naxes; k++) {
            pads[axes[k]] = fold_get_i64(p, k);
            pads[r + axes[k]] = fold_get_i64(p, naxes + k);
        }
    } else {
        const Attr *a = node_attr(n, "pads");
        if (!a || a->type != ATTR_INTS || a->n != 2 * r)
            return shape_fail(d, n, "pads must have %d entries", 2 * r);
        memcpy(pads, a->ints, sizeof(int64_t) * 2 * (size_t)r);
    }
    if (cv && need_const(d, n, cv, "constant_value"))
        return -1;
    if (cv && (tensor_numel(cv) > 1 || cv->dtype != x->dtype))
        return shape_fail(d, n, "constant_value \"%s\" must be one value of the dtype of \"%s\"", cv->name,
                          x->name);
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < r; i++) {
        const int64_t lim = (int64_t)1 << 40;
        if (pads[i] < -lim || pads[i] > lim || pads[r + i] < -lim || pads[r + i] > lim)
            return shape_fail(d, n, "pads for dim %d are out of range", i);
        int64_t sum = pads[i] + pads[r + i];
        if (sum >= 0 ? ck_add_i64(x->dims[i], sum, &out[i]) : (out[i] = x->dims[i] + sum) < 0)
            return shape_fail(d, n, "padded dim %d would be out of range", i);
        if (strcmp(mode, "constant") && (pads[i] || pads[r + i]) && x->dims[i] == 0)
            return shape_fail(d, n, "mode \"%s\" cannot pad empty dim %d", mode, i);
    }
    node_attr_set_ints(g, n, "pads", pads, 2 * r);
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

/* ---- OneHot ------------------------------------------------------------- */

/* The depth is read from its constant input and kept as attribute
 * "depth"; values stay an input, read by the emitter. */
int shape_onehot(Graph *g, Node *n, Diag *d)
{
    const Tensor *idx = in(n, 0), *dep = in(n, 1), *val = in(n, 2);
    if (need_const(d, n, dep, "depth") || need_const(d, n, val, "values"))
        return -1;
    if (tensor_numel(dep) != 1)
        return shape_fail(d, n, "depth \"%s\" must hold one value", dep->name);
    if (tensor_numel(val) != 2)
        return shape_fail(d, n, "values \"%s\" must hold two values (off, on)", val->name);
    if (idx->dtype == DT_BOOL)
        return shape_fail(d, n, "indices \"%s\" must be numeric", idx->name);
    double dv = fold_get(dep, 0);
    if (!(dv >= 1 && dv <= 1e15))
        return shape_fail(d, n, "depth %g is out of range", dv);
    int64_t depth = (int64_t)dv;
    int q = idx->rank, axis = 0;
    if (shape_norm_axis(d, n, node_attr_int(n, "axis", -1), q + 1, "axis", &axis))
        return -1;
    int64_t out[IR_MAX_RANK];
    if (q + 1 > IR_MAX_RANK)
        return shape_fail(d, n, "output rank exceeds %d", IR_MAX_RANK);
    for (int i = 0, k = 0; i <= q; i++)
        out[i] = i == axis ? depth : idx->dims[k++];
    node_attr_set_ints(g, n, "depth", &depth, 1);
    return shape_set(d, n, n->outputs[0], val->dtype, q + 1, out);
}

/* OneHot of constants: torch's repeat() under dynamic shapes exports its
 * repeats as one (OneHot([1], 3, [1, k]) is [1, k, 1]), so it folds with
 * the rest of the shape arithmetic, as k_onehot computes it: a negative
 * index counts from depth, one out of range gives all off. */
int fold_onehot(Graph *g, Node *n, Diag *d)
{
    (void)d;
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    const Tensor *idx = n->inputs[0], *val = n->inputs[2];
    Tensor *y = n->outputs[0];
    int axis = (int)node_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += idx->rank + 1;
    int64_t depth = (int64_t)fold_get(n->inputs[1], 0), outer = 1, inner = 1; /* checked by shape_onehot */
    for (int i = 0; i < idx->rank; i++) {
        if (i < axis)
            outer *= idx->dims[i];
        else
            inner *= idx->dims[i];
    }
    fold_alloc(g, y);
    double off = fold_get(val, 0), on = fold_get(val, 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double v = fold_get(idx, o * inner + i);
            int64_t h = v > -1e15 && v < 1e15 ? (int64_t)v : depth;
            if (h < 0)
                h += depth;
            for (int64_t k = 0; k < depth; k++)
                fold_set(y, (o * depth + k) * inner + i, k == h ? on : off);
        }
    return 1;
}

/* ---- DepthToSpace, SpaceToDepth ----------------------------------------- */

static int depth_space_check(Diag *d, const Node *n, int64_t *b)
{
    const Tensor *x = in(n, 0);
    *b = node_attr_int(n, "blocksize", 0);
    if (x->rank != 4)
        return shape_fail(d, n, "input \"%s\" has rank %d; %s needs NCHW (rank 4)", x->name, x->rank,
                          node_op_name(n));
    if (*b < 1 || *b > 1 << 20)
        return shape_fail(d, n, "blocksize %lld is invalid", (long long)*b);
    return 0;
}

int shape_depth_to_space(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0);
    int64_t b, out[4];
    if (depth_space_check(d, n, &b))
        return -1;
    const char *mode = node_attr_str(n, "mode", "DCR");
    if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
        return shape_fail(d, n, "mode \"%s\" is not DCR or CRD", mode);
    if (x->dims[1] % (b * b))
        return shape_fail(d, n, "channels %lld are not divisible by blocksize^2 = %lld", (long long)x->dims[1],
                          (long long)(b * b));
    out[0] = x->dims[0];
    out[1] = x->dims[1] / (b * b);
    if (ck_mul_i64(x->dims[2], b, &out[2]) || ck_mul_i64(x->dims[3], b, &out[3]))
        return shape_fail(d, n, "output dims overflow int64");
    return shape_set(d, n, n->outputs[0], x->dtype, 4, out);
}

int shape_space_to_depth(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0);
    int64_t b, out[4];
    if (depth_space_check(d, n, &b))
        return -1;
    if (x->dims[2] % b || x->dims[3] % b)
        return shape_fail(d, n, "height %lld and width %lld must be multiples of blocksize %lld",
                          (long long)x->dims[2], (long long)x->dims[3], (long long)b);
    out[0] = x->dims[0];
    if (ck_mul_i64(x->dims[1], b * b, &out[1]))
        return shape_fail(d, n, "output channels overflow int64");
    out[2] = x->dims[2] / b;
    out[3] = x->dims[3] / b;
    return shape_set(d, n, n->outputs[0], x->dtype, 4, out);
}

/* ---- KvCacheWrite (compile --decode) ------------------------------------- */

int shape_kv_cache_write(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0);
    int64_t axis = node_attr_int(n, "axis", -1), slots = node_attr_int(n, "slots", 0);
    if (axis < 0 || axis >= x->rank)
        return shape_fail(d, n, "axis %lld is outside rank %d", (long long)axis, x->rank);
    if (slots < x->dims[axis])
        return shape_fail(d, n, "%lld cache slots cannot take %lld new positions", (long long)slots,
                          (long long)x->dims[axis]);
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = slots;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, dims);
}

/* ---- MoeDispatch, MoeCombine (ir/moe.c) ---------------------------------- */

int shape_moe_dispatch(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *ids = in(n, 1);
    int64_t e = node_attr_int(n, "experts", 0), cap = node_attr_int(n, "capacity", 0);
    if (x->rank != 3 || ids->rank != 3 || ids->dims[0] != x->dims[0] || ids->dims[1] != x->dims[1])
        return shape_fail(d, n, "tokens [groups, tokens, D] and expert ids [groups, tokens, k] must agree");
    if (ids->dtype != DT_I64)
        return shape_fail(d, n, "expert ids must be int64, not %s", dtype_name(ids->dtype));
    if (e < 1 || cap < 1)
        return shape_fail(d, n, "experts %lld and capacity %lld must be positive", (long long)e, (long long)cap);
    int64_t buf[4] = {x->dims[0], e, x->dims[2], cap};
    if (shape_set(d, n, n->outputs[0], x->dtype, 4, buf))
        return -1;
    return shape_set(d, n, n->outputs[1], DT_I64, 3, ids->dims);
}

int shape_moe_combine(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *y = in(n, 0), *slots = in(n, 1), *w = in(n, 2);
    if (y->rank != 4 || slots->rank != 3 || w->rank != 3 || slots->dims[0] != y->dims[0] ||
        memcmp(slots->dims, w->dims, 3 * sizeof(int64_t)) || slots->dtype != DT_I64 || y->dtype != DT_F32 ||
        w->dtype != DT_F32)
        return shape_fail(d, n, "float32 expert outputs [groups, E, D, C], int64 slots and float32 weights [groups, tokens, k] must agree");
    int64_t out[3] = {y->dims[0], slots->dims[1], y->dims[2]};
    return shape_set(d, n, n->outputs[0], y->dtype, 3, out);
}

int shape_moe_scatter(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = in(n, 0), *slots = in(n, 1), *w = in(n, 2);
    int64_t e = node_attr_int(n, "experts", 0), cap = node_attr_int(n, "capacity", 0);
    if (x->rank != 3 || slots->rank != 3 || w->rank != 3 || memcmp(x->dims, slots->dims, 2 * sizeof(int64_t)) ||
        memcmp(slots->dims, w->dims, 3 * sizeof(int64_t)) || slots->dtype != DT_I64 || x->dtype != DT_F32 ||
        w->dtype != DT_F32)
        return shape_fail(d, n, "float32 rows [groups, tokens, D], int64 slots and float32 weights [groups, tokens, k] "
                                "must agree");
    if (e < 1 || cap < 1)
        return shape_fail(d, n, "experts %lld and capacity %lld must be positive", (long long)e, (long long)cap);
    int64_t out[4] = {x->dims[0], e, x->dims[2], cap};
    return shape_set(d, n, n->outputs[0], DT_F32, 4, out);
}

int shape_moe_pair_dot(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *a = in(n, 0), *y = in(n, 1), *slots = in(n, 2);
    if (a->rank != 3 || y->rank != 4 || slots->rank != 3 || a->dims[0] != y->dims[0] || a->dims[2] != y->dims[2] ||
        memcmp(a->dims, slots->dims, 2 * sizeof(int64_t)) || slots->dtype != DT_I64 || a->dtype != DT_F32 ||
        y->dtype != DT_F32)
        return shape_fail(d, n, "float32 rows [groups, tokens, D], expert outputs [groups, E, D, C] and int64 slots "
                                "[groups, tokens, k] must agree");
    return shape_set(d, n, n->outputs[0], DT_F32, 3, slots->dims);
}
