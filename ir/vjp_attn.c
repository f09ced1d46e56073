/* vjp_attn.c: vector-Jacobian rules of the attn family (ops_attn.def).
 *
 * RotaryEmbedding rotates each pair of x's rotary dims by the angle whose
 * cosine and sine it reads from the caches: an orthogonal map of x, whose
 * transpose is the rotation by the opposite angle, i.e. the same op on dy
 * with the sine cache negated (cos(-a) = cos a, sin(-a) = -sin a); the
 * dims beyond rotary_embedding_dim pass through both ways. The caches'
 * own gradients are not built: they are tables (buffers in PyTorch),
 * freeze them with --frozen.
 *
 * Attention (opset 23) never holds its probabilities P, so its rule runs
 * the node again with qk_matmul_output_mode 3, which outputs them (masks,
 * causality and nonpad lengths applied by the forward kernel itself), and
 * builds, per query head in [B, H, S, D] form (3-D operands are viewed so
 * and back; kv heads repeated for the query heads that share them, their
 * gradients summed back over each group):
 *   dV = P^T dY,  dP = dY V^T,  dS = P (dP - rowsum(dP P)),
 *   dQ = dS K scale,  dK = dS^T Q scale,  d(float mask) = dS.
 * Not covered, and refused by name: past_key / past_value, softcap, and
 * gradients through its present_key, present_value or score outputs.
 */
#include "autodiff.h"

#include <math.h>

#define X(k) (v->n->inputs[k])

/* [B, S, H * D] viewed as [B, H, S, D]; 4-D passes. */
static Tensor *heads_of(Vjp *v, Tensor *t, int64_t h)
{
    if (!t || t->rank == 4)
        return t;
    int64_t d[4] = {t->dims[0], t->dims[1], h, t->dims[2] / h}, perm[4] = {0, 2, 1, 3};
    return ad_transpose(v, ad_reshape(v, t, d, 4), perm);
}

/* [B, H, S, D] back to like's form. */
static Tensor *heads_back(Vjp *v, Tensor *t, const Tensor *like)
{
    if (!t || like->rank == 4)
        return t;
    int64_t perm[4] = {0, 2, 1, 3};
    return ad_reshape(v, ad_transpose(v, t, perm), like->dims, 3);
}

/* [B, Hkv, T, D] -> [B, Hkv * g, T, D]: query head h reads kv head h / g. */
static Tensor *repeat_heads(Vjp *v, Tensor *t, int64_t g)
{
    if (!t || g == 1)
        return t;
    int64_t d5[5] = {t->dims[0], t->dims[1], 1, t->dims[2], t->dims[3]};
    int64_t e5[5] = {t->dims[0], t->dims[1], g, t->dims[2], t->dims[3]};
    int64_t d4[4] = {t->dims[0], t->dims[1] * g, t->dims[2], t->dims[3]};
    return ad_reshape(v, ad_expand(v, ad_reshape(v, t, d5, 5), e5, 5), d4, 4);
}

/* The transpose of repeat_heads: each group of g query heads summed. */
static Tensor *sum_groups(Vjp *v, Tensor *t, int64_t g)
{
    if (!t || g == 1)
        return t;
    int64_t d5[5] = {t->dims[0], t->dims[1] / g, g, t->dims[2], t->dims[3]};
    return ad_reduce(v, OP_REDUCE_SUM, ad_reshape(v, t, d5, 5), 1u << 2, 0);
}

