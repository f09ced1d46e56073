/* ---- onnx2spmd CUDA kernels: reduce family (templates/cuda_reduce.cu) -------
 * CUDA kernels for the ops of ir/ops_reduce.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_reduce.c.
 * Deterministic by construction: no atomics. Reductions, arg-reductions,
 * scans, TopK and log-softmax give each output element (or row) to one
 * thread, which walks its inputs in the C kernels' order; the
 * normalizations give each row to one block and reduce it with the fixed
 * shared-memory tree of k_block_sum (templates/cuda_kernels.cu), so two
 * runs give the same bits.
 */

__global__ void kk_reduce_op_f32(int op, float *y, int64_t ny, const float *x, KRed k, int64_t nred)
{
    GRID_LOOP(o, ny) y[o] = k_reduce_one_f32(op, x, &k, nred, o);
}

__global__ void kk_reduce_op_i64(int op, int64_t *y, int64_t ny, const int64_t *x, KRed k, int64_t nred)
{
    GRID_LOOP(o, ny) y[o] = k_reduce_one_i64(op, x, &k, nred, o);
}

static inline void k_reduce_op_f32(int op, float *y, int64_t ny, const float *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    kk_reduce_op_f32<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(op, y, ny, x, k, nred);
    CHECK_LAUNCH();
}

static inline void k_reduce_op_i64(int op, int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    kk_reduce_op_i64<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(op, y, ny, x, k, nred);
    CHECK_LAUNCH();
}

/* ArgMax / ArgMin: one thread per (outer, inner) row. */
__global__ void kk_argreduce_f32(int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner, int is_min,
                                 int last)
{
    GRID_LOOP(row, outer * inner) y[row] = k_argbest_f32(x, n, inner, row, is_min, last);
}

__global__ void kk_argreduce_i64(int64_t *y, const int64_t *x, int64_t outer, int64_t n, int64_t inner, int is_min,
                                 int last)
{
    GRID_LOOP(row, outer * inner) y[row] = k_argbest_i64(x, n, inner, row, is_min, last);
}

static inline void k_argreduce_f32(int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner, int is_min,
                                   int last)
{
    kk_argreduce_f32<<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner, is_min, last);
    CHECK_LAUNCH();
}

static inline void k_argreduce_i64(int64_t *y, const int64_t *x, int64_t outer, int64_t n, int64_t inner,
                                   int is_min, int last)
{
    kk_argreduce_i64<<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner, is_min, last);
    CHECK_LAUNCH();
}

/* CumSum and CumProd: one thread per row, in order (float as the C
 * target; int64 wraps). */
template <typename T, typename A>
__global__ void kk_scan(T *y, const T *x, int64_t outer, int64_t n, int64_t inner, int exclusive, int reverse, int prod)
{
    GRID_LOOP(row, outer * inner)
    {
        int64_t o = row / inner, i = row % inner;
        A acc = prod ? 1 : 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t off = (o * n + (reverse ? n - 1 - j : j)) * inner + i;
            A v = (A)x[off];
            if (!exclusive)
                acc = prod ? acc * v : acc + v;
            y[off] = (T)acc;
            if (exclusive)
                acc = prod ? acc * v : acc + v;
        }
    }
}

#define K_SCAN(NAME, T, A, PROD)                                                                                  \
    static inline void NAME(T *y, const T *x, int64_t outer, int64_t n, int64_t inner, int exclusive, int reverse) \
    {                                                                                                             \
        kk_scan<T, A><<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner, exclusive,     \
                                                                           reverse, PROD);                        \
        CHECK_LAUNCH();                                                                                           \
    }
K_SCAN(k_cumsum_f32, float, float, 0)
K_SCAN(k_cumsum_i64, int64_t, uint64_t, 0)
K_SCAN(k_cumprod_f32, float, float, 1)
K_SCAN(k_cumprod_i64, int64_t, uint64_t, 1)

/* LogSoftmax: one thread per row. */
__global__ void kk_log_softmax(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    GRID_LOOP(row, outer * inner) k_log_softmax_row(y, x, n, inner, row);
}

static inline void k_log_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    kk_log_softmax<<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner);
    CHECK_LAUNCH();
}

/* TopK, sorted, ties to the lower index: one thread per row, each pick the
 * best element ranked after the previous pick (no scratch). */
template <typename T>
__global__ void kk_topk(T *vals, int64_t *idx, const T *x, int64_t outer, int64_t n, int64_t inner, int64_t k,
                        int largest)
{
    GRID_LOOP(row, outer * inner)
    {
        int64_t o = row / inner, i = row % inner, prev = -1;
        const T *xp = x + o * n * inner + i;
        for (int64_t q = 0; q < k; q++) {
            int64_t best = -1;
            for (int64_t j = 0; j < n; j++) {
                T v = xp[j * inner];
                if (prev >= 0) {
                    T p = xp[prev * inner];
                    int after = largest ? (v < p || (v == p && j > prev)) : (v > p || (v == p && j > prev));
                    if (!after)
                        continue;
                }
                if (best < 0 || (largest ? v > xp[best * inner] : v < xp[best * inner]))
                    best = j;
            }
            vals[(o * k + q) * inner + i] = xp[best * inner];
            idx[(o * k + q) * inner + i] = best;
            prev = best;
        }
    }
}

