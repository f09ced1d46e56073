/* emit_attn.c: kernel calls for the attn family (ir/ops_attn.def).
 *
 * Both ops read their 3-D [B, S, H * D] or 4-D [B, H, S, D] operands through
 * (batch, head, position) strides, so the emitter's work is the geometry:
 * this rank's batches and heads (the factor rules of
 * partition/rules_attn.c keep sequences and head sizes whole, so the
 * global head sizes divide the local hidden sizes), the strides of each
 * form, the mask's broadcast strides, and for grouped-query attention the
 * global index of the rank's first query head and first kv head: query
 * head h reads kv head h / (Hq / Hkv), and the rule may split the query
 * heads while keeping every kv head. The kernels are the k_* of
 * templates/kernels_attn.c and templates/cuda_attn.cu.
 */
#include "codegen.h"

#include <math.h>

/* Strides of batch, head and position of a [B, H, S, D] tensor (four) or
 * of a [B, S, H * D] one (three), from its local dims and head size. */
static void bhs_strides(const int64_t *dims, int rank, int64_t hs, int64_t *st)
{
    if (rank == 3) {
        st[0] = dims[1] * dims[2];
        st[1] = hs;
        st[2] = dims[2];
    } else {
        st[0] = dims[1] * dims[2] * dims[3];
        st[1] = dims[2] * dims[3];
        st[2] = dims[3];
    }
}

/* Global index of the first head this rank holds of b (heads in dim hd). */
static int64_t head0(const EmitCtx *c, const Buffer *b, int hd, int64_t local_heads)
{
    return mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, b->layout.axes[hd], b->layout.naxes[hd]) * local_heads;
}

static const char *name_or_null(const Buffer *b)
{
    return b ? b->name : "NULL";
}

