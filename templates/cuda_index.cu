/* ---- onnx2spmd CUDA kernels: index family (templates/cuda_index.cu) -------
 * CUDA kernels for the ops of ir/ops_index.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_index.c.
 */

__device__ static inline void ki_copy(char *y, const char *x, int elsize)
{
    for (int b = 0; b < elsize; b++)
        y[b] = x[b];
}

/* Non-negative index, or -1 when out of range. */
__device__ static inline int64_t ki_index(int64_t v, int64_t len)
{
    int64_t g = v < 0 ? v + len : v;
    return g >= 0 && g < len ? g : -1;
}

/* k from kp (device memory) when it is a run-time value. */
__global__ void kk_trilu(char *y, const char *x, int elsize, int64_t rows, int64_t cols, int64_t row_off,
                         int64_t col_off, int64_t k, const int64_t *kp, int upper, int64_t n)
{
    if (kp)
        k = *kp;
    GRID_LOOP(e, n)
    {
        int64_t j = e % cols, i = (e / cols) % rows, diff = (j + col_off) - (i + row_off);
        int keep = upper ? diff >= k : diff <= k;
        for (int b = 0; b < elsize; b++)
            y[e * elsize + b] = keep ? x[e * elsize + b] : 0;
    }
}

static inline void k_trilu(void *y, const void *x, size_t elsize, int64_t batch, int64_t rows, int64_t cols,
                           int64_t row_off, int64_t col_off, int64_t k, const int64_t *kp, int upper)
{
    int64_t n = batch * rows * cols;
    if (n)
        kk_trilu<<<k_blocks(n), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, (int)elsize, rows, cols,
                                                          row_off, col_off, k, kp, upper, n);
    CHECK_LAUNCH();
}

/* s.d: the indices' dims; s.s0: x's strides. */
__global__ void kk_gather_elements(char *y, const char *x, const int64_t *idx, int elsize, KShape s, int axis,
                                   int64_t len)
{
    GRID_LOOP(e, s.n)
    {
        int64_t rem = e, off = 0, g = ki_index(idx[e], len);
        for (int i = s.rank - 1; i >= 0; i--) {
            int64_t c = rem % s.d[i];
            rem /= s.d[i];
            off += (i == axis ? g : c) * s.s0[i];
        }
        for (int b = 0; b < elsize; b++)
            y[e * elsize + b] = g < 0 ? 0 : x[off * elsize + b];
    }
}

static inline void k_gather_elements(void *y, const void *x, const int64_t *idx, size_t elsize, int rank,
                                     const int64_t *dims, const int64_t *sx, int axis, int64_t len)
{
    KShape s = k_shape(rank, dims, sx, NULL, NULL);
    if (s.n)
        kk_gather_elements<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, idx, (int)elsize,
                                                                      s, axis, len);
    CHECK_LAUNCH();
}

/* s.d: the indexed dims, s.s0: their strides (rank m). */
__global__ void kk_gather_nd(char *y, const char *x, const int64_t *idx, int elsize, int64_t per, KShape s,
                             int64_t xbatch, int64_t slice, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t e = i % slice, t = i / slice, off = (t / per) * xbatch + e, ok = 1;
        for (int j = 0; j < s.rank; j++) {
            int64_t g = ki_index(idx[t * s.rank + j], s.d[j]);
            ok &= g >= 0;
            off += (g < 0 ? 0 : g) * s.s0[j];
        }
        for (int b = 0; b < elsize; b++)
            y[i * elsize + b] = ok ? x[off * elsize + b] : 0;
    }
}

static inline void k_gather_nd(void *y, const void *x, const int64_t *idx, size_t elsize, int64_t batch, int64_t per,
                               int m, const int64_t *dims, const int64_t *sx, int64_t xbatch, int64_t slice)
{
    KShape s = k_shape(m, dims, sx, NULL, NULL);
    int64_t n = batch * per * slice;
    if (n)
        kk_gather_nd<<<k_blocks(n), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, idx, (int)elsize, per, s,
                                                              xbatch, slice, n);
    CHECK_LAUNCH();
}

