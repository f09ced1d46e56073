/* reshard.c: lowering a layout change to the cheapest collective sequence.
 *
 * Given the layout a tensor has (src) and the one a consumer needs (dst),
 * steps are chosen cheapest first, as DESIGN.md orders them:
 *   reduce-scatter  a partial axis that dst splits some dim over, when it
 *                   can become that dim's next (minor) axis;
 *   all-to-all      an axis that moves from one dim to another, when it is
 *                   the minor-most axis of its dim and fits the target's
 *                   next position;
 *   all-reduce      partial axes dst neither keeps partial nor splits over;
 *   all-gather      the axes of a dim that dst does not want there (minor
 *                   first, a dim's whole tail in one call);
 *   local slice     axes dst adds (free: each rank keeps its block);
 * and the loop repeats until the layout equals dst. That greedy order is
 * the fallback; the lowering proper is a shortest-path search over those
 * same moves (Dijkstra on the alpha-beta cost, ties broken by fewer calls,
 * then fewer bytes), restricted to the mesh axes either layout uses, so
 * it finds e.g. that gathering [dp+tp,_] whole and slicing tp locally
 * beats an all-to-all followed by a gather on a small tensor, and the
 * reverse on a large one. A dim's axis list is
 * ordered major to minor, so only its minor-most axis can leave it without
 * disturbing the others; that is why an axis swap such as [dp,tp] to
 * [tp,dp] costs a gather and an all-to-all. Bytes are those sent per rank
 * by ring algorithms; seconds come from the alpha-beta link model.
 */
#include "partition.h"

#include <stdlib.h>
#include <string.h>

const char *coll_name(CollKind k)
{
    static const char *const names[COLL_COUNT] = {
        [COLL_SLICE] = "slice", [COLL_ALL_TO_ALL] = "all-to-all",
        [COLL_REDUCE_SCATTER] = "reduce-scatter", [COLL_ALL_REDUCE] = "all-reduce",
        [COLL_ALL_GATHER] = "all-gather", [COLL_PARTIALIZE] = "partialize",
    };
    return names[k];
}

/* Bytes sent per rank for a collective whose per-rank input is `local`. */
static int64_t coll_bytes(CollKind k, int n, int64_t local)
{
    switch (k) {
    case COLL_ALL_GATHER: return (int64_t)(n - 1) * local;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL: return local / n * (n - 1);
    case COLL_ALL_REDUCE: return 2 * (local / n * (n - 1));
    default: return 0;
    }
}

/* Fixed cost of issuing one collective (kernel launch, NCCL/MPI setup),
 * on top of the ring's alpha-beta time. Without it the model prefers two
 * small-group calls to one large-group call for every small tensor, which
 * is not what real launches cost. */
#define COLL_LAUNCH_S 5e-6

/* Alpha-beta time of one collective. An all-reduce runs as a ring
 * (2(n-1) latencies, 2(n-1)/n of the data per rank) or, as NCCL and MPI
 * libraries pick for small messages, as a tree or recursive doubling
 * (2 ceil(log2 n) latencies, the whole message twice); the cheaper counts.
 * The other collectives are rings. Bytes in plans are always the ring's. */
double coll_seconds(const Mesh *m, CollKind k, unsigned axes, int64_t local)
{
    int n = mesh_group_size(m, axes);
    if (n <= 1 || k == COLL_SLICE || k == COLL_PARTIALIZE)
        return 0;
    const LinkClass *l = mesh_group_link(m, axes);
    if (k == COLL_ALL_REDUCE) {
        int levels = 0;
        while ((1 << levels) < n)
            levels++;
        double ring = 2.0 * (n - 1) * l->latency_s + (double)coll_bytes(k, n, local) / l->bandwidth_Bps;
        double tree = 2.0 * levels * l->latency_s + 2.0 * (double)local / l->bandwidth_Bps;
        return COLL_LAUNCH_S + (tree < ring ? tree : ring);
    }
    return COLL_LAUNCH_S + (double)(n - 1) * l->latency_s + (double)coll_bytes(k, n, local) / l->bandwidth_Bps;
}

