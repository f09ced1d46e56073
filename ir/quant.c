/* quant.c: QuantizeLinear and DequantizeLinear, shape functions.
 *
 * y = saturate(round_half_even(x / scale) + zero_point) and
 * y = (x - zero_point) * scale, with the scale (and zero point) per tensor
 * (a scalar or one element), per axis (1-D along `axis`) or per block
 * (x's shape with `axis` divided into blocks of `block_size`). Integer
 * types of 8 to 32 bits; float8 and 4/2-bit types are refused with the
 * dtype list (they are not storage types here).
 */
#include "ir.h"

#include <string.h>

/* The scale's layout against x: 0 per tensor, 1 per axis, 2 blocked. */
int quant_layout(const Node *n, const Tensor *x, const Tensor *scale, int *axis, int64_t *block, Diag *d)
{
    int64_t a = node_attr_int(n, "axis", 1), bs = node_attr_int(n, "block_size", 0);
    *block = bs;
    if (tensor_numel(scale) == 1 && scale->rank <= 1 && bs == 0) {
        *axis = 0;
        return 0;
    }
    if (a < -x->rank || a >= x->rank)
        return shape_fail(d, n, "axis %lld is out of range for rank %d", (long long)a, x->rank);
    *axis = (int)(a < 0 ? a + x->rank : a);
    if (bs == 0) {
        if (scale->rank != 1 || scale->dims[0] != x->dims[*axis])
            return shape_fail(d, n, "scale \"%s\" must be a scalar or 1-D of x's dim %d (%lld)", scale->name, *axis,
                              (long long)x->dims[*axis]);
        return 1;
    }
    if (bs < 0 || scale->rank != x->rank)
        return shape_fail(d, n, "block_size %lld needs a scale of x's rank", (long long)bs);
    for (int i = 0; i < x->rank; i++) {
        int64_t want = i == *axis ? (x->dims[i] + bs - 1) / bs : x->dims[i];
        if (scale->dims[i] != want)
            return shape_fail(d, n, "scale \"%s\" dim %d is %lld; blocks of %lld need %lld", scale->name, i,
                              (long long)scale->dims[i], (long long)bs, (long long)want);
    }
    return 2;
}

static int quant_int_ok(DType t)
{
    return t == DT_I8 || t == DT_U8 || t == DT_I16 || t == DT_U16 || t == DT_I32;
}

int shape_quantize(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0], *scale = n->inputs[1], *zp = n->ninputs > 2 ? n->inputs[2] : NULL;
    int axis;
    int64_t block;
    if (!dtype_is_float(x->dtype) || !dtype_is_float(scale->dtype))
        return shape_fail(d, n, "x and scale must be float types");
    if (quant_layout(n, x, scale, &axis, &block, d) < 0)
        return -1;
    DType out = zp ? zp->dtype : (DType)node_attr_int(n, "output_dtype", DT_U8);
    if (zp && node_attr_int(n, "output_dtype", 0) && node_attr_int(n, "output_dtype", 0) != zp->dtype)
        return shape_fail(d, n, "output_dtype differs from the zero point's type");
    if (!quant_int_ok(out))
        return shape_fail(d, n, "output type %s is not supported (int8, uint8, int16, uint16, int32)",
                          dtype_onnx_name((int)out));
    if (zp && (zp->rank != scale->rank || tensor_numel(zp) != tensor_numel(scale)))
        return shape_fail(d, n, "zero point \"%s\" must have the scale's shape", zp->name);
    return shape_set(d, n, n->outputs[0], out, x->rank, x->dims);
}

int shape_dequantize(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0], *scale = n->inputs[1], *zp = n->ninputs > 2 ? n->inputs[2] : NULL;
    int axis;
    int64_t block;
    if (!quant_int_ok(x->dtype))
        return shape_fail(d, n, "input \"%s\" has dtype %s (int8, uint8, int16, uint16, int32 are supported)",
                          x->name, dtype_name(x->dtype));
    if (!dtype_is_float(scale->dtype))
        return shape_fail(d, n, "scale \"%s\" must be a float type", scale->name);
    if (zp && (zp->dtype != x->dtype || tensor_numel(zp) != tensor_numel(scale)))
        return shape_fail(d, n, "zero point \"%s\" must have x's type and the scale's shape", zp->name);
    if (quant_layout(n, x, scale, &axis, &block, d) < 0)
        return -1;
    return shape_set(d, n, n->outputs[0], scale->dtype, x->rank, x->dims);
}
