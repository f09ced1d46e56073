/* shape_nn.c: shape inference for the convolution-style ops (Conv, MaxPool,
 * GlobalAveragePool, Flatten, BatchNormalization).
 *
 * Spatial ops take NCHW-style inputs with any number of spatial dims. The
 * output size follows the ONNX formulas for explicit pads and for each
 * auto_pad mode; the pads actually implied are written back into the
 * node's "pads" attribute, so later stages never look at auto_pad again.
 */
#include "ir.h"

#include <string.h>

/* Reads an INTS attribute of exactly `count` entries into out, or fills
 * out with dflt when the attribute is absent. */
static int ints_or(Diag *d, const Node *n, const char *name, int count,
                   int64_t dflt, int64_t *out)
{
    const Attr *a = node_attr(n, name);
    if (!a || a->n == 0) {
        for (int i = 0; i < count; i++)
            out[i] = dflt;
        return 0;
    }
    if (a->n != count)
        return shape_fail(d, n, "attribute \"%s\" has %d entries, expected %d", name,
                          a->n, count);
    memcpy(out, a->ints, (size_t)count * sizeof(int64_t));
    return 0;
}

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
