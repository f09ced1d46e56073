/* ops_attn.c: shape functions of the attn family (ops_attn.def): Attention
 * (opset 23, and opset 24's nonpad_kv_seqlen input) and RotaryEmbedding.
 *
 * Both ops take 4-D [batch, heads, sequence, head_size] tensors or 3-D
 * [batch, sequence, heads * head_size] ones, whose head count is then an
 * attribute. The shape functions check everything the kernels rely on
 * (equal batch sizes, head counts that divide the hidden sizes, kv heads
 * that divide the query heads, a mask broadcastable to the scores, caches
 * of the rotated width), so that the rule and the emitter can take the
 * geometry for granted. Float operands may be of any float type (the
 * kernels see them widened to float32); masks are bool or float,
 * position ids and nonpad_kv_seqlen int64.
 */
#include "ir.h"

static int need_float(Diag *d, const Node *n, const Tensor *t, const char *what)
{
    if (dtype_is_float(t->dtype))
        return 0;
    return shape_fail(d, n, "%s \"%s\" has dtype %s; %s needs a float type", what, t->name, dtype_name(t->dtype),
                      node_op_name(n));
}

static int need_i64(Diag *d, const Node *n, const Tensor *t, const char *what)
{
    if (t->dtype == DT_I64)
        return 0;
    return shape_fail(d, n, "%s \"%s\" has dtype %s; %s needs int64", what, t->name, dtype_name(t->dtype),
                      node_op_name(n));
}

static int need_rank(Diag *d, const Node *n, const Tensor *t, const char *what, int rank)
{
    if (t->rank == rank)
        return 0;
    return shape_fail(d, n, "%s \"%s\" has rank %d; needs rank %d", what, t->name, t->rank, rank);
}

/* A 4-D cache (past_key / past_value) must be [B, kv_heads, P, head_size]. */
static int check_past(Diag *d, const Node *n, const Tensor *t, const char *what, int64_t b, int64_t kvh,
                      int64_t hs)
{
    if (need_float(d, n, t, what) || need_rank(d, n, t, what, 4))
        return -1;
    if (t->dims[0] != b || t->dims[1] != kvh || t->dims[3] != hs) {
        char s[160];
        return shape_fail(d, n, "%s \"%s\" %s must be [%lld, %lld, past_sequence_length, %lld]", what, t->name,
                          shape_str(t->dims, t->rank, s, sizeof s), (long long)b, (long long)kvh, (long long)hs);
    }
    return 0;
}

/* Attention: Q [B, Hq, S, D] K [B, Hkv, L, D] V [B, Hkv, L, Dv], or the
 * 3-D forms with q_num_heads and kv_num_heads. Outputs Y (Q's form, Dv
 * wide), present_key/value [B, Hkv, P + L, D or Dv], and the scores
 * [B, Hq, S, P + L]. */
