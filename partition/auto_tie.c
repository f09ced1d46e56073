/* auto_tie.c: repeated layers in the --auto search, solved once where exact.
 *
 * find_layers looks for the longest stretch of identical layers among the
 * node choices; tie_make ties layers to a base layer (the tied program) or
 * cuts every edge between pieces (its bound); auto_solve_tied solves both
 * and keeps the tied plan only when its optimum meets the bound. Arrays
 * come from the search's arena; the per-call scratch of the edge checks is
 * the Search's scratch_groups and scratch_reps.
 */
#include "auto_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    L->layer = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    L->slot = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    L->first = auto_alloc(s, (size_t)nc + 2, sizeof(int));
    L->cnodes = auto_alloc(s, (size_t)g->nnodes + 1, sizeof(int));
    L->mslot = auto_alloc(s, (size_t)g->nnodes + 1, sizeof(int));
    int *seq = auto_alloc(s, (size_t)nc + 1, sizeof(int)), *pos = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    uint64_t *sig = auto_alloc(s, (size_t)nc + 1, sizeof(uint64_t));
    SigAt *sa = auto_alloc(s, (size_t)nc + 1, sizeof(SigAt));
    int *diff = auto_alloc(s, (size_t)nc + 1, sizeof(int)), *cross = auto_alloc(s, (size_t)nc + 2, sizeof(int));
    int *where = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    int *nloc = NULL;
    for (int ci = 0; ci < nc; ci++)
        L->layer[ci] = L->slot[ci] = pos[ci] = -1;
    for (int ni = 0; ni < g->nnodes; ni++)
        L->first[s->node_choice[ni] + 1]++;
    for (int ci = 0; ci < nc; ci++)
        L->first[ci + 1] += L->first[ci];
    int *fill = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    for (int ni = 0; ni < g->nnodes; ni++) {
        int c = s->node_choice[ni];
        L->mslot[ni] = fill[c];
        L->cnodes[L->first[c] + fill[c]++] = ni;
    }
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
    nloc = auto_alloc(s, (size_t)bk, sizeof(int));
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
    L->members = auto_alloc(s, (size_t)bk * (size_t)L->per + 1, sizeof(int));
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
    L->global = auto_alloc(s, (size_t)nc + 1, 1);
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
    return L->k;
}

/* Per option of edge e's consumer, the cheapest reshard from any option of
 * its producer. */
static double *cheapest_over_producer(Search *s, const Edge *e)
{
    const Choice *cf = &s->choices[e->from], *ct = &s->choices[e->to];
    IR_ASSERT(cf->nopts <= AUTO_MAX_STRATS && ct->nopts <= AUTO_MAX_STRATS); /* the scratch's size */
    int *ga = s->scratch_groups;
    Sharding *ra = s->scratch_reps;
    double *gmin = s->scratch_min, *out = auto_alloc(s, (size_t)ct->nopts, sizeof(double));
    int *gb = ga + cf->nopts, *ia = gb + ct->nopts, *ib = ia + cf->nopts;
    int na = auto_group_options(s, e, 0, ga, ra), nb = auto_group_options(s, e, 1, gb, ra + cf->nopts);
    for (int o = cf->nopts - 1; o >= 0; o--)
        ia[ga[o]] = o;
    for (int o = ct->nopts - 1; o >= 0; o--)
        ib[gb[o]] = o;
    for (int j = 0; j < nb; j++) {
        gmin[j] = DBL_MAX;
        for (int i = 0; i < na; i++) {
            double c = auto_edge_cost(s, e, ia[i], ib[j]);
            if (c < gmin[j])
                gmin[j] = c;
        }
    }
    for (int o = 0; o < ct->nopts; o++)
        out[o] = gmin[gb[o]];
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
    IR_ASSERT(nf <= AUTO_MAX_STRATS && nt <= AUTO_MAX_STRATS); /* the scratch's size */
    int *g = s->scratch_groups;
    Sharding *r = s->scratch_reps;
    int *ga = g, *gb = ga + nf, *ga2 = gb + nt, *gb2 = ga2 + nf, *ia = gb2 + nt, *ib = ia + nf;
    int na = auto_group_options(s, a, 0, ga, r), nb = 1;
    int na2 = auto_group_options(s, b, 0, ga2, r), nb2 = 1;
    gb[0] = gb2[0] = 0;
    if (ct) {
        nb = auto_group_options(s, a, 1, gb, r);
        nb2 = auto_group_options(s, b, 1, gb2, r);
    }
    int ok = na == na2 && nb == nb2 && !memcmp(ga, ga2, sizeof(int) * (size_t)nf) &&
             !memcmp(gb, gb2, sizeof(int) * (size_t)nt);
    for (int o = nf - 1; o >= 0; o--)
        ia[ga[o]] = o;
    for (int o = nt - 1; o >= 0; o--)
        ib[gb[o]] = o;
    for (int i = 0; i < na && ok; i++)
        for (int j = 0; j < nb && ok; j++)
            ok = auto_edge_cost(s, a, ia[i], ib[j]) == auto_edge_cost(s, b, ia[i], ib[j]);
    return ok;
}