/* Bytes a rank puts into a step: its block before it, or for a
 * reduce-scatter onto a padded dim, the p whole blocks it reduces. */
static int64_t step_input_bytes(const Mesh *m, const Tensor *t, CollKind k, unsigned axes, const Sharding *before,
                                const Sharding *after)
{
    if (k == COLL_REDUCE_SCATTER)
        return sharding_local_bytes(after, m, t) * mesh_group_size(m, axes);
    return sharding_local_bytes(before, m, t);
}

static void push(const Mesh *m, const Tensor *t, Reshard *out, CollKind k, unsigned axes,
                 int dim, int dim_to, const Sharding *before, const Sharding *after)
{
    if (out->nsteps == RESHARD_MAX_STEPS)
        return;
    ReshardStep *s = &out->steps[out->nsteps++];
    int64_t local = step_input_bytes(m, t, k, axes, before, after);
    s->kind = k;
    s->axes = axes;
    s->dim = dim;
    s->dim_to = dim_to;
    s->bytes = coll_bytes(k, mesh_group_size(m, axes), local);
    s->seconds = coll_seconds(m, k, axes, local);
    s->after = *after;
    out->bytes += s->bytes;
    out->seconds += s->seconds;
}

/* Length of the common prefix of dim i of a and b. */
static int common_prefix(const Sharding *a, const Sharding *b, int i)
{
    int k = 0;
    while (k < a->naxes[i] && k < b->naxes[i] && a->axes[i][k] == b->axes[i][k])
        k++;
    return k;
}

/* Would appending axis ax to dim j of cur keep it a prefix of dst's dim j? */
static int fits_next(const Sharding *cur, const Sharding *dst, int j, int ax)
{
    int k = cur->naxes[j];
    return common_prefix(cur, dst, j) == k && k < dst->naxes[j] && dst->axes[j][k] == ax;
}

static int dim_of_axis(const Sharding *s, int ax)
{
    for (int i = 0; i < s->rank; i++)
        for (int k = 0; k < s->naxes[i]; k++)
            if (s->axes[i][k] == ax)
                return i;
    return -1;
}

/* Padded layouts (sharding.c), when the search gave up: reduce, gather
 * each split dim whole, slice each dim dst splits, partialize: every step
 * a whole-dim move, so blocks stay aligned. */
static void reshard_whole_dims(const Mesh *m, const Tensor *t, const Sharding *src, const Sharding *dst,
                               Reshard *out)
{
    Sharding cur = *src, next;
    if (cur.partial) {
        next = cur;
        next.partial = 0;
        push(m, t, out, COLL_ALL_REDUCE, cur.partial, -1, -1, &cur, &next);
        cur = next;
    }
    for (int i = 0; i < cur.rank; i++) {
        if (!cur.naxes[i] || (cur.naxes[i] == dst->naxes[i] && !memcmp(cur.axes[i], dst->axes[i], cur.naxes[i])))
            continue;
        unsigned axes = 0;
        for (int k = 0; k < cur.naxes[i]; k++)
            axes |= 1u << cur.axes[i][k];
        next = cur;
        next.naxes[i] = 0;
        push(m, t, out, COLL_ALL_GATHER, axes, i, -1, &cur, &next);
        cur = next;
    }
    for (int i = 0; i < cur.rank; i++) {
        if (cur.naxes[i] || !dst->naxes[i])
            continue;
        unsigned axes = 0;
        next = cur;
        for (int k = 0; k < dst->naxes[i]; k++) {
            axes |= 1u << dst->axes[i][k];
            next.axes[i][next.naxes[i]++] = dst->axes[i][k];
        }
        push(m, t, out, COLL_SLICE, axes, i, -1, &cur, &next);
        cur = next;
    }
    if (dst->partial) {
        next = cur;
        next.partial = dst->partial;
        push(m, t, out, COLL_PARTIALIZE, dst->partial, -1, -1, &cur, &next);
    }
}

