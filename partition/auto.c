/* auto.c: --auto, layouts chosen by an integer program over the cost model.
 *
 * The intra-operator half of Alpa (OSDI'22), on the factor rules:
 *
 * 1. Strategies. For every node, each mesh axis goes to one of the node's
 *    shardable factors (or to none) when the product of the axes a factor
 *    gets divides it; strategies some tensor could not hold (rules.c's
 *    representability) are dropped, and so are duplicates. A strategy fixes
 *    the layout of every operand and result, and its compute time (cost.c:
 *    the roofline max(FLOPs / peak, bytes / memory bandwidth) of the device
 *    preset on the local shard).
 * 2. Choices. Each node is one choice among its strategies. A weight or
 *    input read by one operand only takes the layout that operand needs
 *    (stored that way, no reshard); one read by several operands is a
 *    choice of its own among its layouts. User annotations are hard: an
 *    annotated source has one layout, an annotated result keeps only the
 *    strategies that produce it exactly.
 * 3. Edges. Every value crossing two choices costs the reshard (reshard.c,
 *    under the link model) from the layout its producer's strategy gives it
 *    to the layout its consumer's strategy needs; a graph output costs the
 *    reduction of a partial sum (--out gathers it outside the step). Strategies are grouped by the layout they give or need, and
 *    an edge is a transport between the two groups: continuous variables
 *    y[i][j] whose row sums are the producer's group indicators and column
 *    sums the consumer's, so y is the product of two one-hot vectors
 *    without the quadratic term.
 * 4. Memory. With --mem-limit, one row per program step: weights (every
 *    weight's local bytes) plus the values live at that step, at the local
 *    size their producer's strategy gives them, stay under the limit.
 * 5. The program is solved exactly under a time limit: by COIN-OR CBC
 *    through its C API when libCbcSolver loads (cbc.c; 3x faster than
 *    GLPK on the 64-rank Llama program), else by GLPK's dual simplex and
 *    branch and cut (linked in); --auto-solver picks one. The chosen
 *    factor shardings go to propagate.c's lowering, which records the
 *    reshards as for an annotated plan.
 *
 * Every decision is kept for --explain: a node's chosen strategy, its
 * cost, and the best alternatives with what switching that node alone
 * would add to the plan's cost.
 */
#include "partition.h"

#include <float.h>
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AUTO_MAX_STRATS 512 /* per node, after pruning duplicates */

typedef struct Strat {
    unsigned char fn[RULE_MAX_FACTORS];
    unsigned char fa[RULE_MAX_FACTORS][MESH_MAX_AXES];
    double compute;   /* seconds, local shard */
    int64_t weights;  /* bytes of the single-use sources it stores */
} Strat;

/* A choice of the integer program: a node's strategies or a shared
 * source's layouts. col0 is the first GLPK column (1-based). */
typedef struct Choice {
    int leader;         /* the node whose strategies are the options, or -1 for a source */
    const Tensor *src;  /* the shared source, else NULL */
    int nopts;
    int col0;
    double *cost;       /* per option, seconds: compute + edges inside */
    int64_t *weights;   /* per option: weight bytes held */
    int64_t *sent;      /* per option: bytes sent per rank by the edges inside */
    Sharding *layouts;  /* source choice: its candidate layouts */
    int pick;           /* the solution */
} Choice;

/* A value crossing two choices: from its producer (a node, or a shared
 * source when pnode is -1) to a consumer node's operand (or, with to = -1,
 * to the graph outputs). pidx/cidx are tensor indices in the nodes' rules. */
typedef struct Edge {
    const Tensor *t;
    int from, pnode, pidx;
    int to, cnode, cidx;
} Edge;

/* A cache of reshard costs: many edges repeat the same shapes and layouts
 * (a model's layers), and the search is the expensive part of an edge. */
typedef struct CostKey {
    int64_t dims[IR_MAX_RANK];
    int rank, esize;
    Sharding src, dst;
} CostKey;

typedef struct CostCache {
    CostKey *keys;
    double *vals;       /* seconds, -1 for an empty slot */
    int64_t *bufs;      /* bytes of the buffers the reshard's steps write */
    int64_t *sent;      /* bytes sent per rank */
    int cap, n;
} CostCache;

typedef struct Search {
    Plan *p;
    const Mesh *m;
    const AnnotationList *ann;
    Strat **strats;     /* per node: its strategy under each option of its choice */
    int *nstrats;
    Choice *choices;
    int nchoices;
    int *node_choice;   /* node index -> choice */
    int *src_choice;    /* tensor id -> choice, or -1 (a single-use source) */
    Edge *edges;
    int nedges, edges_cap;
    Edge *inner;        /* values inside one choice (costs folded into its options) */
    int ninner, inner_cap;
    CostCache cache;
    AutoReport *rep;
} Search;

/* ---- strategies --------------------------------------------------------- */

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
        c->keys = calloc((size_t)c->cap, sizeof(CostKey));
        c->vals = malloc(sizeof(double) * (size_t)c->cap);
        c->bufs = malloc(sizeof(int64_t) * (size_t)c->cap);
        c->sent = malloc(sizeof(int64_t) * (size_t)c->cap);
        if (!c->keys || !c->vals || !c->bufs || !c->sent)
            abort();
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
        free(old.keys);
        free(old.vals);
        free(old.bufs);
        free(old.sent);
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

static int is_source(const Tensor *t)
{
    return t && !t->producer && t->rank >= 0;
}

static const Annotation *annotation_of(const Search *s, const Tensor *t)
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
static void node_layout(const Search *s, int ni, int o, int t, Sharding *out)
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

static Strat *strat_array(int n)
{
    Strat *a = calloc((size_t)(n ? n : 1), sizeof(Strat));
    if (!a)
        abort();
    return a;
}

static Choice *new_choice(Search *s, int leader, const Tensor *src, int nopts)
{
    Choice *c = &s->choices[s->nchoices++];
    c->leader = leader;
    c->src = src;
    c->nopts = nopts;
    c->cost = calloc((size_t)nopts + 1, sizeof(double));
    c->weights = calloc((size_t)nopts + 1, sizeof(int64_t));
    c->sent = calloc((size_t)nopts + 1, sizeof(int64_t));
    if (!c->cost || !c->weights || !c->sent)
        abort();
    return c;
}

/* A node with a choice of its own: every strategy of its rule, without
 * duplicates (the same layout of every tensor). */
static int leader_strats(Search *s, int ni, Diag *d)
{
    const Node *n = s->p->g->nodes[ni];
    const FactorRule *r = &s->p->nodes[ni].rule;
    s->strats[ni] = strat_array(AUTO_MAX_STRATS);
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
    s->strats[ni] = strat_array(c->nopts);
    s->nstrats[ni] = c->nopts;
    for (int o = 0; o < c->nopts; o++) {
        Sharding l;
        node_layout(s, pn, o, pidx, &l);
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
        s->edges_cap = s->edges_cap ? 2 * s->edges_cap : 256;
        s->edges = realloc(s->edges, sizeof(Edge) * (size_t)s->edges_cap);
        if (!s->edges)
            abort();
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
        node_layout(s, e->pnode, o, e->pidx, out);
}

static void edge_need(const Search *s, const Edge *e, int o, const Sharding *have, Sharding *out)
{
    if (e->to < 0) {
        /* A graph output: a partial sum is reduced, a split is kept (--out
         * gathers it to rank 0 once, after the run, outside the step). */
        *out = *have;
        out->partial = 0;
    } else
        node_layout(s, e->cnode, o, e->cidx, out);
}

static double edge_cost(Search *s, const Edge *e, int a, int b)
{
    Sharding have, need;
    edge_have(s, e, a, &have);
    edge_need(s, e, b, &have, &need);
    return reshard_cost(s, e->t, &have, &need);
}

/* Bytes of the buffers the reshard on edge e writes under options a, b. */
static int64_t edge_buf(Search *s, const Edge *e, int a, int b)
{
    Sharding have, need;
    int64_t bytes;
    edge_have(s, e, a, &have);
    edge_need(s, e, b, &have, &need);
    reshard_cost_buf(s, e->t, &have, &need, &bytes, NULL);
    return bytes;
}

/* Bytes sent per rank by the reshard on edge e under options a, b. */
static int64_t edge_sent(Search *s, const Edge *e, int a, int b)
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
        const Annotation *a = t ? annotation_of(s, t) : NULL;
        Sharding l;
        if (a) {
            node_layout(s, ni, o, n->ninputs + k, &l);
            if (!sharding_equal(&l, &a->sharding)) {
                *why = a;
                return 0;
            }
        }
    }
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!is_source(t) || s->src_choice[t->id] >= 0)
            continue;
        const Annotation *a = annotation_of(s, t);
        Sharding l;
        node_layout(s, ni, o, k, &l);
        if (a ? !sharding_equal(&l, &a->sharding) : !(t->is_input || t->is_initializer) && !sharding_is_replicated(&l)) {
            *why = a;
            return 0;
        }
    }
    return 1;
}

