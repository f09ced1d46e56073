/* moe.c: a mixture-of-experts block turned into dispatch, expert GEMMs
 * over stacked weights, and combine, so that experts can be split over a
 * mesh axis (expert parallelism).
 *
 * The exporters' loop-free form of an MoE block (HF transformers'
 * batched_mm experts: Mixtral, Qwen2-MoE, OLMoE) gathers every (token,
 * expert) pair's weights and computes each pair as its own GEMV:
 *
 *   ids  = Reshape(TopK(router)[1], [P])             P = N * k pairs
 *   xc   = Unsqueeze(Flatten(Tile(Unsqueeze(x))), 2)  [P, D, 1]
 *   s1   = Squeeze(MatMul(Gather(W1 [E, O, D], ids), xc), 2)   [P, O]
 *   h    = elementwise(s1)   (Slice along O, SiLU, gate product)  [P, F]
 *   s2   = Squeeze(MatMul(Gather(W2 [E, D, F], ids), Unsqueeze(h, 2)), 2)
 *   out  = ReduceSum(Reshape(s2 * Unsqueeze(Reshape(w, [P]), 1), [N, k, D]), 1)
 *
 * On experts split over ranks that is a masked gather of weights: every
 * rank computes every pair. GShard's form is used instead. The N tokens
 * are cut into G groups of Ng; each group sends at most C tokens to each
 * expert (the capacity), and the GEMMs run per expert over its C columns:
 *
 *   buf, slots = MoeDispatch(Reshape(x, [G, Ng, D]), Reshape(ids, [G, Ng, k]))
 *   h    = elementwise(MatMul(W1, buf))            [G, E, F, C]
 *   y    = MatMul(W2, h)                           [G, E, D, C]
 *   out  = Reshape(MoeCombine(y, slots, Reshape(w, [G, Ng, k])), [N, D])
 *
 * With tokens split by group and experts split over the same axis, the
 * planner's reshard of buf from the one to the other is the all-to-all
 * that sends tokens to their experts, and y's the one that brings them
 * back (partition/rules_index.c).
 *
 * By default nothing is dropped: C = Ng, as many slots as a group has
 * tokens (no expert can be chosen twice by one token), so the program
 * computes what the model does whatever the routing. The buffers are then
 * sized for the worst case, every token of a group on one expert. With
 * --capacity-factor F (GShard's dropping, opt-in) the capacity is
 * C = min(Ng, max(1, ceil(F * k * Ng / E))). Within a
 * group, positions go to pairs in priority order: every token's first
 * choice in token order, then every second choice, and so on; a pair past
 * its expert's C is dropped, adding nothing to its token (whose other
 * choices keep their weights, and whose residual path carries it). A
 * factor of E / k or more never drops. The element-wise part between the
 * GEMMs is moved as it is (its values gain a rank: [P, X] becomes [G, E,
 * X, C]): its ops must be element-wise or Slices of the features, with
 * scalar constants.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_elementwise(OpKind op)
{
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_POW: case OP_SQRT: case OP_ERF: case OP_TANH:
    case OP_RELU: case OP_GELU: case OP_SIGMOID: case OP_NEG: case OP_EXP: case OP_SWISH: case OP_SOFTPLUS:
    case OP_MIN: case OP_MAX: case OP_CLIP: case OP_LEAKY_RELU: case OP_ELU: case OP_HARD_SWISH: case OP_MISH:
    case OP_IDENTITY:
        return 1;
    default:
        return 0;
    }
}

static Node *producer(const Tensor *t, OpKind op)
{
    return t && t->producer && !t->producer->folded && t->producer->op == op ? t->producer : NULL;
}

static int is_scalar_const(const Tensor *t)
{
    return t && t->is_initializer && !t->producer && tensor_numel(t) == 1;
}

/* The only live consumer of t, or NULL. */
static Node *sole_consumer(const Tensor *t)
{
    Node *only = NULL;
    for (int c = 0; c < t->nconsumers; c++) {
        if (t->consumers[c]->folded)
            continue;
        if (only)
            return NULL;
        only = t->consumers[c];
    }
    return t->is_output ? NULL : only;
}

