/* moe_eager.c: transformers' "eager" mixture-of-experts export rewritten
 * into its batched form, before shape inference.
 *
 * With set_experts_implementation("eager") an MoE block exports as the
 * Python loop over the experts that the traced input hit:
 *
 *   mask = Transpose(OneHot(TopK(router)[1], E + 1), [2, 1, 0])   [E+1, k, N]
 *   hit  = Split(Transpose(NonZero(ReduceSum(mask, [-1, -2]) > 0)), [1] * H)
 *   for each of the H pieces:                (unrolled: H copies of the body)
 *     e          = Gather(Squeeze(piece), 0)
 *     pos, tok   = Split(Transpose(NonZero(Cast(Gather(mask, e), bool))))
 *     a          = MatMul(Gather(x, tok), Transpose(Gather(W1 [E, O, D], e)))
 *     h          = elementwise(a)          (Slices of the features, SiLU, gate product)
 *     c          = MatMul(h, Transpose(Gather(W2 [E, D, F], e)))
 *                  * Gather(Flatten(Unsqueeze(w, 2)), pos + tok * k)
 *     acc       += ScatterElements(zeros [N, D], tok, c)
 *
 * Its sizes are data-dependent (NonZero), which a static-shape compiler
 * cannot lay out; the model itself only runs on inputs that hit exactly H
 * experts (the Split's sizes are fixed). On every such input the loop
 * computes the same as a sum over every (token, choice) pair of that
 * pair's expert applied to the token, times its weight, which is what the
 * batched export writes (ir/moe.c's header):
 *
 *   idf = Reshape(ids, [-1]);  xc = Unsqueeze(Flatten(Tile(Unsqueeze(x, 1), [1, k, 1]), 2), 2)
 *   s1  = Squeeze(MatMul(Gather(W1, idf), xc), 2);  h = elementwise(s1)
 *   s2  = Squeeze(MatMul(Gather(W2, idf), Unsqueeze(h, 2)), 2)
 *   out = ReduceSum(Reshape(s2 * Unsqueeze(Reshape(w, [-1]), 1), [-1, k, D]), [1])
 *
 * so the block is rewritten into that, reusing the first body's
 * element-wise nodes (their Slice bounds, computed from a's shape, now
 * read s1's, which has the same last dim), and the last accumulating Add
 * becomes the ReduceSum (the block's output keeps its name). ir/moe.c then
 * recognises it like an exported batched block. For top-1 and top-2 the
 * sums are the same floating-point sums (two terms commute exactly); from
 * top-3 on they may round differently.
 *
 * Only a block that matches exactly is rewritten: every piece of the hit
 * Split has one body, every body reads the same tokens, weights and
 * routing, its middle is element-wise along rows with scalar constants,
 * and the accumulation is one chain from a zero constant. Anything else is
 * left alone, and the NonZero refusal in shape inference names it.
 */
#include "frontend.h"

#include <stdlib.h>
#include <string.h>

/* Input i and output i of n, NULL when absent: the pass runs before
 * normalize.c checks arities. */
static Tensor *in(const Node *n, int i)
{
    return n && i < n->ninputs ? n->inputs[i] : NULL;
}

static Tensor *out(const Node *n, int i)
{
    return n && i < n->noutputs ? n->outputs[i] : NULL;
}

/* The producer of t when it is an `op`, else NULL. */
static Node *prod(const Tensor *t, OpKind op)
{
    return t && t->producer && t->producer->op == op ? t->producer : NULL;
}

/* The only consumer of t (NULL when none, several or t is an output). */
static Node *only_reader(const Tensor *t)
{
    return t && !t->is_output && t->nconsumers == 1 ? t->consumers[0] : NULL;
}

/* The values of an integer constant of at most cap entries, or -1. */
static int tensor_ints(const Tensor *t, int64_t *v, int cap)
{
    if (!t || !t->data || (t->dtype != DT_I64 && t->dtype != DT_I32) || t->rank < 0 || t->rank > 1)
        return -1;
    int64_t count = t->rank == 0 ? 1 : t->dims[0];
    if (count < 0 || count > cap || t->nbytes < count * (int64_t)dtype_size(t->dtype))
        return -1;
    for (int64_t i = 0; i < count; i++) {
        if (t->dtype == DT_I64)
            memcpy(&v[i], (const char *)t->data + i * 8, 8); /* may be unaligned */
        else
            v[i] = (int64_t)dtype_load(t->dtype, t->data, i);
    }
    return (int)count;
}