static int build_choices(Search *s, Diag *d)
{
    const Graph *g = s->p->g;
    const Mesh *m = s->m;
    s->choices = calloc((size_t)(g->nnodes + g->ntensors + 1), sizeof(Choice));
    if (!s->choices)
        abort();
    /* Shared sources: a choice among their layouts. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        s->src_choice[t->id] = -1;
        /* An annotated one is stored as annotated, whatever its reader
         * needs: a choice of one layout, resharded on an edge. */
        const Annotation *a = is_source(t) ? annotation_of(s, t) : NULL;
        if (!is_source(t) || !t->nconsumers || (source_uses(t) < 2 && !a))
            continue;
        Sharding *lay = malloc(sizeof(Sharding) * 256);
        if (!lay)
            abort();
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
    char *ok = malloc(AUTO_MAX_STRATS + 1);
    if (!ok)
        abort();
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
            free(ok);
            return -1;
        }
        c->nopts = kept;
        for (int ni = 0; ni < g->nnodes; ni++)
            if (s->node_choice[ni] == ci)
                s->nstrats[ni] = kept;
    }
    free(ok);
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
                if (is_source(t) && t->is_initializer && s->src_choice[t->id] < 0) {
                    Sharding l;
                    node_layout(s, ni, o, k, &l);
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
                    c->cost[o] += edge_cost(s, &e, o, o);
                    c->sent[o] += edge_sent(s, &e, o, o);
                }
                if (s->ninner == s->inner_cap) {
                    s->inner_cap = s->inner_cap ? 2 * s->inner_cap : 64;
                    s->inner = realloc(s->inner, sizeof(Edge) * (size_t)s->inner_cap);
                    if (!s->inner)
                        abort();
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
        } else if (is_source(t) && s->src_choice[t->id] >= 0) {
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
static int group_options(const Search *s, const Edge *e, int consumer, int *group, Sharding *rep)
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

/* ---- the integer program ------------------------------------------------ */

typedef struct Matrix {
    int *ia, *ja;
    double *ar;
    int n, cap;
} Matrix;

static void mat_add(Matrix *mx, int row, int col, double v)
{
    if (mx->n + 1 >= mx->cap) {
        mx->cap = mx->cap ? 2 * mx->cap : 4096;
        mx->ia = realloc(mx->ia, sizeof(int) * (size_t)mx->cap);
        mx->ja = realloc(mx->ja, sizeof(int) * (size_t)mx->cap);
        mx->ar = realloc(mx->ar, sizeof(double) * (size_t)mx->cap);
        if (!mx->ia || !mx->ja || !mx->ar)
            abort();
    }
    mx->n++;
    mx->ia[mx->n] = row;
    mx->ja[mx->n] = col;
    mx->ar[mx->n] = v;
}

#define US 1e6 /* the objective in microseconds keeps coefficients near 1 */

/* Branch-and-cut callback: keeps the relative gap between the incumbent
 * and the best bound, to report when the time limit stops the search. */
static void on_tree(glp_tree *tree, void *info)
{
    double *gap = info;
    if (glp_ios_reason(tree) == GLP_IBINGO || glp_ios_reason(tree) == GLP_ISELECT)
        *gap = glp_ios_mip_gap(tree);
}

/* A reshard's buffers in the memory rows: bytes held at a program step
 * when column col is 1 (col 0: always). */
typedef struct MemTerm {
    int col, step;
    double bytes;
} MemTerm;

typedef struct MemTerms {
    MemTerm *t;
    int n, cap;
} MemTerms;

static void term_add(MemTerms *m, int col, int step, int64_t bytes)
{
    if (bytes <= 0)
        return;
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 256;
        m->t = realloc(m->t, sizeof(MemTerm) * (size_t)m->cap);
        if (!m->t)
            abort();
    }
    m->t[m->n++] = (MemTerm){col, step, (double)bytes};
}

/* GLPK: dual simplex for the root relaxation, then branch and cut. */
static void solve_glpk(glp_prob *lp, double time_limit_s, MipResult *res)
{
    glp_iocp parm;
    glp_init_iocp(&parm);
    /* O2S_AUTO_VERBOSE=1 shows GLPK's own progress log, for debugging a slow search. */
    parm.msg_lev = getenv("O2S_AUTO_VERBOSE") ? GLP_MSG_ALL : GLP_MSG_OFF;
    if (getenv("O2S_AUTO_VERBOSE"))
        glp_term_out(GLP_ON);
    /* Pseudo-cost branching: with a memory limit the program is a
     * knapsack over layouts, where GLPK's default branching stalls (tiny_gpt
     * on tp=2: optimal in 7 s, against no proof in 60 s); cuts and the
     * feasibility pump did not help there. */
    parm.br_tech = GLP_BR_PCH;
    double gap = 0;
    parm.cb_func = on_tree;
    parm.cb_info = &gap;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = parm.msg_lev;
    sp.meth = GLP_DUALP; /* faster than primal on the programs of bench/auto_bench.py */
    /* The textbook ratio test: 8.7 s against 10.4 s for the long-step one
     * (GLPK's default) and 10.0 s for Harris' on the 64-rank Llama program. */
    sp.r_test = GLP_RT_STD;
    sp.presolve = GLP_OFF;
    sp.tm_lim = (int)(time_limit_s * 1000);
    int ret = glp_simplex(lp, &sp);
    /* The relaxation bounds the search; infeasible there, nothing fits. */
    int lp_st = ret == 0 ? glp_get_status(lp) : GLP_UNDEF;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double spent = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    parm.presolve = GLP_OFF;
    parm.tm_lim = (int)((time_limit_s - spent) * 1000);
    if (parm.tm_lim < 1)
        parm.tm_lim = 1;
    if (lp_st == GLP_OPT)
        ret = glp_intopt(lp, &parm);
    int st = lp_st == GLP_OPT ? glp_mip_status(lp) : GLP_UNDEF;
    if (lp_st == GLP_NOFEAS || ret == GLP_ENOPFS || ret == GLP_ENODFS || st == GLP_NOFEAS) {
        res->status = MIP_INFEASIBLE;
    } else if (st != GLP_OPT && st != GLP_FEAS) {
        res->status = MIP_NONE;
    } else {
        res->status = st == GLP_OPT ? MIP_OPTIMAL : MIP_FEASIBLE;
        res->objective = glp_mip_obj_val(lp);
        res->bound = st == GLP_OPT ? res->objective : res->objective * (1 - gap);
        int nc = glp_get_num_cols(lp);
        res->x = malloc(sizeof(double) * (size_t)(nc ? nc : 1));
        if (!res->x)
            abort();
        for (int j = 0; j < nc; j++)
            res->x[j] = glp_mip_col_val(lp, j + 1);
    }
}

/* Bounds of a GLPK row or column as a lower/upper pair (infinite: DBL_MAX). */
static void glpk_bounds(int type, double lb, double ub, double *lo, double *hi)
{
    *lo = type == GLP_FR || type == GLP_UP ? -DBL_MAX : lb;
    *hi = type == GLP_FR || type == GLP_LO ? DBL_MAX : ub;
}

/* CBC (cbc.c) on the same program, copied out of GLPK's problem object
 * into CBC's column-major arrays. */
static int solve_cbc(glp_prob *lp, double time_limit_s, MipResult *res)
{
    if (!cbc_available())
        return -1;
    int nr = glp_get_num_rows(lp), nc = glp_get_num_cols(lp), nz = glp_get_num_nz(lp);
    MipProblem mp = {.nrows = nr, .ncols = nc};
    int *start = malloc(sizeof(int) * (size_t)(nc + 1)), *index = malloc(sizeof(int) * (size_t)(nz + 1));
    int *ind = malloc(sizeof(int) * (size_t)(nr + 1));
    double *value = malloc(sizeof(double) * (size_t)(nz + 1)), *val = malloc(sizeof(double) * (size_t)(nr + 1));
    double *collb = malloc(sizeof(double) * (size_t)(nc + 1)), *colub = malloc(sizeof(double) * (size_t)(nc + 1));
    double *obj = malloc(sizeof(double) * (size_t)(nc + 1));
    double *rowlb = malloc(sizeof(double) * (size_t)(nr + 1)), *rowub = malloc(sizeof(double) * (size_t)(nr + 1));
    char *is_int = malloc((size_t)nc + 1);
    if (!start || !index || !ind || !value || !val || !collb || !colub || !obj || !rowlb || !rowub || !is_int)
        abort();
    int k = 0;
    for (int j = 0; j < nc; j++) {
        start[j] = k;
        int len = glp_get_mat_col(lp, j + 1, ind, val);
        for (int i = 1; i <= len; i++) {
            index[k] = ind[i] - 1;
            value[k++] = val[i];
        }
        glpk_bounds(glp_get_col_type(lp, j + 1), glp_get_col_lb(lp, j + 1), glp_get_col_ub(lp, j + 1), &collb[j],
                    &colub[j]);
        obj[j] = glp_get_obj_coef(lp, j + 1);
        is_int[j] = glp_get_col_kind(lp, j + 1) != GLP_CV;
    }
    start[nc] = k;
    for (int i = 0; i < nr; i++)
        glpk_bounds(glp_get_row_type(lp, i + 1), glp_get_row_lb(lp, i + 1), glp_get_row_ub(lp, i + 1), &rowlb[i],
                    &rowub[i]);
    mp.start = start;
    mp.index = index;
    mp.value = value;
    mp.collb = collb;
    mp.colub = colub;
    mp.obj = obj;
    mp.rowlb = rowlb;
    mp.rowub = rowub;
    mp.is_int = is_int;
    int rc = cbc_solve(&mp, time_limit_s, res);
    if (rc == 0 && res->status != MIP_NONE && res->status != MIP_INFEASIBLE) {
        res->objective += glp_get_obj_coef(lp, 0);
        res->bound += glp_get_obj_coef(lp, 0);
    }
    free(start);
    free(index);
    free(ind);
    free(value);
    free(val);
    free(collb);
    free(colub);
    free(obj);
    free(rowlb);
    free(rowub);
    free(is_int);
    return rc;
}

