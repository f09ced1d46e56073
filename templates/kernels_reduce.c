/* ---- onnx2spmd kernels: reduce family (templates/kernels_reduce.c) ----------
 * C kernels for the ops of ir/ops_reduce.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_reduce.cu.
 * Reductions are one generic kernel with an op code; arg-reductions, scans,
 * TopK and log-softmax see x as [outer, n, inner] with n the op's axis.
 * Every output element is computed on its own, walking its inputs in
 * row-major order, exactly as the CUDA kernels do (one thread each), so both
 * targets add in the same order. Sums accumulate in double.
 */

/* Splits x's dims into kept ones (sy != 0: they index the output) and
 * reduced ones, with x's strides; returns the reduced element count. */
typedef struct KRed {
    int nk, nr;
    int64_t kd[K_MAX_RANK], ks[K_MAX_RANK], rd[K_MAX_RANK], rs[K_MAX_RANK];
} KRed;

static inline int64_t k_red_setup(KRed *k, int rank, const int64_t *dims, const int64_t *sy)
{
    int64_t st = 1, nred = 1;
    k->nk = k->nr = 0;
    for (int i = rank - 1; i >= 0; i--) {
        if (sy[i]) {
            k->kd[k->nk] = dims[i];
            k->ks[k->nk++] = st;
        } else {
            k->rd[k->nr] = dims[i];
            k->rs[k->nr++] = st;
            nred *= dims[i];
        }
        st *= dims[i];
    }
    return nred; /* the lists run minor to major */
}

static inline int64_t k_red_off(const int64_t *d, const int64_t *s, int n, int64_t i)
{
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        off += (i % d[k]) * s[k];
        i /= d[k];
    }
    return off;
}

static inline void k_reduce_op_f32(int op, float *y, int64_t ny, const float *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    for (int64_t o = 0; o < ny; o++) {
        const float *xp = x + k_red_off(k.kd, k.ks, k.nk, o);
        double acc = op == K_RED_PROD ? 1.0 : 0.0;
        float mx = op == K_RED_MIN ? INFINITY : -INFINITY;
        for (int64_t r = 0; r < nred; r++) {
            float v = xp[k_red_off(k.rd, k.rs, k.nr, r)];
            switch (op) {
            case K_RED_MAX: case K_RED_LSE: mx = v > mx ? v : mx; break;
            case K_RED_MIN: mx = v < mx ? v : mx; break;
            case K_RED_PROD: acc *= v; break;
            case K_RED_SUMSQ: case K_RED_L2: acc += (double)v * v; break;
            case K_RED_L1: acc += fabs((double)v); break;
            default: acc += v; break;
            }
        }
        if (op == K_RED_LSE && isfinite(mx)) {
            for (int64_t r = 0; r < nred; r++)
                acc += exp((double)xp[k_red_off(k.rd, k.rs, k.nr, r)] - mx);
            acc = log(acc) + mx;
        } else if (op == K_RED_LSE || op == K_RED_MAX || op == K_RED_MIN) {
            acc = mx;
        } else if (op == K_RED_L2) {
            acc = sqrt(acc);
        }
        y[o] = (float)acc;
    }
}

static inline void k_reduce_op_i64(int op, int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                   const int64_t *sy)
{
    KRed k;
    int64_t nred = k_red_setup(&k, rank, dims, sy);
    for (int64_t o = 0; o < ny; o++) {
        const int64_t *xp = x + k_red_off(k.kd, k.ks, k.nk, o);
        uint64_t acc = op == K_RED_PROD ? 1 : 0; /* wraps as int64 arithmetic does */
        int64_t mx = op == K_RED_MIN ? INT64_MAX : INT64_MIN;
        for (int64_t r = 0; r < nred; r++) {
            int64_t v = xp[k_red_off(k.rd, k.rs, k.nr, r)];
            switch (op) {
            case K_RED_MAX: mx = v > mx ? v : mx; break;
            case K_RED_MIN: mx = v < mx ? v : mx; break;
            case K_RED_PROD: acc *= (uint64_t)v; break;
            case K_RED_SUMSQ: acc += (uint64_t)v * (uint64_t)v; break;
            case K_RED_L1: acc += (uint64_t)(v < 0 ? -v : v); break;
            default: acc += (uint64_t)v; break;
            }
        }
        y[o] = op == K_RED_MAX || op == K_RED_MIN ? mx : (int64_t)acc;
    }
}

/* ArgMax / ArgMin over the middle dim of [outer, n, inner]: the first
 * extreme element, or the last with select_last_index. */
static inline void k_argreduce_f32(int64_t *y, const float *x, int64_t outer, int64_t n, int64_t inner, int is_min,
                                   int last)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xp = x + o * n * inner + i;
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++) {
                float v = xp[j * inner], b = xp[best * inner];
                if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b)))
                    best = j;
            }
            y[o * inner + i] = best;
        }
}

static inline void k_argreduce_i64(int64_t *y, const int64_t *x, int64_t outer, int64_t n, int64_t inner,
                                   int is_min, int last)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t *xp = x + o * n * inner + i;
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++) {
                int64_t v = xp[j * inner], b = xp[best * inner];
                if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b)))
                    best = j;
            }
            y[o * inner + i] = best;
        }
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
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xp = x + o * n * inner + i;
            float *yp = y + o * n * inner + i;
            float mx = -INFINITY;
            double sum = 0;
            for (int64_t j = 0; j < n; j++)
                mx = xp[j * inner] > mx ? xp[j * inner] : mx;
            for (int64_t j = 0; j < n; j++)
                sum += exp((double)xp[j * inner] - mx);
            float lse = (float)log(sum);
            for (int64_t j = 0; j < n; j++)
                yp[j * inner] = xp[j * inner] - mx - lse;
        }
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