/* A node's constant list operand: attribute `attr` (older opsets) or input
 * idx (newer), as normalize.c folds them; -1 when neither is a constant. */
static int node_ints(const Node *n, int idx, const char *attr, int64_t *v, int cap)
{
    const Attr *a = node_attr(n, attr);
    if (a && a->type == ATTR_INTS) {
        if (a->n > cap)
            return -1;
        memcpy(v, a->ints, (size_t)a->n * sizeof(int64_t));
        return a->n;
    }
    return idx < n->ninputs ? tensor_ints(n->inputs[idx], v, cap) : -1;
}

static int is_transpose(const Node *n, int64_t a, int64_t b, int64_t c, int rank)
{
    const Attr *p = n ? node_attr(n, "perm") : NULL;
    int64_t want[3] = {a, b, c};
    return p && p->type == ATTR_INTS && p->n == rank && memcmp(p->ints, want, (size_t)rank * sizeof(int64_t)) == 0;
}

static int is_int_scalar(const Tensor *t, int64_t want)
{
    int64_t v;
    return tensor_ints(t, &v, 1) == 1 && v == want;
}

/* Is t a constant whose every element is zero? */
static int all_zero(const Tensor *t)
{
    if (!t || !t->data || t->rank < 0 || t->dtype != DT_F32)
        return 0;
    int64_t numel = 1;
    for (int i = 0; i < t->rank; i++)
        numel = t->dims[i] < 0 || numel > INT64_MAX / 8 / (t->dims[i] ? t->dims[i] : 1) ? -1 : numel * t->dims[i];
    if (numel < 0 || t->nbytes < numel * 4)
        return 0;
    for (int64_t i = 0; i < numel; i++)
        if (dtype_load(t->dtype, t->data, i) != 0.0)
            return 0;
    return 1;
}

/* A Squeeze/Unsqueeze with the one axis `axis` (or axis - rank). */
static int one_axis(const Node *n, int64_t axis, int rank)
{
    int64_t v[2];
    return n && node_ints(n, 1, "axes", v, 2) == 1 && (v[0] == axis || v[0] + rank == axis);
}

/* The Gathers(W, t) along axis 0 among t's consumers whose W is a float32
 * initializer of rank 3 (a stacked expert weight): how many, up to cap. */
static int weight_gathers(const Tensor *t, Node **out, int cap)
{
    int n = 0;
    for (int c = 0; c < t->nconsumers; c++) {
        Node *g = t->consumers[c];
        const Tensor *w = g->op == OP_GATHER && g->ninputs == 2 && g->inputs[1] == t ? g->inputs[0] : NULL;
        if (w && w->is_initializer && !w->producer && w->rank == 3 && w->dtype == DT_F32 &&
            node_attr_int(g, "axis", 0) == 0) {
            if (n == cap)
                return -1;
            out[n++] = g;
        }
    }
    return n;
}

/* MatMul(lhs, Transpose(Gather(W, e), [1, 0])) for the expert weight
 * gather wg: that MatMul, or NULL. */
static Node *expert_matmul(const Node *wg)
{
    Node *tr = only_reader(out(wg, 0));
    if (!tr || tr->op != OP_TRANSPOSE || !is_transpose(tr, 1, 0, 0, 2))
        return NULL;
    Node *mm = only_reader(out(tr, 0));
    return mm && mm->op == OP_MATMUL && mm->ninputs == 2 && mm->inputs[0] && mm->inputs[1] == out(tr, 0) ? mm : NULL;
}

/* Is t shape arithmetic over Shape(a) and constants (a Slice bound)? */
static int shape_arith(const Tensor *t, const Tensor *a, int depth)
{
    if (!t || depth > 12)
        return 0;
    if (t->data)
        return 1;
    Node *p = t->producer;
    if (!p)
        return 0;
    if (p->op == OP_SHAPE)
        return in(p, 0) == a;
    switch (p->op) {
    case OP_GATHER: case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_CONCAT:
    case OP_UNSQUEEZE: case OP_SQUEEZE: case OP_CAST: case OP_SLICE:
        break;
    default:
        return 0;
    }
    for (int i = 0; i < p->ninputs; i++)
        if (p->inputs[i] && !shape_arith(p->inputs[i], a, depth + 1))
            return 0;
    return 1;
}

