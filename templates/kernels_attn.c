/* ---- onnx2spmd kernels: the attn family (templates/kernels_attn.c) ---------
 * C kernels for Attention and RotaryEmbedding (ir/ops_attn.def), on this
 * rank's local blocks, with the same k_* names and arguments as
 * templates/cuda_attn.cu.
 *
 * Attention works one query row (batch, head, position) at a time and never
 * holds a score matrix: a first pass over the keys finds the row's maximum
 * and the softmax denominator (online, rescaling the sum when the maximum
 * grows), a second pass recomputes each score, turns it into a probability
 * and adds that share of the value row into Y. So the kernel needs no
 * scratch, whatever the sequence lengths. Q, K, V and Y are read through
 * (batch, head, position) strides, which covers both the [B, H, S, D] and
 * the [B, S, H * D] forms without a transpose; keys and values at positions
 * below `past` come from the past caches. Scores are computed in float32
 * as the reference does; the softmax runs in double.
 */

/* Geometry of one Attention node on this rank (codegen/emit_attn.c fills it). */
typedef struct KAttn {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, past, head, v_head;
    int64_t q_head0, kv_head0, group; /* global first q / kv head here; q heads per kv head */
    int64_t qs[3], ks[3], vs[3], ys[3]; /* strides of batch, head, position */
    int64_t mask_len, ms[3];            /* mask columns (then -inf), strides of batch, head, row */
    float scale, softcap;
    int causal, mode;                   /* qk_matmul_output_mode */
} KAttn;

/* Score of query row qrow against key position t (past keys first), after
 * scale, softcap and masks; *raw gets the value qk_matmul_output_mode 0 or
 * 1 asks for. */
static inline float k_attn_score(const KAttn *a, const float *qrow, const float *k, const float *pk,
                                 const float *mf, const unsigned char *mb, const int64_t *nonpad, int64_t b,
                                 int64_t kh, int64_t s, int64_t t, float *raw)
{
    const float *krow = t < a->past ? pk + ((b * a->kv_heads + kh) * a->past + t) * a->head
                                    : k + b * a->ks[0] + kh * a->ks[1] + (t - a->past) * a->ks[2];
    float dot = 0;
    for (int64_t e = 0; e < a->head; e++)
        dot += qrow[e] * krow[e];
    float x = dot * a->scale;
    if (a->mode == 0)
        *raw = x;
    if (a->softcap > 0)
        x = a->softcap * tanhf(x / a->softcap);
    if (a->mode == 1)
        *raw = x;
    int64_t moff = b * a->ms[0] + s * a->ms[2];
    if (t >= a->mask_len || (mb && !mb[moff + t]) || (a->causal && t > s + a->past) || (nonpad && t >= nonpad[b]))
        x = -INFINITY;
    else if (mf)
        x += mf[moff + t];
    return x;
}

/* mf / mb: float or bool mask (or both NULL); mask strides exclude the
 * head, which the caller adds. y: [.., v_head] rows, overwritten. */
static inline void k_attention_f32(const KAttn *a, float *y, float *qk, const float *q, const float *k, const float *v,
                                   const float *mf, const unsigned char *mb, const float *pk, const float *pv,
                                   const int64_t *nonpad)
{
    int64_t total = a->past + a->kv_len;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->q_heads; h++)
            for (int64_t s = 0; s < a->q_len; s++) {
                int64_t kh = (a->q_head0 + h) / a->group - a->kv_head0;
                const float *qrow = q + b * a->qs[0] + h * a->qs[1] + s * a->qs[2];
                const float *mfh = mf ? mf + h * a->ms[1] : NULL;
                const unsigned char *mbh = mb ? mb + h * a->ms[1] : NULL;
                float *yrow = y + b * a->ys[0] + h * a->ys[1] + s * a->ys[2];
                float *qkrow = qk ? qk + ((b * a->q_heads + h) * a->q_len + s) * total : NULL;
                double mx = -INFINITY, sum = 0;
                for (int64_t t = 0; t < total; t++) {
                    float raw = 0;
                    float x = k_attn_score(a, qrow, k, pk, mfh, mbh, nonpad, b, kh, s, t, &raw);
                    if (qkrow && a->mode < 3)
                        qkrow[t] = a->mode == 2 ? x : raw;
                    if (x == -INFINITY)
                        continue; /* adds exp(-inf) = 0; a row masked whole ends 0/0 = NaN, as the reference */
                    if (x > mx) {
                        sum = sum * exp(mx - x) + 1.0;
                        mx = x;
                    } else {
                        sum += exp(x - mx);
                    }
                }
                for (int64_t e = 0; e < a->v_head; e++)
                    yrow[e] = 0;
                for (int64_t t = 0; t < total; t++) {
                    float raw;
                    float x = k_attn_score(a, qrow, k, pk, mfh, mbh, nonpad, b, kh, s, t, &raw);
                    float p = (float)(exp(x - mx) / sum);
                    if (qkrow && a->mode == 3)
                        qkrow[t] = p;
                    const float *vrow = t < a->past ? pv + ((b * a->kv_heads + kh) * a->past + t) * a->v_head
                                                    : v + b * a->vs[0] + kh * a->vs[1] + (t - a->past) * a->vs[2];
                    for (int64_t e = 0; e < a->v_head; e++)
                        yrow[e] += p * vrow[e];
                }
            }
}

/* present = concat(past, x) along the sequence: [B, H, past + len, D], x
 * read through its (batch, head, position) strides. */
static inline void k_attn_cache_f32(float *present, const float *past, const float *x, int64_t batch, int64_t heads,
                                    int64_t past_len, int64_t len, int64_t d, const int64_t *xs)
{
    int64_t total = past_len + len;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t t = 0; t < total; t++) {
                const float *src = t < past_len ? past + ((b * heads + h) * past_len + t) * d
                                                : x + b * xs[0] + h * xs[1] + (t - past_len) * xs[2];
                memcpy(present + ((b * heads + h) * total + t) * d, src, (size_t)d * sizeof(float));
            }
}

/* RotaryEmbedding of x [.., D] rows addressed by (batch, head, position)
 * strides xs (y has the same layout): the first rot elements rotate in
 * pairs (i, i + rot/2), or (2i, 2i + 1) when interleaved; the rest are
 * copied. cos/sin rows: pos[b * len + s] of a [max_pos, rot/2] table, or
 * row b * len + s of the per-position [B, len, rot/2] one (pos NULL). */
static inline void k_rotary_f32(float *y, const float *x, const float *cs, const float *sn, const int64_t *pos,
                                int64_t max_pos, int64_t batch, int64_t heads, int64_t len, int64_t d, int64_t rot,
                                int interleaved, const int64_t *xs)
{
    int64_t half = rot / 2;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < len; s++) {
                int64_t row = b * len + s;
                if (pos) {
                    row = pos[b * len + s];
                    if (row < 0 || row >= max_pos)
                        rt_die("node \"%s\": position id %lld out of range [0, %lld)", rt_node, (long long)row,
                               (long long)max_pos);
                }
                const float *c = cs + row * half, *sv = sn + row * half;
                int64_t off = b * xs[0] + h * xs[1] + s * xs[2];
                const float *xr = x + off;
                float *yr = y + off;
                for (int64_t i = 0; i < half; i++) {
                    int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
                    float x1 = xr[i1], x2 = xr[i2];
                    yr[i1] = c[i] * x1 - sv[i] * x2;
                    yr[i2] = sv[i] * x1 + c[i] * x2;
                }
                for (int64_t i = rot; i < d; i++)
                    yr[i] = xr[i];
            }
}
