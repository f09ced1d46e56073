/* ---- onnx2spmd kernels: the nn family (templates/kernels_nn.c) ----
 * C kernels for the ops of ir/ops_nn.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_nn.cu. Each
 * output element is computed on its own, walking its window in row-major
 * order, as the CUDA kernels do (one thread each), so both targets add in
 * the same order. Sums accumulate in double.
 */

/* ---- pooling: AveragePool, LpPool, GlobalMaxPool ---- */

static inline void k_pool_f32(int op, float *y, const float *x, int64_t planes, int ns, const int64_t *g, int p)
{
    KWin w = k_win(ns, g);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t o = 0; o < w.ny; o++)
            y[pl * w.ny + o] = k_pool_one(op, x + pl * w.nx, &w, o, p);
}

/* ---- LRN ---- */

static inline void k_lrn_f32(float *y, const float *x, int64_t n, int64_t c, int64_t inner, int64_t size,
                             float alpha, float beta, float bias)
{
    for (int64_t i = 0; i < n * c * inner; i++)
        y[i] = k_lrn_one(x, c, inner, i, size, alpha, beta, bias);
}

/* ---- Resize ---- */

static inline void k_resize_f32(float *y, const float *x, int64_t ny, int rank, const int64_t *dims,
                                const double *f, int mode, int coord, int nearest, int antialias, int exclude,
                                double a, double extrap)
{
    KResize r = k_resize_params(rank, dims, f, mode, coord, nearest, antialias, exclude, a, extrap);
    for (int64_t o = 0; o < ny; o++)
        y[o] = k_resize_one(&r, x, o);
}

static inline void k_resize_i64(int64_t *y, const int64_t *x, int64_t ny, int rank, const int64_t *dims,
                                const double *f, int mode, int coord, int nearest, int antialias, int exclude,
                                double a, double extrap)
{
    KResize r = k_resize_params(rank, dims, f, mode, coord, nearest, antialias, exclude, a, extrap);
    for (int64_t o = 0; o < ny; o++)
        y[o] = k_resize_one_i64(&r, x, o);
}

/* ---- ConvTranspose ---- */

static inline void k_conv_transpose_f32(float *y, const float *x, const float *wt, const float *b, int64_t n,
                                        int64_t cin, int64_t m, int64_t group, int ns, const int64_t *g)
{
    KWin w = k_win(ns, g);
    for (int64_t i = 0; i < n * m * w.ny; i++)
        y[i] = k_convt_one(x, wt, b, cin, m, group, &w, i);
}

/* ---- Col2Im ---- */

static inline void k_col2im_f32(float *y, const float *x, int64_t planes, int64_t kk, int ns, const int64_t *g)
{
    KWin w = k_win(ns, g);
    for (int64_t i = 0; i < planes * w.ny; i++)
        y[i] = k_col2im_one(x, kk, &w, i);
}

/* ---- MaxUnpool ---- */

/* y zero, then x's elements at their indices, plane by plane in order (a
 * repeated index keeps the last). Local plane p is global plane
 * (n_off + p / c) * cg + c_off + p % c of cg channels; its indices must
 * fall in that plane of the addressed part, as MaxPool's do. */
static inline void k_max_unpool_f32(float *y, const float *x, const int64_t *idx, int64_t n, int64_t c, int64_t cg,
                                    int64_t n_off, int64_t c_off, int64_t in_plane, int ns, const int64_t *g)
{
    KUnpool u = k_unpool(ns, g);
    memset(y, 0, sizeof(float) * (size_t)(n * c * u.nout));
    for (int64_t p = 0; p < n * c; p++) {
        int64_t base = ((n_off + p / c) * cg + c_off + p % c) * u.ninf;
        for (int64_t e = 0; e < in_plane; e++) {
            int64_t pos = idx[p * in_plane + e] - base;
            if (pos < 0 || pos >= u.ninf)
                rt_die("node \"%s\": index %lld is outside its [n, c] plane [%lld, %lld)", rt_node,
                       (long long)idx[p * in_plane + e], (long long)base, (long long)(base + u.ninf));
            y[p * u.nout + k_unpool_pos(&u, pos)] = x[p * in_plane + e];
        }
    }
}

/* ---- convolution, MaxPool, GlobalAveragePool, BatchNormalization ---- */

/* 2-D convolution (NCHW) through im2col and sgemm, per image and group.
 * Any number of spatial dims is reduced to 2 by the caller (1-D: H=1). */
static inline void k_conv2d_f32(float *y, const float *x, const float *w, const float *bias, int64_t N, int64_t C,
                                int64_t H, int64_t W, int64_t M, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw,
                                int64_t group, float *col)
{
    int64_t cg = C / group, mg = M / group, kk = cg * kh * kw, npix = oh * ow;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < group; g++) {
            for (int64_t c = 0; c < cg; c++)
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        float *row = col + ((c * kh + i) * kw + j) * npix;
                        const float *xp = x + ((n * C + g * cg + c) * H) * W;
                        for (int64_t oy = 0; oy < oh; oy++) {
                            int64_t iy = oy * sh - ph + i * dh;
                            for (int64_t ox = 0; ox < ow; ox++) {
                                int64_t ix = ox * sw - pw + j * dw;
                                row[oy * ow + ox] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xp[iy * W + ix] : 0.0f;
                            }
                        }
                    }
            float *yp = y + (n * M + g * mg) * npix;
            for (int64_t m = 0; m < mg; m++)
                for (int64_t p = 0; p < npix; p++)
                    yp[m * npix + p] = bias ? bias[g * mg + m] : 0.0f;
            k_sgemm(0, 0, mg, npix, kk, 1.0f, w + g * mg * kk, kk, col, npix, 1.0f, yp, npix);
        }
}

/* 2-D max pooling (NCHW); indices (optional) are flat over the global
 * input tensor, as ONNX defines them: n_off/c_off/C_global place this
 * rank's block. */
static inline void k_maxpool2d_f32(float *y, int64_t *ind, const float *x, int64_t N, int64_t C, int64_t H,
                                   int64_t W, int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw,
                                   int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t n_off, int64_t c_off,
                                   int64_t C_global)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *xp = x + (n * C + c) * H * W;
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    float best;
                    int64_t at = k_maxpool_one(xp, H, W, kh, kw, oy, ox, sh, sw, dh, dw, ph, pw, &best);
                    int64_t o = ((n * C + c) * oh + oy) * ow + ox;
                    y[o] = best;
                    if (ind)
                        ind[o] = ((n + n_off) * C_global + (c + c_off)) * H * W + at;
                }
        }
}

static inline void k_global_avgpool_f32(float *y, const float *x, int64_t nc, int64_t spatial)
{
    for (int64_t i = 0; i < nc; i++) {
        double s = 0;
        for (int64_t j = 0; j < spatial; j++)
            s += x[i * spatial + j];
        y[i] = (float)(s / (double)spatial);
    }
}

static inline void k_batchnorm_f32(float *y, const float *x, const float *scale, const float *bias, const float *mean,
                                   const float *var, int64_t N, int64_t C, int64_t spatial, float eps)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float a = scale[c] / sqrtf(var[c] + eps), b = bias[c] - mean[c] * a;
            const float *xp = x + (n * C + c) * spatial;
            float *yp = y + (n * C + c) * spatial;
            for (int64_t j = 0; j < spatial; j++)
                yp[j] = xp[j] * a + b;
        }
}