static inline void k_topk_f32(float *vals, int64_t *idx, const float *x, int64_t outer, int64_t n, int64_t inner,
                              int64_t k, int largest)
{
    kk_topk<float><<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(vals, idx, x, outer, n, inner, k, largest);
    CHECK_LAUNCH();
}

static inline void k_topk_i64(int64_t *vals, int64_t *idx, const int64_t *x, int64_t outer, int64_t n,
                              int64_t inner, int64_t k, int largest)
{
    kk_topk<int64_t><<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(vals, idx, x, outer, n, inner, k,
                                                                            largest);
    CHECK_LAUNCH();
}

/* RMSNormalization: one block per row. */
__global__ void kk_rmsnorm(float *y, const float *x, const float *scale, int64_t n, int64_t sn, float eps)
{
    __shared__ float sh[K_THREADS];
    int64_t row = blockIdx.x;
    const float *xp = x + row * n;
    float q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        q += xp[j] * xp[j];
    float inv = rsqrtf(k_block_sum(q, sh) / n + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        y[row * n + j] = xp[j] * inv * scale[j % sn];
}

static inline void k_rmsnorm_f32(float *y, const float *x, const float *scale, int64_t outer, int64_t n, int64_t sn,
                                 float eps)
{
    if (outer < 1)
        return;
    kk_rmsnorm<<<(unsigned)outer, K_THREADS, 0, g_stream>>>(y, x, scale, n, sn, eps);
    CHECK_LAUNCH();
}

/* Instance / group normalization: one block per (batch, group), two
 * passes (mean, then squared deviations), as kk_layernorm. */
__global__ void kk_chan_norm(float *y, const float *x, const float *scale, const float *bias, int64_t C, int64_t S,
                             int64_t groups, int64_t sn, float eps)
{
    __shared__ float sh[K_THREADS];
    int64_t b = blockIdx.x, cg = C / groups, len = cg * S;
    const float *xp = x + b * len;
    float s = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        s += xp[j];
    float mean = k_block_sum(s, sh) / len;
    float q = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        q += (xp[j] - mean) * (xp[j] - mean);
    float istd = rsqrtf(k_block_sum(q, sh) / len + eps);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        int64_t c = (b % groups) * cg + j / S, p = sn == C ? c : c / cg;
        y[b * len + j] = (xp[j] - mean) * istd * scale[p] + bias[p];
    }
}

static inline void k_chan_norm_f32(float *y, const float *x, const float *scale, const float *bias, int64_t N,
                                   int64_t C, int64_t S, int64_t groups, int64_t sn, float eps)
{
    if (N * groups < 1)
        return;
    kk_chan_norm<<<(unsigned)(N * groups), K_THREADS, 0, g_stream>>>(y, x, scale, bias, C, S, groups, sn, eps);
    CHECK_LAUNCH();
}

/* ---- ReduceSum, ReduceMean ---- */

/* Reductions: one thread per output element, summing its inputs in the
 * C target's order (row-major over the reduced dims). No atomics, so two
 * runs give the same bits. sy: the output stride of each input dim, 0
 * along the reduced ones; the output is contiguous over the kept dims. */
template <typename T> __global__ void kk_reduce(T *y, int64_t ny, const T *x, KShape s, T scale)
{
    GRID_LOOP(o, ny)
    {
        int64_t xstride[K_MAX_RANK], st = 1, base = 0, rem = o;
        for (int k = s.rank - 1; k >= 0; k--) {
            xstride[k] = st;
            st *= s.d[k];
        }
        for (int k = s.rank - 1; k >= 0; k--)
            if (s.s0[k]) { /* a kept dim: its coordinate comes from o */
                base += (rem % s.d[k]) * xstride[k];
                rem /= s.d[k];
            }
        int64_t nred = 1, idx[K_MAX_RANK] = {0};
        for (int k = 0; k < s.rank; k++)
            if (!s.s0[k])
                nred *= s.d[k];
        T acc = 0;
        int64_t off = base;
        for (int64_t r = 0; r < nred; r++) {
            acc += x[off];
            for (int k = s.rank - 1; k >= 0; k--) {
                if (s.s0[k])
                    continue;
                off += xstride[k];
                if (++idx[k] < s.d[k])
                    break;
                off -= xstride[k] * s.d[k];
                idx[k] = 0;
            }
        }
        y[o] = acc * scale;
    }
}

static inline void k_reduce_f32(float *y, int64_t ny, const float *x, int rank, const int64_t *dims, const int64_t *sy,
                                float scale)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    kk_reduce<float><<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, ny, x, s, scale);
    CHECK_LAUNCH();
}

static inline void k_reduce_i64(int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                const int64_t *sy)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    kk_reduce<int64_t><<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, ny, x, s, (int64_t)1);
    CHECK_LAUNCH();
}
