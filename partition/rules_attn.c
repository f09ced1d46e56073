/* rules_attn.c: factor rules of the attn family (ir/ops_attn.def).
 *
 * Attention computes, for every (batch, query head) pair, a softmax over
 * the whole key sequence followed by a contraction with the values. Batch
 * and heads are therefore pass-through factors: a rank that holds some
 * batches or some heads computes their outputs exactly. Everything along
 * which the kernel works is need-replication: the query sequence (the
 * causal mask compares a query's global position with each key's), the key
 * and past sequences (the softmax normalises over them, so a split would
 * need a partial max and sum the plan cannot express), and the head sizes
 * (the QK dot product feeds the softmax, not a sum, so a partial QK is of
 * no use). In the 3-D form a hidden dim holds two factors, heads (major)
 * then head size, so a split of the major part is a split of the heads.
 *
 * Under grouped-query attention (fewer kv heads than query heads) query
 * head h reads kv head h / (Hq / Hkv). The query heads stay a pass-through
 * factor, but the kv heads are a need-replication one: every rank keeps all
 * kv heads, and the emitter passes the rank's first query head so that the
 * kernel finds the right one. (Splitting both alike would also be exact
 * when the split follows kv-head groups; the conservative rule is simpler
 * and never wrong.)
 *
 * RotaryEmbedding rotates each (batch, head, position) vector on its own:
 * batch, heads and sequence pass through (the position ids or the
 * per-position caches split with the sequence), the head size is
 * need-replication (the rotation pairs element i with i + R/2), and a
 * position-indexed cache is whole on every rank (any position may be read).
 */
#include "partition.h"

/* A factor of the given size, or -1 for a size-1 dim (which holds none). */
static int factor(FactorRule *r, int64_t size, FactorKind kind, const char *why)
{
    return size > 1 ? rule_new_factor(r, size, kind, why) : -1;
}

/* Rule tensor index of input k and of output k, or -1 where the node has
 * fewer inputs or outputs. */
static int in_t(const Node *n, int k)
{
    return k < n->ninputs ? k : -1;
}

static int out_t(const Node *n, int k)
{
    return k < n->noutputs ? rule_out_idx(n, k) : -1;
}

/* Maps dim of tensor t to factor f, when both exist (t may be -1 or an
 * omitted optional input or output). */
static void map(FactorRule *r, int t, int dim, int f)
{
    if (f >= 0 && t >= 0 && r->tensors[t])
        rule_map_dim(r, t, dim, f);
}