/* Is t a float scalar constant (broadcast along rows)? */
static int scalar_const(const Tensor *t)
{
    if (!t || !t->data || t->rank < 0)
        return 0;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] != 1)
            return 0;
    return 1;
}

/* One unrolled body of the loop. */
typedef struct {
    int piece;                /* which output of the hit Split */
    const Tensor *e, *pos, *tok, *x, *w1, *w2, *w, *a, *h;
    Node *m1, *m2, *scatter, *add;
} Body;

/* Checks that h is computed from a by row-wise element-wise nodes (and
 * Slices of the last dim, bounds from a's shape), read by nothing else
 * than each other, the Slices' bound arithmetic and m2. */
static int rowwise(const Tensor *a, const Tensor *h, const Node *m2)
{
    const Tensor *todo[64];
    const Node *seen[64];
    int ntodo = 0, nseen = 0;
    todo[ntodo++] = h;
    while (ntodo) {
        const Tensor *t = todo[--ntodo];
        if (t == a)
            continue;
        Node *p = t->producer;
        if (!p || p->noutputs != 1)
            return -1;
        int dup = 0;
        for (int i = 0; i < nseen; i++)
            dup |= seen[i] == p;
        if (dup)
            continue;
        if (nseen == 64)
            return -1;
        seen[nseen++] = p;
        if (p->op == OP_SLICE) {
            if (!in(p, 0))
                return -1;
            int64_t ax[2], st[2];
            if (node_ints(p, 3, "axes", ax, 2) != 1 || (ax[0] != -1 && ax[0] != 1))
                return -1;
            int ns = node_ints(p, 4, "steps", st, 2);
            if (ns == 0 || ns > 1 || (ns == 1 && st[0] != 1) || (ns < 0 && p->ninputs > 4 && p->inputs[4]))
                return -1;
            for (int i = 1; i < p->ninputs && i < 3; i++)
                if (!shape_arith(p->inputs[i], a, 0))
                    return -1;
            if (ntodo == 64)
                return -1;
            todo[ntodo++] = p->inputs[0];
            continue;
        }
        if (!moe_elementwise(p->op))
            return -1;
        for (int i = 0; i < p->ninputs; i++) {
            const Tensor *x = p->inputs[i];
            if (!x || scalar_const(x))
                continue;
            if (ntodo == 64)
                return -1;
            todo[ntodo++] = x;
        }
    }
    /* a feeds the middle and its Slices' bounds only (m1 ignored: it is a's
     * producer); the middle's values go nowhere else (h to m2 only). */
    if (a->is_output)
        return -1;
    for (int c = 0; c < a->nconsumers; c++) {
        int ok = a->consumers[c]->op == OP_SHAPE;
        for (int j = 0; j < nseen && !ok; j++)
            ok = seen[j] == a->consumers[c];
        if (!ok)
            return -1;
    }
    for (int i = 0; i < nseen; i++) {
        const Tensor *t = seen[i]->outputs[0];
        if (t->is_output)
            return -1;
        for (int c = 0; c < t->nconsumers; c++) {
            const Node *r = t->consumers[c];
            int ok = t == h && r == m2;
            for (int j = 0; j < nseen && !ok; j++)
                ok = seen[j] == r;
            if (!ok)
                return -1;
        }
    }
    return 0;
}

/* The routing weight of each of a body's pairs:
 * Reshape*(Gather(Flatten(Unsqueeze(w, 2), 2), pos + tok * k)); w or NULL. */
