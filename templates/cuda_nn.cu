/* ---- onnx2spmd CUDA kernels: the nn family (templates/cuda_nn.cu) ----
 * CUDA kernels for the ops of ir/ops_nn.def, launched on g_stream, with the
 * same k_* names and arguments as templates/kernels_nn.c. One thread per
 * output element, walking its window in the C kernels' order (the
 * per-element functions below are those of the C template, run on the
 * device), so both targets add in the same order; no atomics.
 */

/* ---- pooling: AveragePool, LpPool, GlobalMaxPool ---- */

__global__ void kk_pool_f32(int op, float *y, const float *x, int64_t planes, KWin w, int p)
{
    GRID_LOOP(i, planes * w.ny)
    {
        y[i] = k_pool_one(op, x + i / w.ny * w.nx, &w, i % w.ny, p);
    }
}

static inline void k_pool_f32(int op, float *y, const float *x, int64_t planes, int ns, const int64_t *g, int p)
{
    KWin w = k_win(ns, g);
    kk_pool_f32<<<k_blocks(planes * w.ny), K_THREADS, 0, g_stream>>>(op, y, x, planes, w, p);
    CHECK_LAUNCH();
}

/* ---- LRN ---- */

__global__ void kk_lrn_f32(float *y, const float *x, int64_t total, int64_t c, int64_t inner, int64_t size,
                           float alpha, float beta, float bias)
{
    GRID_LOOP(i, total)
    {
        y[i] = k_lrn_one(x, c, inner, i, size, alpha, beta, bias);
    }
}

static inline void k_lrn_f32(float *y, const float *x, int64_t n, int64_t c, int64_t inner, int64_t size,
                             float alpha, float beta, float bias)
{
    kk_lrn_f32<<<k_blocks(n * c * inner), K_THREADS, 0, g_stream>>>(y, x, n * c * inner, c, inner, size, alpha,
                                                                    beta, bias);
    CHECK_LAUNCH();
}

/* ---- Resize ---- */

__global__ void kk_resize_f32(float *y, const float *x, int64_t ny, KResize r)
{
    GRID_LOOP(o, ny)
    {
        y[o] = k_resize_one(&r, x, o);
    }
}

static inline void k_resize_f32(float *y, const float *x, int64_t ny, int rank, const int64_t *dims,
                                const double *f, int mode, int coord, int nearest, int antialias, int exclude,
                                double a, double extrap)
{
    KResize r = k_resize_params(rank, dims, f, mode, coord, nearest, antialias, exclude, a, extrap);
    kk_resize_f32<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, x, ny, r);
    CHECK_LAUNCH();
}

__global__ void kk_resize_i64(int64_t *y, const int64_t *x, int64_t ny, KResize r)
{
    GRID_LOOP(o, ny)
    {
        y[o] = k_resize_one_i64(&r, x, o);
    }
}

static inline void k_resize_i64(int64_t *y, const int64_t *x, int64_t ny, int rank, const int64_t *dims,
                                const double *f, int mode, int coord, int nearest, int antialias, int exclude,
                                double a, double extrap)
{
    KResize r = k_resize_params(rank, dims, f, mode, coord, nearest, antialias, exclude, a, extrap);
    kk_resize_i64<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, x, ny, r);
    CHECK_LAUNCH();
}

/* ---- ConvTranspose ---- */

__global__ void kk_conv_transpose_f32(float *y, const float *x, const float *wt, const float *b, int64_t total,
                                      int64_t cin, int64_t m, int64_t group, KWin w)
{
    GRID_LOOP(i, total)
    {
        y[i] = k_convt_one(x, wt, b, cin, m, group, &w, i);
    }
}

static inline void k_conv_transpose_f32(float *y, const float *x, const float *wt, const float *b, int64_t n,
                                        int64_t cin, int64_t m, int64_t group, int ns, const int64_t *g)
{
    KWin w = k_win(ns, g);
    kk_conv_transpose_f32<<<k_blocks(n * m * w.ny), K_THREADS, 0, g_stream>>>(y, x, wt, b, n * m * w.ny, cin, m,
                                                                              group, w);
    CHECK_LAUNCH();
}

/* ---- Col2Im ---- */

__global__ void kk_col2im_f32(float *y, const float *x, int64_t total, int64_t kk, KWin w)
{
    GRID_LOOP(i, total)
    {
        y[i] = k_col2im_one(x, kk, &w, i);
    }
}

static inline void k_col2im_f32(float *y, const float *x, int64_t planes, int64_t kk, int ns, const int64_t *g)
{
    KWin w = k_win(ns, g);
    kk_col2im_f32<<<k_blocks(planes * w.ny), K_THREADS, 0, g_stream>>>(y, x, planes * w.ny, kk, w);
    CHECK_LAUNCH();
}

/* ---- MaxUnpool ---- */

/* One thread per [n, c] plane, applying its elements in order (a repeated
 * index keeps the last), so no two threads write one element. An index
 * outside its plane cannot stop a kernel: it writes nothing, where the C
 * target stops with an error. */
__global__ void kk_max_unpool_f32(float *y, const float *x, const int64_t *idx, int64_t c, int64_t cg, int64_t n_off,
                                  int64_t c_off, int64_t in_plane, int64_t planes, KUnpool u)
{
    GRID_LOOP(p, planes)
    {
        int64_t base = ((n_off + p / c) * cg + c_off + p % c) * u.ninf;
        for (int64_t e = 0; e < in_plane; e++) {
            int64_t pos = idx[p * in_plane + e] - base;
            if (pos >= 0 && pos < u.ninf)
                y[p * u.nout + k_unpool_pos(&u, pos)] = x[p * in_plane + e];
        }
    }
}