int shape_attention(Graph *g, Node *n, Diag *d)
{
    Tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    Tensor *mask = n->ninputs > 3 ? n->inputs[3] : NULL;
    Tensor *pk = n->ninputs > 4 ? n->inputs[4] : NULL, *pv = n->ninputs > 5 ? n->inputs[5] : NULL;
    Tensor *nonpad = n->ninputs > 6 ? n->inputs[6] : NULL;
    if (!q || !k || !v)
        return shape_fail(d, n, "needs Q, K and V");
    if (need_float(d, n, q, "Q") || need_float(d, n, k, "K") || need_float(d, n, v, "V"))
        return -1;
    if ((q->rank != 3 && q->rank != 4) || k->rank != q->rank || v->rank != q->rank)
        return shape_fail(d, n, "Q, K and V have ranks %d, %d, %d; they must all be 3 or all be 4", q->rank, k->rank,
                          v->rank);
    int64_t b = q->dims[0], hq, hkv, s = q->dims[q->rank - 2], l = k->dims[k->rank - 2], hs, vhs;
    const Attr *qa = node_attr(n, "q_num_heads"), *ka = node_attr(n, "kv_num_heads");
    if (q->rank == 3) {
        hq = node_attr_int(n, "q_num_heads", 0);
        hkv = node_attr_int(n, "kv_num_heads", 0);
        if (hq <= 0 || hkv <= 0)
            return shape_fail(d, n, "3-D Q, K and V need positive q_num_heads and kv_num_heads attributes");
        if (q->dims[2] % hq || k->dims[2] % hkv || v->dims[2] % hkv)
            return shape_fail(d, n, "hidden sizes %lld (Q), %lld (K), %lld (V) are not multiples of the head counts "
                              "q_num_heads = %lld and kv_num_heads = %lld",
                              (long long)q->dims[2], (long long)k->dims[2], (long long)v->dims[2], (long long)hq,
                              (long long)hkv);
        hs = q->dims[2] / hq;
        vhs = v->dims[2] / hkv;
        if (k->dims[2] / hkv != hs)
            return shape_fail(d, n, "K's head size %lld differs from Q's %lld", (long long)(k->dims[2] / hkv),
                              (long long)hs);
    } else {
        hq = q->dims[1];
        hkv = k->dims[1];
        hs = q->dims[3];
        vhs = v->dims[3];
        if (v->dims[1] != hkv || k->dims[3] != hs) {
            char a[160], c[160], e[160];
            return shape_fail(d, n, "Q %s, K %s and V %s disagree on kv heads or head size",
                              shape_str(q->dims, 4, a, sizeof a), shape_str(k->dims, 4, c, sizeof c),
                              shape_str(v->dims, 4, e, sizeof e));
        }
        /* The attributes are for 3-D inputs; when a 4-D model sets them
         * anyway they must say what the shapes say. */
        if ((qa && qa->type == ATTR_INT && qa->i != hq) || (ka && ka->type == ATTR_INT && ka->i != hkv))
            return shape_fail(d, n, "q_num_heads / kv_num_heads disagree with the 4-D head dims %lld and %lld",
                              (long long)hq, (long long)hkv);
    }
    if (k->dims[0] != b || v->dims[0] != b)
        return shape_fail(d, n, "Q, K and V have batch sizes %lld, %lld, %lld", (long long)b, (long long)k->dims[0],
                          (long long)v->dims[0]);
    if (v->dims[v->rank - 2] != l)
        return shape_fail(d, n, "K and V have sequence lengths %lld and %lld", (long long)l,
                          (long long)v->dims[v->rank - 2]);
    if (hq % hkv)
        return shape_fail(d, n, "%lld query heads are not a multiple of %lld kv heads (grouped-query attention "
                          "shares each kv head among a whole number of query heads)",
                          (long long)hq, (long long)hkv);
    int64_t past = 0;
    if ((pk != NULL) != (pv != NULL))
        return shape_fail(d, n, "past_key and past_value must be given together");
    if (pk) {
        if (check_past(d, n, pk, "past_key", b, hkv, hs) || check_past(d, n, pv, "past_value", b, hkv, vhs))
            return -1;
        past = pk->dims[2];
        if (pv->dims[2] != past)
            return shape_fail(d, n, "past_key and past_value have sequence lengths %lld and %lld", (long long)past,
                              (long long)pv->dims[2]);
    }
    int64_t total, yhidden;
    if (ck_add_i64(past, l, &total) || ck_mul_i64(hq, vhs, &yhidden))
        return shape_fail(d, n, "output sizes overflow");
    if (nonpad) {
        if (g->opset < 24)
            return shape_fail(d, n, "input nonpad_kv_seqlen needs opset 24; the model imports opset %lld",
                              (long long)g->opset);
        if (pk)
            return shape_fail(d, n, "nonpad_kv_seqlen cannot be used with past_key and past_value");
        if (need_i64(d, n, nonpad, "nonpad_kv_seqlen") || need_rank(d, n, nonpad, "nonpad_kv_seqlen", 1))
            return -1;
        if (nonpad->dims[0] != b)
            return shape_fail(d, n, "nonpad_kv_seqlen \"%s\" has %lld entries; needs one per batch (%lld)",
                              nonpad->name, (long long)nonpad->dims[0], (long long)b);
    }
    if (mask) {
        /* Broadcastable to [B, Hq, S, total]; a shorter last dim (even 1)
         * is padded with -inf, as the spec and the reference say. */
        if (mask->dtype != DT_BOOL && need_float(d, n, mask, "attn_mask"))
            return -1;
        int64_t want[4] = {b, hq, s, total};
        int ok = mask->rank >= 1 && mask->rank <= 4 && mask->dims[mask->rank - 1] >= 1 &&
                 mask->dims[mask->rank - 1] <= total;
        for (int i = 0; ok && i < mask->rank - 1; i++) {
            int64_t m = mask->dims[i], w = want[4 - mask->rank + i];
            ok = m == 1 || m == w;
        }
        if (!ok) {
            char a[160], c[160];
            return shape_fail(d, n, "attn_mask \"%s\" %s does not broadcast to the scores %s (its last dim may be "
                              "shorter, not longer)",
                              mask->name, shape_str(mask->dims, mask->rank, a, sizeof a), shape_str(want, 4, c, sizeof c));
        }
    }
    int64_t mode = node_attr_int(n, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return shape_fail(d, n, "qk_matmul_output_mode = %lld; must be 0, 1, 2 or 3", (long long)mode);
    const Attr *sp = node_attr(n, "softmax_precision");
    if (sp && !(sp->type == ATTR_INT && dtype_supported((int)sp->i) && dtype_is_float((DType)sp->i)))
        return shape_fail(d, n, "softmax_precision must name a float type (the kernel's softmax runs in float64, at "
                          "least as precise as any of them)");
    int64_t y3[3] = {b, s, yhidden}, y4[4] = {b, hq, s, vhs};
    if (shape_set(d, n, n->outputs[0], q->dtype, q->rank, q->rank == 3 ? y3 : y4))
        return -1;
    int64_t pkd[4] = {b, hkv, total, hs}, pvd[4] = {b, hkv, total, vhs}, qkd[4] = {b, hq, s, total};
    if (n->noutputs > 1 && n->outputs[1] && shape_set(d, n, n->outputs[1], k->dtype, 4, pkd))
        return -1;
    if (n->noutputs > 2 && n->outputs[2] && shape_set(d, n, n->outputs[2], v->dtype, 4, pvd))
        return -1;
    if (n->noutputs > 3 && n->outputs[3] && shape_set(d, n, n->outputs[3], q->dtype, 4, qkd))
        return -1;
    return 0;
}

/* RotaryEmbedding: X [B, H, S, D] or [B, S, H * D] (num_heads); cos and sin
 * [max_position + 1, R / 2] with position_ids [B, S], else [B, S, R / 2],
 * where R (rotary_embedding_dim, default D) is even and at most D. */
int shape_rotary(Graph *g, Node *n, Diag *d)
{
    (void)g;
    Tensor *x = n->inputs[0], *cs = n->inputs[1], *sn = n->inputs[2];
    Tensor *pos = n->ninputs > 3 ? n->inputs[3] : NULL;
    if (need_float(d, n, x, "input") || need_float(d, n, cs, "cos_cache") || need_float(d, n, sn, "sin_cache"))
        return -1;
    if (x->rank != 3 && x->rank != 4)
        return shape_fail(d, n, "input \"%s\" has rank %d; needs 3 or 4", x->name, x->rank);
    int64_t heads = node_attr_int(n, "num_heads", 0), b = x->dims[0], seq, hs;
    if (x->rank == 3) {
        if (heads <= 0 || x->dims[2] % heads)
            return shape_fail(d, n, "3-D input needs a num_heads attribute that divides its hidden size %lld",
                              (long long)x->dims[2]);
        seq = x->dims[1];
        hs = x->dims[2] / heads;
    } else {
        if (heads && heads != x->dims[1])
            return shape_fail(d, n, "num_heads = %lld disagrees with the 4-D input's %lld heads", (long long)heads,
                              (long long)x->dims[1]);
        seq = x->dims[2];
        hs = x->dims[3];
    }
    int64_t rot = node_attr_int(n, "rotary_embedding_dim", 0);
    if (rot == 0)
        rot = hs;
    if (rot < 0 || rot > hs || rot % 2)
        return shape_fail(d, n, "rotary_embedding_dim = %lld must be even and at most the head size %lld",
                          (long long)rot, (long long)hs);
    const Tensor *caches[2] = {cs, sn};
    for (int i = 0; i < 2; i++) {
        const Tensor *c = caches[i];
        const char *what = i ? "sin_cache" : "cos_cache";
        int ok = pos ? c->rank == 2 : c->rank == 3 && c->dims[0] == b && c->dims[1] == seq;
        if (!ok || c->dims[c->rank - 1] != rot / 2) {
            char a[160];
            return shape_fail(d, n, "%s \"%s\" %s must be %s, %lld]", what, c->name,
                              shape_str(c->dims, c->rank, a, sizeof a),
                              pos ? "[max_position_id + 1" : "[batch, sequence_length", (long long)(rot / 2));
        }
    }
    if (cs->dims[0] != sn->dims[0])
        return shape_fail(d, n, "cos_cache and sin_cache have %lld and %lld rows", (long long)cs->dims[0],
                          (long long)sn->dims[0]);
    if (pos) {
        if (need_i64(d, n, pos, "position_ids") || need_rank(d, n, pos, "position_ids", 2))
            return -1;
        if (pos->dims[0] != b || pos->dims[1] != seq)
            return shape_fail(d, n, "position_ids \"%s\" must be [%lld, %lld]", pos->name, (long long)b,
                              (long long)seq);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}
