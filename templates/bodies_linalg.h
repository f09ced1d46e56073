/* ---- onnx2spmd kernel bodies: the linalg family (templates/bodies_linalg.h) ----
 * The scale index of (De)QuantizeLinear and Einsum's limits, shared by
 * templates/kernels_linalg.c and templates/cuda_linalg.cu: both targets compute each element with this same code, in the same
 * order. O2S_HD is from templates/bodies.h.
 */

/* Einsum: the most summed letters one call takes. */
#define K_EINSUM_MAX_SUMMED 16

/* (De)QuantizeLinear's scale index for element (o, j, i) of x seen as
 * [outer, len, inner], by its K_QUANT_* mode. */
O2S_HD static inline int64_t k_quant_index(int mode, int64_t o, int64_t j, int64_t i, int64_t len, int64_t inner,
                                           int64_t block)
{
    if (mode == K_QUANT_TENSOR)
        return 0;
    if (mode == K_QUANT_AXIS)
        return j;
    return (o * ((len + block - 1) / block) + j / block) * inner + i;
}
