/* ops_nn.c: shape functions of the nn family (ops_nn.def): Conv, MaxPool,
 * GlobalAveragePool, BatchNormalization, AveragePool, LpPool,
 * GlobalMaxPool, LRN, Resize, ConvTranspose, Col2Im and MaxUnpool.
 *
 * Every windowed op here resolves its geometry once, in its shape
 * function, and writes it back as attributes the later stages read
 * without looking at auto_pad, ceil_mode or the constant inputs again:
 * the pools store "pads" (and GlobalMaxPool a "kernel_shape" spanning the
 * spatial dims, so that one kernel serves all three pools), ConvTranspose
 * stores the "pads" implied by output_shape or auto_pad, and Resize stores
 * the per-dim "scales" and "roi" that its scales, sizes, roi and axes
 * inputs mean. Resize therefore needs those inputs as constants, as Col2Im
 * needs its image_shape and block_shape (stored as attributes of those
 * names).
 */
#include "ir.h"

#include <math.h>
#include <string.h>

/* Taps one output element of Resize may read along one axis (the kernels'
 * K_RS_TAPS): antialiased downsampling widens the filter by 1 / scale. */
#define RESIZE_MAX_TAPS 32

static Tensor *in(const Node *n, int i)
{
    return i < n->ninputs ? n->inputs[i] : NULL;
}

static int need_float(Diag *d, const Node *n, const Tensor *t)
{
    if (dtype_is_float(t->dtype))
        return 0;
    return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs a float type", t->name, dtype_name(t->dtype),
                      node_op_name(n));
}

static int need_spatial(Diag *d, const Node *n, const Tensor *x)
{
    if (x->rank >= 3)
        return 0;
    return shape_fail(d, n, "input \"%s\" has rank %d; %s needs [N, C, spatial...]", x->name, x->rank,
                      node_op_name(n));
}

/* An INTS attribute of exactly count entries, or dflt everywhere when it is
 * absent or empty. */
static int ints_or(Diag *d, const Node *n, const char *name, int count, int64_t dflt, int64_t *out)
{
    const Attr *a = node_attr(n, name);
    if (!a || a->n == 0) {
        for (int i = 0; i < count; i++)
            out[i] = dflt;
        return 0;
    }
    if (a->type != ATTR_INTS || a->n != count)
        return shape_fail(d, n, "attribute \"%s\" has %d entries, expected %d", name, a->n, count);
    memcpy(out, a->ints, (size_t)count * sizeof(int64_t));
    return 0;
}

