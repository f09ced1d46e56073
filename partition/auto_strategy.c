/* auto_strategy.c: the --auto search's options and what they cost.
 *
 * 1. Strategies. For every node, each mesh axis goes to one of the node's
 *    shardable factors (or to none) when the product of the axes a factor
 *    gets divides it; strategies some tensor could not hold (rules.c's
 *    representability) are dropped, and so are duplicates. A strategy fixes
 *    the layout of every operand and result, and its compute time
 *    (cost.c's roofline on the local shard).
 * 2. Choices. Each node is one choice among its strategies; a node that
 *    only maps or moves values follows the choice of its main operand's
 *    producer. A weight or input read by one operand only takes the layout
 *    that operand needs; one read by several is a choice of its own among
 *    its layouts. Annotations drop the options that contradict them.
 * 3. Edges. Every value crossing two choices costs the reshard (reshard.c,
 *    under the link model) from the layout its producer's option gives it
 *    to the layout its consumer's option needs. Reshard costs are cached by
 *    shape and layouts, since a model's layers repeat them.
 *
 * Everything is allocated in the search's arena (auto_internal.h).
 */
#include "auto_internal.h"

#include <string.h>

/* ---- reshard costs ------------------------------------------------------- */

static uint64_t key_hash(const CostKey *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static double reshard_cost_buf(Search *s, const Tensor *t, const Sharding *src, const Sharding *dst,
                               int64_t *buf_bytes, int64_t *sent)
{
    if (buf_bytes)
        *buf_bytes = 0;
    if (sent)
        *sent = 0;
    if (sharding_equal(src, dst))
        return 0;
    CostKey k;
    memset(&k, 0, sizeof k);
    memcpy(k.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    k.rank = t->rank;
    k.esize = (int)dtype_size(t->dtype);
    k.src = *src;
    k.dst = *dst;
    CostCache *c = &s->cache;
    if (c->n * 2 >= c->cap) {
        CostCache old = *c;
        c->cap = old.cap ? old.cap * 2 : 1024;
        /* The old table stays in the arena: the tables sum to twice the last. */
        c->keys = auto_alloc(s, (size_t)c->cap, sizeof(CostKey));
        c->vals = auto_alloc(s, (size_t)c->cap, sizeof(double));
        c->bufs = auto_alloc(s, (size_t)c->cap, sizeof(int64_t));
        c->sent = auto_alloc(s, (size_t)c->cap, sizeof(int64_t));
        for (int i = 0; i < c->cap; i++)
            c->vals[i] = -1;
        c->n = 0;
        for (int i = 0; i < old.cap; i++)
            if (old.vals[i] >= 0) {
                size_t h = (size_t)(key_hash(&old.keys[i]) & (uint64_t)(c->cap - 1));
                while (c->vals[h] >= 0)
                    h = (h + 1) & (size_t)(c->cap - 1);
                c->keys[h] = old.keys[i];
                c->vals[h] = old.vals[i];
                c->bufs[h] = old.bufs[i];
                c->sent[h] = old.sent[i];
                c->n++;
            }
    }
    size_t h = (size_t)(key_hash(&k) & (uint64_t)(c->cap - 1));
    while (c->vals[h] >= 0) {
        if (!memcmp(&c->keys[h], &k, sizeof k)) {
            if (buf_bytes)
                *buf_bytes = c->bufs[h];
            if (sent)
                *sent = c->sent[h];
            return c->vals[h];
        }
        h = (h + 1) & (size_t)(c->cap - 1);
    }
    Reshard r;
    reshard_lower(s->m, t, src, dst, &r);
    c->keys[h] = k;
    c->vals[h] = r.seconds;
    c->sent[h] = r.bytes;
    c->bufs[h] = 0;
    for (int i = 0; i < r.nsteps; i++)
        c->bufs[h] += sharding_local_bytes(&r.steps[i].after, s->m, t);
    c->n++;
    if (buf_bytes)
        *buf_bytes = c->bufs[h];
    if (sent)
        *sent = c->sent[h];
    return r.seconds;
}

static double reshard_cost(Search *s, const Tensor *t, const Sharding *src, const Sharding *dst)
{
    return reshard_cost_buf(s, t, src, dst, NULL, NULL);
}

/* ---- strategies --------------------------------------------------------- */

/* Number of operand slots reading t over the whole graph. */
static int source_uses(const Tensor *t)
{
    int uses = 0;
    for (int c = 0; c < t->nconsumers; c++) {
        const Node *u = t->consumers[c];
        if (c && u == t->consumers[c - 1])
            continue; /* a node listed once per use: counted below */
        for (int k = 0; k < u->ninputs; k++)
            uses += u->inputs[k] == t;
    }
    return uses;
}

int auto_is_source(const Tensor *t)
{
    return t && !t->producer && t->rank >= 0;
}

const Annotation *auto_annotation_of(const Search *s, const Tensor *t)
{
    const AnnotationList *l = s->ann;
    for (int i = 0; l && i < l->n; i++)
        if (!strcmp(l->items[i].tensor, t->name))
            return &l->items[i];
    return NULL;
}

/* Recursively gives mesh axes a = 0.. to factors (or none). */
static void enum_strats(Search *s, int ni, const FactorRule *r, int a, Strat *cur, int64_t *left /* shards per factor so far */, int *overflow)
{
    const Mesh *m = s->m;
    if (a == m->naxes) {
        if (!rule_representable(m, r, cur->fn, (const unsigned char (*)[MESH_MAX_AXES])cur->fa))
            return;
        if (s->nstrats[ni] == AUTO_MAX_STRATS) {
            *overflow = 1;
            return;
        }
        s->strats[ni][s->nstrats[ni]++] = *cur;
        return;
    }
    enum_strats(s, ni, r, a + 1, cur, left, overflow); /* axis a unused */
    for (int f = 0; f < r->nfactors && m->axes[a].size > 1; f++) { /* a size-1 axis splits nothing */
        /* left[f]: shards the factor has so far (it may be padded: sharding.c) */
        if (r->kind[f] == FK_NEED_REPL || left[f] * m->axes[a].size > r->size[f] / rule_factor_unit(r, f))
            continue; /* no rank left all padding */
        cur->fa[f][cur->fn[f]] = (unsigned char)a;
        if (!rule_factor_fits(r, f, m, cur->fa[f], cur->fn[f] + 1))
            continue;
        cur->fn[f]++;
        left[f] *= m->axes[a].size;
        enum_strats(s, ni, r, a + 1, cur, left, overflow);
        left[f] /= m->axes[a].size;
        cur->fn[f]--;
    }
}

/* Layout a strategy gives tensor t of node n's rule; results carry the
 * partial axes of the split reduction factors. */
static void strat_layout(const Search *s, const FactorRule *r, const Node *n, const Strat *st, int t, Sharding *out)
{
    rule_project(r, t, st->fn, (const unsigned char (*)[MESH_MAX_AXES])st->fa, s->m, out);
    if (t >= n->ninputs)
        out->partial = rule_reduced_axes(r, st->fn, (const unsigned char (*)[MESH_MAX_AXES])st->fa);
}

/* Layout of tensor index t of node ni under option o of its choice; an
 * operand's (what the node needs) is never partial. */
void auto_node_layout(const Search *s, int ni, int o, int t, Sharding *out)
{
    const Node *n = s->p->g->nodes[ni];
    strat_layout(s, &s->p->nodes[ni].rule, n, &s->strats[ni][o], t, out);
    if (t < n->ninputs)
        out->partial = 0;
}

static int out_index(const Tensor *t)
{
    int k = 0;
    while (t->producer->outputs[k] != t)
        k++;
    return t->producer->ninputs + k;
}

/* A node that only maps or moves values follows the choice of the node
 * producing its main operand (Alpa's operator clustering): no reduction or
 * must-be-whole factor, and every factor appears in that operand, so the
 * operand's layout decides the node's whole factor sharding. Returns the
 * operand, or -1 for a node with a choice of its own. */
static int follower_operand(const Search *s, int ni)
{
    const Node *n = s->p->g->nodes[ni];
    const FactorRule *r = &s->p->nodes[ni].rule;
    if (n->noutputs != 1)
        return -1;
    for (int f = 0; f < r->nfactors; f++)
        if (r->kind[f] != FK_PASS)
            return -1;
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!t || !t->producer || t->rank < 0)
            continue;
        unsigned char seen[RULE_MAX_FACTORS] = {0};
        for (int i = 0; i < t->rank; i++)
            for (int fi = 0; fi < r->dims[k][i].n; fi++)
                seen[r->dims[k][i].f[fi]] = 1;
        int all = 1;
        for (int f = 0; f < r->nfactors; f++)
            all &= seen[f];
        if (all)
            return k;
    }
    return -1;
}

