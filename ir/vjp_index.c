/* vjp_index.c: vector-Jacobian rules of the index family (ops_index.def):
 * GatherElements, GatherND, Trilu, Pad and Tile; TopK's values (a gather
 * along its axis); and the mixture-of-experts ops of ir/moe.c.
 *
 * Each is a linear map of its float input, so each rule applies the map's
 * transpose to dY, built from ops the compiler already runs, as vjp.c's
 * Gather does: a gather's transpose is the matching scatter with
 * reduction "add" into zeros (an element read twice gets both gradients),
 * Trilu's is the same Trilu (a mask), constant Pad's is a Slice (and a
 * Pad back where the forward pads were negative, i.e. cropped), Tile's a
 * sum over the copies. Indices are made non-negative first, as the
 * gathers read them. Integer inputs (indices, Trilu's k) get no gradient.
 */
#include "autodiff.h"

#include <string.h>

#define DY0 (v->dy[0])
#define X(k) (v->n->inputs[k])

static int ok(Vjp *v, int k)
{
    return !v->want[k] || v->dx[k] ? 0 : -1;
}

static Tensor *zeros_like(Vjp *v, const Tensor *t)
{
    Tensor *z = ad_cast(v, ad_scalar(v, 0.0f), t->dtype);
    return ad_expand(v, z, t->dims, t->rank);
}

static Tensor *i64_const(Vjp *v, const char *what, const int64_t *vals, int n, int rank)
{
    return ad_const(v, what, DT_I64, vals, n, rank);
}

/* idx with each negative entry i replaced by i + bound, bound broadcast
 * against idx (one value, or one per last-dim entry for GatherND). */
static Tensor *wrap_negative(Vjp *v, Tensor *idx, const int64_t *bound, int nb)
{
    Tensor *ix = ad_cast(v, idx, DT_I64);
    Tensor *neg = ad_bin(v, OP_LESS, ix, i64_const(v, "zero", (int64_t[]){0}, 1, 0));
    Tensor *wrapped = ad_bin(v, OP_ADD, ix, i64_const(v, "bound", bound, nb, nb > 1));
    if (!neg || !wrapped)
        return NULL;
    Tensor *ins[3] = {neg, wrapped, ix};
    return ad_done(v, ad_begin(v, OP_WHERE, 3, ins));
}

/* zeros shaped like data with dy added at idx (ScatterElements or
 * ScatterND, reduction add). */
static Tensor *scatter_add(Vjp *v, OpKind op, const Tensor *data, Tensor *idx, Tensor *dy, int axis)
{
    Tensor *ins[3] = {zeros_like(v, data), idx, dy};
    if (!ins[0] || !idx || !dy)
        return NULL;
    Node *s = ad_begin(v, op, 3, ins);
    if (op == OP_SCATTER_ELEMENTS)
        node_attr_set_int(v->g, s, "axis", axis);
    node_attr_set_str(v->g, s, "reduction", "add");
    return ad_done(v, s);
}

int vjp_gather_elements(Vjp *v)
{
    Tensor *data = X(0);
    if (!v->want[0])
        return 0;
    int64_t a = node_attr_int(v->n, "axis", 0);
    int axis = (int)(a < 0 ? a + data->rank : a);
    Tensor *idx = wrap_negative(v, X(1), &data->dims[axis], 1);
    v->dx[0] = scatter_add(v, OP_SCATTER_ELEMENTS, data, idx, DY0, axis);
    return ok(v, 0);
}

int vjp_gather_nd(Vjp *v)
{
    Tensor *data = X(0), *idx = X(1);
    if (!v->want[0])
        return 0;
    if (node_attr_int(v->n, "batch_dims", 0) != 0)
        return vjp_fail(v, "a GatherND with batch_dims has no gradient rule yet");
    int q = (int)idx->dims[idx->rank - 1];
    v->dx[0] = scatter_add(v, OP_SCATTER_ND, data, wrap_negative(v, idx, data->dims, q), DY0, 0);
    return ok(v, 0);
}

int vjp_trilu(Vjp *v)
{
    if (!v->want[0])
        return 0;
    Tensor *ins[2] = {DY0, v->n->ninputs > 1 ? X(1) : NULL};
    Node *t = ad_begin(v, OP_TRILU, ins[1] ? 2 : 1, ins);
    node_attr_set_int(v->g, t, "upper", node_attr_int(v->n, "upper", 1));
    v->dx[0] = ad_done(v, t);
    return ok(v, 0);
}