/* Does Squeeze/Unsqueeze n have the one axis `axis` (of rank `rank`)? */
static int one_axis(const Node *n, int64_t axis, int rank)
{
    const Attr *a = node_attr(n, "axes");
    return a && a->n == 1 && (a->ints[0] == axis || a->ints[0] + rank == axis);
}

/* x for xc = Unsqueeze(Flatten|Reshape(Tile(Unsqueeze(x, 1), [1, k, 1])), 2)
 * with x [n, dm]; NULL when xc is not that. */
static Tensor *tiled_tokens(const Tensor *xc, int64_t n, int64_t k, int64_t dm)
{
    Node *u = producer(xc, OP_UNSQUEEZE);
    if (!u || !one_axis(u, 2, 3))
        return NULL;
    const Tensor *xf = u->inputs[0];
    Node *fl = producer(xf, OP_FLATTEN) ? producer(xf, OP_FLATTEN) : producer(xf, OP_RESHAPE);
    if (!fl || fl->inputs[0]->rank != 3)
        return NULL;
    Node *ti = producer(fl->inputs[0], OP_TILE);
    const Attr *rep = ti ? node_attr(ti, "repeats") : NULL;
    if (!ti || !rep || rep->n != 3 || rep->ints[0] != 1 || rep->ints[1] != k || rep->ints[2] != 1)
        return NULL;
    Node *u0 = producer(ti->inputs[0], OP_UNSQUEEZE);
    if (!u0 || !one_axis(u0, 1, 3))
        return NULL;
    Tensor *x = u0->inputs[0];
    return x->rank == 2 && x->dims[0] == n && x->dims[1] == dm && x->dtype == DT_F32 ? x : NULL;
}

/* One matched block. */
typedef struct {
    Node *m1, *m2, *mul, *rs;
    Tensor *w1, *w2, *x, *ids, *weights; /* ids and weights [N, k] */
    Node *chain[64];
    int nchain;
    int64_t n, k, e, dm;
} Block;

/* Collects the element-wise nodes from s1 up to h (backwards from h):
 * every input of each is on the chain or a scalar constant. */
static int collect_chain(Block *b, const Tensor *s1, const Tensor *h)
{
    const Tensor *todo[64];
    int ntodo = 0;
    todo[ntodo++] = h;
    while (ntodo) {
        const Tensor *t = todo[--ntodo];
        if (t == s1)
            continue;
        Node *p = t->producer;
        if (!p || p->folded || t->rank != 2 || t->dims[0] != b->n * b->k || t->dtype != DT_F32)
            return -1;
        int seen = 0;
        for (int i = 0; i < b->nchain; i++)
            seen |= b->chain[i] == p;
        if (seen)
            continue;
        if (b->nchain == 64 || (!moe_elementwise(p->op) && p->op != OP_SLICE))
            return -1;
        if (p->op == OP_SLICE) {
            const Attr *ax = node_attr(p, "axes"), *sp = node_attr(p, "steps");
            if (!ax || ax->n != 1 || (ax->ints[0] != 1 && ax->ints[0] != -1) || (sp && sp->ints[0] != 1))
                return -1;
        }
        b->chain[b->nchain++] = p;
        for (int i = 0; i < p->ninputs; i++) {
            const Tensor *in = p->inputs[i];
            if (!in || is_scalar_const(in))
                continue;
            if (ntodo == 64)
                return -1;
            todo[ntodo++] = in;
        }
    }
    /* Nothing outside the block may read the chain's values. */
    for (int i = 0; i < b->nchain; i++)
        for (int o = 0; o < b->chain[i]->noutputs; o++) {
            const Tensor *t = b->chain[i]->outputs[o];
            if (t->is_output)
                return -1;
            for (int c = 0; c < t->nconsumers; c++) {
                const Node *r = t->consumers[c];
                int ok = r->folded || (t == h && r->op == OP_UNSQUEEZE);
                for (int j = 0; j < b->nchain && !ok; j++)
                    ok = b->chain[j] == r;
                if (!ok)
                    return -1;
            }
        }
    return 0;
}

