/* ---- onnx2spmd CUDA kernels: the linalg family (templates/cuda_linalg.cu) ----
 * Einsum and (De)QuantizeLinear (ir/ops_linalg.def). */

/* (De)QuantizeLinear: one thread per element, as the C kernels. */
__global__ void kk_quantize(int64_t *y, const float *x, const float *s, const int64_t *zp, int64_t outer, int64_t len,
                            int64_t inner, int mode, int64_t block, int64_t lo, int64_t hi)
{
    GRID_LOOP(e, outer * len * inner)
    {
        int64_t o = e / (len * inner), j = e / inner % len, i = e % inner, q = k_quant_index(mode, o, j, i, len, inner, block);
        double v = (double)rintf(x[e] / s[q]) + (double)(zp ? zp[q] : 0); /* divided in float32, as ONNX specifies */
        y[e] = v != v ? 0 : v < (double)lo ? lo : v > (double)hi ? hi : (int64_t)v;
    }
}

static inline void k_quantize(int64_t *y, const float *x, const float *s, const int64_t *zp, int64_t outer, int64_t len,
                              int64_t inner, int mode, int64_t block, int64_t lo, int64_t hi)
{
    kk_quantize<<<k_blocks(outer * len * inner), K_THREADS, 0, g_stream>>>(y, x, s, zp, outer, len, inner, mode, block,
                                                                         lo, hi);
    CHECK_LAUNCH();
}

__global__ void kk_dequantize(float *y, const int64_t *x, const float *s, const int64_t *zp, int64_t outer, int64_t len,
                              int64_t inner, int mode, int64_t block)
{
    GRID_LOOP(e, outer * len * inner)
    {
        int64_t o = e / (len * inner), j = e / inner % len, i = e % inner, q = k_quant_index(mode, o, j, i, len, inner, block);
        y[e] = (float)(x[e] - (zp ? zp[q] : 0)) * s[q];
    }
}

static inline void k_dequantize(float *y, const int64_t *x, const float *s, const int64_t *zp, int64_t outer,
                                int64_t len, int64_t inner, int mode, int64_t block)
{
    kk_dequantize<<<k_blocks(outer * len * inner), K_THREADS, 0, g_stream>>>(y, x, s, zp, outer, len, inner, mode,
                                                                           block);
    CHECK_LAUNCH();
}

/* Einsum: one thread per output element, as the C kernel. */
typedef struct KEinsum {
    int nin, nout, ncon;
    const void *x[8];
    int64_t osz[K_MAX_RANK], csz[K_EINSUM_MAX_SUMMED];
    int64_t ost[8 * K_MAX_RANK], cst[8 * K_EINSUM_MAX_SUMMED];
} KEinsum;

template <typename T> __global__ void kk_einsum(T *y, int64_t ny, int64_t nc, KEinsum e)
{
    GRID_LOOP(o, ny)
    {
        int64_t base[8] = {0}, q = o;
        for (int i = e.nout - 1; i >= 0; i--) {
            int64_t v = q % e.osz[i];
            q /= e.osz[i];
            for (int k = 0; k < e.nin; k++)
                base[k] += v * e.ost[k * e.nout + i];
        }
        T acc = 0;
        for (int64_t cc = 0; cc < nc; cc++) {
            int64_t off[8], r = cc;
            for (int k = 0; k < e.nin; k++)
                off[k] = base[k];
            for (int i = e.ncon - 1; i >= 0; i--) {
                int64_t v = r % e.csz[i];
                r /= e.csz[i];
                for (int k = 0; k < e.nin; k++)
                    off[k] += v * e.cst[k * e.ncon + i];
            }
            T p = ((const T *)e.x[0])[off[0]];
            for (int k = 1; k < e.nin; k++)
                p *= ((const T *)e.x[k])[off[k]];
            acc += p;
        }
        y[o] = acc;
    }
}

template <typename T>
static inline void k_einsum(T *y, int nin, const T *const *x, int nout, const int64_t *osz, const int64_t *ost, int ncon,
                            const int64_t *csz, const int64_t *cst)
{
    KEinsum e;
    memset(&e, 0, sizeof e);
    e.nin = nin;
    e.nout = nout;
    e.ncon = ncon;
    int64_t ny = 1, nc = 1;
    for (int k = 0; k < nin; k++)
        e.x[k] = x[k];
    for (int i = 0; i < nout; i++) {
        e.osz[i] = osz[i];
        ny *= osz[i];
        for (int k = 0; k < nin; k++)
            e.ost[k * nout + i] = ost[k * nout + i];
    }
    for (int i = 0; i < ncon; i++) {
        e.csz[i] = csz[i];
        nc *= csz[i];
        for (int k = 0; k < nin; k++)
            e.cst[k * ncon + i] = cst[k * ncon + i];
    }
    kk_einsum<T><<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, ny, nc, e);
    CHECK_LAUNCH();
}
#define k_einsum_f32 k_einsum<float>
#define k_einsum_i64 k_einsum<int64_t>