static const Tensor *pair_weight(const Tensor *r, const Body *b, int64_t k)
{
    Node *p;
    for (int i = 0; i < 3 && (p = prod(r, OP_RESHAPE)); i++)
        r = in(p, 0);
    Node *g = prod(r, OP_GATHER);
    if (!g || g->ninputs != 2 || node_attr_int(g, "axis", 0) != 0)
        return NULL;
    Node *fl = prod(g->inputs[0], OP_FLATTEN);
    Node *un = fl && node_attr_int(fl, "axis", 1) == 2 ? prod(in(fl, 0), OP_UNSQUEEZE) : NULL;
    if (!un || !one_axis(un, 2, 3) || !in(un, 0))
        return NULL;
    Node *add = prod(g->inputs[1], OP_ADD);
    if (!add || add->ninputs != 2)
        return NULL;
    int pi = add->inputs[0] == b->pos ? 0 : add->inputs[1] == b->pos ? 1 : -1;
    Node *mul = pi >= 0 ? prod(add->inputs[1 - pi], OP_MUL) : NULL;
    if (!mul || mul->ninputs != 2)
        return NULL;
    int ti = mul->inputs[0] == b->tok ? 0 : mul->inputs[1] == b->tok ? 1 : -1;
    if (ti < 0)
        return NULL;
    /* the stride: k itself, or dim 1 of Shape(Unsqueeze(w, 2)) */
    const Tensor *kk = mul->inputs[1 - ti];
    Node *gs = prod(kk, OP_GATHER);
    Node *sh = gs ? prod(in(gs, 0), OP_SHAPE) : NULL;
    int ok = is_int_scalar(kk, k) || (sh && in(sh, 0) == out(un, 0) && is_int_scalar(in(gs, 1), 1));
    return ok ? un->inputs[0] : NULL;
}

/* Matches the body that starts at gm = Gather(mask, e); 0 when it is one. */
static int match_body(const Node *gm, const Tensor *mask, const Node *hit, int64_t k, Body *b)
{
    memset(b, 0, sizeof *b);
    if (gm->op != OP_GATHER || gm->ninputs != 2 || gm->inputs[0] != mask || node_attr_int(gm, "axis", 0) != 0)
        return -1;
    b->e = gm->inputs[1];
    /* e = Gather(Squeeze(hit piece, [0]), 0) */
    Node *ge = prod(b->e, OP_GATHER);
    Node *sq = ge && is_int_scalar(in(ge, 1), 0) ? prod(in(ge, 0), OP_SQUEEZE) : NULL;
    if (!sq || !one_axis(sq, 0, 2) || !in(sq, 0) || sq->inputs[0]->producer != hit)
        return -1;
    b->piece = -1;
    for (int o = 0; o < hit->noutputs; o++)
        if (hit->outputs[o] == sq->inputs[0])
            b->piece = o;

    /* pos, tok = Squeeze(Split(Transpose(NonZero(Cast(gm, bool))), axis 1), 1) */
    Node *ca = only_reader(out(gm, 0));
    Node *nz = ca && ca->op == OP_CAST && node_attr_int(ca, "to", 0) == DT_BOOL ? only_reader(out(ca, 0)) : NULL;
    Node *tr = nz && nz->op == OP_NONZERO ? only_reader(out(nz, 0)) : NULL;
    Node *sp = tr && tr->op == OP_TRANSPOSE && is_transpose(tr, 1, 0, 0, 2) ? only_reader(out(tr, 0)) : NULL;
    if (!sp || sp->op != OP_SPLIT || sp->noutputs != 2 || node_attr_int(sp, "axis", 0) != 1)
        return -1;
    const Tensor *pt[2];
    for (int o = 0; o < 2; o++) {
        Node *s = only_reader(sp->outputs[o]);
        if (!s || s->op != OP_SQUEEZE || !one_axis(s, 1, 2) || !out(s, 0))
            return -1;
        pt[o] = s->outputs[0];
    }
    b->pos = pt[0];
    b->tok = pt[1];

    /* a = MatMul(Gather(x, tok), Transpose(Gather(W1, e))), then
     * MatMul(h, Transpose(Gather(W2, e))): W1's is the one reading tokens. */
    Node *wg[2];
    if (weight_gathers(b->e, wg, 2) != 2)
        return -1;
    b->m1 = expert_matmul(wg[0]);
    b->m2 = expert_matmul(wg[1]);
    if (!b->m1 || !b->m2)
        return -1;
    Node *gx = prod(b->m1->inputs[0], OP_GATHER);
    if (!gx || in(gx, 1) != b->tok) {
        Node *t = b->m1;
        b->m1 = b->m2;
        b->m2 = t;
        t = wg[0];
        wg[0] = wg[1];
        wg[1] = t;
        gx = prod(b->m1->inputs[0], OP_GATHER);
    }
    if (!gx || in(gx, 1) != b->tok || !in(gx, 0) || node_attr_int(gx, "axis", 0) != 0 ||
        only_reader(out(gx, 0)) != b->m1 || !out(b->m1, 0) || !out(b->m2, 0))
        return -1;
    b->x = gx->inputs[0];
    b->w1 = wg[0]->inputs[0];
    b->w2 = wg[1]->inputs[0];
    b->a = b->m1->outputs[0];
    b->h = b->m2->inputs[0];
    if (b->w1->dims[0] != b->w2->dims[0] || b->w1->dims[2] != b->w2->dims[1] || rowwise(b->a, b->h, b->m2))
        return -1;

    /* c = m2 * weight [, Cast to float] */
    Node *mul = only_reader(b->m2->outputs[0]);
    if (!mul || mul->op != OP_MUL || mul->ninputs != 2 || !out(mul, 0))
        return -1;
    int yi = mul->inputs[0] == b->m2->outputs[0] ? 0 : 1;
    b->w = pair_weight(mul->inputs[1 - yi], b, k);
    if (!b->w)
        return -1;
    const Tensor *c = mul->outputs[0];
    Node *cast = only_reader(c);
    if (cast && cast->op == OP_CAST && node_attr_int(cast, "to", 0) == DT_F32 && out(cast, 0))
        c = cast->outputs[0];

    /* acc' = Add(acc, ScatterElements(zeros, Expand(Unsqueeze(tok, 1)), Expand(c), axis 0)) */
    Node *ex = only_reader(c);
    if (ex && ex->op == OP_EXPAND && out(ex, 0))
        c = ex->outputs[0];
    for (int i = 0; i < c->nconsumers && !b->scatter; i++) {
        Node *s = c->consumers[i];
        if (s->op == OP_SCATTER_ELEMENTS && s->ninputs == 3 && s->inputs[2] == c)
            b->scatter = s;
    }
    Node *s = b->scatter;
    if (!s || node_attr_int(s, "axis", 0) != 0 || strcmp(node_attr_str(s, "reduction", "none"), "none") ||
        !all_zero(s->inputs[0]) || !out(s, 0))
        return -1;
    const Tensor *ix = s->inputs[1];
    Node *ie = prod(ix, OP_EXPAND);
    Node *iu = prod(ie ? in(ie, 0) : ix, OP_UNSQUEEZE);
    if (!iu || in(iu, 0) != b->tok || !one_axis(iu, 1, 2))
        return -1;
    b->add = only_reader(s->outputs[0]);
    return b->add && b->add->op == OP_ADD && b->add->ninputs == 2 && out(b->add, 0) ? 0 : -1;
}

