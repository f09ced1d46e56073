/* ---- onnx2spmd CUDA kernels: the loss family (templates/cuda_loss.cu) ----
 * CUDA kernels for the ops of ir/ops_loss.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_loss.c.
 * Deterministic by construction: no atomics. Per-element work (a loss
 * with reduction "none", a Hardmax or LpNormalization row, a ReduceLogSum
 * or MeanVarianceNormalization group) is one thread each, walking its
 * elements in the C kernels' order; a summed or averaged loss runs in one
 * block that reduces its threads' sums in a fixed shared-memory tree.
 */

__global__ void kk_nll_none(int sce, float *y, float *lp, const float *x, const int64_t *t, const float *w,
                            int64_t ne, int64_t c, int64_t inner, int has_ignore, int64_t ignore)
{
    GRID_LOOP(e, ne)
    {
        float wt;
        y[e] = k_nll_one(sce, lp, x, t, w, c, inner, has_ignore, ignore, e, &wt);
    }
}

/* One block: each thread sums a strided share, then a fixed tree. */
__global__ void kk_nll_reduce(int sce, float *y, float *lp, const float *x, const int64_t *t, const float *w,
                              int64_t ne, int64_t c, int64_t inner, int has_ignore, int64_t ignore, int reduction)
{
    __shared__ double sh_s[K_THREADS], sh_w[K_THREADS];
    double s = 0, ws = 0;
    for (int64_t e = threadIdx.x; e < ne; e += blockDim.x) {
        float wt;
        s += k_nll_one(sce, lp, x, t, w, c, inner, has_ignore, ignore, e, &wt);
        ws += wt;
    }
    sh_s[threadIdx.x] = s;
    sh_w[threadIdx.x] = ws;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            sh_s[threadIdx.x] += sh_s[threadIdx.x + k];
            sh_w[threadIdx.x] += sh_w[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        y[0] = (float)(reduction == K_LOSS_SUM ? sh_s[0] : sh_s[0] / sh_w[0]);
}

static inline void k_nll_f32(int sce, float *y, float *lp, const float *x, const int64_t *t, const float *w,
                             int64_t n, int64_t c, int64_t inner, int has_ignore, int64_t ignore, int reduction)
{
    int64_t ne = n * inner;
    if (reduction == K_LOSS_NONE)
        kk_nll_none<<<k_blocks(ne), K_THREADS, 0, g_stream>>>(sce, y, lp, x, t, w, ne, c, inner, has_ignore, ignore);
    else
        kk_nll_reduce<<<1, K_THREADS, 0, g_stream>>>(sce, y, lp, x, t, w, ne, c, inner, has_ignore, ignore,
                                                      reduction);
    CHECK_LAUNCH();
}

static inline void k_dropout_mask(unsigned char *m, int64_t n)
{
    CHECK_CUDA(cudaMemsetAsync(m, 1, (size_t)n, g_stream));
}

/* Hardmax and LpNormalization: one thread per row of [outer, n, inner]. */
__global__ void kk_hardmax(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    GRID_LOOP(r, outer * inner) k_hardmax_row(y, x, n, inner, r);
}

static inline void k_hardmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    kk_hardmax<<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner);
    CHECK_LAUNCH();
}

__global__ void kk_lp_norm(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int p)
{
    GRID_LOOP(r, outer * inner) k_lp_norm_row(y, x, n, inner, p, r);
}

static inline void k_lp_norm_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int p)
{
    kk_lp_norm<<<k_blocks(outer * inner), K_THREADS, 0, g_stream>>>(y, x, outer, n, inner, p);
    CHECK_LAUNCH();
}

/* x's dims and the mask of the dims worked over, by value. */
typedef struct KLossShape {
    int rank;
    int64_t mask;
    int64_t d[K_MAX_RANK];
} KLossShape;