/* auto_pad as 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID. */
static int auto_pad(Diag *d, const Node *n, int *mode)
{
    static const char *const names[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
    const char *ap = node_attr_str(n, "auto_pad", "NOTSET");
    for (int i = 0; i < 4; i++)
        if (!strcmp(ap, names[i])) {
            *mode = i;
            return 0;
        }
    return shape_fail(d, n, "auto_pad \"%s\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
}

/* Bounds every geometry number so that the products in the kernels stay
 * far from overflow. */
static int in_range(int64_t v, int64_t lo)
{
    return v >= lo && v <= ((int64_t)1 << 31);
}

/* ---- AveragePool, LpPool, GlobalMaxPool ---------------------------------- */

/* Output spatial dims of a pooling window over x, with the pads written
 * back as "pads" (begin..., end...). ceil_mode's last window must start
 * inside the input or its begin pad, as ONNX Runtime and the reference
 * implementation have it. */
static int pool_window(Graph *g, Node *n, Diag *d, const Tensor *x, const int64_t *kernel, int64_t *out)
{
    int ns = x->rank - 2, ap;
    int64_t st[IR_MAX_RANK], dl[IR_MAX_RANK], pads[2 * IR_MAX_RANK];
    int ceil_mode = node_attr_int(n, "ceil_mode", 0) != 0;
    if (ints_or(d, n, "strides", ns, 1, st) || ints_or(d, n, "dilations", ns, 1, dl) ||
        ints_or(d, n, "pads", 2 * ns, 0, pads) || auto_pad(d, n, &ap))
        return -1;
    for (int i = 0; i < ns; i++) {
        int64_t len = x->dims[2 + i], k = kernel[i], s = st[i];
        if (!in_range(k, 1) || !in_range(s, 1) || !in_range(dl[i], 1) || !in_range(pads[i], 0) ||
            !in_range(pads[ns + i], 0))
            return shape_fail(d, n, "spatial dim %d: kernel, stride, dilation or pad out of range", i);
        int64_t span = (k - 1) * dl[i] + 1;
        if (ap == 1 || ap == 2) {
            out[i] = (len + s - 1) / s;
            int64_t total = (out[i] - 1) * s + span - len;
            if (total < 0)
                total = 0;
            pads[i] = ap == 1 ? total / 2 : total - total / 2;
            pads[ns + i] = total - pads[i];
            continue;
        }
        if (ap == 3)
            pads[i] = pads[ns + i] = 0;
        int64_t padded = len + pads[i] + pads[ns + i];
        if (padded < span)
            return shape_fail(d, n, "spatial dim %d: window %lld is larger than the padded input %lld", i,
                              (long long)span, (long long)padded);
        if (pads[i] >= span || pads[ns + i] >= span)
            return shape_fail(d, n, "spatial dim %d: a pad of %lld or %lld leaves windows with no input (window %lld)",
                              i, (long long)pads[i], (long long)pads[ns + i], (long long)span);
        out[i] = (padded - span + (ceil_mode ? s - 1 : 0)) / s + 1;
        if (ceil_mode && (out[i] - 1) * s >= len + pads[i])
            out[i]--;
    }
    node_attr_set_ints(g, n, "pads", pads, 2 * ns);
    return 0;
}

int shape_nn_pool(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0];
    if (need_float(d, n, x) || need_spatial(d, n, x))
        return -1;
    int ns = x->rank - 2;
    int64_t out[IR_MAX_RANK], kernel[IR_MAX_RANK];
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    if (n->op == OP_GLOBAL_MAXPOOL) {
        /* A window over all spatial dims: the general pool with no pads. */
        int64_t zero[2 * IR_MAX_RANK] = {0};
        for (int i = 0; i < ns; i++) {
            if (x->dims[2 + i] == 0)
                return shape_fail(d, n, "spatial dim %d of \"%s\" is empty", i, x->name);
            out[2 + i] = 1;
        }
        node_attr_set_ints(g, n, "kernel_shape", x->dims + 2, ns);
        node_attr_set_ints(g, n, "pads", zero, 2 * ns);
        return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
    }
    const Attr *ks = node_attr(n, "kernel_shape");
    if (!ks || ks->type != ATTR_INTS || ks->n != ns)
        return shape_fail(d, n, "attribute \"kernel_shape\" must have %d entries", ns);
    memcpy(kernel, ks->ints, sizeof(int64_t) * (size_t)ns);
    if (n->op == OP_LP_POOL) {
        const Attr *p = node_attr(n, "p");
        if (p && !(p->type == ATTR_INT && p->i >= 1 && p->i <= 64))
            return shape_fail(d, n, "p must be an integer from 1 to 64");
    }
    if (pool_window(g, n, d, x, kernel, out + 2))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

/* ---- LRN ------------------------------------------------------------------ */

int shape_lrn(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    if (need_float(d, n, x))
        return -1;
    if (x->rank < 2)
        return shape_fail(d, n, "input \"%s\" has rank %d; LRN needs [N, C, ...]", x->name, x->rank);
    int64_t size = node_attr_int(n, "size", 0);
    if (size < 1 || size > ((int64_t)1 << 31))
        return shape_fail(d, n, "attribute \"size\" must be a positive integer");
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* ---- Resize --------------------------------------------------------------- */

static int one_of(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

/* A constant input the op reads at compile time; NULL when omitted or empty. */
static int const_input(Diag *d, const Node *n, int k, const char *what, const Tensor **out)
{
    const Tensor *t = in(n, k);
    *out = NULL;
    if (!t || tensor_numel(t) == 0)
        return 0;
    if (!t->data)
        return shape_fail(d, n, "input \"%s\" (%s) must be a constant: dynamic values are not supported%s", t->name,
                          what, shape_const_hint(t));
    if (t->rank != 1)
        return shape_fail(d, n, "input \"%s\" (%s) must be 1-D", t->name, what);
    *out = t;
    return 0;
}

/* Taps per output element of an antialiased filter with half-width
 * support at scale s < 1, as the reference implementation counts them.
 * Kept in double: a tiny scale from the model gives a count far past
 * int64 (converting that would be undefined behaviour). */
static double aa_taps(double support, double s)
{
    return -2.0 * floor(-support / s);
}

int shape_resize(Graph *g, Node *n, Diag *d)
{
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    Tensor *x = n->inputs[0];
    int r = x->rank;
    const char *mode = node_attr_str(n, "mode", "nearest");
    /* Integers only pick elements (nearest); interpolating them would need
     * ONNX Runtime's rounding and saturation, which the kernels lack. */
    if (!dtype_is_float(x->dtype) && !(dtype_is_int(x->dtype) && !strcmp(mode, "nearest")))
        return shape_fail(d, n, "input \"%s\" has dtype %s; Resize needs a float type (or an integer type with mode nearest)",
                          x->name, dtype_name(x->dtype));
    if (r < 1)
        return shape_fail(d, n, "input \"%s\" is a scalar", x->name);
    const char *coord = node_attr_str(n, "coordinate_transformation_mode", "half_pixel");
    const char *nearest = node_attr_str(n, "nearest_mode", "round_prefer_floor");
    const char *policy = node_attr_str(n, "keep_aspect_ratio_policy", "stretch");
    int m = one_of(mode, modes, 3), pol = one_of(policy, policies, 3);
    if (m < 0)
        return shape_fail(d, n, "mode \"%s\" is not one of nearest, linear, cubic", mode);
    if (one_of(coord, coords, 7) < 0)
        return shape_fail(d, n, "coordinate_transformation_mode \"%s\" is not supported", coord);
    if (one_of(nearest, nearests, 4) < 0)
        return shape_fail(d, n, "nearest_mode \"%s\" is not one of round_prefer_floor, round_prefer_ceil, floor, ceil",
                          nearest);
    if (pol < 0)
        return shape_fail(d, n, "keep_aspect_ratio_policy \"%s\" is not one of stretch, not_larger, not_smaller",
                          policy);
    if (n->ninputs < 2)
        return shape_fail(d, n, "has no scales or sizes input (the opset-10 form is not supported)");

    /* The resized axes: the "axes" attribute (opset 18), else all. */
    int axes[IR_MAX_RANK], naxes = r;
    const Attr *ax = node_attr(n, "axes");
    if (ax && ax->n > 0) {
        unsigned mask;
        if (ax->type != ATTR_INTS || shape_axes_mask(d, n, ax, r, &mask))
            return -1;
        naxes = ax->n;
        for (int k = 0; k < naxes; k++)
            axes[k] = (int)(ax->ints[k] < 0 ? ax->ints[k] + r : ax->ints[k]);
    } else {
        for (int k = 0; k < r; k++)
            axes[k] = k;
    }

    /* roi matters to tf_crop_and_resize only; the others ignore it, dynamic or not. */
    int crop = !strcmp(coord, "tf_crop_and_resize");
    const Tensor *roi = NULL, *scales, *sizes;
    if ((crop && const_input(d, n, 1, "roi", &roi)) || const_input(d, n, 2, "scales", &scales) ||
        const_input(d, n, 3, "sizes", &sizes))
        return -1;
    if (!scales == !sizes)
        return shape_fail(d, n, "needs exactly one of scales and sizes");
    const Tensor *given = scales ? scales : sizes;
    if (tensor_numel(given) != naxes)
        return shape_fail(d, n, "%s \"%s\" has %lld entries; %d expected", scales ? "scales" : "sizes", given->name,
                          (long long)tensor_numel(given), naxes);
    if (scales && !dtype_is_float(scales->dtype))
        return shape_fail(d, n, "scales \"%s\" must be a float tensor", scales->name);
    if (sizes && sizes->dtype != DT_I64)
        return shape_fail(d, n, "sizes \"%s\" must be an int64 tensor", sizes->name);

    float sc[IR_MAX_RANK];
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < r; i++) {
        sc[i] = 1.0f;
        out[i] = x->dims[i];
    }
    if (scales) {
        for (int k = 0; k < naxes; k++) {
            double s = fold_get(scales, k);
            double o = floor((double)x->dims[axes[k]] * (double)(float)s);
            if (!(s > 0) || !(o <= (double)((int64_t)1 << 40)))
                return shape_fail(d, n, "scale %g for dim %d is out of range", s, axes[k]);
            sc[axes[k]] = (float)s;
            out[axes[k]] = (int64_t)o;
        }
    } else {
        double common = pol == 1 ? INFINITY : 0.0;
        for (int k = 0; k < naxes; k++) {
            int64_t v = fold_get_i64(sizes, k), len = x->dims[axes[k]];
            if (v < 1 || v > ((int64_t)1 << 40) || len < 1)
                return shape_fail(d, n, "size %lld for dim %d (of %lld) is out of range", (long long)v, axes[k],
                                  (long long)len);
            double s = (double)v / (double)len;
            common = pol == 1 ? fmin(common, s) : fmax(common, s);
            sc[axes[k]] = (float)s;
            out[axes[k]] = v;
        }
        for (int k = 0; pol > 0 && k < naxes; k++) {
            sc[axes[k]] = (float)common;
            out[axes[k]] = (int64_t)(common * (double)x->dims[axes[k]] + 0.5);
        }
    }

    /* roi: begin then end per resized axis; only tf_crop_and_resize reads it. */
    float rv[2 * IR_MAX_RANK];
    for (int i = 0; i < r; i++) {
        rv[i] = 0.0f;
        rv[r + i] = 1.0f;
    }
    if (crop) {
        if (!roi || tensor_numel(roi) != 2 * naxes)
            return shape_fail(d, n, "tf_crop_and_resize needs a constant roi of %d entries", 2 * naxes);
        for (int k = 0; k < naxes; k++) {
            rv[axes[k]] = (float)fold_get(roi, k);
            rv[r + axes[k]] = (float)fold_get(roi, naxes + k);
            if (!isfinite(rv[axes[k]]) || !isfinite(rv[r + axes[k]]))
                return shape_fail(d, n, "roi \"%s\" holds a value that is not finite", roi->name);
        }
    }
    /* Antialiased downsampling reads 1/scale times as many taps. */
    if (node_attr_int(n, "antialias", 0) && m > 0)
        for (int i = 0; i < r; i++)
            if (sc[i] < 1.0f && !(aa_taps(m == 1 ? 1.0 : 2.0, sc[i]) <= RESIZE_MAX_TAPS))
                return shape_fail(d, n, "antialiased %s resize of dim %d by %g reads more than %d inputs per output",
                                  mode, i, (double)sc[i], RESIZE_MAX_TAPS);
    node_attr_set_floats(g, n, "scales", sc, r);
    node_attr_set_floats(g, n, "roi", rv, 2 * r);
    return shape_set(d, n, n->outputs[0], x->dtype, r, out);
}

/* ---- ConvTranspose -------------------------------------------------------- */

/* x [N, C, spatial...], w [C, M / group, kernel...], optional b [M]. The
 * output size comes from output_shape (pads then follow from it, split as
 * the spec says for SAME_UPPER and otherwise), from auto_pad SAME (output
 * = input * stride) or from the explicit pads; the pads are written back. */
int shape_conv_transpose(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *w = n->inputs[1], *b = in(n, 2);
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && (n->inputs[i]->dtype != x->dtype || !dtype_is_float(x->dtype)))
            return shape_fail(d, n, "input \"%s\" has dtype %s; ConvTranspose needs every input in the input's float type",
                              n->inputs[i]->name, dtype_name(n->inputs[i]->dtype));
    if (need_spatial(d, n, x))
        return -1;
    if (w->rank != x->rank)
        return shape_fail(d, n, "weight \"%s\" has rank %d; input \"%s\" rank %d", w->name, w->rank, x->name,
                          x->rank);
    int64_t group = node_attr_int(n, "group", 1), c = x->dims[1];
    if (group < 1 || c % group || w->dims[0] != c)
        return shape_fail(d, n, "weight \"%s\" has %lld input channels; input \"%s\" has %lld in %lld groups",
                          w->name, (long long)w->dims[0], x->name, (long long)c, (long long)group);
    int64_t m = w->dims[1] * group;
    if (b && (b->rank != 1 || b->dims[0] != m))
        return shape_fail(d, n, "bias \"%s\" must have shape [%lld]", b->name, (long long)m);
    int ns = x->rank - 2, ap;
    int64_t kernel[IR_MAX_RANK], st[IR_MAX_RANK], dl[IR_MAX_RANK], opad[IR_MAX_RANK], pads[2 * IR_MAX_RANK];
    int64_t oshape[IR_MAX_RANK], out[IR_MAX_RANK];
    if (ints_or(d, n, "kernel_shape", ns, -1, kernel) || ints_or(d, n, "strides", ns, 1, st) ||
        ints_or(d, n, "dilations", ns, 1, dl) || ints_or(d, n, "output_padding", ns, 0, opad) ||
        ints_or(d, n, "pads", 2 * ns, 0, pads) || auto_pad(d, n, &ap))
        return -1;
    const Attr *os = node_attr(n, "output_shape");
    int has_os = os && os->n > 0;
    if (has_os) {
        /* Spatial dims, or (as some exporters write) the whole shape. */
        if (os->type != ATTR_INTS || (os->n != ns && os->n != x->rank))
            return shape_fail(d, n, "attribute \"output_shape\" must have %d entries", ns);
        memcpy(oshape, os->ints + (os->n - ns), sizeof(int64_t) * (size_t)ns);
    }
    for (int i = 0; i < ns; i++) {
        if (kernel[i] == -1)
            kernel[i] = w->dims[2 + i];
        if (kernel[i] != w->dims[2 + i])
            return shape_fail(d, n, "kernel_shape[%d] = %lld but weight \"%s\" has %lld", i, (long long)kernel[i],
                              w->name, (long long)w->dims[2 + i]);
        if (!in_range(kernel[i], 1) || !in_range(st[i], 1) || !in_range(dl[i], 1) || !in_range(opad[i], 0) ||
            !in_range(pads[i], 0) || !in_range(pads[ns + i], 0) || (has_os && !in_range(oshape[i], 1)))
            return shape_fail(d, n, "spatial dim %d: kernel, stride, dilation, pad or output size out of range", i);
        if (opad[i] >= st[i] && opad[i] >= dl[i])
            return shape_fail(d, n, "output_padding[%d] = %lld must be smaller than the stride or the dilation", i,
                              (long long)opad[i]);
        int64_t full = st[i] * (x->dims[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dl[i] + 1;
        if (has_os || ap == 1 || ap == 2) {
            out[i] = has_os ? oshape[i] : x->dims[2 + i] * st[i];
            /* An output_shape beyond what the input reaches gets no pads
             * (ONNX Runtime clamps them at 0): its last positions hold
             * the bias only. */
            int64_t total = full > out[i] ? full - out[i] : 0;
            pads[i] = ap == 1 ? total / 2 : total - total / 2;
            pads[ns + i] = total - pads[i];
        } else {
            if (ap == 3)
                pads[i] = pads[ns + i] = 0;
            out[i] = full - pads[i] - pads[ns + i];
            if (out[i] < 1)
                return shape_fail(d, n, "spatial dim %d: pads leave no output", i);
        }
    }
    node_attr_set_ints(g, n, "pads", pads, 2 * ns);
    int64_t y[IR_MAX_RANK];
    y[0] = x->dims[0];
    y[1] = m;
    memcpy(y + 2, out, sizeof(int64_t) * (size_t)ns);
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, y);
}

/* ---- Col2Im --------------------------------------------------------------- */

/* x [N, C * prod(block), L] holds, per channel and block offset, one value
 * per block position; L must be the number of positions the block takes
 * in the padded image with the strides and dilations. y [N, C, image...]. */
int shape_col2im(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0];
    const Tensor *img, *blk;
    if (need_float(d, n, x) || const_input(d, n, 1, "image_shape", &img) ||
        const_input(d, n, 2, "block_shape", &blk))
        return -1;
    if (x->rank != 3)
        return shape_fail(d, n, "input \"%s\" has rank %d; Col2Im needs [N, C * block size, blocks]", x->name,
                          x->rank);
    if (!img || !blk || tensor_numel(img) != tensor_numel(blk) || tensor_numel(img) > IR_MAX_RANK - 2 ||
        img->dtype != DT_I64 || blk->dtype != DT_I64)
        return shape_fail(d, n, "image_shape and block_shape must be int64 vectors of one length, at most %d",
                          IR_MAX_RANK - 2);
    int ns = (int)tensor_numel(img);
    int64_t st[IR_MAX_RANK], dl[IR_MAX_RANK], pads[2 * IR_MAX_RANK], image[IR_MAX_RANK], block[IR_MAX_RANK];
    if (ints_or(d, n, "strides", ns, 1, st) || ints_or(d, n, "dilations", ns, 1, dl) ||
        ints_or(d, n, "pads", 2 * ns, 0, pads))
        return -1;
    int64_t bsize = 1, blocks = 1;
    for (int i = 0; i < ns; i++) {
        image[i] = fold_get_i64(img, i);
        block[i] = fold_get_i64(blk, i);
        if (!in_range(image[i], 1) || !in_range(block[i], 1) || !in_range(st[i], 1) || !in_range(dl[i], 1) ||
            !in_range(pads[i], 0) || !in_range(pads[ns + i], 0))
            return shape_fail(d, n, "spatial dim %d: image, block, stride, dilation or pad out of range", i);
        int64_t span = (block[i] - 1) * dl[i] + 1, padded = image[i] + pads[i] + pads[ns + i];
        if (padded < span)
            return shape_fail(d, n, "spatial dim %d: block %lld is larger than the padded image %lld", i,
                              (long long)span, (long long)padded);
        if (ck_mul_i64(bsize, block[i], &bsize) || ck_mul_i64(blocks, (padded - span) / st[i] + 1, &blocks))
            return shape_fail(d, n, "block counts overflow");
    }
    if (x->dims[1] % bsize || x->dims[2] != blocks)
        return shape_fail(d, n, "input \"%s\" is [%lld, %lld, %lld]; the blocks need [N, C * %lld, %lld]", x->name,
                          (long long)x->dims[0], (long long)x->dims[1], (long long)x->dims[2], (long long)bsize,
                          (long long)blocks);
    node_attr_set_ints(g, n, "image_shape", image, ns);
    node_attr_set_ints(g, n, "block_shape", block, ns);
    node_attr_set_ints(g, n, "pads", pads, 2 * ns);
    int64_t y[IR_MAX_RANK];
    y[0] = x->dims[0];
    y[1] = x->dims[1] / bsize;
    memcpy(y + 2, image, sizeof(int64_t) * (size_t)ns);
    return shape_set(d, n, n->outputs[0], x->dtype, ns + 2, y);
}

/* ---- MaxUnpool ------------------------------------------------------------ */

/* MaxUnpool(x [N, C, spatial...], indices of x's shape, optional
 * output_shape): y is zero but at the indices, which are flat over the
 * whole of y, as MaxPool writes them. Its spatial size inverts MaxPool's
 * ((in - 1) * stride - pads + kernel) unless output_shape is given. */
int shape_max_unpool(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *idx = n->inputs[1];
    const Tensor *os;
    if (need_float(d, n, x) || need_spatial(d, n, x) || const_input(d, n, 2, "output_shape", &os))
        return -1;
    if (idx->dtype != DT_I64 || idx->rank != x->rank || memcmp(idx->dims, x->dims, sizeof(int64_t) * (size_t)x->rank))
        return shape_fail(d, n, "indices \"%s\" must be int64 of the shape of \"%s\"", idx->name, x->name);
    int ns = x->rank - 2;
    const Attr *ks = node_attr(n, "kernel_shape");
    int64_t st[IR_MAX_RANK], pads[2 * IR_MAX_RANK], y[IR_MAX_RANK];
    if (!ks || ks->type != ATTR_INTS || ks->n != ns)
        return shape_fail(d, n, "attribute \"kernel_shape\" must have %d entries", ns);
    if (ints_or(d, n, "strides", ns, 1, st) || ints_or(d, n, "pads", 2 * ns, 0, pads))
        return -1;
    y[0] = x->dims[0];
    y[1] = x->dims[1];
    for (int i = 0; i < ns; i++) {
        if (!in_range(ks->ints[i], 1) || !in_range(st[i], 1) || !in_range(pads[i], 0) || !in_range(pads[ns + i], 0))
            return shape_fail(d, n, "spatial dim %d: kernel, stride or pad out of range", i);
        y[2 + i] = (x->dims[2 + i] - 1) * st[i] - pads[i] - pads[ns + i] + ks->ints[i];
        if (y[2 + i] < 1)
            return shape_fail(d, n, "spatial dim %d: pads leave no output", i);
    }
    if (os) {
        if (tensor_numel(os) != x->rank || os->dtype != DT_I64)
            return shape_fail(d, n, "output_shape \"%s\" must be %d int64 values", os->name, x->rank);
        for (int i = 0; i < x->rank; i++) {
            int64_t v = fold_get_i64(os, i);
            if (i < 2 ? v != x->dims[i] : v < y[i] || v > ((int64_t)1 << 40))
                return shape_fail(d, n, "output_shape[%d] = %lld does not fit input \"%s\"", i, (long long)v,
                                  x->name);
            y[i] = v;
        }
    }
    node_attr_set_ints(g, n, "output_shape", y, x->rank);
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, y);
}

/* ---- Conv, MaxPool, GlobalAveragePool, BatchNormalization ---- */

/* Output spatial dims of a windowed op; fills pads (2*ns entries). */
static int window_out(Graph *g, Node *n, Diag *d, const Tensor *x,
                      const int64_t *kernel, int ceil_mode, int64_t *out)
{
    int ns = x->rank - 2;
    int64_t strides[IR_MAX_RANK], dil[IR_MAX_RANK], pads[2 * IR_MAX_RANK];
    if (ints_or(d, n, "strides", ns, 1, strides) ||
        ints_or(d, n, "dilations", ns, 1, dil) ||
        ints_or(d, n, "pads", 2 * ns, 0, pads))
        return -1;
    const char *ap = node_attr_str(n, "auto_pad", "NOTSET");
    int same_upper = strcmp(ap, "SAME_UPPER") == 0, same_lower = strcmp(ap, "SAME_LOWER") == 0;
    int valid = strcmp(ap, "VALID") == 0;
    if (!same_upper && !same_lower && !valid && strcmp(ap, "NOTSET") != 0)
        return shape_fail(d, n, "auto_pad \"%s\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
    for (int i = 0; i < ns; i++) {
        int64_t in = x->dims[2 + i], k = kernel[i], s = strides[i], dl = dil[i];
        if (k < 1 || s < 1 || dl < 1 || pads[i] < 0 || pads[ns + i] < 0 ||
            k > (1ll << 31) || s > (1ll << 31) || dl > (1ll << 31) ||
            pads[i] > (1ll << 31) || pads[ns + i] > (1ll << 31))
            return shape_fail(d, n, "spatial dim %d: kernel, stride, dilation or pad out of range", i);
        int64_t span = (k - 1) * dl + 1;
        if (same_upper || same_lower) {
            out[i] = (in + s - 1) / s;
            int64_t total = (out[i] - 1) * s + span - in;
            if (total < 0)
                total = 0;
            pads[i] = same_upper ? total / 2 : total - total / 2;
            pads[ns + i] = total - pads[i];
        } else {
            if (valid)
                pads[i] = pads[ns + i] = 0;
            int64_t padded = in + pads[i] + pads[ns + i];
            if (padded < span)
                return shape_fail(d, n, "spatial dim %d: window %lld is larger than the padded input %lld",
                                  i, (long long)span, (long long)padded);
            if (ceil_mode) {
                out[i] = (padded - span + s - 1) / s + 1;
                /* The last window must start inside the input or left pad. */
                if ((out[i] - 1) * s >= in + pads[i])
                    out[i]--;
            } else {
                out[i] = (padded - span) / s + 1;
            }
        }
    }
    node_attr_set_ints(g, n, "pads", pads, 2 * ns);
    return 0;
}

int shape_conv(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && (n->inputs[i]->dtype != x->dtype || !dtype_is_float(x->dtype)))
            return shape_fail(d, n, "input \"%s\" has dtype %s; Conv needs every input in the input's float type",
                              n->inputs[i]->name, dtype_name(n->inputs[i]->dtype));
    if (x->rank < 3 || w->rank != x->rank)
        return shape_fail(d, n, "input \"%s\" (rank %d) and weight \"%s\" (rank %d) must have equal rank >= 3",
                          x->name, x->rank, w->name, w->rank);
    int64_t group = node_attr_int(n, "group", 1);
    int64_t c = x->dims[1], m = w->dims[0];
    if (group < 1 || c % group || m % group || w->dims[1] * group != c)
        return shape_fail(d, n, "weight \"%s\" has %lld input channels per group; input \"%s\" has %lld channels in %lld groups",
                          w->name, (long long)w->dims[1], x->name, (long long)c, (long long)group);
    if (b && (b->rank != 1 || b->dims[0] != m))
        return shape_fail(d, n, "bias \"%s\" must have shape [%lld]", b->name, (long long)m);
    int ns = x->rank - 2;
    int64_t kernel[IR_MAX_RANK], out[IR_MAX_RANK];
    if (ints_or(d, n, "kernel_shape", ns, -1, kernel))
        return -1;
    for (int i = 0; i < ns; i++) {
        if (kernel[i] == -1)
            kernel[i] = w->dims[2 + i];
        if (kernel[i] != w->dims[2 + i])
            return shape_fail(d, n, "kernel_shape[%d] = %lld but weight \"%s\" has %lld",
                              i, (long long)kernel[i], w->name, (long long)w->dims[2 + i]);
    }
    out[0] = x->dims[0];
    out[1] = m;
    if (window_out(g, n, d, x, kernel, 0, out + 2))
        return -1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int shape_maxpool(Graph *g, Node *n, Diag *d)
{
    Tensor *x = n->inputs[0];
    if (!dtype_is_float(x->dtype))
        return shape_fail(d, n, "input \"%s\" has dtype %s; MaxPool needs float32",
                          x->name, dtype_name(x->dtype));
    if (x->rank < 3)
        return shape_fail(d, n, "input \"%s\" has rank %d; MaxPool needs rank >= 3",
                          x->name, x->rank);
    const Attr *ks = node_attr(n, "kernel_shape");
    int ns = x->rank - 2;
    if (!ks || ks->n != ns)
        return shape_fail(d, n, "attribute \"kernel_shape\" must have %d entries", ns);
    if (node_attr_int(n, "storage_order", 0) != 0)
        return shape_fail(d, n, "storage_order=1 (column-major indices) is not supported");
    int64_t out[IR_MAX_RANK];
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    if (window_out(g, n, d, x, ks->ints, node_attr_int(n, "ceil_mode", 0) != 0, out + 2) ||
        shape_set(d, n, n->outputs[0], x->dtype, x->rank, out))
        return -1;
    return n->noutputs > 1 ? shape_set(d, n, n->outputs[1], DT_I64, x->rank, out) : 0;
}

int shape_global_pool(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    if (!dtype_is_float(x->dtype) || x->rank < 3)
        return shape_fail(d, n, "input \"%s\" must be float32 with rank >= 3", x->name);
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        out[i] = i < 2 ? x->dims[i] : 1;
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, out);
}

int shape_batchnorm(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0];
    if (node_attr_int(n, "training_mode", 0) != 0)
        return shape_fail(d, n, "training_mode=1 is not supported (inference only)");
    if (!dtype_is_float(x->dtype) || x->rank < 2)
        return shape_fail(d, n, "input \"%s\" must be float32 with rank >= 2", x->name);
    static const char *const roles[] = {"", "scale", "B", "input_mean", "input_var"};
    for (int i = 1; i < 5; i++) {
        Tensor *p = n->inputs[i];
        if (p->dtype != x->dtype || p->rank != 1 || p->dims[0] != x->dims[1])
            return shape_fail(d, n, "%s \"%s\" must be float32 of shape [%lld]", roles[i],
                              p->name, (long long)x->dims[1]);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}
