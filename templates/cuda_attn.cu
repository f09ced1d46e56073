/* ---- onnx2spmd CUDA kernels: the attn family (templates/cuda_attn.cu) ------
 * CUDA kernels for Attention and RotaryEmbedding (ir/ops_attn.def), launched
 * on g_stream, with the same k_* names and arguments as
 * templates/kernels_attn.c.
 *
 * Attention gives each query row (batch, head, position) to one thread,
 * which walks the keys in the C kernel's order with the same two passes
 * (online maximum and denominator, then probabilities times values), so
 * the result needs no scratch and no atomics and is the same on every run.
 * That is simple rather than fast: a tiled (flash-attention) kernel would
 * share K and V rows through shared memory. The KV-cache concatenation and
 * RotaryEmbedding give each element (or rotated pair) to one thread.
 */

/* Geometry of one Attention node on this rank, as in templates/kernels_attn.c. */
typedef struct KAttn {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, past, head, v_head;
    int64_t q_head0, kv_head0, group;
    int64_t qs[3], ks[3], vs[3], ys[3];
    int64_t mask_len, ms[3];
    float scale, softcap;
    int causal, mode;
} KAttn;

__device__ static inline float k_attn_score(const KAttn &a, const float *qrow, const float *k, const float *pk,
                                            const float *mf, const unsigned char *mb, const int64_t *nonpad, int64_t b,
                                            int64_t kh, int64_t s, int64_t t, float *raw)
{
    const float *krow = t < a.past ? pk + ((b * a.kv_heads + kh) * a.past + t) * a.head
                                   : k + b * a.ks[0] + kh * a.ks[1] + (t - a.past) * a.ks[2];
    float dot = 0;
    for (int64_t e = 0; e < a.head; e++)
        dot += qrow[e] * krow[e];
    float x = dot * a.scale;
    if (a.mode == 0)
        *raw = x;
    if (a.softcap > 0)
        x = a.softcap * tanhf(x / a.softcap);
    if (a.mode == 1)
        *raw = x;
    int64_t moff = b * a.ms[0] + s * a.ms[2];
    if (t >= a.mask_len || (mb && !mb[moff + t]) || (a.causal && t > s + a.past) || (nonpad && t >= nonpad[b]))
        x = -INFINITY;
    else if (mf)
        x += mf[moff + t];
    return x;
}

__global__ void kk_attention(KAttn a, float *y, float *qk, const float *q, const float *k, const float *v,
                             const float *mf, const unsigned char *mb, const float *pk, const float *pv,
                             const int64_t *nonpad)
{
    int64_t total = a.past + a.kv_len;
    GRID_LOOP(row, a.batch * a.q_heads * a.q_len)
    {
        int64_t s = row % a.q_len, h = row / a.q_len % a.q_heads, b = row / (a.q_len * a.q_heads);
        int64_t kh = (a.q_head0 + h) / a.group - a.kv_head0;
        const float *qrow = q + b * a.qs[0] + h * a.qs[1] + s * a.qs[2];
        const float *mfh = mf ? mf + h * a.ms[1] : NULL;
        const unsigned char *mbh = mb ? mb + h * a.ms[1] : NULL;
        float *yrow = y + b * a.ys[0] + h * a.ys[1] + s * a.ys[2];
        float *qkrow = qk ? qk + row * total : NULL;
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < total; t++) {
            float raw = 0;
            float x = k_attn_score(a, qrow, k, pk, mfh, mbh, nonpad, b, kh, s, t, &raw);
            if (qkrow && a.mode < 3)
                qkrow[t] = a.mode == 2 ? x : raw;
            if (x == -INFINITY)
                continue;
            if (x > mx) {
                sum = sum * exp(mx - x) + 1.0;
                mx = x;
            } else {
                sum += exp(x - mx);
            }
        }
        for (int64_t e = 0; e < a.v_head; e++)
            yrow[e] = 0;
        for (int64_t t = 0; t < total; t++) {
            float raw;
            float x = k_attn_score(a, qrow, k, pk, mfh, mbh, nonpad, b, kh, s, t, &raw);
            float p = (float)(exp(x - mx) / sum);
            if (qkrow && a.mode == 3)
                qkrow[t] = p;
            const float *vrow = t < a.past ? pv + ((b * a.kv_heads + kh) * a.past + t) * a.v_head
                                           : v + b * a.vs[0] + kh * a.vs[1] + (t - a.past) * a.vs[2];
            for (int64_t e = 0; e < a.v_head; e++)
                yrow[e] += p * vrow[e];
        }
    }
}