/* One thread per slice element: it walks every update in order, so
 * duplicates resolve as on the C target (the last one wins, or combine). */
__global__ void kk_scatter_nd(void *y, const int64_t *idx, const void *upd, int dt, int red, int64_t nupd, KShape s,
                              int64_t slice)
{
    GRID_LOOP(e, slice)
    {
        for (int64_t u = 0; u < nupd; u++) {
            int64_t off = 0, ok = 1;
            for (int j = 0; j < s.rank; j++) {
                int64_t g = ki_index(idx[u * s.rank + j], s.d[j]);
                ok &= g >= 0;
                off += (g < 0 ? 0 : g) * s.s0[j];
            }
            if (ok)
                ki_scatter_one(y, off + e, upd, u * slice + e, dt, red);
        }
    }
}

static inline void k_scatter_nd(void *y, const int64_t *idx, const void *upd, int dt, int red, int64_t nupd, int m,
                                const int64_t *dims, const int64_t *sy, int64_t slice)
{
    KShape s = k_shape(m, dims, sy, NULL, NULL);
    if (slice && nupd)
        kk_scatter_nd<<<k_blocks(slice), K_THREADS, 0, g_stream>>>(y, idx, upd, dt, red, nupd, s, slice);
    CHECK_LAUNCH();
}

/* One thread per line along axis (s.d: the indices' dims, s.s0: y's
 * strides): the lines' outputs are disjoint, each walked in order. */
__global__ void kk_scatter_elements(void *y, const int64_t *idx, const void *upd, int dt, int red, KShape s, int axis,
                                    int64_t len, int64_t lines)
{
    GRID_LOOP(l, lines)
    {
        int64_t rem = l, base = 0, ebase = 0, es = 1, eax = 1;
        for (int i = s.rank - 1; i >= 0; i--) {
            if (i == axis) {
                eax = es;
            } else {
                int64_t c = rem % s.d[i];
                rem /= s.d[i];
                base += c * s.s0[i];
                ebase += c * es;
            }
            es *= s.d[i];
        }
        for (int64_t a = 0; a < s.d[axis]; a++) {
            int64_t e = ebase + a * eax, g = ki_index(idx[e], len);
            if (g >= 0)
                ki_scatter_one(y, base + g * s.s0[axis], upd, e, dt, red);
        }
    }
}

static inline void k_scatter_elements(void *y, const int64_t *idx, const void *upd, int dt, int red, int rank,
                                      const int64_t *dims, const int64_t *sy, int axis, int64_t len)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    int64_t lines = dims[axis] ? s.n / dims[axis] : 0;
    if (lines)
        kk_scatter_elements<<<k_blocks(lines), K_THREADS, 0, g_stream>>>(y, idx, upd, dt, red, s, axis, len, lines);
    CHECK_LAUNCH();
}

/* s.d: y's dims, s.s0: x's dims, s.s1: begin pads, s.s2: x's strides. */
__global__ void kk_pad(void *y, const void *x, int dt, int mode, KShape s, double value)
{
    int es = dt == 1 ? 4 : dt == 7 ? 8 : 1;
    GRID_LOOP(e, s.n)
    {
        int64_t rem = e, off = 0;
        for (int i = s.rank - 1; i >= 0; i--) {
            int64_t c = rem % s.d[i];
            rem /= s.d[i];
            int64_t src = ki_pad_src(c - s.s1[i], s.s0[i], mode);
            off = (off < 0 || src < 0) ? -1 : off + src * s.s2[i];
        }
        if (off < 0)
            ki_store(y, dt, e, value);
        else
            ki_copy((char *)y + e * es, (const char *)x + off * es, es);
    }
}

