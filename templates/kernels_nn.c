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