/* The hit Split of the block whose mask is `mask`:
 * Split(Transpose(NonZero(Greater(ReduceSum(mask, [-1, -2]), 0))), [1] * H, 0). */
static Node *hit_split(const Tensor *mask, const Node **reduce)
{
    for (int c = 0; c < mask->nconsumers; c++) {
        Node *rs = mask->consumers[c];
        int64_t ax[4];
        int na = rs->op == OP_REDUCE_SUM ? node_ints(rs, 1, "axes", ax, 4) : -1;
        if (na != 2 || !((ax[0] == -1 && ax[1] == -2) || (ax[0] == -2 && ax[1] == -1) ||
                         (ax[0] == 1 && ax[1] == 2) || (ax[0] == 2 && ax[1] == 1)) ||
            node_attr_int(rs, "keepdims", 1) != 0)
            continue;
        Node *gt = only_reader(out(rs, 0));
        if (!gt || gt->op != OP_GREATER || in(gt, 0) != out(rs, 0) || !is_int_scalar(in(gt, 1), 0))
            continue;
        Node *nz = only_reader(out(gt, 0));
        Node *tr = nz && nz->op == OP_NONZERO ? only_reader(out(nz, 0)) : NULL;
        Node *sp = tr && tr->op == OP_TRANSPOSE && is_transpose(tr, 1, 0, 0, 2) ? only_reader(out(tr, 0)) : NULL;
        if (!sp || sp->op != OP_SPLIT || node_attr_int(sp, "axis", 0) != 0)
            continue;
        int64_t sizes[256];
        int ns = node_ints(sp, 1, "split", sizes, 256);
        if (ns != sp->noutputs)
            continue;
        for (int i = 0; i < ns && sp; i++)
            if (sizes[i] != 1 || !sp->outputs[i])
                sp = NULL;
        if (sp) {
            *reduce = rs;
            return sp;
        }
    }
    return NULL;
}

