/* ---- onnx2spmd kernels: the loss family (templates/kernels_loss.c) ----
 * C kernels for the ops of ir/ops_loss.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_loss.cu. Sums
 * run in double, in element order, so the C and CUDA targets agree.
 */

/* NegativeLogLikelihoodLoss (sce 0) and SoftmaxCrossEntropyLoss (sce 1)
 * over x [n, c, inner] and targets t [n, inner]: loss = -w[t] * x[t]
 * (x[t] the log-softmax for sce, also written to lp unless NULL), 0 where
 * t is the ignore_index. "mean" divides the sum by the total weight of the
 * targets not ignored (their count without w). A target outside [0, c)
 * that is not ignored stops the run. */
static inline void k_nll_f32(int sce, float *y, float *lp, const float *x, const int64_t *t, const float *w,
                             int64_t n, int64_t c, int64_t inner, int has_ignore, int64_t ignore, int reduction)
{
    double sum = 0, wsum = 0;
    for (int64_t e = 0; e < n * inner; e++) {
        int64_t k = t[e];
        if (!(has_ignore && k == ignore) && (k < 0 || k >= c))
            rt_die("node \"%s\": target %lld is outside the %lld classes", rt_node, (long long)k, (long long)c);
        float wt, loss = k_nll_one(sce, lp, x, t, w, c, inner, has_ignore, ignore, e, &wt);
        if (reduction == K_LOSS_NONE)
            y[e] = loss;
        sum += loss;
        wsum += wt;
    }
    if (reduction != K_LOSS_NONE)
        y[0] = (float)(reduction == K_LOSS_SUM ? sum : sum / wsum);
}

/* The data unchanged is k_copy's; the mask of an inference Dropout. */
static inline void k_dropout_mask(unsigned char *m, int64_t n)
{
    memset(m, 1, (size_t)n);
}

/* Hardmax over the middle dim of [outer, n, inner]: 1 at the first
 * largest element, 0 elsewhere. */
static inline void k_hardmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    for (int64_t row = 0; row < outer * inner; row++)
        k_hardmax_row(y, x, n, inner, row);
}

/* LpNormalization (p 1 or 2) over the middle dim: x / ||x||_p, and 0 where
 * the norm is 0 (as ONNX Runtime). */
static inline void k_lp_norm_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner, int p)
{
    for (int64_t row = 0; row < outer * inner; row++)
        k_lp_norm_row(y, x, n, inner, p, row);
}

/* Offset in x (dims, row-major) of element i of the sub-block of the dims
 * whose mask bit equals sel, itself taken row-major. */
static inline int64_t k_loss_off(int rank, const int64_t *dims, int64_t mask, int sel, int64_t i)
{
    int64_t off = 0, st = 1;
    for (int k = rank - 1; k >= 0; k--) {
        if (((mask >> k) & 1) == sel) {
            off += (i % dims[k]) * st;
            i /= dims[k];
        }
        st *= dims[k];
    }
    return off;
}

/* Element counts of the kept (sel 0) and masked (sel 1) dims. */
static inline int64_t k_loss_count(int rank, const int64_t *dims, int64_t mask, int sel)
{
    int64_t c = 1;
    for (int k = 0; k < rank; k++)
        if (((mask >> k) & 1) == sel)
            c *= dims[k];
    return c;
}

/* ReduceLogSum: y (x's kept dims) = log of the sum over the masked dims;
 * an empty sum gives log(0) = -inf. */
static inline void k_reduce_log_sum_f32(float *y, const float *x, int rank, const int64_t *dims, int64_t mask)
{
    int64_t ny = k_loss_count(rank, dims, mask, 0), nr = k_loss_count(rank, dims, mask, 1);
    for (int64_t o = 0; o < ny; o++) {
        const float *xp = x + k_loss_off(rank, dims, mask, 0, o);
        double s = 0;
        for (int64_t r = 0; r < nr; r++)
            s += xp[k_loss_off(rank, dims, mask, 1, r)];
        y[o] = (float)log(s);
    }
}

/* MeanVarianceNormalization: (x - mean) / (std + 1e-9) over the masked
 * dims, the epsilon of ONNX's function body. */
static inline void k_mvn_f32(float *y, const float *x, int rank, const int64_t *dims, int64_t mask)
{
    int64_t ng = k_loss_count(rank, dims, mask, 0), nr = k_loss_count(rank, dims, mask, 1);
    for (int64_t g = 0; g < ng; g++) {
        int64_t base = k_loss_off(rank, dims, mask, 0, g);
        double s = 0, q = 0;
        for (int64_t r = 0; r < nr; r++)
            s += x[base + k_loss_off(rank, dims, mask, 1, r)];
        double mean = s / (double)nr;
        for (int64_t r = 0; r < nr; r++) {
            double v = x[base + k_loss_off(rank, dims, mask, 1, r)] - mean;
            q += v * v;
        }
        float den = (float)sqrt(q / (double)nr) + 1e-9f;
        for (int64_t r = 0; r < nr; r++) {
            int64_t off = base + k_loss_off(rank, dims, mask, 1, r);
            y[off] = (float)(x[off] - mean) / den;
        }
    }
}

/* EyeLike: ones on the k-th diagonal of a [rows, cols] matrix. */
static inline void k_eyelike_f32(float *y, int64_t rows, int64_t cols, int64_t k)
{
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = i % cols - i / cols == k ? 1.0f : 0.0f;
}

static inline void k_eyelike_i64(int64_t *y, int64_t rows, int64_t cols, int64_t k)
{
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = i % cols - i / cols == k;
}

static inline void k_eyelike_bool(unsigned char *y, int64_t rows, int64_t cols, int64_t k)
{
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = i % cols - i / cols == k;
}