static inline void k_pad(void *y, const void *x, int dt, int mode, int rank, const int64_t *ydims,
                         const int64_t *xdims, const int64_t *begin, double value)
{
    int64_t sx[K_MAX_RANK], st = 1;
    for (int i = rank - 1; i >= 0; i--) {
        sx[i] = st;
        st *= xdims[i];
    }
    KShape s = k_shape(rank, ydims, xdims, begin, sx);
    if (s.n)
        kk_pad<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(y, x, dt, mode, s, value);
    CHECK_LAUNCH();
}

__global__ void kk_onehot(void *y, int ydt, const void *idx, int idt, int64_t depth, int64_t inner, double off,
                          double on, int64_t n)
{
    GRID_LOOP(e, n)
    {
        int64_t i = e % inner, k = (e / inner) % depth, o = e / (inner * depth);
        double v = ki_load(idx, idt, o * inner + i);
        int64_t h = v > -1e15 && v < 1e15 ? (int64_t)v : depth;
        if (h < 0)
            h += depth;
        ki_store(y, ydt, e, k == h ? on : off);
    }
}

static inline void k_onehot(void *y, int ydt, const void *idx, int idt, int64_t outer, int64_t depth, int64_t inner,
                            double off, double on)
{
    int64_t n = outer * depth * inner;
    if (n)
        kk_onehot<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, ydt, idx, idt, depth, inner, off, on, n);
    CHECK_LAUNCH();
}

__global__ void kk_kv_cache_write(char *cache, const char *x, int elsize, int64_t tokens, int64_t inner, int64_t slots,
                                  int64_t pos, int64_t n)
{
    GRID_LOOP(e, n)
    ki_copy(cache + ki_cache_slot(e, tokens, inner, slots, pos) * elsize, x + e * elsize, elsize);
}

/* KvCacheWrite (compile --decode): as templates/kernels_index.c; the
 * position is the host's (the program's step counter). */
static inline void k_kv_cache_write(void *cache, const void *x, size_t elsize, int64_t outer, int64_t tokens,
                                    int64_t inner, int64_t slots, int64_t pos)
{
    int64_t n = outer * tokens * inner;
    if (pos < 0 || pos + tokens > slots)
        rt_die("node \"%s\": position %lld is outside the cache's %lld slots (--max-seq)", rt_node, (long long)pos,
               (long long)slots);
    if (n)
        kk_kv_cache_write<<<k_blocks(n), K_THREADS, 0, g_stream>>>((char *)cache, (const char *)x, (int)elsize, tokens,
                                                                   inner, slots, pos, n);
    CHECK_LAUNCH();
}

/* One thread per (pair, element): each kept pair of this rank's experts
 * gets its weight (1 where w is NULL: MoeDispatch's copy) times its
 * token's row (MoeScatter and MoeDispatch). */
__global__ void kk_moe_scatter(float *buf, const float *x, const int64_t *slots, const float *w, int64_t ng, int64_t k,
                               int64_t d, int64_t el, int64_t e_off, int64_t cap, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t di = i % d, p = i / d, gi = p / (ng * k), s = slots[p], le = s < 0 ? -1 : s / cap - e_off;
        if (le >= 0 && le < el)
            buf[((gi * el + le) * d + di) * cap + s % cap] = (w ? w[p] : 1.0f) * x[(p / k) * d + di];
    }
}

/* MoeDispatch: one thread per (group, expert) hands out that expert's
 * slots (ki_moe_expert_slots, as the C target), adding the drops of this
 * rank's experts to *dropped; then one per (group, token, choice, element)
 * copies the token's rows into the experts' columns. */
__global__ void kk_moe_slots(int64_t *slots, const int64_t *ids, int64_t ng, int64_t k, int64_t experts, int64_t el,
                             int64_t e_off, int64_t cap, unsigned long long *dropped, int64_t g_real, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t gi = i / experts, e = i % experts;
        int64_t lost = ki_moe_expert_slots(ids + gi * ng * k, slots + gi * ng * k, ng, k, e, cap);
        if (dropped && lost && e >= e_off && e < e_off + el && gi < g_real)
            atomicAdd(dropped, (unsigned long long)lost);
    }
}