static void reshard_greedy(const Mesh *m, const Tensor *t, const Sharding *src, const Sharding *dst,
                           Reshard *out)
{
    memset(out, 0, sizeof(*out));
    if (sharding_is_uneven(src, m, t) || sharding_is_uneven(dst, m, t)) {
        reshard_whole_dims(m, t, src, dst, out);
        return;
    }
    Sharding cur = *src, next;
    for (int guard = 0; guard < 4 * RESHARD_MAX_STEPS && !sharding_equal(&cur, dst); guard++) {
        unsigned pending = cur.partial & ~dst->partial;
        unsigned used = sharding_used_axes(&cur);
        int progressed = 0;
        /* 1. reduce-scatter */
        for (int ax = 0; ax < m->naxes && !progressed; ax++) {
            if (!(pending & (1u << ax)) || (used & (1u << ax)))
                continue;
            int j = dim_of_axis(dst, ax);
            if (j >= 0 && fits_next(&cur, dst, j, ax)) {
                next = cur;
                next.partial &= ~(1u << ax);
                next.axes[j][next.naxes[j]++] = (unsigned char)ax;
                push(m, t, out, COLL_REDUCE_SCATTER, 1u << ax, j, -1, &cur, &next);
                cur = next;
                progressed = 1;
            }
        }
        if (progressed)
            continue;
        /* 2. all-to-all: the minor-most misplaced axis of a dim moves. */
        for (int i = 0; i < cur.rank && !progressed; i++) {
            int cp = common_prefix(&cur, dst, i);
            if (cur.naxes[i] <= cp)
                continue;
            int ax = cur.axes[i][cur.naxes[i] - 1];
            int j = dim_of_axis(dst, ax);
            if (j >= 0 && j != i && fits_next(&cur, dst, j, ax)) {
                next = cur;
                next.naxes[i]--;
                next.axes[j][next.naxes[j]++] = (unsigned char)ax;
                push(m, t, out, COLL_ALL_TO_ALL, 1u << ax, i, j, &cur, &next);
                cur = next;
                progressed = 1;
            }
        }
        if (progressed)
            continue;
        /* 3. all-reduce partial axes that dst never splits over. */
        unsigned stuck = 0;
        for (int ax = 0; ax < m->naxes; ax++)
            if ((pending & (1u << ax)) && dim_of_axis(dst, ax) < 0)
                stuck |= 1u << ax;
        if (stuck) {
            next = cur;
            next.partial &= ~stuck;
            push(m, t, out, COLL_ALL_REDUCE, stuck, -1, -1, &cur, &next);
            cur = next;
            continue;
        }
        /* 4. all-gather the misplaced tail of the first dim that has one. */
        for (int i = 0; i < cur.rank && !progressed; i++) {
            int cp = common_prefix(&cur, dst, i);
            if (cur.naxes[i] <= cp)
                continue;
            unsigned axes = 0;
            for (int k = cp; k < cur.naxes[i]; k++)
                axes |= 1u << cur.axes[i][k];
            next = cur;
            next.naxes[i] = (unsigned char)cp;
            push(m, t, out, COLL_ALL_GATHER, axes, i, -1, &cur, &next);
            cur = next;
            progressed = 1;
        }
        if (progressed)
            continue;
        /* 5. partial axes whose scatter target is blocked: reduce them. */
        if (pending) {
            next = cur;
            next.partial &= ~pending;
            push(m, t, out, COLL_ALL_REDUCE, pending, -1, -1, &cur, &next);
            cur = next;
            continue;
        }
        /* 6. local slices for axes dst adds, one step per dim. */
        for (int i = 0; i < cur.rank; i++) {
            if (cur.naxes[i] >= dst->naxes[i])
                continue;
            unsigned axes = 0;
            next = cur;
            for (int k = cur.naxes[i]; k < dst->naxes[i]; k++) {
                axes |= 1u << dst->axes[i][k];
                next.axes[i][next.naxes[i]++] = dst->axes[i][k];
            }
            push(m, t, out, COLL_SLICE, axes, i, -1, &cur, &next);
            cur = next;
            progressed = 1;
        }
        if (progressed)
            continue;
        /* 7. dst partial over axes cur is not: keep the value on one
         * coordinate and zero elsewhere (local). */
        if (dst->partial & ~cur.partial) {
            next = cur;
            next.partial = dst->partial;
            push(m, t, out, COLL_PARTIALIZE, dst->partial & ~cur.partial, -1, -1, &cur, &next);
            cur = next;
            continue;
        }
        break;
    }
    if (!sharding_equal(&cur, dst)) {
        /* Nothing cheaper worked: gather everything, then slice. */
        Reshard full;
        memset(&full, 0, sizeof full);
        Sharding rep;
        sharding_replicated(&rep, src->rank);
        next = *src;
        next.partial = 0;
        if (src->partial) {
            push(m, t, &full, COLL_ALL_REDUCE, src->partial, -1, -1, src, &next);
        }
        Sharding gathered = rep;
        push(m, t, &full, COLL_ALL_GATHER, sharding_used_axes(src), -1, -1, &next, &gathered);
        push(m, t, &full, COLL_SLICE, sharding_used_axes(dst), -1, -1, &gathered, dst);
        full.full_gather = 1;
        *out = full;
    }
}