int vjp_attention(Vjp *v)
{
    Node *n = v->n;
    Tensor *q = X(0), *k = X(1), *val = X(2), *mask = n->ninputs > 3 ? X(3) : NULL;
    if ((n->ninputs > 4 && X(4)) || (n->ninputs > 5 && X(5)))
        return vjp_fail(v, "an Attention with past_key and past_value has no gradient rule yet");
    for (int j = 1; j < n->noutputs; j++)
        if (v->dy[j])
            return vjp_fail(v, "gradients through its present_key, present_value or score outputs are not supported");
    if (node_attr_float(n, "softcap", 0.0f) != 0.0f)
        return vjp_fail(v, "an Attention with softcap has no gradient rule yet");
    if (!v->dy[0])
        return 0;
    int r = q->rank;
    int64_t hq = r == 4 ? q->dims[1] : node_attr_int(n, "q_num_heads", 0);
    int64_t hkv = r == 4 ? k->dims[1] : node_attr_int(n, "kv_num_heads", 0);
    int64_t hs = r == 4 ? q->dims[3] : q->dims[2] / hq, group = hq / hkv;
    const Attr *sa = node_attr(n, "scale");
    float scale = sa ? node_attr_float(n, "scale", 1.0f) : (float)(1.0 / sqrt((double)hs));

    /* P, as the forward computed it */
    Node *re = ad_begin(v, OP_ATTENTION, n->ninputs, n->inputs);
    for (int i = 0; i < n->nattrs; i++) {
        const Attr *a = &n->attrs[i];
        if (a->type == ATTR_INT)
            node_attr_set_int(v->g, re, a->name, a->i);
        else if (a->type == ATTR_FLOAT)
            node_attr_set_float(v->g, re, a->name, a->f);
    }
    node_attr_set_int(v->g, re, "qk_matmul_output_mode", 3);
    for (int j = 1; j < 4; j++)
        ad_add_output(v, re);
    if (!ad_done(v, re))
        return -1;
    Tensor *P = re->outputs[3];

    Tensor *Q = heads_of(v, q, hq), *K = repeat_heads(v, heads_of(v, k, hkv), group);
    Tensor *V = repeat_heads(v, heads_of(v, val, hkv), group), *dY = heads_of(v, v->dy[0], hq);
    Tensor *sc = ad_cast(v, ad_scalar(v, scale), q->dtype);
    if (v->want[2])
        v->dx[2] = heads_back(v, sum_groups(v, ad_bin(v, OP_MATMUL, ad_swap_last2(v, P), dY), group), val);
    Tensor *dP = ad_bin(v, OP_MATMUL, dY, ad_swap_last2(v, V));
    Tensor *dS = ad_bin(v, OP_MUL, P,
                        ad_bin(v, OP_SUB, dP, ad_reduce(v, OP_REDUCE_SUM, ad_bin(v, OP_MUL, dP, P), 1u << 3, 1)));
    if (v->want[0])
        v->dx[0] = heads_back(v, ad_bin(v, OP_MUL, ad_bin(v, OP_MATMUL, dS, K), sc), q);
    if (v->want[1])
        v->dx[1] = heads_back(
            v, sum_groups(v, ad_bin(v, OP_MUL, ad_bin(v, OP_MATMUL, ad_swap_last2(v, dS), Q), sc), group), k);
    if (mask && v->want[3]) {
        /* a mask shorter than the keys covers their first columns */
        Tensor *g = dS;
        int64_t mlen = mask->dims[mask->rank - 1];
        if (g && mlen < g->dims[3]) {
            int64_t st = 0, ax = 3;
            Node *s = ad_begin(v, OP_SLICE, 1, &g);
            node_attr_set_ints(v->g, s, "starts", &st, 1);
            node_attr_set_ints(v->g, s, "ends", &mlen, 1);
            node_attr_set_ints(v->g, s, "axes", &ax, 1);
            g = ad_done(v, s);
        }
        v->dx[3] = ad_sum_to(v, g, mask);
    }
    for (int j = 0; j < 4 && j < n->ninputs; j++)
        if (v->want[j] && !v->dx[j])
            return -1;
    return 0;
}

int vjp_rotary(Vjp *v)
{
    for (int k = 1; k < v->n->ninputs; k++)
        if (v->want[k])
            return vjp_fail(v, "the cos and sin caches (\"%s\") have no gradient rule: freeze them with --frozen",
                            X(k)->label);
    if (!v->want[0])
        return 0;
    Tensor *ins[4] = {v->dy[0], X(1), ad_un(v, OP_NEG, X(2)), v->n->ninputs > 3 ? X(3) : NULL};
    if (!ins[2])
        return -1;
    Node *r = ad_begin(v, OP_ROTARY_EMBEDDING, ins[3] ? 4 : 3, ins);
    for (int i = 0; i < v->n->nattrs; i++) {
        const Attr *a = &v->n->attrs[i];
        if (a->type == ATTR_INT)
            node_attr_set_int(v->g, r, a->name, a->i);
    }
    v->dx[0] = ad_done(v, r);
    return v->dx[0] ? 0 : -1;
}