/* The second pass: among the plans within AUTO_TIME_SLACK of the fastest
 * (the first pass's optimum), the one that sends the fewest bytes. The
 * cost model cannot tell plans that close apart (its latencies and
 * bandwidths are presets, its overlap is not in the sum), and fewer bytes
 * leave less to the link model's errors: on GPT-2 medium over tp=2 this
 * turns a plan 0.2% faster on paper that all-gathers the residual stream
 * (92 MB per rank) into Megatron's all-reduces (84 MB). It runs after an
 * optimal first pass only, on programs of at most AUTO_BYTES_PASS_MAX_COLS
 * columns, for half the first pass's time (at least AUTO_BYTES_PASS_MIN_S),
 * and its plan is taken only if proven optimal:
 * otherwise the first pass's stands and the report says so. Knapsack-like
 * programs under a tight --mem-limit are where it runs out of time. */
#define AUTO_TIME_SLACK 0.01
#define AUTO_BYTES_PASS_MIN_S 0.25
/* Larger programs skip it: on the 64-rank Llama one (134,706 columns)
 * it did not finish in twice the first pass's 4 s. */
#define AUTO_BYTES_PASS_MAX_COLS 20000

static void bytes_pass(Search *s, glp_prob *lp, const char *solver, const double *obj, const double *sent,
                       int ncols, double time_limit_s, MipResult *res)
{
    double first_sent = 0;
    for (int j = 1; j <= ncols; j++)
        first_sent += sent[j] * res->x[j - 1];
    if (first_sent <= 0)
        return; /* nothing is sent: nothing to trade */
    int row = glp_add_rows(lp, 1), *ind = malloc(sizeof(int) * ((size_t)ncols + 1));
    double *val = malloc(sizeof(double) * ((size_t)ncols + 1));
    if (!ind || !val)
        abort();
    int n = 0;
    for (int j = 1; j <= ncols; j++)
        if (obj[j] != 0) {
            ind[++n] = j;
            val[n] = obj[j];
        }
    glp_set_mat_row(lp, row, n, ind, val);
    double c0 = glp_get_obj_coef(lp, 0);
    glp_set_row_bnds(lp, row, GLP_UP, 0.0, (res->objective - c0) * (1 + AUTO_TIME_SLACK) + 1e-9);
    for (int j = 1; j <= ncols; j++)
        glp_set_obj_coef(lp, j, sent[j]);
    glp_set_obj_coef(lp, 0, 0.0);
    MipResult two = {MIP_NONE, 0, 0, NULL};
    if (strcmp(solver, "cbc") == 0)
        solve_cbc(lp, time_limit_s, &two);
    else
        solve_glpk(lp, time_limit_s, &two);
    s->rep->bytes_pass = two.status == MIP_OPTIMAL ? 2 : -1; /* 2: ran, nothing better; -1: out of time */
    if (two.status == MIP_OPTIMAL && two.objective < first_sent * (1 - 1e-9)) {
        double t = c0;
        for (int j = 1; j <= ncols; j++)
            t += obj[j] * two.x[j - 1];
        free(res->x);
        res->x = two.x;
        res->objective = res->bound = t;
        s->rep->bytes_pass = 1;
    } else {
        free(two.x);
    }
    free(ind);
    free(val);
}

/* ---- building the program ----------------------------------------------- */

/* An integer program built from the choices and edges, with what the
 * second pass needs of it. */
typedef struct Program {
    glp_prob *lp;
    double *obj, *sent; /* per column (1-based): microseconds, MB */
    int ncols, nrows, nnz;
} Program;

/* How a program shares columns (repeated layers, below). A NULL Tie is the
 * whole program: every choice and edge its own. */
typedef struct Tie {
    int *rep;        /* choice -> the choice whose columns it takes */
    int *edge_rep;   /* edge -> the edge whose transport it shares */
    char *cut;       /* the bound only: edge -> relaxed, else NULL */
    double **cutmin; /* cut edge -> per consumer option, its cheapest reshard over the producer's options */
} Tie;

static void program_free(Program *pr)
{
    if (pr->lp)
        glp_delete_prob(pr->lp);
    free(pr->obj);
    free(pr->sent);
    memset(pr, 0, sizeof *pr);
}

/* The program over s's choices and edges. Under a tie, a choice takes its
 * representative's columns and an edge between the same columns its
 * representative's transport: every cost still lands (summed), so the
 * program's objective at a tied solution is the whole program's there. A
 * cut edge costs its consumer the cheapest reshard from any option of its
 * producer. With mem_limit, one row per program step bounds weights plus
 * live values. */
