/* ---- onnx2spmd kernel bodies: the index family (templates/bodies_index.h) ----
 * Per-element loads, stores, scatter updates and Pad's source indices of
 * the index family's kernels, shared by templates/kernels_index.c and
 * templates/cuda_index.cu: both targets compute each element with this
 * same code. O2S_HD is from templates/bodies.h.
 */

/* Elements travel as bytes (elsize) where only positions matter; where a
 * value is computed (scatter reductions, pad and one-hot values) the dtype
 * code is ONNX's: 1 float32, 7 int64, 9 bool. */
O2S_HD static inline double ki_load(const void *p, int dt, int64_t i)
{
    return dt == 1 ? (double)((const float *)p)[i] : dt == 7 ? (double)((const int64_t *)p)[i]
                                                             : (double)((const unsigned char *)p)[i];
}

O2S_HD static inline void ki_store(void *p, int dt, int64_t i, double v)
{
    if (dt == 1)
        ((float *)p)[i] = (float)v;
    else if (dt == 7)
        ((int64_t *)p)[i] = (int64_t)v;
    else
        ((unsigned char *)p)[i] = v != 0;
}

/* Source coordinate of padded coordinate s (already minus the begin pad)
 * along a dim of length n; -1 for the constant value. mode: 0 constant,
 * 1 reflect, 2 edge, 3 wrap. */
O2S_HD static inline int64_t ki_pad_src(int64_t s, int64_t n, int mode)
{
    if (s >= 0 && s < n)
        return s;
    if (mode == K_PAD_CONSTANT)
        return -1;
    if (mode == K_PAD_EDGE)
        return s < 0 ? 0 : n - 1;
    if (mode == K_PAD_WRAP)
        return ((s % n) + n) % n;
    if (n == 1)
        return 0;
    int64_t p = 2 * (n - 1), r = ((s % p) + p) % p;
    return r < n ? r : p - r;
}

/* y[yi] = u[ui] combined by the K_SCATTER_* reduction red (max and min as
 * Y > v ? Y : v, so a NaN update replaces). */
O2S_HD static inline void ki_scatter_one(void *y, int64_t yi, const void *u, int64_t ui, int dt, int red)
{
    if (dt == 1) {
        float *Y = (float *)y, v = ((const float *)u)[ui];
        Y[yi] = red == K_SCATTER_NONE  ? v
                : red == K_SCATTER_ADD ? Y[yi] + v
                : red == K_SCATTER_MUL ? Y[yi] * v
                : red == K_SCATTER_MAX ? (Y[yi] > v ? Y[yi] : v)
                                       : (Y[yi] < v ? Y[yi] : v);
    } else if (dt == 7) {
        int64_t *Y = (int64_t *)y, v = ((const int64_t *)u)[ui];
        Y[yi] = red == K_SCATTER_NONE  ? v
                : red == K_SCATTER_ADD ? (int64_t)((uint64_t)Y[yi] + (uint64_t)v)
                : red == K_SCATTER_MUL ? (int64_t)((uint64_t)Y[yi] * (uint64_t)v)
                : red == K_SCATTER_MAX ? (Y[yi] > v ? Y[yi] : v)
                                       : (Y[yi] < v ? Y[yi] : v);
    } else {
        ((unsigned char *)y)[yi] = ((const unsigned char *)u)[ui];
    }
}

/* KvCacheWrite: where element e of the new positions [outer, tokens,
 * inner] goes in the cache [outer, slots, inner] when the first of them
 * is position pos. */
O2S_HD static inline int64_t ki_cache_slot(int64_t e, int64_t tokens, int64_t inner, int64_t slots, int64_t pos)
{
    int64_t i = e % inner, t = (e / inner) % tokens, o = e / (inner * tokens);
    return (o * slots + pos + t) * inner + i;
}

/* MoeDispatch: the slots of expert e's pairs in one group of ng tokens
 * with k choices each (ids [ng, k]), in priority order: every token's
 * first choice in token order, then every second choice, and so on. The
 * c-th pair gets e * cap + c while c < cap; the rest keep -1 (dropped).
 * Returns how many were dropped. */
O2S_HD static inline int64_t ki_moe_expert_slots(const int64_t *ids, int64_t *slots, int64_t ng, int64_t k, int64_t e,
                                                 int64_t cap)
{
    int64_t c = 0;
    for (int64_t j = 0; j < k; j++)
        for (int64_t t = 0; t < ng; t++)
            if (ids[t * k + j] == e) {
                if (c < cap)
                    slots[t * k + j] = e * cap + c;
                c++;
            }
    return c > cap ? c - cap : 0;
}

/* MoeCombine: token t's output element di, the sum over its kept choices
 * held by this rank (experts e_off .. e_off + el - 1) of routing weight
 * times the expert's output at the pair's slot; y is [el, d, cap] of one
 * group, slots and w [ng, k] of the same group. */
O2S_HD static inline float ki_moe_combine(const float *y, const int64_t *slots, const float *w, int64_t t, int64_t di,
                                          int64_t k, int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    float acc = 0.0f;
    for (int64_t j = 0; j < k; j++) {
        int64_t s = slots[t * k + j], le = s < 0 ? -1 : s / cap - e_off;
        if (le >= 0 && le < el)
            acc += w[t * k + j] * y[(le * d + di) * cap + s % cap];
    }
    return acc;
}

/* MoePairDot: pair i's (token i / k) row of a [ng, d] against its slot's
 * column of y [el, d, cap] (one group); 0 for a dropped pair or one whose
 * expert is not this rank's. */
O2S_HD static inline float ki_moe_pair_dot(const float *a, const float *y, const int64_t *slots, int64_t i, int64_t k,
                                           int64_t d, int64_t el, int64_t e_off, int64_t cap)
{
    int64_t s = slots[i], le = s < 0 ? -1 : s / cap - e_off;
    if (le < 0 || le >= el)
        return 0.0f;
    const float *row = a + (i / k) * d, *col = y + le * d * cap + s % cap;
    float acc = 0.0f;
    for (int64_t di = 0; di < d; di++)
        acc += row[di] * col[di * cap];
    return acc;
}
