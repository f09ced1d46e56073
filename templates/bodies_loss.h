/* ---- onnx2spmd kernel bodies: the loss family (templates/bodies_loss.h) ----
 * One element of NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss and
 * one row of Hardmax and LpNormalization, shared by templates/kernels_loss.c
 * (loops) and templates/cuda_loss.cu (one thread each): both targets
 * compute them with this same code. O2S_HD is from templates/bodies.h.
 */

/* The loss of element e = (b, i) of [n, inner] (see k_nll_f32) and its
 * weight (0 when ignored). A target outside [0, c) gives NaN: the C
 * kernel stops the run before, a CUDA kernel cannot, and the NaN shows in
 * the output. */
O2S_HD static inline float k_nll_one(int sce, float *lp, const float *x, const int64_t *t, const float *w,
                                         int64_t c, int64_t inner, int has_ignore, int64_t ignore, int64_t e,
                                         float *wt)
{
    int64_t b = e / inner, i = e % inner;
    const float *xp = x + b * c * inner + i;
    float mx = -INFINITY, lse = 0;
    if (sce) {
        double s = 0;
        for (int64_t j = 0; j < c; j++)
            mx = xp[j * inner] > mx ? xp[j * inner] : mx;
        for (int64_t j = 0; j < c; j++)
            s += exp((double)xp[j * inner] - mx);
        lse = (float)log(s);
        for (int64_t j = 0; lp && j < c; j++)
            lp[b * c * inner + j * inner + i] = xp[j * inner] - mx - lse;
    }
    int64_t k = t[e];
    *wt = 0;
    if (has_ignore && k == ignore)
        return 0.0f;
    if (k < 0 || k >= c)
        return NAN;
    float wk = w ? w[k] : 1.0f, v = sce ? xp[k * inner] - mx - lse : xp[k * inner];
    *wt = wk;
    return -v * wk;
}

/* Hardmax of row `row` (= o * inner + i) of [outer, n, inner]: 1 at the
 * first largest element, 0 elsewhere. */
O2S_HD static inline void k_hardmax_row(float *y, const float *x, int64_t n, int64_t inner, int64_t row)
{
    int64_t o = row / inner, i = row % inner;
    const float *xp = x + o * n * inner + i;
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (xp[j * inner] > xp[best * inner])
            best = j;
    for (int64_t j = 0; j < n; j++)
        y[o * n * inner + j * inner + i] = j == best ? 1.0f : 0.0f;
}

/* LpNormalization (p 1 or 2) of row `row` of [outer, n, inner]: x / ||x||_p,
 * and 0 where the norm is 0 (as ONNX Runtime). */
O2S_HD static inline void k_lp_norm_row(float *y, const float *x, int64_t n, int64_t inner, int p, int64_t row)
{
    int64_t o = row / inner, i = row % inner;
    const float *xp = x + o * n * inner + i;
    double s = 0;
    for (int64_t j = 0; j < n; j++)
        s += p == 1 ? fabs((double)xp[j * inner]) : (double)xp[j * inner] * xp[j * inner];
    float norm = (float)(p == 1 ? s : sqrt(s));
    for (int64_t j = 0; j < n; j++)
        y[o * n * inner + j * inner + i] = norm != 0 ? xp[j * inner] / norm : 0.0f;
}