static void program_build(Search *s, const Tie *tie, int64_t mem_limit, Program *pr)
{
    const Graph *g = s->p->g;
    MemTerms terms = {0};
    int last_step = g->nnodes > 0 ? g->nnodes - 1 : 0;
    memset(pr, 0, sizeof *pr);
    glp_term_out(GLP_OFF);
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    Matrix mx = {0};
    int ncols = 0, nrows = 0;
    /* One-hot rows per choice. */
    int nown = 0;
    for (int ci = 0; ci < s->nchoices; ci++)
        nown += !tie || tie->rep[ci] == ci;
    glp_add_rows(lp, nown);
    for (int ci = 0; ci < s->nchoices; ci++) {
        Choice *c = &s->choices[ci];
        if (tie && tie->rep[ci] != ci)
            continue;
        c->col0 = ncols + 1;
        glp_add_cols(lp, c->nopts);
        nrows++;
        for (int o = 0; o < c->nopts; o++) {
            glp_set_col_kind(lp, c->col0 + o, GLP_BV);
            mat_add(&mx, nrows, c->col0 + o, 1.0);
        }
        ncols += c->nopts;
        glp_set_row_bnds(lp, nrows, GLP_FX, 1.0, 1.0);
    }
    for (int ci = 0; tie && ci < s->nchoices; ci++)
        s->choices[ci].col0 = s->choices[tie->rep[ci]].col0;
    /* Objective: option costs, then edges. */
    double *obj = calloc((size_t)ncols + 1, sizeof(double));
    double *sent = calloc((size_t)ncols + 1, sizeof(double)); /* the second pass's objective, in MB */
    if (!obj || !sent)
        abort();
    for (int ci = 0; ci < s->nchoices; ci++)
        for (int o = 0; o < s->choices[ci].nopts; o++) {
            obj[s->choices[ci].col0 + o] += s->choices[ci].cost[o] * US;
            sent[s->choices[ci].col0 + o] += (double)s->choices[ci].sent[o] / 1e6;
        }
    int *ga = malloc(sizeof(int) * AUTO_MAX_STRATS * 2), *gb = ga + AUTO_MAX_STRATS;
    Sharding *ra = malloc(sizeof(Sharding) * AUTO_MAX_STRATS * 2), *rb = ra + AUTO_MAX_STRATS;
    int *ia = malloc(sizeof(int) * AUTO_MAX_STRATS), *ib = malloc(sizeof(int) * AUTO_MAX_STRATS);
    /* A transport's first column and its groups (na, nb, then each end's
     * group per option), for the tied edges that share it. */
    int *y0 = calloc((size_t)s->nedges + 1, sizeof(int));
    int **groups = calloc((size_t)s->nedges + 1, sizeof(int *));
    if (!ga || !ra || !ia || !ib || !y0 || !groups)
        abort();
    for (int ei = 0; ei < s->nedges; ei++) {
        const Edge *e = &s->edges[ei];
        const Choice *cf = &s->choices[e->from];
        const Choice *ct = e->to >= 0 ? &s->choices[e->to] : NULL;
        if (tie && tie->cut && tie->cut[ei]) {
            for (int o = 0; o < ct->nopts; o++)
                obj[ct->col0 + o] += tie->cutmin[ei][o] * US;
            continue;
        }
        int na = group_options(s, e, 0, ga, ra);
        int nb = 1;
        gb[0] = 0;
        if (ct)
            nb = group_options(s, e, 1, gb, rb);
        /* A representative option per group, for the costs. */
        for (int o = cf->nopts - 1; o >= 0; o--)
            ia[ga[o]] = o;
        for (int o = ct ? ct->nopts - 1 : 0; o >= 0; o--)
            ib[gb[o]] = o;
        int step = ct ? e->cnode : last_step; /* where the reshard's result is read */
        int mem = mem_limit > 0;
        if (na == 1 || nb == 1) {
            /* Linear in the other end's options. */
            if (na == 1) {
                /* (With no consumer choice the cost is a constant.) */
                for (int o = 0; ct && o < ct->nopts; o++) {
                    obj[ct->col0 + o] += edge_cost(s, e, ia[0], o) * US;
                    sent[ct->col0 + o] += (double)edge_sent(s, e, ia[0], o) / 1e6;
                    if (mem)
                        term_add(&terms, ct->col0 + o, step, edge_buf(s, e, ia[0], o));
                }
                if (mem && !ct)
                    term_add(&terms, 0, step, edge_buf(s, e, ia[0], 0));
            } else {
                for (int o = 0; o < cf->nopts; o++) {
                    obj[cf->col0 + o] += edge_cost(s, e, o, ct ? ib[0] : 0) * US;
                    sent[cf->col0 + o] += (double)edge_sent(s, e, o, ct ? ib[0] : 0) / 1e6;
                    if (mem)
                        term_add(&terms, cf->col0 + o, step, edge_buf(s, e, o, ct ? ib[0] : 0));
                }
            }
            continue;
        }
        /* Transport: y[i][j] >= 0, row sums = producer groups, column
         * sums = consumer groups. A tied edge with the same groups as its
         * representative adds its costs to that transport. */
        int er = tie ? tie->edge_rep[ei] : ei;
        const int *gr = groups[er];
        int shared = er != ei && gr && gr[0] == na && gr[1] == nb &&
                     !memcmp(gr + 2, ga, sizeof(int) * (size_t)cf->nopts) &&
                     !memcmp(gr + 2 + cf->nopts, gb, sizeof(int) * (size_t)ct->nopts);
        int base = y0[er];
        if (!shared) {
            int rows0 = nrows;
            glp_add_rows(lp, na + nb);
            for (int i = 0; i < na + nb; i++)
                glp_set_row_bnds(lp, rows0 + 1 + i, GLP_FX, 0.0, 0.0);
            nrows += na + nb;
            for (int o = 0; o < cf->nopts; o++)
                mat_add(&mx, rows0 + 1 + ga[o], cf->col0 + o, -1.0);
            for (int o = 0; o < ct->nopts; o++)
                mat_add(&mx, rows0 + 1 + na + gb[o], ct->col0 + o, -1.0);
            base = ncols + 1;
            glp_add_cols(lp, na * nb);
            ncols += na * nb;
            obj = realloc(obj, sizeof(double) * ((size_t)ncols + 1));
            sent = realloc(sent, sizeof(double) * ((size_t)ncols + 1));
            if (!obj || !sent)
                abort();
            for (int i = 0; i < na; i++)
                for (int j = 0; j < nb; j++) {
                    int col = base + i * nb + j;
                    glp_set_col_bnds(lp, col, GLP_DB, 0.0, 1.0);
                    obj[col] = sent[col] = 0;
                    mat_add(&mx, rows0 + 1 + i, col, 1.0);
                    mat_add(&mx, rows0 + 1 + na + j, col, 1.0);
                }
            if (!groups[ei]) {
                int *gc = malloc(sizeof(int) * (size_t)(2 + cf->nopts + ct->nopts));
                if (!gc)
                    abort();
                gc[0] = na;
                gc[1] = nb;
                memcpy(gc + 2, ga, sizeof(int) * (size_t)cf->nopts);
                memcpy(gc + 2 + cf->nopts, gb, sizeof(int) * (size_t)ct->nopts);
                groups[ei] = gc;
                y0[ei] = base;
            }
        }
        for (int i = 0; i < na; i++)
            for (int j = 0; j < nb; j++) {
                int col = base + i * nb + j;
                obj[col] += edge_cost(s, e, ia[i], ib[j]) * US;
                sent[col] += (double)edge_sent(s, e, ia[i], ib[j]) / 1e6;
                if (mem)
                    term_add(&terms, col, step, edge_buf(s, e, ia[i], ib[j]));
            }
    }
    for (int ei = 0; ei < s->nedges; ei++)
        free(groups[ei]);
    free(groups);
    free(y0);
    /* Memory rows: weights + live values at each step, in MB. Several
     * nodes of one choice (or of tied choices) add to the same column:
     * summed per row first. */
    if (mem_limit > 0) {
        int nn = g->nnodes;
        int *last = malloc(sizeof(int) * (size_t)(g->ntensors + 1));
        double *acc = calloc((size_t)ncols + 1, sizeof(double));
        if (!last || !acc)
            abort();
        graph_last_readers(g, last);
        /* Weights are live at every step, so a step whose live values are
         * a subset of another's adds nothing: only the steps whose live set
         * is maximal get a row. With intervals [producer, last reader], the
         * set at step i is contained in step j's when every value live at
         * i is live at j; a sweep keeps step i unless its set grows by step
         * i+1 (then i+1 dominates) or shrank since i-1 without a birth. */
        int *born_at = calloc((size_t)nn + 1, sizeof(int)), *dies_after = calloc((size_t)nn + 2, sizeof(int));
        char *keep = calloc((size_t)nn + 1, 1);
        if (!born_at || !dies_after || !keep)
            abort();
        for (int ni = 0; ni < nn; ni++)
            for (int k = 0; k < g->nodes[ni]->noutputs; k++) {
                const Tensor *t = g->nodes[ni]->outputs[k];
                if (t && t->rank >= 0 && last[t->id] >= ni) {
                    born_at[ni]++;
                    dies_after[last[t->id] < nn ? last[t->id] : nn]++;
                }
            }
        /* Step i is dominated by i+1 when nothing dies after i (so i+1 holds
         * all of i's values). */
        for (int i = 0; i < s->ninner; i++) {
            const Edge *e = &s->inner[i];
            const Choice *c = &s->choices[e->to];
            for (int o = 0; o < c->nopts; o++)
                term_add(&terms, c->col0 + o, e->cnode, edge_buf(s, e, o, o));
        }
        for (int i = 0; i < terms.n; i++)
            keep[terms.t[i].step] = 1;
        int nkeep = 0;
        for (int step = 0; step < nn; step++) {
            keep[step] |= step == nn - 1 || dies_after[step] > 0;
            nkeep += keep[step];
        }
        /* The weights, live at every step, are summed once into a column
         * of their own (MB): every step's row then reads that column
         * instead of every option's weight, which kept the matrix dense. */
        int wcol = ++ncols;
        glp_add_cols(lp, 1);
        glp_set_col_bnds(lp, wcol, GLP_LO, 0.0, 0.0);
        obj = realloc(obj, sizeof(double) * ((size_t)ncols + 1));
        sent = realloc(sent, sizeof(double) * ((size_t)ncols + 1));
        acc = realloc(acc, sizeof(double) * ((size_t)ncols + 1));
        if (!obj || !sent || !acc)
            abort();
        obj[wcol] = sent[wcol] = acc[wcol] = 0;
        glp_add_rows(lp, 1);
        int wrow = ++nrows;
        glp_set_row_bnds(lp, wrow, GLP_FX, 0.0, 0.0);
        mat_add(&mx, wrow, wcol, -1.0);
        for (int ci = 0; ci < s->nchoices; ci++)
            for (int o = 0; o < s->choices[ci].nopts; o++)
                acc[s->choices[ci].col0 + o] += (double)s->choices[ci].weights[o];
        for (int col = 1; col <= ncols; col++) {
            if (acc[col] > 0)
                mat_add(&mx, wrow, col, acc[col] / 1e6);
            acc[col] = 0;
        }
        int r0 = nrows;
        glp_add_rows(lp, nkeep);
        nrows += nkeep;
        for (int step = 0, row = r0; step < nn; step++) {
            if (!keep[step])
                continue;
            row++;
            mat_add(&mx, row, wcol, 1.0);
            for (int ni = 0; ni <= step; ni++) {
                const Node *n = g->nodes[ni];
                const Choice *c = &s->choices[s->node_choice[ni]];
                for (int k = 0; k < n->noutputs; k++) {
                    const Tensor *t = n->outputs[k];
                    if (!t || t->rank < 0 || last[t->id] < step)
                        continue;
                    for (int o = 0; o < c->nopts; o++) {
                        Sharding l;
                        node_layout(s, ni, o, n->ninputs + k, &l);
                        acc[c->col0 + o] += (double)sharding_local_bytes(&l, s->m, t);
                    }
                }
            }
            /* Reshard results read at this step (a constant one lowers the bound). */
            double fixed = 0;
            for (int i = 0; i < terms.n; i++)
                if (terms.t[i].step == step) {
                    if (terms.t[i].col)
                        acc[terms.t[i].col] += terms.t[i].bytes;
                    else
                        fixed += terms.t[i].bytes;
                }
            glp_set_row_bnds(lp, row, GLP_UP, 0.0, ((double)mem_limit - fixed) / 1e6);
            for (int col = 1; col <= ncols; col++) {
                if (acc[col] > 0)
                    mat_add(&mx, row, col, acc[col] / 1e6);
                acc[col] = 0;
            }
        }
        free(last);
        free(acc);
        free(born_at);
        free(dies_after);
        free(keep);
    }
    free(terms.t);
    for (int col = 1; col <= ncols; col++)
        glp_set_obj_coef(lp, col, obj[col]);
    glp_load_matrix(lp, mx.n, mx.ia, mx.ja, mx.ar);
    pr->lp = lp;
    pr->obj = obj;
    pr->sent = sent;
    pr->ncols = ncols;
    pr->nrows = nrows;
    pr->nnz = mx.n;
    free(mx.ia);
    free(mx.ja);
    free(mx.ar);
    free(ga);
    free(ra);
    free(ia);
    free(ib);
}