/* ---- shortest path over layouts ------------------------------------------ */

enum { SEARCH_MAX_STATES = 4096, SEARCH_MAX_MOVES = 256 };

typedef struct Node_ {
    Sharding s;
    double cost;
    int ncoll;
    int64_t bytes;
    int parent;
    ReshardStep step; /* move from parent to here */
    int done;
} SearchNode;

typedef struct Move {
    Sharding to;
    CollKind kind;
    unsigned axes;
    int dim, dim_to;
} Move;

/* May a move change dim `dim` from layout a to layout b? A padded dim
 * (sharding.c) keeps its blocks aligned only through whole-dim moves:
 * every axis gathered at once, or axes put on an unsplit dim (blocks of
 * ceil(n/4) are not halves of blocks of ceil(n/2)). */
static int aligned(const Mesh *m, const Tensor *t, const Sharding *a, const Sharding *b, int dim)
{
    if (!sharding_dim_uneven(a, m, t, dim) && !sharding_dim_uneven(b, m, t, dim))
        return 1;
    return a->naxes[dim] == 0 || b->naxes[dim] == 0;
}

/* An all-to-all moves blocks between two dims; neither may be padded. */
static int even_both(const Mesh *m, const Tensor *t, const Sharding *a, const Sharding *b, int i, int j)
{
    return !sharding_dim_uneven(a, m, t, i) && !sharding_dim_uneven(b, m, t, i) &&
           !sharding_dim_uneven(a, m, t, j) && !sharding_dim_uneven(b, m, t, j);
}