static inline void k_moe_dispatch(float *buf, int64_t *slots, const float *x, const int64_t *ids, int64_t g, int64_t ng,
                                  int64_t k, int64_t d, int64_t experts, int64_t el, int64_t e_off, int64_t cap,
                                  int64_t *dropped, int64_t g_real)
{
    CHECK_CUDA(cudaMemsetAsync(slots, 0xff, (size_t)(g * ng * k) * sizeof(int64_t), g_stream)); /* -1 */
    CHECK_CUDA(cudaMemsetAsync(buf, 0, (size_t)(g * el * d * cap) * sizeof(float), g_stream));
    if (dropped)
        CHECK_CUDA(cudaMemsetAsync(dropped, 0, sizeof(int64_t), g_stream));
    int64_t nslots = g * experts, ncopy = g * ng * k * d;
    if (nslots > 0)
        kk_moe_slots<<<k_blocks(nslots), K_THREADS, 0, g_stream>>>(slots, ids, ng, k, experts, el, e_off, cap,
                                                                   (unsigned long long *)dropped, g_real, nslots);
    CHECK_LAUNCH();
    if (ncopy > 0)
        kk_moe_scatter<<<k_blocks(ncopy), K_THREADS, 0, g_stream>>>(buf, x, slots, NULL, ng, k, d, el, e_off, cap,
                                                                    ncopy);
    CHECK_LAUNCH();
}

__global__ void kk_moe_combine(float *out, const float *y, const int64_t *slots, const float *w, int64_t ng, int64_t k,
                               int64_t d, int64_t el, int64_t e_off, int64_t cap, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t di = i % d, t = (i / d) % ng, gi = i / (d * ng);
        out[i] = ki_moe_combine(y + gi * el * d * cap, slots + gi * ng * k, w + gi * ng * k, t, di, k, d, el, e_off,
                                cap);
    }
}

/* MoeCombine: as templates/kernels_index.c, one thread per output element. */
static inline void k_moe_combine(float *out, const float *y, const int64_t *slots, const float *w, int64_t g,
                                 int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    int64_t n = g * ng * d;
    if (n > 0)
        kk_moe_combine<<<k_blocks(n), K_THREADS, 0, g_stream>>>(out, y, slots, w, ng, k, d, el, e_off, cap, n);
    CHECK_LAUNCH();
}

/* MoeScatter: as templates/kernels_index.c; one thread per pair element. */
static inline void k_moe_scatter(float *buf, const float *x, const int64_t *slots, const float *w, int64_t g,
                                 int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    int64_t n = g * ng * k * d;
    CHECK_CUDA(cudaMemsetAsync(buf, 0, (size_t)(g * el * d * cap) * sizeof(float), g_stream));
    if (n > 0)
        kk_moe_scatter<<<k_blocks(n), K_THREADS, 0, g_stream>>>(buf, x, slots, w, ng, k, d, el, e_off, cap, n);
    CHECK_LAUNCH();
}

__global__ void kk_moe_pair_dot(float *out, const float *a, const float *y, const int64_t *slots, int64_t ng, int64_t k,
                                int64_t d, int64_t el, int64_t e_off, int64_t cap, int64_t n)
{
    GRID_LOOP(p, n)
    {
        int64_t gi = p / (ng * k);
        out[p] = ki_moe_pair_dot(a + gi * ng * d, y + gi * el * d * cap, slots + gi * ng * k, p % (ng * k), k, d, el,
                                 e_off, cap);
    }
}

/* MoePairDot: as templates/kernels_index.c; one thread per pair. */
static inline void k_moe_pair_dot(float *out, const float *a, const float *y, const int64_t *slots, int64_t g,
                                  int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    int64_t n = g * ng * k;
    if (n > 0)
        kk_moe_pair_dot<<<k_blocks(n), K_THREADS, 0, g_stream>>>(out, a, y, slots, ng, k, d, el, e_off, cap, n);
    CHECK_LAUNCH();
}