static int program_solve(Program *pr, const char *solver, double time_limit_s, MipResult *res)
{
    if (strcmp(solver, "cbc") == 0)
        return solve_cbc(pr->lp, time_limit_s, res);
    solve_glpk(pr->lp, time_limit_s, res);
    return 0;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}
/* ---- repeated layers ---------------------------------------------------- */

/* A model's identical layers (a transformer's blocks) are one stretch of
 * node choices that repeats with a period: their options, costs and
 * strategies are equal, and so are the shapes they read and write. They
 * are solved once, as Alpa suggests for a stack of layers, but only where
 * that is exact:
 *
 * - The tied program T gives every layer the choices of layer 0 (one set
 *   of columns, every layer's costs summed on them). Its optimum is a plan
 *   of the whole program, so it bounds the whole optimum from above.
 * - The relaxation R cuts every edge between layers and between a layer
 *   and the rest: a cut edge costs its consumer the cheapest reshard from
 *   any option of its producer, and the memory rows are dropped. R falls
 *   apart into independent pieces (the rest, layer 0, layers 1..k-1), and
 *   layers 1..k-1 are the same piece, so R solves layer 1 once for all of
 *   them; its optimum bounds the whole optimum from below.
 * - When T's optimum meets R's, it is the optimum: the plan is T's. Else
 *   the whole program is solved, as without layers.
 *
 * On a transformer the bound meets: every layer keeps the residual
 * stream's layout, so nothing is paid across the cuts. */

#define AUTO_TIE_MIN_LAYERS 3 /* fewer: the bound costs as much as the whole program */
#define AUTO_TIE_PERIODS 4    /* candidate periods tried: the most frequent distances */

typedef struct Layers {
    int k, per;      /* layers, choices in each (0: none found) */
    int *layer;      /* choice -> its layer, or -1 */
    int *slot;       /* choice -> its index in its layer */
    int *members;    /* layer * per + slot -> choice */
    int *mslot;      /* node -> its index among its choice's nodes */
    int *first;      /* choice -> its nodes, cnodes[first[c] .. first[c + 1]) */
    int *cnodes;
    char *global;    /* choice -> outside the layers, with edges to two or more of them */
} Layers;

static void layers_free(Layers *L)
{
    free(L->layer);
    free(L->slot);
    free(L->members);
    free(L->mslot);
    free(L->first);
    free(L->cnodes);
    free(L->global);
    memset(L, 0, sizeof *L);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

/* Equal for choices that can be the same layer's: the leader's op and
 * every option's cost, weights and bytes. */
static uint64_t choice_sig(const Search *s, int ci)
{
    const Choice *c = &s->choices[ci];
    uint64_t h = mix(mix(0, (uint64_t)s->p->g->nodes[c->leader]->op), (uint64_t)c->nopts);
    for (int o = 0; o < c->nopts; o++) {
        uint64_t b;
        memcpy(&b, &c->cost[o], sizeof b);
        h = mix(mix(mix(h, b), (uint64_t)c->weights[o]), (uint64_t)c->sent[o]);
    }
    return h;
}

static int same_shape(const Tensor *a, const Tensor *b)
{
    if (!a || !b)
        return a == b;
    if (a->rank != b->rank || a->dtype != b->dtype || a->is_initializer != b->is_initializer ||
        a->is_input != b->is_input)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i] || a->split_unit[i] != b->split_unit[i])
            return 0;
    return 1;
}

static int same_strat(const Strat *a, const Strat *b, int nfactors)
{
    for (int f = 0; f < nfactors; f++)
        if (a->fn[f] != b->fn[f] || memcmp(a->fa[f], b->fa[f], a->fn[f]))
            return 0;
    return a->compute == b->compute && a->weights == b->weights;
}

/* Can choice b stand for choice a: the same options at the same costs, the
 * same nodes (op, shapes, strategies) or the same source layouts? */
static int same_choice(const Search *s, const Layers *L, int a, int b)
{
    const Graph *g = s->p->g;
    const Choice *ca = &s->choices[a], *cb = &s->choices[b];
    size_t n = (size_t)ca->nopts;
    if ((ca->leader < 0) != (cb->leader < 0) || ca->nopts != cb->nopts || memcmp(ca->cost, cb->cost, n * sizeof(double)) ||
        memcmp(ca->weights, cb->weights, n * sizeof(int64_t)) || memcmp(ca->sent, cb->sent, n * sizeof(int64_t)))
        return 0;
    if (ca->src) {
        for (size_t o = 0; o < n; o++)
            if (!sharding_equal(&ca->layouts[o], &cb->layouts[o]))
                return 0;
        return same_shape(ca->src, cb->src);
    }
    int nn = L->first[a + 1] - L->first[a];
    if (nn != L->first[b + 1] - L->first[b])
        return 0;
    for (int i = 0; i < nn; i++) {
        const Node *x = g->nodes[L->cnodes[L->first[a] + i]], *y = g->nodes[L->cnodes[L->first[b] + i]];
        if (x->op != y->op || x->ninputs != y->ninputs || x->noutputs != y->noutputs)
            return 0;
        for (int k = 0; k < x->ninputs; k++)
            if (!same_shape(x->inputs[k], y->inputs[k]))
                return 0;
        for (int k = 0; k < x->noutputs; k++)
            if (!same_shape(x->outputs[k], y->outputs[k]))
                return 0;
        int nf = s->p->nodes[x->id].rule.nfactors;
        for (size_t o = 0; o < n; o++)
            if (!same_strat(&s->strats[x->id][o], &s->strats[y->id][o], nf))
                return 0;
    }
    return 1;
}

typedef struct SigAt {
    uint64_t sig;
    int at;
} SigAt;

static int cmp_sigat(const void *pa, const void *pb)
{
    const SigAt *a = pa, *b = pb;
    if (a->sig != b->sig)
        return a->sig < b->sig ? -1 : 1;
    return a->at - b->at;
}