static int gen_moves(const Mesh *m, const Tensor *t, const Sharding *s, unsigned relevant, Move *mv)
{
    int n = 0;
    unsigned used = sharding_used_axes(s);
    for (int i = 0; i < s->rank; i++) {
        unsigned tail = 0;
        for (int k = s->naxes[i] - 1; k >= 0 && n < SEARCH_MAX_MOVES; k--) { /* all-gather a tail */
            tail |= 1u << s->axes[i][k];
            mv[n] = (Move){.to = *s, .kind = COLL_ALL_GATHER, .axes = tail, .dim = i, .dim_to = -1};
            mv[n].to.naxes[i] = (unsigned char)k;
            if (aligned(m, t, s, &mv[n].to, i))
                n++;
        }
        for (int j = 0; j < s->rank && s->naxes[i] && n < SEARCH_MAX_MOVES; j++) { /* all-to-all */
            if (j == i)
                continue;
            int ax = s->axes[i][s->naxes[i] - 1];
            mv[n] = (Move){.to = *s, .kind = COLL_ALL_TO_ALL, .axes = 1u << ax, .dim = i, .dim_to = j};
            mv[n].to.naxes[i]--;
            mv[n].to.axes[j][mv[n].to.naxes[j]++] = (unsigned char)ax;
            if (even_both(m, t, s, &mv[n].to, i, j))
                n++;
        }
        for (int ax = 0; ax < m->naxes && n < SEARCH_MAX_MOVES; ax++) {
            if (!((relevant >> ax) & 1) || s->naxes[i] >= MESH_MAX_AXES)
                continue;
            if ((s->partial >> ax) & 1) { /* reduce-scatter onto dim i */
                mv[n] = (Move){.to = *s, .kind = COLL_REDUCE_SCATTER, .axes = 1u << ax, .dim = i, .dim_to = -1};
                mv[n].to.partial &= ~(1u << ax);
                mv[n].to.axes[i][mv[n].to.naxes[i]++] = (unsigned char)ax;
                if (aligned(m, t, s, &mv[n].to, i))
                    n++;
            } else if (!((used >> ax) & 1)) { /* local slice */
                mv[n] = (Move){.to = *s, .kind = COLL_SLICE, .axes = 1u << ax, .dim = i, .dim_to = -1};
                mv[n].to.axes[i][mv[n].to.naxes[i]++] = (unsigned char)ax;
                if (aligned(m, t, s, &mv[n].to, i))
                    n++;
            }
        }
    }
    /* Reduce-scatter over several partial axes at once, onto one dim: one
     * call over the combined group instead of one per axis. The axes go
     * on in mesh order or (for two) the reverse. */
    unsigned multi = s->partial & relevant & ~used;
    for (unsigned sub = 1; sub <= multi && n < SEARCH_MAX_MOVES; sub++) {
        if ((sub & multi) != sub || !(sub & (sub - 1)))
            continue;
        int nsub = __builtin_popcount(sub);
        for (int rev = 0; rev <= (nsub == 2); rev++)
            for (int i = 0; i < s->rank && n < SEARCH_MAX_MOVES; i++) {
                if (s->naxes[i] + nsub > MESH_MAX_AXES)
                    continue;
                mv[n] = (Move){.to = *s, .kind = COLL_REDUCE_SCATTER, .axes = sub, .dim = i, .dim_to = -1};
                mv[n].to.partial &= ~sub;
                for (int k = 0; k < m->naxes; k++) {
                    int ax = rev ? m->naxes - 1 - k : k;
                    if (sub & (1u << ax))
                        mv[n].to.axes[i][mv[n].to.naxes[i]++] = (unsigned char)ax;
                }
                if (aligned(m, t, s, &mv[n].to, i))
                    n++;
            }
    }
    unsigned free_axes = relevant & ~used & ~s->partial;
    for (unsigned sub = 1; sub <= relevant && n < SEARCH_MAX_MOVES; sub++) {
        if ((sub & relevant) != sub)
            continue;
        if ((s->partial & sub) == sub) { /* all-reduce a subset of the partial axes */
            mv[n] = (Move){.to = *s, .kind = COLL_ALL_REDUCE, .axes = sub, .dim = -1, .dim_to = -1};
            mv[n++].to.partial &= ~sub;
        }
        if ((free_axes & sub) == sub) { /* partialize */
            mv[n] = (Move){.to = *s, .kind = COLL_PARTIALIZE, .axes = sub, .dim = -1, .dim_to = -1};
            mv[n++].to.partial |= sub;
        }
    }
    return n;
}

/* Lexicographic: seconds, then number of collectives, then bytes. */
static int better(double c1, int n1, int64_t b1, double c2, int n2, int64_t b2)
{
    if (c1 < c2 * (1 - 1e-12))
        return 1;
    if (c1 > c2 * (1 + 1e-12))
        return 0;
    return n1 != n2 ? n1 < n2 : b1 < b2;
}