static inline void k_attention_f32(const KAttn *a, float *y, float *qk, const float *q, const float *k, const float *v,
                                   const float *mf, const unsigned char *mb, const float *pk, const float *pv,
                                   const int64_t *nonpad)
{
    int64_t rows = a->batch * a->q_heads * a->q_len;
    kk_attention<<<k_blocks(rows), K_THREADS, 0, g_stream>>>(*a, y, qk, q, k, v, mf, mb, pk, pv, nonpad);
    CHECK_LAUNCH();
}

__global__ void kk_attn_cache(float *present, const float *past, const float *x, int64_t batch, int64_t heads,
                              int64_t past_len, int64_t len, int64_t d, int64_t xs0, int64_t xs1, int64_t xs2)
{
    int64_t total = past_len + len;
    GRID_LOOP(i, batch * heads * total * d)
    {
        int64_t e = i % d, t = i / d % total, bh = i / (d * total), h = bh % heads, b = bh / heads;
        present[i] = t < past_len ? past[(bh * past_len + t) * d + e] : x[b * xs0 + h * xs1 + (t - past_len) * xs2 + e];
    }
}

static inline void k_attn_cache_f32(float *present, const float *past, const float *x, int64_t batch, int64_t heads,
                                    int64_t past_len, int64_t len, int64_t d, const int64_t *xs)
{
    int64_t n = batch * heads * (past_len + len) * d;
    kk_attn_cache<<<k_blocks(n), K_THREADS, 0, g_stream>>>(present, past, x, batch, heads, past_len, len, d, xs[0],
                                                            xs[1], xs[2]);
    CHECK_LAUNCH();
}

/* One thread per rotated pair (i < rot/2) or copied element (i >= rot). A
 * position id outside the table writes NaN: a device cannot abort, and a
 * NaN is not mistaken for a result. */
__global__ void kk_rotary(float *y, const float *x, const float *cs, const float *sn, const int64_t *pos,
                          int64_t max_pos, int64_t batch, int64_t heads, int64_t len, int64_t d, int64_t rot,
                          int interleaved, int64_t xs0, int64_t xs1, int64_t xs2)
{
    int64_t half = rot / 2, per = half + (d - rot);
    GRID_LOOP(i, batch * heads * len * per)
    {
        int64_t j = i % per, s = i / per % len, h = i / (per * len) % heads, b = i / (per * len * heads);
        int64_t off = b * xs0 + h * xs1 + s * xs2;
        if (j >= half) {
            int64_t e = rot + (j - half);
            y[off + e] = x[off + e];
            continue;
        }
        int64_t row = pos ? pos[b * len + s] : b * len + s;
        int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
        if (row < 0 || row >= max_pos) {
            y[off + i1] = y[off + i2] = NAN;
            continue;
        }
        float c = cs[row * half + j], sv = sn[row * half + j], x1 = x[off + i1], x2 = x[off + i2];
        y[off + i1] = c * x1 - sv * x2;
        y[off + i2] = sv * x1 + c * x2;
    }
}

static inline void k_rotary_f32(float *y, const float *x, const float *cs, const float *sn, const int64_t *pos,
                                int64_t max_pos, int64_t batch, int64_t heads, int64_t len, int64_t d, int64_t rot,
                                int interleaved, const int64_t *xs)
{
    int64_t n = batch * heads * len * (rot / 2 + (d - rot));
    kk_rotary<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, cs, sn, pos, max_pos, batch, heads, len, d, rot,
                                                        interleaved, xs[0], xs[1], xs[2]);
    CHECK_LAUNCH();
}