static inline KLossShape k_loss_shape(int rank, const int64_t *dims, int64_t mask)
{
    KLossShape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    s.mask = mask;
    for (int k = 0; k < rank; k++)
        s.d[k] = dims[k];
    return s;
}

/* As k_loss_off / k_loss_count of the C kernels. */
__host__ __device__ static inline int64_t k_loss_off(const KLossShape &s, int sel, int64_t i)
{
    int64_t off = 0, st = 1;
    for (int k = s.rank - 1; k >= 0; k--) {
        if (((s.mask >> k) & 1) == sel) {
            off += (i % s.d[k]) * st;
            i /= s.d[k];
        }
        st *= s.d[k];
    }
    return off;
}

__host__ __device__ static inline int64_t k_loss_count(const KLossShape &s, int sel)
{
    int64_t c = 1;
    for (int k = 0; k < s.rank; k++)
        if (((s.mask >> k) & 1) == sel)
            c *= s.d[k];
    return c;
}

__global__ void kk_reduce_log_sum(float *y, const float *x, KLossShape s, int64_t ny, int64_t nr)
{
    GRID_LOOP(o, ny)
    {
        const float *xp = x + k_loss_off(s, 0, o);
        double acc = 0;
        for (int64_t r = 0; r < nr; r++)
            acc += xp[k_loss_off(s, 1, r)];
        y[o] = (float)log(acc);
    }
}

static inline void k_reduce_log_sum_f32(float *y, const float *x, int rank, const int64_t *dims, int64_t mask)
{
    KLossShape s = k_loss_shape(rank, dims, mask);
    int64_t ny = k_loss_count(s, 0);
    kk_reduce_log_sum<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, x, s, ny, k_loss_count(s, 1));
    CHECK_LAUNCH();
}

__global__ void kk_mvn(float *y, const float *x, KLossShape s, int64_t ng, int64_t nr)
{
    GRID_LOOP(g, ng)
    {
        int64_t base = k_loss_off(s, 0, g);
        double sum = 0, q = 0;
        for (int64_t r = 0; r < nr; r++)
            sum += x[base + k_loss_off(s, 1, r)];
        double mean = sum / (double)nr;
        for (int64_t r = 0; r < nr; r++) {
            double v = x[base + k_loss_off(s, 1, r)] - mean;
            q += v * v;
        }
        float den = (float)sqrt(q / (double)nr) + 1e-9f;
        for (int64_t r = 0; r < nr; r++) {
            int64_t off = base + k_loss_off(s, 1, r);
            y[off] = (float)(x[off] - mean) / den;
        }
    }
}

static inline void k_mvn_f32(float *y, const float *x, int rank, const int64_t *dims, int64_t mask)
{
    KLossShape s = k_loss_shape(rank, dims, mask);
    int64_t ng = k_loss_count(s, 0);
    kk_mvn<<<k_blocks(ng), K_THREADS, 0, g_stream>>>(y, x, s, ng, k_loss_count(s, 1));
    CHECK_LAUNCH();
}

/* EyeLike: ones on the k-th diagonal of a [rows, cols] matrix. */
template <typename T> __global__ void kk_eyelike(T *y, int64_t rows, int64_t cols, int64_t k)
{
    GRID_LOOP(i, rows * cols) y[i] = i % cols - i / cols == k ? (T)1 : (T)0;
}

static inline void k_eyelike_f32(float *y, int64_t rows, int64_t cols, int64_t k)
{
    kk_eyelike<float><<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(y, rows, cols, k);
    CHECK_LAUNCH();
}

static inline void k_eyelike_i64(int64_t *y, int64_t rows, int64_t cols, int64_t k)
{
    kk_eyelike<int64_t><<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(y, rows, cols, k);
    CHECK_LAUNCH();
}

static inline void k_eyelike_bool(unsigned char *y, int64_t rows, int64_t cols, int64_t k)
{
    kk_eyelike<unsigned char><<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(y, rows, cols, k);
    CHECK_LAUNCH();
}