static int search(const Mesh *m, const Tensor *t, const Sharding *src, const Sharding *dst, Reshard *out)
{
    unsigned relevant = sharding_used_axes(src) | src->partial | sharding_used_axes(dst) | dst->partial;
    SearchNode *v = malloc(sizeof(SearchNode) * SEARCH_MAX_STATES);
    Move *mv = malloc(sizeof(Move) * SEARCH_MAX_MOVES);
    int nv = 1, found = -1;
    if (!v || !mv)
        abort();
    memset(&v[0], 0, sizeof v[0]);
    v[0].s = *src;
    v[0].parent = -1;
    for (;;) {
        int best = -1;
        for (int i = 0; i < nv; i++)
            if (!v[i].done && (best < 0 || better(v[i].cost, v[i].ncoll, v[i].bytes, v[best].cost,
                                                  v[best].ncoll, v[best].bytes)))
                best = i;
        if (best < 0)
            break;
        if (sharding_equal(&v[best].s, dst)) {
            found = best;
            break;
        }
        v[best].done = 1;
        int nm = gen_moves(m, t, &v[best].s, relevant, mv);
        for (int k = 0; k < nm; k++) {
            int64_t local = step_input_bytes(m, t, mv[k].kind, mv[k].axes, &v[best].s, &mv[k].to);
            int coll = mv[k].kind != COLL_SLICE && mv[k].kind != COLL_PARTIALIZE;
            int64_t b = coll_bytes(mv[k].kind, mesh_group_size(m, mv[k].axes), local);
            double sec = coll_seconds(m, mv[k].kind, mv[k].axes, local);
            double c = v[best].cost + sec;
            int nc = v[best].ncoll + coll;
            int64_t nb = v[best].bytes + b;
            int at = -1;
            for (int i = 0; i < nv && at < 0; i++)
                if (sharding_equal(&v[i].s, &mv[k].to))
                    at = i;
            if (at < 0) {
                if (nv == SEARCH_MAX_STATES)
                    goto give_up;
                at = nv++;
                memset(&v[at], 0, sizeof v[at]);
                v[at].s = mv[k].to;
            } else if (v[at].done || !better(c, nc, nb, v[at].cost, v[at].ncoll, v[at].bytes)) {
                continue;
            }
            v[at].cost = c;
            v[at].ncoll = nc;
            v[at].bytes = nb;
            v[at].parent = best;
            v[at].step = (ReshardStep){.kind = mv[k].kind, .axes = mv[k].axes, .dim = mv[k].dim,
                                       .dim_to = mv[k].dim_to, .bytes = b, .seconds = sec,
                                       .after = mv[k].to};
        }
    }
    if (found < 0)
        goto give_up;
    int path[RESHARD_MAX_STEPS], np = 0;
    for (int i = found; v[i].parent >= 0; i = v[i].parent) {
        if (np == RESHARD_MAX_STEPS)
            goto give_up;
        path[np++] = i;
    }
    memset(out, 0, sizeof(*out));
    int was_sharded = sharding_used_axes(src) != 0, through_replicated = 0;
    for (int k = np - 1; k >= 0; k--) {
        out->steps[out->nsteps++] = v[path[k]].step;
        out->bytes += v[path[k]].step.bytes;
        out->seconds += v[path[k]].step.seconds;
        if (k > 0 && sharding_is_replicated(&v[path[k]].s))
            through_replicated = 1;
    }
    /* Report a plan that gathers everything and then slices again. */
    out->full_gather = was_sharded && through_replicated && sharding_used_axes(dst) != 0;
    free(v);
    free(mv);
    return 0;
give_up:
    free(v);
    free(mv);
    return -1;
}

void reshard_lower(const Mesh *m, const Tensor *t, const Sharding *src, const Sharding *dst,
                   Reshard *out)
{
    memset(out, 0, sizeof(*out));
    if (sharding_equal(src, dst))
        return;
    if (search(m, t, src, dst, out) != 0)
        reshard_greedy(m, t, src, dst, out);
}
