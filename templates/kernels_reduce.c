/* ---- onnx2spmd kernels: reduce family (templates/kernels_reduce.c) ----------
 * C kernels for the ops of ir/ops_reduce.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_reduce.cu.
 * Reductions are one generic kernel with an op code; arg-reductions, scans,
 * TopK and log-softmax see x as [outer, n, inner] with n the op's axis.
 * Every output element is computed on its own, walking its inputs in
 * row-major order, exactly as the CUDA kernels do (one thread each), so both
 * targets add in the same order. Sums accumulate in double.
 */

static inline void k_reduce_op_f32(int op, float *y, int64_t ny, const float *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    for (int64_t o = 0; o < ny; o++)
        y[o] = k_reduce_one_f32(op, x, &k, nred, o);
}

static inline void k_reduce_op_i64(int op, int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    for (int64_t o = 0; o < ny; o++)
        y[o] = k_reduce_one_i64(op, x, &k, nred, o);
}

static inline void k_argreduce_f32(int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner, int is_min,
                                   int last)
{
    for (int64_t row = 0; row < outer * inner; row++)
        y[row] = k_argbest_f32(x, n, inner, row, is_min, last);
}

static inline void k_argreduce_i64(int64_t *y, const int64_t *x, int64_t outer, int64_t n, int64_t inner,
                                   int is_min, int last)
{
    for (int64_t row = 0; row < outer * inner; row++)
        y[row] = k_argbest_i64(x, n, inner, row, is_min, last);
}

/* CumSum (and CumProd) along the middle dim of [outer, n, inner];
 * exclusive shifts by one (the first result is 0, or 1 for a product),
 * reverse runs from the end. int64 wraps (unsigned arithmetic). */
#define K_SCAN(NAME, T, A, INIT, OP)                                                                           \
    static inline void NAME(T *y, const T *x, int64_t outer, int64_t n, int64_t inner, int exclusive, int reverse) \
    {                                                                                                          \
        for (int64_t o = 0; o < outer; o++)                                                                    \
            for (int64_t i = 0; i < inner; i++) {                                                              \
                A acc = INIT;                                                                                  \
                for (int64_t j = 0; j < n; j++) {                                                              \
                    int64_t off = (o * n + (reverse ? n - 1 - j : j)) * inner + i;                             \
                    A v = (A)x[off];                                                                           \
                    if (!exclusive)                                                                            \
                        acc = acc OP v;                                                                        \
                    y[off] = (T)acc;                                                                           \
                    if (exclusive)                                                                             \
                        acc = acc OP v;                                                                        \
                }                                                                                              \
            }                                                                                                  \
    }
K_SCAN(k_cumsum_f32, float, float, 0, +)
K_SCAN(k_cumsum_i64, int64_t, uint64_t, 0, +)
K_SCAN(k_cumprod_f32, float, float, 1, *)
K_SCAN(k_cumprod_i64, int64_t, uint64_t, 1, *)

/* LogSoftmax over the middle dim: x - max - log(sum(exp(x - max))). */
static inline void k_log_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    for (int64_t row = 0; row < outer * inner; row++)
        k_log_softmax_row(y, x, n, inner, row);
}

/* TopK along the middle dim, sorted: the k best elements, best first, ties
 * broken by the lower index (as ONNX Runtime). Each pick is the best
 * element ranked after the previous pick, so no scratch is needed. */
#define K_TOPK_BODY(T)                                                                                          \
    for (int64_t o = 0; o < outer; o++)                                                                         \
        for (int64_t i = 0; i < inner; i++) {                                                                   \
            const T *xp = x + o * n * inner + i;                                                                \
            int64_t prev = -1;                                                                                  \
            for (int64_t q = 0; q < k; q++) {                                                                   \
                int64_t best = -1;                                                                              \
                for (int64_t j = 0; j < n; j++) {                                                               \
                    T v = xp[j * inner];                                                                        \
                    if (prev >= 0) {                                                                            \
                        T p = xp[prev * inner];                                                                 \
                        int after = largest ? (v < p || (v == p && j > prev)) : (v > p || (v == p && j > prev)); \
                        if (!after)                                                                             \
                            continue;                                                                           \
                    }                                                                                           \
                    if (best < 0) {                                                                             \
                        best = j;                                                                               \
                        continue;                                                                               \
                    }                                                                                           \
                    T b = xp[best * inner];                                                                     \
                    if (largest ? v > b : v < b)                                                                \
                        best = j;                                                                               \
                }                                                                                               \
                vals[(o * k + q) * inner + i] = xp[best * inner];                                               \
                idx[(o * k + q) * inner + i] = best;                                                            \
                prev = best;                                                                                    \
            }                                                                                                   \
        }

