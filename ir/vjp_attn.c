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
 * Attention (opset 23) has no rule yet: its backward (recomputing the
 * probabilities from Q and K, then dV = P^T dY, dS = P (dP - rowsum(dP P)),
 * dQ = dS K scale, dK = dS^T Q scale, through the mask, GQA's head
 * repetition and the softcap) is not built; --train names it.
 */
#include "autodiff.h"

#define X(k) (v->n->inputs[k])

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
