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
 * and the loop repeats until the layout equals dst. A dim's axis list is
 * ordered major to minor, so only its minor-most axis can leave it without
 * disturbing the others; that is why an axis swap such as [dp,tp] to
 * [tp,dp] costs a gather and an all-to-all. Bytes are those sent per rank
 * by ring algorithms; seconds come from the alpha-beta link model.
 */
#include "partition.h"

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

double coll_seconds(const Mesh *m, CollKind k, unsigned axes, int64_t local)
{
    int n = mesh_group_size(m, axes);
    if (n <= 1 || k == COLL_SLICE || k == COLL_PARTIALIZE)
        return 0;
    const LinkClass *l = mesh_group_link(m, axes);
    double hops = k == COLL_ALL_REDUCE ? 2.0 * (n - 1) : (double)(n - 1);
    return hops * l->latency_s + (double)coll_bytes(k, n, local) / l->bandwidth_Bps;
}

static void push(const Mesh *m, const Tensor *t, Reshard *out, CollKind k, unsigned axes,
                 int dim, int dim_to, const Sharding *before, const Sharding *after)
{
    if (out->nsteps == RESHARD_MAX_STEPS)
        return;
    ReshardStep *s = &out->steps[out->nsteps++];
    int64_t local = sharding_local_bytes(before, m, t);
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

void reshard_lower(const Mesh *m, const Tensor *t, const Sharding *src, const Sharding *dst,
                   Reshard *out)
{
    memset(out, 0, sizeof(*out));
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