/* Is gather g = Gather(W [E, ., .], ids [P], axis 0) with W a float32
 * weight, feeding one MatMul as its first operand? Returns that MatMul. */
static Node *expert_gemm(const Node *g, const Tensor *ids, Tensor **w)
{
    if (g->op != OP_GATHER || g->folded || g->ninputs != 2 || g->inputs[1] != ids ||
        node_attr_int(g, "axis", 0) != 0)
        return NULL;
    Tensor *wt = g->inputs[0];
    if (!wt->is_initializer || wt->producer || wt->rank != 3 || wt->dtype != DT_F32)
        return NULL;
    Node *m = sole_consumer(g->outputs[0]);
    if (!m || m->op != OP_MATMUL || m->inputs[0] != g->outputs[0])
        return NULL;
    *w = wt;
    return m;
}

/* Matches the block whose first expert Gather is g1; 0 when it is one. */
static int match_block(const Node *g1, Block *b)
{
    memset(b, 0, sizeof *b);
    const Tensor *idf = g1->inputs[1];
    Node *rid = producer(idf, OP_RESHAPE);
    if (!rid || idf->rank != 1 || idf->dtype != DT_I64)
        return -1;
    b->ids = rid->inputs[0];
    Node *topk = producer(b->ids, OP_TOPK);
    if (!topk || topk->noutputs < 2 || topk->outputs[1] != b->ids || b->ids->rank != 2)
        return -1;
    b->n = b->ids->dims[0];
    b->k = b->ids->dims[1];
    int64_t p = b->n * b->k;
    if (idf->dims[0] != p)
        return -1;

    b->m1 = expert_gemm(g1, idf, &b->w1);
    if (!b->m1)
        return -1;
    b->e = b->w1->dims[0];
    b->dm = b->w1->dims[2];
    if (b->e != topk->inputs[0]->dims[topk->inputs[0]->rank - 1])
        return -1;
    b->x = tiled_tokens(b->m1->inputs[1], b->n, b->k, b->dm);
    Node *sq1 = b->x ? sole_consumer(b->m1->outputs[0]) : NULL;
    if (!sq1 || sq1->op != OP_SQUEEZE || !one_axis(sq1, 2, 3))
        return -1;

    /* The second expert GEMM: another Gather of the same ids. */
    for (int c = 0; c < idf->nconsumers && !b->m2; c++) {
        const Node *g2 = idf->consumers[c];
        Tensor *w2;
        Node *m2 = g2 != g1 ? expert_gemm(g2, idf, &w2) : NULL;
        if (m2 && w2->dims[0] == b->e && w2->dims[1] == b->dm) {
            b->m2 = m2;
            b->w2 = w2;
        }
    }
    if (!b->m2)
        return -1;
    Node *uh = producer(b->m2->inputs[1], OP_UNSQUEEZE);
    if (!uh || !one_axis(uh, 2, 3) || uh->inputs[0]->dims[1] != b->w2->dims[2])
        return -1;
    if (collect_chain(b, sq1->outputs[0], uh->inputs[0]))
        return -1;
    Node *sq2 = sole_consumer(b->m2->outputs[0]);
    if (!sq2 || sq2->op != OP_SQUEEZE || !one_axis(sq2, 2, 3))
        return -1;

    /* out = ReduceSum(Reshape(s2 * Unsqueeze(Reshape(w, [P]), 1), [N, k, D]), 1) */
    b->mul = sole_consumer(sq2->outputs[0]);
    if (!b->mul || b->mul->op != OP_MUL)
        return -1;
    const Tensor *wc = b->mul->inputs[b->mul->inputs[0] == sq2->outputs[0] ? 1 : 0];
    Node *uw = producer(wc, OP_UNSQUEEZE);
    Node *rw = uw && one_axis(uw, 1, 2) ? producer(uw->inputs[0], OP_RESHAPE) : NULL;
    if (!rw || rw->inputs[0]->rank != 2 || rw->inputs[0]->dims[0] != b->n || rw->inputs[0]->dims[1] != b->k ||
        rw->inputs[0]->dtype != DT_F32)
        return -1;
    b->weights = rw->inputs[0];
    Node *r3 = sole_consumer(b->mul->outputs[0]);
    if (!r3 || r3->op != OP_RESHAPE || r3->outputs[0]->rank != 3 || r3->outputs[0]->dims[1] != b->k)
        return -1;
    b->rs = sole_consumer(r3->outputs[0]);
    if (!b->rs || b->rs->op != OP_REDUCE_SUM || node_attr_int(b->rs, "keepdims", 1) != 0 ||
        !one_axis(b->rs, 1, 3))
        return -1;
    return 0;
}