static Strat *strat_array(Search *s, int n)
{
    return auto_alloc(s, (size_t)(n ? n : 1), sizeof(Strat));
}

static Choice *new_choice(Search *s, int leader, const Tensor *src, int nopts)
{
    Choice *c = &s->choices[s->nchoices++];
    c->leader = leader;
    c->src = src;
    c->nopts = nopts;
    c->cost = auto_alloc(s, (size_t)nopts + 1, sizeof(double));
    c->weights = auto_alloc(s, (size_t)nopts + 1, sizeof(int64_t));
    c->sent = auto_alloc(s, (size_t)nopts + 1, sizeof(int64_t));
    return c;
}

/* A node with a choice of its own: every strategy of its rule, without
 * duplicates (the same layout of every tensor). */
static int leader_strats(Search *s, int ni, Diag *d)
{
    const Node *n = s->p->g->nodes[ni];
    const FactorRule *r = &s->p->nodes[ni].rule;
    s->strats[ni] = strat_array(s, AUTO_MAX_STRATS);
    Strat cur;
    memset(&cur, 0, sizeof cur);
    int64_t left[RULE_MAX_FACTORS];
    for (int f = 0; f < r->nfactors; f++)
        left[f] = 1;
    int overflow = 0;
    enum_strats(s, ni, r, 0, &cur, left, &overflow);
    if (overflow) {
        diag_add(d, "node \"%s\" (%s): more than %d sharding strategies on this mesh; annotate it or use "
                 "fewer mesh axes", n->name, node_op_name(n), AUTO_MAX_STRATS);
        return -1;
    }
    int kept = 0;
    for (int i = 0; i < s->nstrats[ni]; i++) {
        const Strat *st = &s->strats[ni][i];
        int dup = 0;
        for (int j = 0; j < kept && !dup; j++) {
            int same = 1;
            for (int t = 0; t < r->ntensors && same; t++) {
                if (!r->tensors[t] || r->tensors[t]->rank < 0)
                    continue;
                Sharding l1, l2;
                strat_layout(s, r, n, st, t, &l1);
                strat_layout(s, r, n, &s->strats[ni][j], t, &l2);
                same = sharding_equal(&l1, &l2);
            }
            dup = same;
        }
        if (!dup)
            s->strats[ni][kept++] = *st;
    }
    s->nstrats[ni] = kept;
    return 0;
}