/* The bound's pieces 1..k-1 must be one piece repeated: the same edges at
 * the same places in each (a place inside the piece, or a global choice),
 * at the same costs, and the same cheapest costs on their cut edges. Given
 * the global choices' options, the pieces are then one problem, so one
 * solution serves them all and tying them loses nothing. */
static int pieces_equal(Search *s, const Layers *L, const Tie *t)
{
    EdgeKey *ref = auto_alloc(s, (size_t)s->nedges + 1, sizeof(EdgeKey));
    EdgeKey *cur = auto_alloc(s, (size_t)s->nedges + 1, sizeof(EdgeKey));
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
    return ok;
}

/* The tie of layers base+1..k-1 to layer base: base 0 for the tied program,
 * base 1 (with every edge between pieces cut) for its bound. -1 when the
 * layers turn out not to be one piece repeated. */
static int tie_make(Search *s, const Layers *L, int base, Tie *t)
{
    int nc = s->nchoices, ne = s->nedges;
    memset(t, 0, sizeof *t);
    t->rep = auto_alloc(s, (size_t)nc + 1, sizeof(int));
    t->edge_rep = auto_alloc(s, (size_t)ne + 1, sizeof(int));
    EdgeKey *keys = auto_alloc(s, (size_t)ne + 1, sizeof(EdgeKey));
    for (int ci = 0; ci < nc; ci++)
        t->rep[ci] = L->layer[ci] > base ? L->members[base * L->per + L->slot[ci]] : ci;
    if (base) {
        t->cut = auto_alloc(s, (size_t)ne + 1, 1);
        t->cutmin = auto_alloc(s, (size_t)ne + 1, sizeof(double *));
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
         * nodes alike (ilp_build shares a transport only between equal
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
    if (ok && base)
        ok = pieces_equal(s, L, t);
    if (!ok) {
        memset(t, 0, sizeof *t);
        return -1;
    }
    return 0;
}

/* Solves the tied program and its bound. Returns 1 when the tied optimum
 * meets the bound (pr and res then hold the tied program and its
 * solution), else 0 with the reason in the report. */
int auto_solve_tied(Search *s, const AutoOptions *opt, const char *solver, Ilp *pr, MipResult *res)
{
    AutoReport *rep = s->rep;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Layers L;
    int found = find_layers(s, &L);
    int min_layers = opt->tie == AUTO_TIE_ALWAYS ? 2 : AUTO_TIE_MIN_LAYERS;
    rep->layers = found;
    rep->layer_choices = found ? L.per : 0;
    if (found < min_layers)
        return 0;
    Tie tb, tt;
    if (tie_make(s, &L, 1, &tb)) {
        rep->tied = TIED_DIFFER;
        return 0;
    }
    if (tie_make(s, &L, 0, &tt)) {
        rep->tied = TIED_DIFFER;
        return 0;
    }
    Ilp pb;
    MipResult rb = {MIP_NONE, 0, 0, NULL};
    ilp_build(s, &tb, 0, &pb);
    ilp_solve(s, &pb, solver, opt->time_limit_s / 4, &rb);
    ilp_free(&pb);
    ilp_build(s, &tt, opt->mem_limit, pr);
    ilp_solve(s, pr, solver, opt->time_limit_s / 4, res);
    rep->bound_s = rb.objective / US;
    rep->tied_s = res->objective / US;
    int exact = rb.status == MIP_OPTIMAL && res->status == MIP_OPTIMAL &&
                res->objective <= rb.objective + 1e-6 * fmax(fabs(rb.objective), 1.0);
    rep->tied = exact ? TIED_EXACT : rb.status == MIP_OPTIMAL && res->status == MIP_OPTIMAL ? TIED_INEXACT
                                                                                               : TIED_UNSOLVED;
    if (!exact) {
        ilp_free(pr);
        *res = (MipResult){MIP_NONE, 0, 0, NULL};
    }
    rep->tie_s = auto_seconds_since(&t0);
    return exact;
}