int emit_attention(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Node *n = c->n;
    const Buffer *q = emit_in(c, 0), *k = emit_in(c, 1), *v = emit_in(c, 2), *mask = emit_in(c, 3);
    const Buffer *pk = emit_in(c, 4), *pv = emit_in(c, 5), *nonpad = emit_in(c, 6);
    const Buffer *y = emit_out(c, 0), *prk = emit_out(c, 1), *prv = emit_out(c, 2), *qk = emit_out(c, 3);
    const Tensor *qt = n->inputs[0], *vt = n->inputs[2];
    int three = q->rank == 3, hd = three ? 2 : 1, sd = three ? 1 : 2;
    /* Global head counts and sizes (shape_attention checked them). */
    int64_t hq_g = three ? node_attr_int(n, "q_num_heads", 1) : qt->dims[1];
    int64_t hkv_g = three ? node_attr_int(n, "kv_num_heads", 1) : n->inputs[1]->dims[1];
    int64_t hs = three ? qt->dims[2] / hq_g : qt->dims[3], vhs = three ? vt->dims[2] / hkv_g : vt->dims[3];
    /* This rank's blocks. */
    int64_t hq = three ? q->dims[2] / hs : q->dims[1], hkv = three ? k->dims[2] / hs : k->dims[1];
    int64_t past = pk ? pk->dims[2] : 0, len = k->dims[sd], total = past + len;
    int64_t qs[3], ks[3], vs[3], ys[3], ms[3] = {0, 0, 0}, mask_len = total;
    bhs_strides(q->dims, q->rank, hs, qs);
    bhs_strides(k->dims, k->rank, hs, ks);
    bhs_strides(v->dims, v->rank, vhs, vs);
    bhs_strides(y->dims, y->rank, vhs, ys);
    if (mask) {
        /* Right-aligned to [B, Hq, S, columns]; a size-1 dim broadcasts
         * (stride 0). Columns past the mask's own are -inf (the spec's
         * padding), so its last dim is mask_len, not a broadcast. */
        int64_t st[IR_MAX_RANK];
        emit_strides(mask->dims, mask->rank, st);
        for (int j = 0; j < 3; j++) {
            int i = j - (4 - mask->rank);
            ms[j] = i >= 0 && mask->dims[i] > 1 ? st[i] : 0;
        }
        mask_len = mask->dims[mask->rank - 1];
    }
    const Attr *sa = node_attr(n, "scale");
    float scale = sa ? node_attr_float(n, "scale", 1.0f) : (float)(1.0 / sqrt((double)hs));
    char sc[48], cap[48];
    int mode = (int)node_attr_int(n, "qk_matmul_output_mode", 0);
    fprintf(c->f, "    {\n");
    fprintf(c->f, "        static const KAttn ATTN = {\n");
    fprintf(c->f, "            %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, /* batch, q_heads, kv_heads, q_len, "
            "kv_len, past, head, v_head */\n", (long long)q->dims[0], (long long)hq, (long long)hkv,
            (long long)q->dims[sd], (long long)len, (long long)past, (long long)hs, (long long)vhs);
    fprintf(c->f, "            %lld, %lld, %lld, /* global first q head, first kv head; q heads per kv head */\n",
            (long long)head0(c, q, hd, hq), (long long)head0(c, k, hd, hkv), (long long)(hq_g / hkv_g));
    const int64_t *st[4] = {qs, ks, vs, ys};
    fprintf(c->f, "           ");
    for (int i = 0; i < 4; i++)
        fprintf(c->f, " {%lld, %lld, %lld},", (long long)st[i][0], (long long)st[i][1], (long long)st[i][2]);
    fprintf(c->f, " /* Q, K, V, Y strides of batch, head, position */\n");
    fprintf(c->f, "            %lld, {%lld, %lld, %lld}, /* mask columns (the rest -inf), mask strides */\n",
            (long long)mask_len, (long long)ms[0], (long long)ms[1], (long long)ms[2]);
    fprintf(c->f, "            %s, %s, %d, %d /* scale, softcap, is_causal, qk_matmul_output_mode */\n",
            emit_cf(scale, sc), emit_cf(node_attr_float(n, "softcap", 0.0f), cap),
            node_attr_int(n, "is_causal", 0) != 0, mode);
    fprintf(c->f, "        };\n");
    int fmask = mask && mask->dtype != DT_BOOL;
    fprintf(c->f, "        k_attention_f32(&ATTN, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", y->name,
            name_or_null(qk), q->name, k->name, v->name, fmask ? mask->name : "NULL",
            mask && !fmask ? mask->name : "NULL", name_or_null(pk), name_or_null(pv), name_or_null(nonpad));
    /* present = concat(past, new) along the sequence, in [B, Hkv, T, D]. */
    const Buffer *pres[2] = {prk, prv}, *src[2] = {k, v}, *old[2] = {pk, pv};
    const int64_t *sst[2] = {ks, vs}, width[2] = {hs, vhs};
    for (int i = 0; i < 2; i++) {
        if (!pres[i])
            continue;
        emit_arr(c, i ? "VS" : "KS", sst[i], 3);
        fprintf(c->f, "        k_attn_cache_f32(%s, %s, %s, %lld, %lld, %lld, %lld, %lld, %s); /* present_%s */\n",
                pres[i]->name, name_or_null(old[i]), src[i]->name, (long long)q->dims[0], (long long)hkv,
                (long long)past, (long long)len, (long long)width[i], i ? "VS" : "KS", i ? "value" : "key");
    }
    fprintf(c->f, "    }\n");
    return 0;
}

int emit_rotary(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Node *n = c->n;
    const Buffer *x = emit_in(c, 0), *cs = emit_in(c, 1), *sn = emit_in(c, 2), *pos = emit_in(c, 3);
    const Buffer *y = emit_out(c, 0);
    const Tensor *xt = n->inputs[0];
    int three = x->rank == 3;
    int64_t hs = three ? xt->dims[2] / node_attr_int(n, "num_heads", 1) : xt->dims[3];
    int64_t heads = three ? x->dims[2] / hs : x->dims[1], len = x->dims[three ? 1 : 2];
    int64_t rot = node_attr_int(n, "rotary_embedding_dim", 0), xs[3];
    if (rot == 0)
        rot = hs;
    bhs_strides(x->dims, x->rank, hs, xs);
    fprintf(c->f, "    {\n");
    emit_arr(c, "XS", xs, 3);
    fprintf(c->f, "        k_rotary_f32(%s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %d, XS); /* max_pos, "
            "batch, heads, len, head, rotary dim, interleaved */\n", y->name, x->name, cs->name, sn->name,
            name_or_null(pos), (long long)(pos ? cs->dims[0] : 0), (long long)x->dims[0], (long long)heads,
            (long long)len, (long long)hs, (long long)rot, node_attr_int(n, "interleaved", 0) != 0);
    fprintf(c->f, "    }\n");
    return 0;
}
