/* ---- onnx2spmd kernels: index family (templates/kernels_index.c) ----------
 * C kernels for the ops of ir/ops_index.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_index.cu.
 */

/* An index along a dim of length len, made non-negative; out of range is
 * a run-time error naming the node. */
static inline int64_t ki_index(int64_t v, int64_t len)
{
    int64_t g = v < 0 ? v + len : v;
    if (g < 0 || g >= len)
        rt_die("node \"%s\": index %lld out of range [%lld, %lld)", rt_node, (long long)v, (long long)-len,
               (long long)len);
    return g;
}

/* Trilu on [batch, rows, cols] blocks whose first row and column sit at
 * global (row_off, col_off): keeps col - row >= k (upper) or <= k; k is
 * read from kp when k is a run-time value. */
static inline void k_trilu(void *y, const void *x, size_t elsize, int64_t batch, int64_t rows, int64_t cols,
                           int64_t row_off, int64_t col_off, int64_t k, const int64_t *kp, int upper)
{
    if (kp)
        k = *kp;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                int64_t e = (b * rows + i) * cols + j, diff = (j + col_off) - (i + row_off);
                int keep = upper ? diff >= k : diff <= k;
                if (keep)
                    memcpy((char *)y + e * (int64_t)elsize, (const char *)x + e * (int64_t)elsize, elsize);
                else
                    memset((char *)y + e * (int64_t)elsize, 0, elsize);
            }
}

/* GatherElements: y (shape dims, the indices' shape) reads x at the same
 * coordinates except along axis, where it takes the index value; sx are
 * x's strides, len x's length along axis. */
static inline void k_gather_elements(void *y, const void *x, const int64_t *idx, size_t elsize, int rank,
                                     const int64_t *dims, const int64_t *sx, int axis, int64_t len)
{
    int64_t n = 1, c[K_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    for (int64_t e = 0; e < n; e++) {
        int64_t off = ki_index(idx[e], len) * sx[axis];
        for (int i = 0; i < rank; i++)
            if (i != axis)
                off += c[i] * sx[i];
        memcpy((char *)y + e * (int64_t)elsize, (const char *)x + off * (int64_t)elsize, elsize);
        for (int i = rank - 1; i >= 0 && ++c[i] == dims[i]; i--)
            c[i] = 0;
    }
}

/* GatherND: for each of batch x per index tuples (m values each, over dims
 * with strides sx inside a batch of xbatch elements), copies a slice of
 * `slice` elements. */
static inline void k_gather_nd(void *y, const void *x, const int64_t *idx, size_t elsize, int64_t batch, int64_t per,
                               int m, const int64_t *dims, const int64_t *sx, int64_t xbatch, int64_t slice)
{
    for (int64_t t = 0; t < batch * per; t++) {
        int64_t off = (t / per) * xbatch;
        for (int j = 0; j < m; j++)
            off += ki_index(idx[t * m + j], dims[j]) * sx[j];
        if (slice)
            memcpy((char *)y + t * slice * (int64_t)elsize, (const char *)x + off * (int64_t)elsize,
                   (size_t)slice * elsize);
    }
}

/* ScatterND on y (already a copy of data): nupd index tuples of m values
 * over dims with strides sy, each writing a slice of `slice` elements, in
 * order (a later duplicate wins, or combines under red). */
static inline void k_scatter_nd(void *y, const int64_t *idx, const void *upd, int dt, int red, int64_t nupd, int m,
                                const int64_t *dims, const int64_t *sy, int64_t slice)
{
    for (int64_t u = 0; u < nupd; u++) {
        int64_t off = 0;
        for (int j = 0; j < m; j++)
            off += ki_index(idx[u * m + j], dims[j]) * sy[j];
        for (int64_t e = 0; e < slice; e++)
            ki_scatter_one(y, off + e, upd, u * slice + e, dt, red);
    }
}

/* ScatterElements on y (already a copy of data): update e (shape dims)
 * lands at its own coordinates except along axis, where it takes the
 * index value; sy are y's strides, len y's length along axis. */
static inline void k_scatter_elements(void *y, const int64_t *idx, const void *upd, int dt, int red, int rank,
                                      const int64_t *dims, const int64_t *sy, int axis, int64_t len)
{
    int64_t n = 1, c[K_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    for (int64_t e = 0; e < n; e++) {
        int64_t off = ki_index(idx[e], len) * sy[axis];
        for (int i = 0; i < rank; i++)
            if (i != axis)
                off += c[i] * sy[i];
        ki_scatter_one(y, off, upd, e, dt, red);
        for (int i = rank - 1; i >= 0 && ++c[i] == dims[i]; i--)
            c[i] = 0;
    }
}

/* Pad: y (ydims) from x (xdims), begin pads per dim (negative crops). */
static inline void k_pad(void *y, const void *x, int dt, int mode, int rank, const int64_t *ydims,
                         const int64_t *xdims, const int64_t *begin, double value)
{
    int64_t n = 1, c[K_MAX_RANK] = {0}, sx[K_MAX_RANK], s = 1;
    size_t es = dt == 1 ? 4 : dt == 7 ? 8 : 1;
    for (int i = rank - 1; i >= 0; i--) {
        sx[i] = s;
        s *= xdims[i];
        n *= ydims[i];
    }
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int i = 0; i < rank && off >= 0; i++) {
            int64_t src = ki_pad_src(c[i] - begin[i], xdims[i], mode);
            off = src < 0 ? -1 : off + src * sx[i];
        }
        if (off < 0)
            ki_store(y, dt, e, value);
        else
            memcpy((char *)y + e * (int64_t)es, (const char *)x + off * (int64_t)es, es);
        for (int i = rank - 1; i >= 0 && ++c[i] == ydims[i]; i--)
            c[i] = 0;
    }
}