static inline void k_max_unpool_f32(float *y, const float *x, const int64_t *idx, int64_t n, int64_t c, int64_t cg,
                                    int64_t n_off, int64_t c_off, int64_t in_plane, int ns, const int64_t *g)
{
    KUnpool u = k_unpool(ns, g);
    CHECK_CUDA(cudaMemsetAsync(y, 0, sizeof(float) * (size_t)(n * c * u.nout), g_stream));
    kk_max_unpool_f32<<<k_blocks(n * c), K_THREADS, 0, g_stream>>>(y, x, idx, c, cg, n_off, c_off, in_plane, n * c,
                                                                    u);
    CHECK_LAUNCH();
}

/* ---- convolution, MaxPool, GlobalAveragePool, BatchNormalization ---- */

__global__ void kk_im2col(float *col, const float *x, int64_t C, int64_t H, int64_t W, int64_t cg, int64_t g, int64_t n,
                          int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh,
                          int64_t dw, int64_t ph, int64_t pw)
{
    GRID_LOOP(i, cg * kh * kw * oh * ow)
    {
        int64_t ox = i % ow, oy = (i / ow) % oh, r = i / (ow * oh), j = r % kw, q = (r / kw) % kh, c = r / (kw * kh);
        int64_t iy = oy * sh - ph + q * dh, ix = ox * sw - pw + j * dw;
        const float *xp = x + ((n * C + g * cg + c) * H) * W;
        col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xp[iy * W + ix] : 0.0f;
    }
}

__global__ void kk_bias_rows(float *y, const float *bias, int64_t rows, int64_t cols)
{
    GRID_LOOP(i, rows * cols) y[i] = bias ? bias[i / cols] : 0.0f;
}

static inline void k_conv2d_f32(float *y, const float *x, const float *w, const float *bias, int64_t N, int64_t C,
                                int64_t H, int64_t W, int64_t M, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t group,
                                float *col)
{
    int64_t cg = C / group, mg = M / group, kk = cg * kh * kw, npix = oh * ow;
    const float one = 1.0f;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < group; g++) {
            kk_im2col<<<k_blocks(kk * npix), K_THREADS, 0, g_stream>>>(col, x, C, H, W, cg, g, n, kh, kw, oh, ow, sh,
                                                                      sw, dh, dw, ph, pw);
            CHECK_LAUNCH();
            float *yp = y + (n * M + g * mg) * npix;
            kk_bias_rows<<<k_blocks(mg * npix), K_THREADS, 0, g_stream>>>(yp, bias ? bias + g * mg : NULL, mg, npix);
            CHECK_LAUNCH();
            /* yp[mg, npix] += w_g[mg, kk] @ col[kk, npix] (row-major). */
            CHECK_CUBLAS(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)npix, (int)mg, (int)kk, &one, col, (int)npix,
                                     w + g * mg * kk, (int)kk, &one, yp, (int)npix));
        }
}

__global__ void kk_maxpool(float *y, int64_t *ind, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                           int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph,
                           int64_t pw, int64_t n_off, int64_t c_off, int64_t Cg)
{
    GRID_LOOP(o, N * C * oh * ow)
    {
        int64_t ox = o % ow, oy = (o / ow) % oh, c = (o / (ow * oh)) % C, n = o / (ow * oh * C);
        const float *xp = x + (n * C + c) * H * W;
        float best;
        int64_t at = k_maxpool_one(xp, H, W, kh, kw, oy, ox, sh, sw, dh, dw, ph, pw, &best);
        y[o] = best;
        if (ind)
            ind[o] = ((n + n_off) * Cg + (c + c_off)) * H * W + at;
    }
}

static inline void k_maxpool2d_f32(float *y, int64_t *ind, const float *x, int64_t N, int64_t C, int64_t H, int64_t W,
                                   int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh,
                                   int64_t dw, int64_t ph, int64_t pw, int64_t n_off, int64_t c_off, int64_t C_global)
{
    kk_maxpool<<<k_blocks(N * C * oh * ow), K_THREADS, 0, g_stream>>>(y, ind, x, N, C, H, W, kh, kw, oh, ow, sh, sw, dh,
                                                                     dw, ph, pw, n_off, c_off, C_global);
    CHECK_LAUNCH();
}

__global__ void kk_gap(float *y, const float *x, int64_t nc, int64_t spatial)
{
    GRID_LOOP(i, nc)
    {
        float s = 0;
        for (int64_t j = 0; j < spatial; j++)
            s += x[i * spatial + j];
        y[i] = s / (float)spatial;
    }
}

static inline void k_global_avgpool_f32(float *y, const float *x, int64_t nc, int64_t spatial)
{
    kk_gap<<<k_blocks(nc), K_THREADS, 0, g_stream>>>(y, x, nc, spatial);
    CHECK_LAUNCH();
}

__global__ void kk_batchnorm(float *y, const float *x, const float *scale, const float *bias, const float *mean,
                             const float *var, int64_t C, int64_t spatial, int64_t total, float eps)
{
    GRID_LOOP(i, total)
    {
        int64_t c = (i / spatial) % C;
        float a = scale[c] * rsqrtf(var[c] + eps);
        y[i] = (x[i] - mean[c]) * a + bias[c];
    }
}

static inline void k_batchnorm_f32(float *y, const float *x, const float *scale, const float *bias, const float *mean,
                                   const float *var, int64_t N, int64_t C, int64_t spatial, float eps)
{
    kk_batchnorm<<<k_blocks(N * C * spatial), K_THREADS, 0, g_stream>>>(y, x, scale, bias, mean, var, C, spatial,
                                                                        N * C * spatial, eps);
    CHECK_LAUNCH();
}
