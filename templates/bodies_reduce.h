/* ---- onnx2spmd kernel bodies: the reduce family (templates/bodies_reduce.h) ----
 * One output element of the reductions (ReduceSum ... ReduceLogSumExp) and
 * one row of ArgMax / ArgMin and LogSoftmax, shared by
 * templates/kernels_reduce.c (a loop over the outputs) and
 * templates/cuda_reduce.cu (one thread each): both
 * walk the inputs in row-major order, so both add in the same order. Sums
 * accumulate in double. O2S_HD is from templates/bodies.h.
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

/* Offset of element i of the n dims d (minor to major) with strides s. */
O2S_HD static inline int64_t k_red_off(const int64_t *d, const int64_t *s, int n, int64_t i)
{
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        off += (i % d[k]) * s[k];
        i /= d[k];
    }
    return off;
}

/* Output element o of a K_RED_* reduction over the reduced dims of k. */
O2S_HD static inline float k_reduce_one_f32(int op, const float *x, const KRed *k, int64_t nred, int64_t o)
{
    const float *xp = x + k_red_off(k->kd, k->ks, k->nk, o);
    double acc = op == K_RED_PROD ? 1.0 : 0.0;
    float mx = op == K_RED_MIN ? INFINITY : -INFINITY;
    for (int64_t r = 0; r < nred; r++) {
        float v = xp[k_red_off(k->rd, k->rs, k->nr, r)];
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
            acc += exp((double)xp[k_red_off(k->rd, k->rs, k->nr, r)] - mx);
        acc = log(acc) + mx;
    } else if (op == K_RED_LSE || op == K_RED_MAX || op == K_RED_MIN) {
        acc = mx;
    } else if (op == K_RED_L2) {
        acc = sqrt(acc);
    }
    return (float)acc;
}

O2S_HD static inline int64_t k_reduce_one_i64(int op, const int64_t *x, const KRed *k, int64_t nred, int64_t o)
{
    const int64_t *xp = x + k_red_off(k->kd, k->ks, k->nk, o);
    uint64_t acc = op == K_RED_PROD ? 1 : 0; /* wraps as int64 arithmetic does */
    int64_t mx = op == K_RED_MIN ? INT64_MAX : INT64_MIN;
    for (int64_t r = 0; r < nred; r++) {
        int64_t v = xp[k_red_off(k->rd, k->rs, k->nr, r)];
        switch (op) {
        case K_RED_MAX: mx = v > mx ? v : mx; break;
        case K_RED_MIN: mx = v < mx ? v : mx; break;
        case K_RED_PROD: acc *= (uint64_t)v; break;
        case K_RED_SUMSQ: acc += (uint64_t)v * (uint64_t)v; break;
        case K_RED_L1: acc += (uint64_t)(v < 0 ? -v : v); break;
        default: acc += (uint64_t)v; break;
        }
    }
    return op == K_RED_MAX || op == K_RED_MIN ? mx : (int64_t)acc;
}

/* ArgMax / ArgMin of row `row` (= o * inner + i) of x as [outer, n, inner]:
 * the first extreme element, or the last with select_last_index. */
#define K_ARGBEST(SFX, T)                                                                                          \
    O2S_HD static inline int64_t k_argbest_##SFX(const T *x, int64_t n, int64_t inner, int64_t row, int is_min,  \
                                                 int last)                                                         \
    {                                                                                                              \
        const T *xp = x + (row / inner) * n * inner + row % inner;                                                 \
        int64_t best = 0;                                                                                          \
        for (int64_t j = 1; j < n; j++) {                                                                          \
            T v = xp[j * inner], b = xp[best * inner];                                                             \
            if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b)))                                \
                best = j;                                                                                          \
        }                                                                                                          \
        return best;                                                                                               \
    }
K_ARGBEST(f32, float)
K_ARGBEST(i64, int64_t)
#undef K_ARGBEST

/* LogSoftmax of row `row` (= o * inner + i) of [outer, n, inner]:
 * x - max - log(sum(exp(x - max))), the sum in double. */
O2S_HD static inline void k_log_softmax_row(float *y, const float *x, int64_t n, int64_t inner, int64_t row)
{
    int64_t o = row / inner, i = row % inner;
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