/* Constant Pad: y holds x at offset pads-begin (a negative pad crops). */
int vjp_pad(Vjp *v)
{
    Tensor *x = X(0), *dy = DY0;
    if (strcmp(node_attr_str(v->n, "mode", "constant"), "constant"))
        return vjp_fail(v, "a Pad in mode \"%s\" has no gradient rule yet (constant only)",
                        node_attr_str(v->n, "mode", "constant"));
    const Attr *pa = node_attr(v->n, "pads");
    int r = x->rank, ncut = 0, nback = 0;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], back[2 * IR_MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        int64_t pb = pa->ints[i], pe = pa->ints[r + i];
        if (pb > 0 || pe > 0) {
            st[ncut] = pb > 0 ? pb : 0;
            en[ncut] = dy->dims[i] - (pe > 0 ? pe : 0);
            ax[ncut++] = i;
        }
        if (pb < 0 || pe < 0) {
            back[i] = pb < 0 ? -pb : 0;
            back[r + i] = pe < 0 ? -pe : 0;
            nback++;
        }
    }
    Tensor *g = dy;
    if (ncut) {
        Node *s = ad_begin(v, OP_SLICE, 1, &g);
        node_attr_set_ints(v->g, s, "starts", st, ncut);
        node_attr_set_ints(v->g, s, "ends", en, ncut);
        node_attr_set_ints(v->g, s, "axes", ax, ncut);
        g = ad_done(v, s);
    }
    Tensor *inner = g; /* dy where x landed */
    if (g && nback) {
        Node *p = ad_begin(v, OP_PAD, 1, &g);
        node_attr_set_ints(v->g, p, "pads", back, 2 * r);
        g = ad_done(v, p);
    }
    if (v->want[0])
        v->dx[0] = g;
    /* the constant value fills every position x did not land on */
    if (v->n->ninputs > 2 && X(2) && v->want[2]) {
        unsigned all = (1u << r) - 1;
        Tensor *tot = ad_bin(v, OP_SUB, ad_reduce(v, OP_REDUCE_SUM, dy, all, 0),
                             ad_reduce(v, OP_REDUCE_SUM, inner, all, 0));
        v->dx[2] = ad_reshape(v, tot, X(2)->dims, X(2)->rank);
    }
    return ok(v, 0) || (v->n->ninputs > 2 && ok(v, 2));
}

/* y = x repeated r_i times along each dim: dy viewed as [r0, d0, r1, d1,
 * ...] summed over the r's. */
int vjp_tile(Vjp *v)
{
    Tensor *x = X(0);
    if (!v->want[0])
        return 0;
    int r = x->rank;
    if (2 * r > IR_MAX_RANK)
        return vjp_fail(v, "a Tile of rank %d has no gradient rule (at most %d)", r, IR_MAX_RANK / 2);
    const Attr *rep = node_attr(v->n, "repeats");
    int64_t dims[IR_MAX_RANK];
    unsigned m = 0;
    for (int i = 0; i < r; i++) {
        dims[2 * i] = rep->ints[i];
        dims[2 * i + 1] = x->dims[i];
        m |= 1u << (2 * i);
    }
    Tensor *g = ad_reduce(v, OP_REDUCE_SUM, ad_reshape(v, DY0, dims, 2 * r), m, 0);
    v->dx[0] = ad_reshape(v, g, x->dims, r);
    return ok(v, 0);
}

/* TopK's values: each is its input element, so dX is dValues scattered
 * back to the indices along the axis, zeros elsewhere (the indices get no
 * gradient). A mixture of experts' router trains through it. */
int vjp_topk(Vjp *v)
{
    Tensor *x = X(0);
    if (!v->want[0] || !DY0)
        return 0;
    int64_t a = node_attr_int(v->n, "axis", -1);
    v->dx[0] = scatter_add(v, OP_SCATTER_ELEMENTS, x, v->n->outputs[1], DY0, (int)(a < 0 ? a + x->rank : a));
    return ok(v, 0);
}

/* MoeDispatch copies each kept pair's token row into its slot: the tokens'
 * gradient is the combine of the buffer's gradient with unit weights (a
 * dropped pair adds nothing). The expert ids get none. */
int vjp_moe_dispatch(Vjp *v)
{
    if (!v->want[0] || !DY0)
        return 0;
    Tensor *slots = v->n->outputs[1];
    Tensor *ones = ad_expand(v, ad_scalar(v, 1.0f), slots->dims, slots->rank);
    Tensor *ins[3] = {DY0, slots, ones};
    v->dx[0] = ones ? ad_done(v, ad_begin(v, OP_MOE_COMBINE, 3, ins)) : NULL;
    return ok(v, 0);
}

/* MoeCombine: out[t] = sum over kept pairs of w[pair] * y[slot]. The
 * experts' outputs get each pair's weight times dOut's row at its slot
 * (MoeScatter, the transpose); the weights get dOut's row dotted with the
 * slot's column (MoePairDot). The slots get none. */
int vjp_moe_combine(Vjp *v)
{
    Tensor *y = X(0), *slots = X(1), *w = X(2);
    if (!DY0)
        return 0;
    if (v->want[0]) {
        Tensor *ins[3] = {DY0, slots, w};
        Node *n = ad_begin(v, OP_MOE_SCATTER, 3, ins);
        node_attr_set_int(v->g, n, "experts", y->dims[1]);
        node_attr_set_int(v->g, n, "capacity", y->dims[3]);
        v->dx[0] = ad_done(v, n);
    }
    if (v->want[2]) {
        Tensor *ins[3] = {DY0, y, slots};
        v->dx[2] = ad_done(v, ad_begin(v, OP_MOE_PAIR_DOT, 3, ins));
    }
    return ok(v, 0) || ok(v, 2) ? -1 : 0;
}