/* A follower's strategy under each option of its leader's choice: the
 * factor sharding its main operand's layout implies there. */
static void follower_strats(Search *s, int ni, int k0)
{
    const Node *n = s->p->g->nodes[ni];
    const FactorRule *r = &s->p->nodes[ni].rule;
    const Tensor *t = n->inputs[k0];
    int pn = t->producer->id, pidx = out_index(t);
    const Choice *c = &s->choices[s->node_choice[pn]];
    s->strats[ni] = strat_array(s, c->nopts);
    s->nstrats[ni] = c->nopts;
    for (int o = 0; o < c->nopts; o++) {
        Sharding l;
        auto_node_layout(s, pn, o, pidx, &l);
        Strat *st = &s->strats[ni][o];
        rule_factors_of(s->m, r, k0, &l, st->fn, st->fa);
        if (!rule_representable(s->m, r, st->fn, (const unsigned char (*)[MESH_MAX_AXES])st->fa))
            memset(st, 0, sizeof *st);
    }
}

/* Every layout of a source: each axis on one dim (evenly or padded), or on none. */
static void enum_layouts(const Mesh *m, const Tensor *t, int a, Sharding *cur, int64_t *left, Sharding *out,
                         int *n, int cap)
{
    if (a == m->naxes) {
        if (*n < cap)
            out[(*n)++] = *cur;
        return;
    }
    enum_layouts(m, t, a + 1, cur, left, out, n, cap);
    for (int i = 0; i < t->rank && m->axes[a].size > 1; i++) {
        if (t->dims[i] <= 1 || left[i] * m->axes[a].size > t->dims[i] / (t->split_unit[i] > 1 ? t->split_unit[i] : 1))
            continue; /* left: shards so far; the split may pad (sharding.c) */
        cur->axes[i][cur->naxes[i]++] = (unsigned char)a;
        left[i] *= m->axes[a].size;
        enum_layouts(m, t, a + 1, cur, left, out, n, cap);
        left[i] /= m->axes[a].size;
        cur->naxes[i]--;
    }
}