static Node *add_node(Graph *g, OpKind op, const char *base, const char *what, Tensor *const *in, int nin)
{
    char name[320];
    snprintf(name, sizeof name, "%s/%s", base, what);
    return graph_node_make(g, op, name, in, nin);
}

static Tensor *op1(Graph *g, OpKind op, const char *base, const char *what, Tensor *x, const char *attr,
                   const int64_t *vals, int count)
{
    Node *n = add_node(g, op, base, what, &x, 1);
    if (attr)
        node_attr_set_ints(g, n, attr, vals, count);
    return n->outputs[0];
}

static Tensor *op2(Graph *g, OpKind op, const char *base, const char *what, Tensor *x, Tensor *y)
{
    Tensor *in[2] = {x, y};
    return add_node(g, op, base, what, in, 2)->outputs[0];
}

/* Writes the batched form of a matched block (bodies[0]'s middle reused). */
static void rewrite(Graph *g, const char *base, Tensor *ids, int64_t k, const Body *b0, Node *last)
{
    Tensor *x = (Tensor *)b0->x, *w = (Tensor *)b0->w;
    int64_t dm = b0->w1->dims[2];
    Tensor *idf = op1(g, OP_RESHAPE, base, "pair_experts", ids, "shape", (const int64_t[]){-1}, 1);
    Tensor *xu = op1(g, OP_UNSQUEEZE, base, "pair_tokens_unsqueeze", x, "axes", (const int64_t[]){1}, 1);
    Tensor *xt = op1(g, OP_TILE, base, "pair_tokens_tile", xu, "repeats", (const int64_t[]){1, k, 1}, 3);
    Node *fl = add_node(g, OP_FLATTEN, base, "pair_tokens", &xt, 1);
    node_attr_set_int(g, fl, "axis", 2);
    Tensor *xc = op1(g, OP_UNSQUEEZE, base, "pair_tokens_column", fl->outputs[0], "axes", (const int64_t[]){2}, 1);

    Tensor *g1 = op2(g, OP_GATHER, base, "Gather_w1", (Tensor *)b0->w1, idf);
    Tensor *m1 = op2(g, OP_MATMUL, base, "pair_matmul_w1", g1, xc);
    Tensor *s1 = op1(g, OP_SQUEEZE, base, "pair_up", m1, "axes", (const int64_t[]){2}, 1);
    /* The middle (and its Slice bounds' Shape) now reads s1. */
    const Tensor *a = b0->a;
    for (int c = 0; c < a->nconsumers; c++) {
        Node *r = a->consumers[c];
        for (int i = 0; i < r->ninputs; i++)
            if (r->inputs[i] == a)
                r->inputs[i] = s1;
    }
    Tensor *hu = op1(g, OP_UNSQUEEZE, base, "pair_hidden_column", (Tensor *)b0->h, "axes", (const int64_t[]){2}, 1);
    Tensor *g2 = op2(g, OP_GATHER, base, "Gather_w2", (Tensor *)b0->w2, idf);
    Tensor *m2 = op2(g, OP_MATMUL, base, "pair_matmul_w2", g2, hu);
    Tensor *s2 = op1(g, OP_SQUEEZE, base, "pair_down", m2, "axes", (const int64_t[]){2}, 1);
    Tensor *wf = op1(g, OP_RESHAPE, base, "pair_weights", w, "shape", (const int64_t[]){-1}, 1);
    Tensor *wu = op1(g, OP_UNSQUEEZE, base, "pair_weights_column", wf, "axes", (const int64_t[]){1}, 1);
    Tensor *yw = op2(g, OP_MUL, base, "pair_weighted", s2, wu);
    Tensor *r3 = op1(g, OP_RESHAPE, base, "token_choices", yw, "shape", (const int64_t[]){-1, k, dm}, 3);

    /* The last accumulation becomes the sum over choices. */
    last->op = OP_REDUCE_SUM;
    last->op_type = NULL;
    last->inputs[0] = r3;
    last->ninputs = 1;
    last->nattrs = 0;
    node_attr_set_ints(g, last, "axes", (const int64_t[]){1}, 1);
    node_attr_set_int(g, last, "keepdims", 0);
}

