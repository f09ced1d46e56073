/* ---- onnx2spmd kernels: the linalg family (templates/kernels_linalg.c) ----
 * Einsum and (De)QuantizeLinear (ir/ops_linalg.def). */

/* Einsum (codegen/emit_ops.c emit_einsum): for every output element (the
 * output letters, row-major), the sum over the summed letters of the
 * product of the operands, each addressed by its stride per letter. */
#define K_EINSUM(SFX, T)                                                                                        \
    static inline void k_einsum_##SFX(T *y, int nin, const T *const *x, int nout, const int64_t *osz,          \
                                      const int64_t *ost, int ncon, const int64_t *csz, const int64_t *cst)     \
    {                                                                                                           \
        int64_t ny = 1, nc = 1;                                                                                 \
        for (int i = 0; i < nout; i++)                                                                          \
            ny *= osz[i];                                                                                       \
        for (int i = 0; i < ncon; i++)                                                                          \
            nc *= csz[i];                                                                                       \
        for (int64_t o = 0; o < ny; o++) {                                                                      \
            int64_t base[8] = {0}, q = o;                                                                       \
            for (int i = nout - 1; i >= 0; i--) {                                                               \
                int64_t v = q % osz[i];                                                                         \
                q /= osz[i];                                                                                    \
                for (int k = 0; k < nin; k++)                                                                   \
                    base[k] += v * ost[k * nout + i];                                                           \
            }                                                                                                   \
            T acc = 0;                                                                                          \
            for (int64_t cc = 0; cc < nc; cc++) {                                                               \
                int64_t off[8], r = cc;                                                                         \
                for (int k = 0; k < nin; k++)                                                                   \
                    off[k] = base[k];                                                                           \
                for (int i = ncon - 1; i >= 0; i--) {                                                           \
                    int64_t v = r % csz[i];                                                                     \
                    r /= csz[i];                                                                                \
                    for (int k = 0; k < nin; k++)                                                               \
                        off[k] += v * cst[k * ncon + i];                                                        \
                }                                                                                               \
                T p = x[0][off[0]];                                                                             \
                for (int k = 1; k < nin; k++)                                                                   \
                    p *= x[k][off[k]];                                                                          \
                acc += p;                                                                                       \
            }                                                                                                   \
            y[o] = acc;                                                                                         \
        }                                                                                                       \
    }
K_EINSUM(f32, float)
K_EINSUM(i64, int64_t)

/* y = clamp(round_half_even(x / scale) + zero_point, lo, hi). */
static inline void k_quantize(int64_t *y, const float *x, const float *s, const int64_t *zp, int64_t outer, int64_t len,
                              int64_t inner, int mode, int64_t block, int64_t lo, int64_t hi)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t e = (o * len + j) * inner + i, q = k_quant_index(mode, o, j, i, len, inner, block);
                double v = (double)rintf(x[e] / s[q]) + (double)(zp ? zp[q] : 0); /* divided in float32, as ONNX specifies */
                y[e] = v != v ? 0 : v < (double)lo ? lo : v > (double)hi ? hi : (int64_t)v;
            }
}

/* y = (x - zero_point) * scale. */
static inline void k_dequantize(float *y, const int64_t *x, const float *s, const int64_t *zp, int64_t outer,
                                int64_t len, int64_t inner, int mode, int64_t block)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t e = (o * len + j) * inner + i, q = k_quant_index(mode, o, j, i, len, inner, block);
                y[e] = (float)(x[e] - (zp ? zp[q] : 0)) * s[q];
            }
}