/* The block's name: g1's without its last part ("/layers.0/mlp/experts"). */
static void block_name(const Node *g1, char *buf, size_t cap)
{
    const char *slash = strrchr(g1->name, '/');
    int len = slash && slash != g1->name ? (int)(slash - g1->name) : (int)strlen(g1->name);
    snprintf(buf, cap, "%.*s", len > 150 ? 150 : len, g1->name);
}

static Tensor *reshaped(Graph *g, Tensor *t, const int64_t *dims, int rank, const char *name)
{
    Node *r = graph_node_add(g, OP_RESHAPE, name);
    r->inputs = arena_alloc(&g->arena, sizeof(Tensor *));
    r->inputs[0] = t;
    r->ninputs = 1;
    r->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    r->outputs[0] = graph_tensor_fresh(g, name);
    r->outputs[0]->producer = r;
    r->noutputs = 1;
    node_attr_set_ints(g, r, "shape", dims, rank);
    return r->outputs[0];
}

static int64_t largest_divisor(int64_t n, int64_t at_most)
{
    int64_t gsz = at_most < 1 ? 1 : at_most > n ? n : at_most;
    while (n % gsz)
        gsz--;
    return gsz;
}

/* Rewrites block b; the nodes left dead are dropped by the caller. */
static void rewrite_block(Graph *g, Block *b, const Node *g1, const MoeOptions *o)
{
    char base[200], name[240];
    block_name(g1, base, sizeof base);
    int64_t groups = largest_divisor(b->n, o->groups), ng = b->n / groups;
    /* Dropless (no factor): an expert takes at most one pair per token of
     * a group (a token's k choices are distinct experts), so a capacity of
     * ng never drops. */
    double want = o->capacity_factor > 0 ? ceil(o->capacity_factor * (double)(b->k * ng) / (double)b->e - 1e-9)
                                         : (double)ng;
    int64_t cap = want < 1 ? 1 : want > (double)ng ? ng : (int64_t)want;

    snprintf(name, sizeof name, "%s/moe_tokens", base);
    Tensor *xg = reshaped(g, b->x, (const int64_t[]){groups, ng, b->dm}, 3, name);
    snprintf(name, sizeof name, "%s/moe_ids", base);
    Tensor *idg = reshaped(g, b->ids, (const int64_t[]){groups, ng, b->k}, 3, name);
    snprintf(name, sizeof name, "%s/moe_weights", base);
    Tensor *wg = reshaped(g, b->weights, (const int64_t[]){groups, ng, b->k}, 3, name);

    snprintf(name, sizeof name, "%s/MoeDispatch", base);
    Node *dn = graph_node_add(g, OP_MOE_DISPATCH, name);
    dn->inputs = arena_alloc(&g->arena, 2 * sizeof(Tensor *));
    dn->inputs[0] = xg;
    dn->inputs[1] = idg;
    dn->ninputs = 2;
    dn->outputs = arena_alloc(&g->arena, 2 * sizeof(Tensor *));
    snprintf(name, sizeof name, "%s/moe_buffer", base);
    dn->outputs[0] = graph_tensor_fresh(g, name);
    snprintf(name, sizeof name, "%s/moe_slots", base);
    dn->outputs[1] = graph_tensor_fresh(g, name);
    dn->outputs[0]->producer = dn->outputs[1]->producer = dn;
    dn->noutputs = 2;
    node_attr_set_int(g, dn, "experts", b->e);
    node_attr_set_int(g, dn, "capacity", cap);
    node_attr_set_float(g, dn, "capacity_factor", (float)o->capacity_factor);

    /* The expert GEMMs over stacked weights; the middle gains two dims. */
    const Tensor *s1 = NULL;
    for (int i = 0; i < b->nchain; i++)
        for (int j = 0; j < b->chain[i]->ninputs; j++) {
            const Tensor *t = b->chain[i]->inputs[j];
            if (t && t->producer && t->producer->op == OP_SQUEEZE && t->producer->inputs[0] == b->m1->outputs[0])
                s1 = t;
        }
    b->m1->inputs[0] = b->w1;
    b->m1->inputs[1] = dn->outputs[0];
    for (int i = 0; i < b->nchain; i++) {
        Node *c = b->chain[i];
        for (int j = 0; j < c->ninputs; j++)
            if (c->inputs[j] == s1)
                c->inputs[j] = b->m1->outputs[0];
        if (c->op == OP_SLICE) {
            const Attr *ax = node_attr(c, "axes");
            int64_t two = 2;
            if (ax)
                node_attr_set_ints(g, c, "axes", &two, 1);
        }
    }
    Tensor *h = b->m2->inputs[1]->producer->inputs[0];
    b->m2->inputs[0] = b->w2;
    b->m2->inputs[1] = h;

    snprintf(name, sizeof name, "%s/MoeCombine", base);
    Node *cn = graph_node_add(g, OP_MOE_COMBINE, name);
    cn->inputs = arena_alloc(&g->arena, 3 * sizeof(Tensor *));
    cn->inputs[0] = b->m2->outputs[0];
    cn->inputs[1] = dn->outputs[1];
    cn->inputs[2] = wg;
    cn->ninputs = 3;
    cn->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    snprintf(name, sizeof name, "%s/moe_combined", base);
    cn->outputs[0] = graph_tensor_fresh(g, name);
    cn->outputs[0]->producer = cn;
    cn->noutputs = 1;

    /* The ReduceSum's output stays the block's, now a Reshape of the combine. */
    Node *rs = b->rs;
    rs->op = OP_RESHAPE;
    rs->op_type = NULL;
    rs->inputs[0] = cn->outputs[0];
    rs->ninputs = 1;
    rs->nattrs = 0;
    node_attr_set_ints(g, rs, "shape", (const int64_t[]){b->n, b->dm}, 2);

    Tensor **ws = arena_alloc(&g->arena, (size_t)(g->nmoe_weights + 2) * sizeof(Tensor *));
    if (g->nmoe_weights)
        memcpy(ws, g->moe_weights, (size_t)g->nmoe_weights * sizeof(Tensor *));
    ws[g->nmoe_weights++] = b->w1;
    ws[g->nmoe_weights++] = b->w2;
    g->moe_weights = ws;
}