static inline void k_topk_f32(float *vals, int64_t *idx, const float *x, int64_t outer, int64_t n, int64_t inner,
                              int64_t k, int largest)
{
    K_TOPK_BODY(float)
}

static inline void k_topk_i64(int64_t *vals, int64_t *idx, const int64_t *x, int64_t outer, int64_t n,
                              int64_t inner, int64_t k, int largest)
{
    K_TOPK_BODY(int64_t)
}

/* RMSNormalization over the trailing n elements of each of `outer` rows;
 * scale has sn elements, repeated over the row. */
static inline void k_rmsnorm_f32(float *y, const float *x, const float *scale, int64_t outer, int64_t n, int64_t sn,
                                 float eps)
{
    for (int64_t o = 0; o < outer; o++) {
        const float *xp = x + o * n;
        double ss = 0;
        for (int64_t j = 0; j < n; j++)
            ss += (double)xp[j] * xp[j];
        float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t j = 0; j < n; j++)
            y[o * n + j] = xp[j] * inv * scale[j % sn];
    }
}

/* Instance (groups == C) and group normalization of x [N, C, S]: mean and
 * variance (two passes) over each group's C/groups channels times S, then
 * scale and bias per channel (sn == C) or per group (sn == groups). */
static inline void k_chan_norm_f32(float *y, const float *x, const float *scale, const float *bias, int64_t N,
                                   int64_t C, int64_t S, int64_t groups, int64_t sn, float eps)
{
    int64_t cg = C / groups, len = cg * S;
    for (int64_t b = 0; b < N * groups; b++) {
        const float *xp = x + b * len;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < len; j++)
            mean += xp[j];
        mean /= (double)len;
        for (int64_t j = 0; j < len; j++)
            var += (xp[j] - mean) * (xp[j] - mean);
        var /= (double)len;
        float istd = (float)(1.0 / sqrt(var + eps));
        for (int64_t j = 0; j < len; j++) {
            int64_t c = (b % groups) * cg + j / S, p = sn == C ? c : c / cg;
            y[b * len + j] = (float)(xp[j] - mean) * istd * scale[p] + bias[p];
        }
    }
}

/* ---- ReduceSum, ReduceMean ---- */

/* Sum over the reduced dims: x viewed with per-dim strides into y
 * (stride 0 for reduced dims), then scaled (1 for sum, 1/count for mean). */
static inline void k_reduce_f32(float *y, int64_t ny, const float *x, int rank, const int64_t *dims,
                                const int64_t *sy, float scale)
{
    memset(y, 0, (size_t)ny * sizeof(float));
    /* Merge dims y walks as one (kept dims in order, or reduced runs), so
     * the innermost loop is a whole row: summed into one y (a reduced
     * last dim: eight partial sums, a loop that vectorises) or added
     * onto a row of y (a kept last dim). */
    int64_t d[K_MAX_RANK], xs[1][K_MAX_RANK];
    const int64_t *s = xs[0];
    int r = k_merge_dims(rank, dims, 1, &sy, d, xs);
    int64_t n = r ? d[r - 1] : 1, inner = r ? s[r - 1] : 0, outer = 1;
    for (int i = 0; i < r - 1; i++)
        outer *= d[i];
    int64_t idx[K_MAX_RANK] = {0}, oy = 0;
    for (int64_t k = 0; k < outer; k++) {
        const float *xp = x + k * n;
        if (inner == 0) {
            float acc[8] = {0};
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                for (int l = 0; l < 8; l++)
                    acc[l] += xp[j + l];
            float t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; j < n; j++)
                t += xp[j];
            y[oy] += t;
        } else {
            for (int64_t j = 0; j < n; j++)
                y[oy + j * inner] += xp[j];
        }
        k_next(r - 1, d, idx, &oy, s, NULL, NULL, NULL, NULL);
    }
    for (int64_t i = 0; i < ny; i++)
        y[i] *= scale;
}

static inline void k_reduce_i64(int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                const int64_t *sy)
{
    memset(y, 0, (size_t)ny * sizeof(int64_t));
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    int64_t idx[K_MAX_RANK] = {0}, oy = 0;
    for (int64_t k = 0; k < n; k++) {
        y[oy] += x[k];
        k_next(rank, dims, idx, &oy, sy, NULL, NULL, NULL, NULL);
    }
}