/* OneHot: y [outer, depth, inner] from indices [outer, inner] (dtype idt);
 * a negative index counts from depth, one out of range gives all off. */
static inline void k_onehot(void *y, int ydt, const void *idx, int idt, int64_t outer, int64_t depth, int64_t inner,
                            double off, double on)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double v = ki_load(idx, idt, o * inner + i);
            int64_t h = v > -1e15 && v < 1e15 ? (int64_t)v : depth;
            if (h < 0)
                h += depth;
            for (int64_t k = 0; k < depth; k++)
                ki_store(y, ydt, (o * depth + k) * inner + i, k == h ? on : off);
        }
}

/* KvCacheWrite (compile --decode): the new positions [outer, tokens,
 * inner] into the cache [outer, slots, inner] from position pos on, a row
 * at a time; the other slots keep what earlier steps wrote. */
static inline void k_kv_cache_write(void *cache, const void *x, size_t elsize, int64_t outer, int64_t tokens,
                                    int64_t inner, int64_t slots, int64_t pos)
{
    if (pos < 0 || pos + tokens > slots)
        rt_die("node \"%s\": position %lld is outside the cache's %lld slots (--max-seq)", rt_node, (long long)pos,
               (long long)slots);
    for (int64_t row = 0; row < outer * tokens; row++)
        memcpy((char *)cache + ki_cache_slot(row * inner, tokens, inner, slots, pos) * (int64_t)elsize,
               (const char *)x + row * inner * (int64_t)elsize, (size_t)inner * elsize);
}

/* MoeScatter: buf [g, el, d, cap] zeroed, then each kept pair of this
 * rank's experts gets its weight (1 where w is NULL: MoeDispatch's copy)
 * times its token's row of x [g, ng, d]. */
static inline void k_moe_scatter(float *buf, const float *x, const int64_t *slots, const float *w, int64_t g,
                                 int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    memset(buf, 0, (size_t)(g * el * d * cap) * sizeof(float));
    for (int64_t gi = 0; gi < g; gi++)
        for (int64_t i = 0; i < ng * k; i++) {
            int64_t p = gi * ng * k + i, s = slots[p], le = s < 0 ? -1 : s / cap - e_off;
            if (le < 0 || le >= el)
                continue;
            float *col = buf + ((gi * el + le) * d) * cap + s % cap;
            const float *row = x + (gi * ng + i / k) * d;
            for (int64_t di = 0; di < d; di++)
                col[di * cap] = (w ? w[p] : 1.0f) * row[di];
        }
}

/* MoeDispatch: x [g, ng, d] into this rank's experts e_off .. e_off + el -
 * 1 of buf [g, el, d, cap], each token's row to column c of its expert;
 * slots [g, ng, k] of every expert (ki_moe_expert_slots). *dropped (when
 * this rank counts: one replica of each block) gets the pairs its experts
 * had no room for in its first g_real groups (the rest pad a block). */
static inline void k_moe_dispatch(float *buf, int64_t *slots, const float *x, const int64_t *ids, int64_t g, int64_t ng,
                                  int64_t k, int64_t d, int64_t experts, int64_t el, int64_t e_off, int64_t cap,
                                  int64_t *dropped, int64_t g_real)
{
    int64_t lost = 0;
    for (int64_t i = 0; i < g * ng * k; i++)
        slots[i] = -1;
    for (int64_t gi = 0; gi < g; gi++)
        for (int64_t e = 0; e < experts; e++) {
            int64_t n = ki_moe_expert_slots(ids + gi * ng * k, slots + gi * ng * k, ng, k, e, cap);
            if (e >= e_off && e < e_off + el && gi < g_real)
                lost += n;
        }
    k_moe_scatter(buf, x, slots, NULL, g, ng, k, d, el, e_off, cap);
    if (dropped)
        *dropped = lost;
}

/* MoeCombine: out [g, ng, d], each token's weighted sum over its kept
 * choices among this rank's experts (a partial sum when they are split). */
static inline void k_moe_combine(float *out, const float *y, const int64_t *slots, const float *w, int64_t g,
                                 int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    for (int64_t gi = 0; gi < g; gi++)
        for (int64_t t = 0; t < ng; t++)
            for (int64_t di = 0; di < d; di++)
                out[(gi * ng + t) * d + di] = ki_moe_combine(y + gi * el * d * cap, slots + gi * ng * k,
                                                             w + gi * ng * k, t, di, k, d, el, e_off, cap);
}

/* MoePairDot: out [g, ng, k], each pair's row of a [g, ng, d] dotted with
 * its slot's column of y [g, el, d, cap]. */
static inline void k_moe_pair_dot(float *out, const float *a, const float *y, const int64_t *slots, int64_t g,
                                  int64_t ng, int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    for (int64_t gi = 0; gi < g; gi++)
        for (int64_t i = 0; i < ng * k; i++)
            out[gi * ng * k + i] = ki_moe_pair_dot(a + gi * ng * d, y + gi * el * d * cap, slots + gi * ng * k, i, k, d,
                                                   el, e_off, cap);
}