/* Re-infers the shapes of the nodes added or changed, in graph order
 * (the graph sorted). */
static int reinfer(Graph *g, Node *const *touched, int ntouched, Diag *d)
{
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < ntouched; j++)
            if (touched[j] == g->nodes[i] && !g->nodes[i]->folded && ir_infer_node(g, g->nodes[i], d))
                return -1;
    return 0;
}

/* Moves each MoeDispatch as early as its inputs allow: the nodes before
 * it that it does not depend on (Qwen2-MoE's shared expert, say) go after
 * it, so that the all-to-all sending its buffer to the experts runs while
 * they compute (the schedule issues a reshard after its producer and
 * waits before its reader), as DeepSpeed-MoE and Megatron overlap the
 * shared expert with the dispatch. The order stays topological: D's
 * ancestors depend only on ancestors, and the rest keep their order. */
static void hoist_dispatches(Graph *g)
{
    int nn = g->nnodes;
    char *anc = malloc((size_t)nn + 1);
    Node **order = malloc(((size_t)nn + 1) * sizeof *order);
    if (!anc || !order)
        abort();
    for (int pos = 0; pos < nn; pos++) {
        if (g->nodes[pos]->op != OP_MOE_DISPATCH || g->nodes[pos]->folded)
            continue;
        for (int i = 0; i < nn; i++)
            g->nodes[i]->id = i;
        memset(anc, 0, (size_t)nn);
        anc[pos] = 1;
        for (int i = pos; i >= 0; i--) {
            if (!anc[i])
                continue;
            const Node *n = g->nodes[i];
            for (int j = 0; j < n->ninputs; j++)
                if (n->inputs[j] && n->inputs[j]->producer)
                    anc[n->inputs[j]->producer->id] = 1;
        }
        int first = 0;
        while (first < pos && anc[first])
            first++;
        int k = first;
        for (int i = first; i <= pos; i++)
            if (anc[i])
                order[k++] = g->nodes[i];
        for (int i = first; i <= pos; i++)
            if (!anc[i])
                order[k++] = g->nodes[i];
        memcpy(g->nodes + first, order + first, (size_t)(pos + 1 - first) * sizeof *order);
    }
    for (int i = 0; i < nn; i++)
        g->nodes[i]->id = i;
    free(anc);
    free(order);
}