/* ---- choices and edges -------------------------------------------------- */

static void add_edge(Search *s, Edge e)
{
    if (s->nedges == s->edges_cap) {
        int cap = s->edges_cap ? 2 * s->edges_cap : 256;
        s->edges = auto_grow(s, s->edges, (size_t)s->nedges, (size_t)cap, sizeof(Edge));
        s->edges_cap = cap;
    }
    s->edges[s->nedges++] = e;
}

/* Layout of the value on edge e under option o of its producer's choice,
 * and under option o of its consumer's (what the consumer needs). */
static void edge_have(const Search *s, const Edge *e, int o, Sharding *out)
{
    if (e->pnode < 0)
        *out = s->choices[e->from].layouts[o];
    else
        auto_node_layout(s, e->pnode, o, e->pidx, out);
}

static void edge_need(const Search *s, const Edge *e, int o, const Sharding *have, Sharding *out)
{
    if (e->to < 0) {
        /* A graph output: a partial sum is reduced, a split is kept (--out
         * gathers it to rank 0 once, after the run, outside the step). */
        *out = *have;
        out->partial = 0;
    } else
        auto_node_layout(s, e->cnode, o, e->cidx, out);
}

double auto_edge_cost(Search *s, const Edge *e, int a, int b)
{
    Sharding have, need;
    edge_have(s, e, a, &have);
    edge_need(s, e, b, &have, &need);
    return reshard_cost(s, e->t, &have, &need);
}

/* Bytes of the buffers the reshard on edge e writes under options a, b. */
int64_t auto_edge_buf(Search *s, const Edge *e, int a, int b)
{
    Sharding have, need;
    int64_t bytes;
    edge_have(s, e, a, &have);
    edge_need(s, e, b, &have, &need);
    reshard_cost_buf(s, e->t, &have, &need, &bytes, NULL);
    return bytes;
}

/* Bytes sent per rank by the reshard on edge e under options a, b. */
int64_t auto_edge_sent(Search *s, const Edge *e, int a, int b)
{
    Sharding have, need;
    int64_t sent;
    edge_have(s, e, a, &have);
    edge_need(s, e, b, &have, &need);
    reshard_cost_buf(s, e->t, &have, &need, NULL, &sent);
    return sent;
}

/* Is option o of node ni's choice allowed by the annotations on the node's
 * results and on the single-use sources it reads? */