int rule_attention(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    const Tensor *mask = n->ninputs > 3 ? n->inputs[3] : NULL, *pk = n->ninputs > 4 ? n->inputs[4] : NULL;
    int three = q->rank == 3;
    int64_t b = q->dims[0], s = q->dims[three ? 1 : 2], l = k->dims[three ? 1 : 2];
    int64_t hq = three ? node_attr_int(n, "q_num_heads", 1) : q->dims[1];
    int64_t hkv = three ? node_attr_int(n, "kv_num_heads", 1) : k->dims[1];
    int64_t hs = three ? q->dims[2] / hq : q->dims[3], vhs = three ? v->dims[2] / hkv : v->dims[3];
    int64_t past = pk ? pk->dims[2] : 0, total = past + l;
    int y = out_t(n, 0), pko = out_t(n, 1), pvo = out_t(n, 2), qko = out_t(n, 3);

    int fb = factor(r, b, FK_PASS, NULL);
    int fhq = factor(r, hq, FK_PASS, NULL);
    int fhkv = hq == hkv ? fhq
                         : factor(r, hkv, FK_NEED_REPL,
                                  "grouped-query attention keeps every kv head on each rank (a rank's query heads "
                                  "may share any of them)");
    int fs = factor(r, s, FK_NEED_REPL, "the causal mask and the scores span the whole query sequence");
    int fl = factor(r, l, FK_NEED_REPL, "Attention's softmax normalises over the whole key sequence");
    int fp = factor(r, past, FK_NEED_REPL, "Attention's softmax normalises over the past keys too");
    int ft = factor(r, total, FK_NEED_REPL, "Attention's softmax normalises over the whole key sequence");
    int fd = factor(r, hs, FK_NEED_REPL, "the query-key dot product feeds a softmax, not a sum");
    int fdv = factor(r, vhs, FK_NEED_REPL, "Attention writes whole value heads");

    /* Q, K, V and Y: [B, S, H*D] (heads major in the hidden dim) or [B, H, S, D]. */
    const int qkv_d[4] = {fd, fd, fdv, fdv}, qkv_h[4] = {fhq, fhkv, fhkv, fhq}, qkv_s[4] = {fs, fl, fl, fs};
    for (int i = 0; i < 4; i++) {
        int t = i < 3 ? i : y;
        map(r, t, 0, fb);
        if (three) {
            map(r, t, 1, qkv_s[i]);
            map(r, t, 2, qkv_h[i]);
            map(r, t, 2, qkv_d[i]);
        } else {
            map(r, t, 1, qkv_h[i]);
            map(r, t, 2, qkv_s[i]);
            map(r, t, 3, qkv_d[i]);
        }
    }
    /* The caches, always [B, Hkv, P or P + L, D or Dv]. */
    const int cache[4] = {in_t(n, 4), in_t(n, 5), pko, pvo};
    for (int i = 0; i < 4; i++) {
        int t = cache[i];
        map(r, t, 0, fb);
        map(r, t, 1, fhkv);
        map(r, t, 2, i < 2 ? fp : ft);
        map(r, t, 3, i % 2 ? fdv : fd);
    }
    map(r, qko, 0, fb);
    map(r, qko, 1, fhq);
    map(r, qko, 2, fs);
    map(r, qko, 3, ft);
    map(r, in_t(n, 6), 0, fb); /* nonpad_kv_seqlen */
    if (mask) {
        /* Right-aligned to [B, Hq, S, T]; broadcast dims (size 1) hold no
         * factor, a last dim shorter than T (padded with -inf) its own. */
        const int want[4] = {fb, fhq, fs, ft};
        int64_t m = mask->dims[mask->rank - 1];
        for (int i = 0; i < mask->rank - 1; i++)
            if (mask->dims[i] > 1)
                map(r, 3, i, want[4 - mask->rank + i]);
        map(r, 3, mask->rank - 1,
            m == total ? ft : factor(r, m, FK_NEED_REPL, "Attention's softmax normalises over the whole key sequence"));
    }
    return 0;
}

int rule_rotary(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *cs = n->inputs[1];
    int pos = n->ninputs > 3 && n->inputs[3], three = x->rank == 3, y = rule_out_idx(n, 0);
    int64_t heads = three ? node_attr_int(n, "num_heads", 1) : x->dims[1];
    int64_t b = x->dims[0], s = x->dims[three ? 1 : 2], hs = three ? x->dims[2] / heads : x->dims[3];
    int fb = factor(r, b, FK_PASS, NULL), fh = factor(r, heads, FK_PASS, NULL), fs = factor(r, s, FK_PASS, NULL);
    int fd = factor(r, hs, FK_NEED_REPL, "RotaryEmbedding rotates pairs of elements across the head");
    for (int t = 0; t < 2; t++) {
        int ti = t ? y : 0;
        map(r, ti, 0, fb);
        if (three) {
            map(r, ti, 1, fs);
            map(r, ti, 2, fh);
            map(r, ti, 2, fd);
        } else {
            map(r, ti, 1, fh);
            map(r, ti, 2, fs);
            map(r, ti, 3, fd);
        }
    }
    if (pos) {
        map(r, 3, 0, fb);
        map(r, 3, 1, fs);
        /* Any position may be read: the tables are whole on every rank. */
        int fmax = factor(r, cs->dims[0], FK_NEED_REPL, "position ids may read any row of the cos/sin cache");
        int fc = factor(r, cs->dims[1], FK_NEED_REPL, "RotaryEmbedding rotates pairs of elements across the head");
        for (int t = 1; t < 3; t++) {
            map(r, t, 0, fmax);
            map(r, t, 1, fc);
        }
    } else {
        int fc = factor(r, cs->dims[2], FK_NEED_REPL, "RotaryEmbedding rotates pairs of elements across the head");
        for (int t = 1; t < 3; t++) {
            map(r, t, 0, fb);
            map(r, t, 1, fs);
            map(r, t, 2, fc);
        }
    }
    return 0;
}