int ir_build_moe(Graph *g, const MoeOptions *o, Diag *d)
{
    if (o->capacity_factor < 0) {
        diag_add(d, "--capacity-factor %g: expected a positive number", o->capacity_factor);
        return -1;
    }
    graph_link_consumers(g);
    int nnodes = g->nnodes, ntouched = 0;
    Node **touched = NULL;
    for (int i = 0; i < nnodes; i++) {
        Node *n = g->nodes[i];
        Block b;
        if (n->folded || n->op != OP_GATHER || match_block(n, &b))
            continue;
        int first = g->nnodes;
        rewrite_block(g, &b, n, o);
        touched = realloc(touched, (size_t)(ntouched + b.nchain + 3 + g->nnodes - first) * sizeof *touched);
        if (!touched)
            abort();
        touched[ntouched++] = b.m1;
        touched[ntouched++] = b.m2;
        touched[ntouched++] = b.rs;
        for (int k = 0; k < b.nchain; k++)
            touched[ntouched++] = b.chain[k];
        for (int k = first; k < g->nnodes; k++)
            touched[ntouched++] = g->nodes[k];
        graph_link_consumers(g);
    }
    int rc = 0;
    if (ntouched) {
        ir_drop_dead(g);
        rc = graph_toposort(g, d) || reinfer(g, touched, ntouched, d) ? -1 : 0;
        if (!rc)
            hoist_dispatches(g);
    }
    free(touched);
    return rc;
}

int moe_layer_index(const Graph *g, const Node *n)
{
    int k = 0;
    for (int i = 0; i < g->nnodes && g->nodes[i] != n; i++)
        k += !g->nodes[i]->folded && g->nodes[i]->op == OP_MOE_DISPATCH;
    return k;
}

int moe_layers(const Graph *g)
{
    return moe_layer_index(g, NULL);
}