/* The block's name: the OneHot's without its last part. */
static void block_base(const Node *oh, char *buf, size_t cap)
{
    const char *slash = strrchr(oh->name, '/');
    int len = slash && slash != oh->name ? (int)(slash - oh->name) : (int)strlen(oh->name);
    snprintf(buf, cap, "%.*s", len > 200 ? 200 : len, oh->name);
}

/* Matches and rewrites the block whose routing mask starts at OneHot oh. */
static int rewrite_block(Graph *g, Node *oh)
{
    Node *topk = prod(in(oh, 0), OP_TOPK);
    int64_t k, depth, vals[2];
    if (!topk || oh->ninputs != 3 || out(topk, 1) != oh->inputs[0] || node_ints(topk, 1, "k", &k, 1) != 1 ||
        k < 1 || tensor_ints(oh->inputs[1], &depth, 1) != 1 || tensor_ints(oh->inputs[2], vals, 2) != 2 ||
        vals[0] != 0 || vals[1] != 1 || node_attr_int(oh, "axis", -1) != -1)
        return 0;
    Node *tm = only_reader(out(oh, 0));
    if (!tm || tm->op != OP_TRANSPOSE || !is_transpose(tm, 2, 1, 0, 3) || !out(tm, 0))
        return 0;
    const Tensor *mask = tm->outputs[0];
    const Node *reduce = NULL;
    Node *hit = hit_split(mask, &reduce);
    if (!hit)
        return 0;
    int nb = hit->noutputs;
    Body *bodies = calloc((size_t)nb, sizeof *bodies);
    int *seen = calloc((size_t)nb, sizeof *seen);
    if (!bodies || !seen)
        abort();
    int nfound = 0, ok = 1;
    for (int c = 0; c < mask->nconsumers && ok; c++) {
        const Node *r = mask->consumers[c];
        if (r == reduce)
            continue;
        Body b;
        if (match_body(r, mask, hit, k, &b) || b.piece < 0 || seen[b.piece]) {
            ok = 0;
            break;
        }
        seen[b.piece] = 1;
        bodies[nfound++] = b;
    }
    ok &= nfound == nb;
    for (int i = 1; i < nfound && ok; i++)
        ok = bodies[i].x == bodies[0].x && bodies[i].w == bodies[0].w && bodies[i].w1 == bodies[0].w1 &&
             bodies[i].w2 == bodies[0].w2;
    /* Every body has an expert of its own: depth covers them all. */
    ok &= ok && depth >= bodies[0].w1->dims[0] && nb <= depth;
    /* One chain of Adds from a zero constant through every body's. */
    Node *last = NULL;
    if (ok) {
        const Tensor *acc = NULL;
        int used = 0;
        for (int step = 0; step < nb && ok; step++) {
            int found = -1;
            for (int i = 0; i < nb; i++) {
                const Node *add = bodies[i].add;
                const Tensor *other = add->inputs[add->inputs[0] == bodies[i].scatter->outputs[0] ? 1 : 0];
                if (step == 0 ? all_zero(other) : other == acc)
                    found = found < 0 ? i : -2;
            }
            if (found < 0) {
                ok = 0;
                break;
            }
            acc = bodies[found].add->outputs[0];
            last = bodies[found].add;
            used++;
        }
        ok &= used == nb;
    }
    if (ok) {
        char base[240];
        block_base(oh, base, sizeof base);
        rewrite(g, base, topk->outputs[1], k, &bodies[0], last);
    }
    free(bodies);
    free(seen);
    return ok;
}

int frontend_moe_eager(Graph *g, Diag *d)
{
    int nnodes = g->nnodes, rewritten = 0;
    for (int i = 0; i < nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op == OP_ONEHOT && rewrite_block(g, n)) {
            rewritten++;
            graph_link_consumers(g);
        }
    }
    if (!rewritten)
        return 0;
    ir_drop_dead(g);
    return graph_toposort(g, d);
}