static int option_allowed(const Search *s, int ni, int o, const Annotation **why)
{
    const Node *n = s->p->g->nodes[ni];
    for (int k = 0; k < n->noutputs; k++) {
        const Tensor *t = n->outputs[k];
        const Annotation *a = t ? auto_annotation_of(s, t) : NULL;
        Sharding l;
        if (a) {
            auto_node_layout(s, ni, o, n->ninputs + k, &l);
            if (!sharding_equal(&l, &a->sharding)) {
                *why = a;
                return 0;
            }
        }
    }
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!auto_is_source(t) || s->src_choice[t->id] >= 0)
            continue;
        const Annotation *a = auto_annotation_of(s, t);
        Sharding l;
        auto_node_layout(s, ni, o, k, &l);
        if (a ? !sharding_equal(&l, &a->sharding) : !(t->is_input || t->is_initializer) && !sharding_is_replicated(&l)) {
            *why = a;
            return 0;
        }
    }
    return 1;
}

int auto_build_choices(Search *s, Diag *d)
{
    const Graph *g = s->p->g;
    const Mesh *m = s->m;
    s->choices = auto_alloc(s, (size_t)(g->nnodes + g->ntensors + 1), sizeof(Choice));
    /* Shared sources: a choice among their layouts. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        s->src_choice[t->id] = -1;
        /* An annotated one is stored as annotated, whatever its reader
         * needs: a choice of one layout, resharded on an edge. */
        const Annotation *a = auto_is_source(t) ? auto_annotation_of(s, t) : NULL;
        if (!auto_is_source(t) || !t->nconsumers || (source_uses(t) < 2 && !a))
            continue;
        Sharding *lay = auto_alloc(s, 256, sizeof(Sharding));
        int nl = 0;
        if (a) {
            lay[nl++] = a->sharding;
        } else if (t->is_input || t->is_initializer) {
            Sharding cur;
            sharding_replicated(&cur, t->rank);
            int64_t left[IR_MAX_RANK];
            for (int i = 0; i < IR_MAX_RANK; i++)
                left[i] = 1;
            enum_layouts(m, t, 0, &cur, left, lay, &nl, 256);
        } else {
            sharding_replicated(&lay[nl++], t->rank);
        }
        Choice *c = new_choice(s, -1, t, nl);
        c->layouts = lay;
        for (int o = 0; t->is_initializer && o < nl; o++)
            c->weights[o] = sharding_local_bytes(&lay[o], m, t);
        s->src_choice[t->id] = (int)(c - s->choices);
    }
    /* Nodes, in order: a follower joins its main operand's choice. */
    for (int ni = 0; ni < g->nnodes; ni++) {
        int k0 = follower_operand(s, ni);
        if (k0 >= 0) {
            s->node_choice[ni] = s->node_choice[g->nodes[ni]->inputs[k0]->producer->id];
            follower_strats(s, ni, k0);
            continue;
        }
        if (leader_strats(s, ni, d))
            return -1;
        s->node_choice[ni] = (int)(new_choice(s, ni, NULL, s->nstrats[ni]) - s->choices);
    }
    /* Annotations are hard: drop the options of a choice that any member
     * node contradicts, compacting every member's strategies alike. */
    char *ok = auto_alloc(s, AUTO_MAX_STRATS + 1, 1);
    for (int ci = 0; ci < s->nchoices; ci++) {
        Choice *c = &s->choices[ci];
        if (c->src)
            continue;
        const Annotation *why = NULL;
        memset(ok, 1, (size_t)c->nopts);
        for (int ni = 0; ni < g->nnodes; ni++)
            if (s->node_choice[ni] == ci)
                for (int o = 0; o < c->nopts; o++)
                    if (ok[o] && !option_allowed(s, ni, o, &why))
                        ok[o] = 0;
        int kept = 0;
        for (int o = 0; o < c->nopts; o++)
            if (ok[o]) {
                for (int ni = 0; ni < g->nnodes; ni++)
                    if (s->node_choice[ni] == ci)
                        s->strats[ni][kept] = s->strats[ni][o];
                kept++;
            }
        if (!kept) {
            const Node *n = g->nodes[c->leader];
            if (why)
                diag_add(d, "annotation %s=%s cannot hold: no sharding strategy of node \"%s\" (%s) and the nodes "
                         "that follow it gives or reads that layout", why->tensor, why->spec, n->name,
                         node_op_name(n));
            else
                diag_add(d, "node \"%s\" (%s): no sharding strategy keeps its inputs whole", n->name,
                         node_op_name(n));
            return -1;
        }
        c->nopts = kept;
        for (int ni = 0; ni < g->nnodes; ni++)
            if (s->node_choice[ni] == ci)
                s->nstrats[ni] = kept;
    }
    /* Option costs: every member's compute and the single-use weights it
     * stores. */
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Node *n = g->nodes[ni];
        const FactorRule *r = &s->p->nodes[ni].rule;
        Choice *c = &s->choices[s->node_choice[ni]];
        for (int o = 0; o < c->nopts; o++) {
            Strat *st = &s->strats[ni][o];
            st->compute = plan_node_seconds(s->p, n, r, st->fn, (const unsigned char (*)[MESH_MAX_AXES])st->fa);
            st->weights = 0;
            for (int k = 0; k < n->ninputs; k++) {
                const Tensor *t = n->inputs[k];
                if (auto_is_source(t) && t->is_initializer && s->src_choice[t->id] < 0) {
                    Sharding l;
                    auto_node_layout(s, ni, o, k, &l);
                    /* --zero: an optimizer update's state is stored as
                     * this rank's block (auto.c's anchor_updates). */
                    if (k > 0 && ir_output_in_place(n, 0) >= 0)
                        plan_zero_shard(s->p, t, &l);
                    st->weights += sharding_local_bytes(&l, m, t);
                }
            }
            c->cost[o] += st->compute;
            c->weights[o] += st->weights;
        }
    }
    /* Edges: every value crossing two choices; one inside a choice is a
     * cost of each of its options. */
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Node *n = g->nodes[ni];
        for (int k = 0; k < n->ninputs; k++) {
            const Tensor *t = n->inputs[k];
            if (!t || t->rank < 0)
                continue;
            Edge e = {t, -1, -1, 0, s->node_choice[ni], ni, k};
            if (t->producer) {
                e.from = s->node_choice[t->producer->id];
                e.pnode = t->producer->id;
                e.pidx = out_index(t);
            } else if (s->src_choice[t->id] >= 0) {
                e.from = s->src_choice[t->id];
            } else {
                continue; /* a single-use source: stored as this node needs */
            }
            if (e.from == e.to) {
                Choice *c = &s->choices[e.to];
                for (int o = 0; o < c->nopts; o++) {
                    c->cost[o] += auto_edge_cost(s, &e, o, o);
                    c->sent[o] += auto_edge_sent(s, &e, o, o);
                }
                if (s->ninner == s->inner_cap) {
                    int cap = s->inner_cap ? 2 * s->inner_cap : 64;
                    s->inner = auto_grow(s, s->inner, (size_t)s->ninner, (size_t)cap, sizeof(Edge));
                    s->inner_cap = cap;
                }
                s->inner[s->ninner++] = e;
            } else {
                add_edge(s, e);
            }
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        Edge e = {t, -1, -1, 0, -1, -1, i};
        if (t->producer) {
            e.from = s->node_choice[t->producer->id];
            e.pnode = t->producer->id;
            e.pidx = out_index(t);
        } else if (auto_is_source(t) && s->src_choice[t->id] >= 0) {
            e.from = s->src_choice[t->id];
        } else {
            continue;
        }
        add_edge(s, e);
    }
    return 0;
}

/* Groups the options of one end of an edge by the layout they give (or
 * need): group[o] is option o's group; returns the group count. */
int auto_group_options(const Search *s, const Edge *e, int consumer, int *group, Sharding *rep)
{
    const Choice *c = &s->choices[consumer ? e->to : e->from];
    int ng = 0;
    for (int o = 0; o < c->nopts; o++) {
        Sharding l;
        if (consumer)
            edge_need(s, e, o, NULL, &l);
        else
            edge_have(s, e, o, &l);
        int gi = 0;
        while (gi < ng && !sharding_equal(&rep[gi], &l))
            gi++;
        if (gi == ng)
            rep[ng++] = l;
        group[o] = gi;
    }
    return ng;
}