static int cmp_int(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

/* Finds the longest stretch of identical layers among the node choices:
 * a period P (one of the most frequent distances between equal
 * signatures) over which the signatures repeat, at the phase that the
 * fewest values cross; then the source choices read inside one layer only
 * join that layer, and each layer is checked against layer 0 (the stretch
 * ends at the first that differs). Returns the layer count, 0 for none. */
static int find_layers(Search *s, Layers *L)
{
    const Graph *g = s->p->g;
    int nc = s->nchoices;
    memset(L, 0, sizeof *L);
    L->layer = malloc(sizeof(int) * ((size_t)nc + 1));
    L->slot = malloc(sizeof(int) * ((size_t)nc + 1));
    L->first = calloc((size_t)nc + 2, sizeof(int));
    L->cnodes = malloc(sizeof(int) * ((size_t)g->nnodes + 1));
    L->mslot = malloc(sizeof(int) * ((size_t)g->nnodes + 1));
    int *seq = malloc(sizeof(int) * ((size_t)nc + 1)), *pos = malloc(sizeof(int) * ((size_t)nc + 1));
    uint64_t *sig = malloc(sizeof(uint64_t) * ((size_t)nc + 1));
    SigAt *sa = malloc(sizeof(SigAt) * ((size_t)nc + 1));
    int *diff = malloc(sizeof(int) * ((size_t)nc + 1)), *cross = calloc((size_t)nc + 2, sizeof(int));
    int *where = malloc(sizeof(int) * ((size_t)nc + 1));
    if (!L->layer || !L->slot || !L->first || !L->cnodes || !L->mslot || !seq || !pos || !sig || !sa || !diff ||
        !cross || !where)
        abort();
    int *nloc = NULL;
    for (int ci = 0; ci < nc; ci++)
        L->layer[ci] = L->slot[ci] = pos[ci] = -1;
    for (int ni = 0; ni < g->nnodes; ni++)
        L->first[s->node_choice[ni] + 1]++;
    for (int ci = 0; ci < nc; ci++)
        L->first[ci + 1] += L->first[ci];
    int *fill = calloc((size_t)nc + 1, sizeof(int));
    if (!fill)
        abort();
    for (int ni = 0; ni < g->nnodes; ni++) {
        int c = s->node_choice[ni];
        L->mslot[ni] = fill[c];
        L->cnodes[L->first[c] + fill[c]++] = ni;
    }
    free(fill);
    int n = 0;
    for (int ci = 0; ci < nc; ci++)
        if (s->choices[ci].leader >= 0) {
            pos[ci] = n;
            seq[n] = ci;
            sig[n] = choice_sig(s, ci);
            sa[n] = (SigAt){sig[n], n};
            n++;
        }
    /* Candidate periods: the distances between successive equal signatures. */
    qsort(sa, (size_t)n, sizeof *sa, cmp_sigat);
    int nd = 0;
    for (int i = 1; i < n; i++)
        if (sa[i].sig == sa[i - 1].sig)
            diff[nd++] = sa[i].at - sa[i - 1].at;
    qsort(diff, (size_t)nd, sizeof *diff, cmp_int);
    int cand[AUTO_TIE_PERIODS], ccount[AUTO_TIE_PERIODS], ncand = 0;
    for (int i = 0; i < nd;) {
        int j = i;
        while (j < nd && diff[j] == diff[i])
            j++;
        int at = ncand;
        while (at > 0 && j - i > ccount[at - 1])
            at--;
        if (at < AUTO_TIE_PERIODS) {
            int end = ncand < AUTO_TIE_PERIODS ? ncand : AUTO_TIE_PERIODS - 1;
            for (int m = end; m > at; m--) {
                cand[m] = cand[m - 1];
                ccount[m] = ccount[m - 1];
            }
            cand[at] = diff[i];
            ccount[at] = j - i;
            if (ncand < AUTO_TIE_PERIODS)
                ncand++;
        }
        i = j;
    }
    /* The stretch covering the most choices (then: the shorter period). */
    int bk = 0, bp = 0, ba = 0, blen = 0;
    for (int ic = 0; ic < ncand; ic++) {
        int P = cand[ic];
        for (int i = 0; i + P < n;) {
            if (sig[i] != sig[i + P]) {
                i++;
                continue;
            }
            int a = i;
            while (i + P < n && sig[i] == sig[i + P])
                i++;
            int len = i - a + P, k = len / P;
            if (k >= 2 && (k * P > bk * bp || (k * P == bk * bp && P < bp))) {
                bk = k;
                bp = P;
                ba = a;
                blen = len;
            }
        }
    }
    if (!bk)
        goto none;
    /* The phase: the layer boundary fewest values cross. cross[q] counts
     * the edges from a node choice before position q to one at or after. */
    for (int ei = 0; ei < s->nedges; ei++) {
        const Edge *e = &s->edges[ei];
        if (e->to < 0 || pos[e->from] < 0 || pos[e->from] >= pos[e->to])
            continue;
        cross[pos[e->from] + 1]++;
        cross[pos[e->to] + 1]--;
    }
    for (int q = 1; q <= n; q++)
        cross[q] += cross[q - 1];
    int start = ba;
    for (int f = 1; f <= blen - bk * bp; f++)
        if (cross[ba + f] < cross[start])
            start = ba + f;
    for (int j = 0; j < bk * bp; j++) {
        L->layer[seq[start + j]] = j / bp;
        L->slot[seq[start + j]] = j % bp;
    }
    /* Sources read inside one layer only belong to it, in the order the
     * layer reads them. */
    for (int ci = 0; ci < nc; ci++)
        where[ci] = -2;
    for (int ei = 0; ei < s->nedges; ei++) {
        const Edge *e = &s->edges[ei];
        if (s->choices[e->from].leader >= 0)
            continue;
        int l = e->to >= 0 ? L->layer[e->to] : -1;
        where[e->from] = where[e->from] == -2 || where[e->from] == l ? l : -1;
    }
    nloc = calloc((size_t)bk, sizeof(int));
    if (!nloc)
        abort();
    for (int ei = 0; ei < s->nedges; ei++) {
        int sc = s->edges[ei].from;
        if (s->choices[sc].leader < 0 && where[sc] >= 0 && L->slot[sc] < 0) {
            L->layer[sc] = where[sc];
            L->slot[sc] = bp + nloc[where[sc]]++;
        }
    }
    int k = bk;
    for (int i = 1; i < k; i++)
        if (nloc[i] != nloc[0])
            k = i;
    L->per = bp + nloc[0];
    L->members = malloc(sizeof(int) * ((size_t)bk * (size_t)L->per + 1));
    if (!L->members)
        abort();
    for (int ci = 0; ci < nc; ci++)
        if (L->layer[ci] >= 0 && L->layer[ci] < k)
            L->members[L->layer[ci] * L->per + L->slot[ci]] = ci;
    for (int i = 1; i < k; i++)
        for (int j = 0; j < L->per && i < k; j++)
            if (!same_choice(s, L, L->members[j], L->members[i * L->per + j]))
                k = i;
    for (int ci = 0; ci < nc; ci++)
        if (L->layer[ci] >= k)
            L->layer[ci] = L->slot[ci] = -1;
    L->k = k >= 2 ? k : 0;
    if (!L->k)
        goto none;
    /* Global choices: outside, with edges to two or more layers (the
     * residual stream's adds, tables every layer reads). where[] now holds
     * the one layer seen so far, -2 for none, -1 for several. */
    L->global = calloc((size_t)nc + 1, 1);
    if (!L->global)
        abort();
    for (int ci = 0; ci < nc; ci++)
        where[ci] = -2;
    for (int ei = 0; ei < s->nedges; ei++) {
        const Edge *e = &s->edges[ei];
        if (e->to < 0)
            continue;
        for (int end = 0; end < 2; end++) {
            int c = end ? e->to : e->from, other = end ? e->from : e->to;
            int l = L->layer[other];
            if (L->layer[c] >= 0 || l < 0)
                continue;
            where[c] = where[c] == -2 || where[c] == l ? l : -1;
        }
    }
    for (int ci = 0; ci < nc; ci++)
        L->global[ci] = where[ci] == -1;
    goto done;
none:
    for (int ci = 0; ci < nc; ci++)
        L->layer[ci] = L->slot[ci] = -1;
    L->k = 0;
done:
    free(nloc);
    free(seq);
    free(pos);
    free(sig);
    free(sa);
    free(diff);
    free(cross);
    free(where);
    return L->k;
}

static void tie_free(Tie *t, int nedges)
{
    for (int ei = 0; t->cutmin && ei < nedges; ei++)
        free(t->cutmin[ei]);
    free(t->cutmin);
    free(t->rep);
    free(t->edge_rep);
    free(t->cut);
    memset(t, 0, sizeof *t);
}

/* Per option of edge e's consumer, the cheapest reshard from any option of
 * its producer. */
static double *cheapest_over_producer(Search *s, const Edge *e)
{
    const Choice *cf = &s->choices[e->from], *ct = &s->choices[e->to];
    int *ga = malloc(sizeof(int) * (size_t)(cf->nopts + ct->nopts) * 2);
    Sharding *ra = malloc(sizeof(Sharding) * (size_t)(cf->nopts + ct->nopts));
    double *gmin = malloc(sizeof(double) * (size_t)ct->nopts), *out = malloc(sizeof(double) * (size_t)ct->nopts);
    if (!ga || !ra || !gmin || !out)
        abort();
    int *gb = ga + cf->nopts, *ia = gb + ct->nopts, *ib = ia + cf->nopts;
    int na = group_options(s, e, 0, ga, ra), nb = group_options(s, e, 1, gb, ra + cf->nopts);
    for (int o = cf->nopts - 1; o >= 0; o--)
        ia[ga[o]] = o;
    for (int o = ct->nopts - 1; o >= 0; o--)
        ib[gb[o]] = o;
    for (int j = 0; j < nb; j++) {
        gmin[j] = DBL_MAX;
        for (int i = 0; i < na; i++) {
            double c = edge_cost(s, e, ia[i], ib[j]);
            if (c < gmin[j])
                gmin[j] = c;
        }
    }
    for (int o = 0; o < ct->nopts; o++)
        out[o] = gmin[gb[o]];
    free(ga);
    free(ra);
    free(gmin);
    return out;
}

/* An edge's place in a tied program (which columns it joins) or in a
 * piece of the bound (where it sits relative to its layer). */
typedef struct EdgeKey {
    int k[6];
    int ei;
} EdgeKey;

static int cmp_edgekey(const void *pa, const void *pb)
{
    const EdgeKey *a = pa, *b = pb;
    for (int i = 0; i < 6; i++)
        if (a->k[i] != b->k[i])
            return a->k[i] < b->k[i] ? -1 : 1;
    return a->ei - b->ei;
}

/* Do edges a and b cost the same under every pair of options (their ends'
 * choices having the same options)? */
static int same_edge_costs(Search *s, const Edge *a, const Edge *b)
{
    const Choice *cf = &s->choices[a->from], *ct = a->to >= 0 ? &s->choices[a->to] : NULL;
    if (!same_shape(a->t, b->t))
        return 0;
    int nf = cf->nopts, nt = ct ? ct->nopts : 1;
    int *g = malloc(sizeof(int) * (size_t)(nf + nt) * 3);
    Sharding *r = malloc(sizeof(Sharding) * (size_t)(nf + nt));
    if (!g || !r)
        abort();
    int *ga = g, *gb = ga + nf, *ga2 = gb + nt, *gb2 = ga2 + nf, *ia = gb2 + nt, *ib = ia + nf;
    int na = group_options(s, a, 0, ga, r), nb = 1;
    int na2 = group_options(s, b, 0, ga2, r), nb2 = 1;
    gb[0] = gb2[0] = 0;
    if (ct) {
        nb = group_options(s, a, 1, gb, r);
        nb2 = group_options(s, b, 1, gb2, r);
    }
    int ok = na == na2 && nb == nb2 && !memcmp(ga, ga2, sizeof(int) * (size_t)nf) &&
             !memcmp(gb, gb2, sizeof(int) * (size_t)nt);
    for (int o = nf - 1; o >= 0; o--)
        ia[ga[o]] = o;
    for (int o = nt - 1; o >= 0; o--)
        ib[gb[o]] = o;
    for (int i = 0; i < na && ok; i++)
        for (int j = 0; j < nb && ok; j++)
            ok = edge_cost(s, a, ia[i], ib[j]) == edge_cost(s, b, ia[i], ib[j]);
    free(g);
    free(r);
    return ok;
}

/* The bound's pieces 1..k-1 must be one piece repeated: the same edges at
 * the same places in each (a place inside the piece, or a global choice),
 * at the same costs, and the same cheapest costs on their cut edges. Given
 * the global choices' options, the pieces are then one problem, so one
 * solution serves them all and tying them loses nothing. */
static int pieces_equal(Search *s, const Layers *L, const Tie *t)
{
    EdgeKey *ref = malloc(sizeof(EdgeKey) * ((size_t)s->nedges + 1));
    EdgeKey *cur = malloc(sizeof(EdgeKey) * ((size_t)s->nedges + 1));
    if (!ref || !cur)
        abort();
    int nref = 0, ok = 1;
    for (int piece = 1; piece < L->k && ok; piece++) {
        EdgeKey *keys = piece == 1 ? ref : cur;
        int nk = 0;
        for (int ei = 0; ei < s->nedges; ei++) {
            const Edge *e = &s->edges[ei];
            int lt = e->to >= 0 ? L->layer[e->to] : -1;
            /* Its consumer's piece, or its producer's for a graph output
             * or a global consumer (a cut edge is the consumer's). */
            if (lt != piece && !(lt < 0 && L->layer[e->from] == piece && !t->cut[ei]))
                continue;
            EdgeKey *key = &keys[nk++];
            key->ei = ei;
            if (e->to < 0) {
                key->k[0] = key->k[1] = key->k[2] = -1;
            } else if (lt == piece) {
                key->k[0] = L->slot[e->to];
                key->k[1] = L->mslot[e->cnode];
                key->k[2] = e->cidx;
            } else {
                key->k[0] = -3 - e->to;
                key->k[1] = -1;
                key->k[2] = e->cidx;
            }
            if (t->cut[ei]) {
                key->k[3] = key->k[4] = key->k[5] = -2;
            } else if (L->layer[e->from] == piece) {
                key->k[3] = L->slot[e->from];
                key->k[4] = e->pnode >= 0 ? L->mslot[e->pnode] : -1;
                key->k[5] = e->pidx;
            } else {
                key->k[3] = -3 - e->from;
                key->k[4] = -1;
                key->k[5] = e->pidx;
            }
        }
        qsort(keys, (size_t)nk, sizeof *keys, cmp_edgekey);
        if (piece == 1) {
            nref = nk;
            continue;
        }
        ok = nk == nref;
        for (int i = 0; i < nk && ok; i++) {
            const Edge *e = &s->edges[cur[i].ei], *r = &s->edges[ref[i].ei];
            ok = !memcmp(cur[i].k, ref[i].k, sizeof cur[i].k);
            if (ok && t->cut[cur[i].ei])
                ok = same_shape(e->t, r->t) && !memcmp(t->cutmin[cur[i].ei], t->cutmin[ref[i].ei],
                                                       sizeof(double) * (size_t)s->choices[e->to].nopts);
            else if (ok)
                ok = same_edge_costs(s, e, r);
        }
    }
    free(ref);
    free(cur);
    return ok;
}

/* The tie of layers base+1..k-1 to layer base: base 0 for the tied program,
 * base 1 (with every edge between pieces cut) for its bound. -1 when the
 * layers turn out not to be one piece repeated. */
static int tie_make(Search *s, const Layers *L, int base, Tie *t)
{
    int nc = s->nchoices, ne = s->nedges;
    memset(t, 0, sizeof *t);
    t->rep = malloc(sizeof(int) * ((size_t)nc + 1));
    t->edge_rep = malloc(sizeof(int) * ((size_t)ne + 1));
    EdgeKey *keys = malloc(sizeof(EdgeKey) * ((size_t)ne + 1));
    if (!t->rep || !t->edge_rep || !keys)
        abort();
    for (int ci = 0; ci < nc; ci++)
        t->rep[ci] = L->layer[ci] > base ? L->members[base * L->per + L->slot[ci]] : ci;
    if (base) {
        t->cut = calloc((size_t)ne + 1, 1);
        t->cutmin = calloc((size_t)ne + 1, sizeof(double *));
        if (!t->cut || !t->cutmin)
            abort();
        for (int ei = 0; ei < ne; ei++) {
            const Edge *e = &s->edges[ei];
            int lf = L->layer[e->from], lt = e->to >= 0 ? L->layer[e->to] : -1;
            int global = (L->global[e->from] && lt >= 0) || (e->to >= 0 && L->global[e->to] && lf >= 0);
            if (e->to >= 0 && lf != lt && !global) {
                t->cut[ei] = 1;
                t->cutmin[ei] = cheapest_over_producer(s, e);
            }
        }
    }
    /* Edges between the same columns share one transport. */
    int nk = 0, ok = 1;
    for (int ei = 0; ei < ne; ei++) {
        const Edge *e = &s->edges[ei];
        t->edge_rep[ei] = ei;
        if (e->to < 0 || (t->cut && t->cut[ei]))
            continue;
        /* A node of a layer by its place in its choice; another choice's
         * nodes alike (program_build shares a transport only between equal
         * groups, which is all sharing needs). */
        keys[nk++] = (EdgeKey){{t->rep[e->from], e->pnode >= 0 && L->layer[e->from] >= 0 ? L->mslot[e->pnode] : -1,
                                e->pidx, t->rep[e->to], L->layer[e->to] >= 0 ? L->mslot[e->cnode] : -1, e->cidx},
                               ei};
    }
    qsort(keys, (size_t)nk, sizeof *keys, cmp_edgekey);
    for (int i = 0, r = 0; i < nk; i++) {
        if (i && !memcmp(keys[i].k, keys[i - 1].k, sizeof keys[i].k))
            t->edge_rep[keys[i].ei] = keys[r].ei;
        else
            r = i;
    }
    free(keys);
    if (ok && base)
        ok = pieces_equal(s, L, t);
    if (!ok) {
        tie_free(t, ne);
        return -1;
    }
    return 0;
}

/* Solves the tied program and its bound. Returns 1 when the tied optimum
 * meets the bound (pr and res then hold the tied program and its
 * solution), else 0 with the reason in the report. */
static int solve_tied(Search *s, const AutoOptions *opt, const char *solver, Program *pr, MipResult *res)
{
    AutoReport *rep = s->rep;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Layers L;
    int found = find_layers(s, &L);
    int min_layers = opt->tie == AUTO_TIE_ALWAYS ? 2 : AUTO_TIE_MIN_LAYERS;
    rep->layers = found;
    rep->layer_choices = found ? L.per : 0;
    if (found < min_layers) {
        layers_free(&L);
        return 0;
    }
    Tie tb, tt;
    if (tie_make(s, &L, 1, &tb)) {
        rep->tied = TIED_DIFFER;
        layers_free(&L);
        return 0;
    }
    if (tie_make(s, &L, 0, &tt)) {
        rep->tied = TIED_DIFFER;
        tie_free(&tb, s->nedges);
        layers_free(&L);
        return 0;
    }
    Program pb;
    MipResult rb = {MIP_NONE, 0, 0, NULL};
    program_build(s, &tb, 0, &pb);
    program_solve(&pb, solver, opt->time_limit_s / 4, &rb);
    program_free(&pb);
    program_build(s, &tt, opt->mem_limit, pr);
    program_solve(pr, solver, opt->time_limit_s / 4, res);
    rep->bound_s = rb.objective / US;
    rep->tied_s = res->objective / US;
    int exact = rb.status == MIP_OPTIMAL && res->status == MIP_OPTIMAL &&
                res->objective <= rb.objective + 1e-6 * fmax(fabs(rb.objective), 1.0);
    rep->tied = exact ? TIED_EXACT : rb.status == MIP_OPTIMAL && res->status == MIP_OPTIMAL ? TIED_INEXACT
                                                                                               : TIED_UNSOLVED;
    if (!exact) {
        program_free(pr);
        free(res->x);
        *res = (MipResult){MIP_NONE, 0, 0, NULL};
    }
    free(rb.x);
    tie_free(&tb, s->nedges);
    tie_free(&tt, s->nedges);
    layers_free(&L);
    rep->tie_s = seconds_since(&t0);
    return exact;
}

/* ---- solving ------------------------------------------------------------- */

static int solve(Search *s, const AutoOptions *opt, Diag *d)
{
    const char *solver = opt->solver ? opt->solver : cbc_available() ? "cbc" : "glpk";
    s->rep->solver = strcmp(solver, "cbc") == 0 ? "CBC" : "GLPK";
    if (strcmp(solver, "cbc") == 0 && !cbc_available()) {
        diag_add(d, "--auto-solver cbc: COIN-OR CBC cannot be loaded (libCbcSolver.so.3; Debian package "
                 "coinor-libcbc3)");
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Program pr;
    MipResult res = {MIP_NONE, 0, 0, NULL};
    int tied = opt->tie != AUTO_TIE_OFF && solve_tied(s, opt, solver, &pr, &res);
    if (!tied) {
        program_build(s, NULL, opt->mem_limit, &pr);
        double left = opt->time_limit_s - seconds_since(&t0);
        program_solve(&pr, solver, left > opt->time_limit_s / 2 ? left : opt->time_limit_s / 2, &res);
    }
    s->rep->rows = pr.nrows;
    s->rep->cols = pr.ncols;
    s->rep->nonzeros = pr.nnz;
    /* The program as a free MPS file, to try another solver on it. */
    if (opt->mps_path && glp_write_mps(pr.lp, GLP_MPS_FILE, NULL, opt->mps_path)) {
        diag_add(d, "--auto-mps %s: cannot write the file", opt->mps_path);
        free(res.x);
        program_free(&pr);
        glp_free_env();
        return -1;
    }
    double first_s = seconds_since(&t0);
    s->rep->best_s = res.objective / US;
    s->rep->bytes_pass = 0;
    if (res.status == MIP_OPTIMAL && pr.ncols <= AUTO_BYTES_PASS_MAX_COLS) {
        double lim = first_s / 2 > AUTO_BYTES_PASS_MIN_S ? first_s / 2 : AUTO_BYTES_PASS_MIN_S;
        if (lim > opt->time_limit_s - first_s)
            lim = opt->time_limit_s - first_s;
        if (lim > 0)
            bytes_pass(s, pr.lp, solver, pr.obj, pr.sent, pr.ncols, lim, &res);
    }
    s->rep->solve_s = seconds_since(&t0);
    int rc = 0;
    if (res.status == MIP_INFEASIBLE) {
        diag_add(d, "--auto: no plan fits --mem-limit %lld bytes per rank", (long long)opt->mem_limit);
        rc = -1;
    } else if (res.status == MIP_NONE) {
        diag_add(d, "--auto: the integer program found no solution within %g s (%s)", opt->time_limit_s,
                 s->rep->solver);
        rc = -1;
    } else {
        s->rep->optimal = res.status == MIP_OPTIMAL;
        double gap = res.objective != 0 ? (res.objective - res.bound) / fabs(res.objective) : 0;
        s->rep->gap = s->rep->optimal || gap < 0 ? 0 : gap;
        s->rep->objective_s = res.objective / US;
        for (int ci = 0; ci < s->nchoices; ci++) {
            Choice *c = &s->choices[ci];
            c->pick = 0;
            for (int o = 0; o < c->nopts; o++)
                if (res.x[c->col0 + o - 1] > 0.5)
                    c->pick = o;
        }
    }
    free(res.x);
    program_free(&pr);
    glp_free_env();
    return rc;
}

/* ---- from the solution to a plan ---------------------------------------- */

/* What switching choice ci alone to option o would add to the plan;
 * adj lists the edges touching ci. */
static double switch_delta(Search *s, int ci, int o, const int *adj, int nadj)
{
    const Choice *c = &s->choices[ci];
    double delta = c->cost[o] - c->cost[c->pick];
    for (int i = 0; i < nadj; i++) {
        const Edge *e = &s->edges[adj[i]];
        int a = s->choices[e->from].pick, b = e->to >= 0 ? s->choices[e->to].pick : 0;
        double now = edge_cost(s, e, a, b);
        double then = edge_cost(s, e, e->from == ci ? o : a, e->to == ci ? o : b);
        delta += then - now;
    }
    return delta;
}

/* For --explain: each node's choice, and for a choice's leader the
 * AUTO_ALTS cheapest other options by what switching to them would add. */
static void record_explanations(Search *s)
{
    const Graph *g = s->p->g;
    AutoReport *rep = s->rep;
    rep->nodes = arena_alloc(&s->p->arena, sizeof(AutoNodeInfo) * (size_t)(g->nnodes + 1));
    int *adj = malloc(sizeof(int) * (size_t)(s->nedges + 1));
    if (!adj)
        abort();
    for (int ni = 0; ni < g->nnodes; ni++) {
        int ci = s->node_choice[ni];
        const Choice *c = &s->choices[ci];
        AutoNodeInfo *info = &rep->nodes[ni];
        info->nstrategies = c->nopts;
        info->pick = c->pick;
        info->leader = c->leader;
        info->cost_s = c->cost[c->pick];
        info->nalt = 0;
        if (c->leader != ni)
            continue;
        int nadj = 0;
        for (int ei = 0; ei < s->nedges; ei++)
            if (s->edges[ei].from == ci || s->edges[ei].to == ci)
                adj[nadj++] = ei;
        for (int o = 0; o < c->nopts; o++) {
            if (o == c->pick)
                continue;
            double dl = switch_delta(s, ci, o, adj, nadj);
            int at = info->nalt;
            while (at > 0 && dl < info->alt_delta_s[at - 1])
                at--;
            if (at >= AUTO_ALTS)
                continue;
            int end = info->nalt < AUTO_ALTS ? info->nalt : AUTO_ALTS - 1;
            for (int j = end; j > at; j--) {
                info->alt_delta_s[j] = info->alt_delta_s[j - 1];
                memcpy(info->alt_fn[j], info->alt_fn[j - 1], sizeof info->alt_fn[j]);
                memcpy(info->alt_fa[j], info->alt_fa[j - 1], sizeof info->alt_fa[j]);
            }
            info->alt_delta_s[at] = dl;
            memcpy(info->alt_fn[at], s->strats[ni][o].fn, sizeof info->alt_fn[at]);
            memcpy(info->alt_fa[at], s->strats[ni][o].fa, sizeof info->alt_fa[at]);
            if (info->nalt < AUTO_ALTS)
                info->nalt++;
        }
    }
    free(adj);
}

static void apply_solution(Search *s)
{
    Plan *p = s->p;
    const Graph *g = p->g;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Strat *st = &s->strats[ni][s->choices[s->node_choice[ni]].pick];
        memcpy(p->nodes[ni].fnaxes, st->fn, sizeof st->fn);
        memcpy(p->nodes[ni].faxes, st->fa, sizeof st->fa);
    }
    /* Sources: a shared one as chosen, a single-use one as its reader needs. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (!is_source(t) || !t->nconsumers)
            continue;
        TensorPlan *tp = &p->tensors[t->id];
        const Annotation *a = annotation_of(s, t);
        int sc = s->src_choice[t->id];
        if (sc >= 0) {
            tp->sharding = s->choices[sc].layouts[s->choices[sc].pick];
        } else {
            const Node *u = t->consumers[0];
            int k = 0;
            while (u->inputs[k] != t)
                k++;
            node_layout(s, u->id, s->choices[s->node_choice[u->id]].pick, k, &tp->sharding);
        }
        tp->fixed = 1;
        tp->origin = a ? a->origin : ORIGIN_AUTO;
        tp->source = a ? a->spec : NULL;
    }
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i]->producer)
            p->tensors[i].origin = ORIGIN_AUTO;
}

Plan *partition_auto(const Graph *g, const Mesh *m, const AnnotationList *ann, const AutoOptions *opt, Diag *d)
{
    Search s;
    memset(&s, 0, sizeof s);
    s.p = plan_new(g, m);
    s.m = &s.p->mesh;
    s.ann = ann;
    Plan *p = s.p;
    p->auto_report = arena_alloc(&p->arena, sizeof(AutoReport));
    s.rep = p->auto_report;
    s.strats = calloc((size_t)g->nnodes + 1, sizeof(Strat *));
    s.nstrats = calloc((size_t)g->nnodes + 1, sizeof(int));
    s.node_choice = calloc((size_t)g->nnodes + 1, sizeof(int));
    s.src_choice = calloc((size_t)g->ntensors + 1, sizeof(int));
    if (!s.strats || !s.nstrats || !s.node_choice || !s.src_choice)
        abort();
    int rc = -1;
    if (plan_build_rules(p, d) || build_choices(&s, d))
        goto cleanup;
    s.rep->nchoices = s.nchoices;
    for (int ci = 0; ci < s.nchoices; ci++)
        s.rep->noptions += s.choices[ci].nopts;
    s.rep->nedges = s.nedges;
    s.rep->time_limit_s = opt->time_limit_s;
    if (solve(&s, opt, d))
        goto cleanup;
    record_explanations(&s);
    apply_solution(&s);
    if (plan_lower(p, 1, d))
        goto cleanup;
    rc = 0;
cleanup:
    for (int ni = 0; ni < g->nnodes; ni++)
        free(s.strats[ni]);
    for (int ci = 0; ci < s.nchoices; ci++) {
        free(s.choices[ci].cost);
        free(s.choices[ci].weights);
        free(s.choices[ci].sent);
        free(s.choices[ci].layouts);
    }
    free(s.choices);
    free(s.strats);
    free(s.nstrats);
    free(s.node_choice);
    free(s.src_choice);
    free(s.edges);
    free(s.inner);
    free(s.cache.keys);
    free(s.cache.vals);
    free(s.cache.bufs);
    free(s.cache.sent);
    if (rc) {
        plan_free(p);
        return NULL;
    }
    return p;
}
