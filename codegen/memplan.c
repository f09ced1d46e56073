/* memplan.c: where a rank's buffers live.
 *
 * Every value, reshard step and scratch buffer lives in one arena; a
 * buffer's lifetime runs from its first write to its last read (a
 * collective's input and output stay live until its wait; a view keeps
 * the storage it shares alive), and buffers are placed in decreasing
 * size, each at the lowest offset free over its lifetime, so buffers
 * whose lifetimes do not overlap share memory. Weights and inputs are
 * persistent, outside the arena: weights at 64-byte aligned offsets of
 * the weight blob. n log n in the number of buffers.
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

static void live(Program *pr, int b, int at)
{
    if (b < 0)
        return;
    if (at < pr->bufs[b].first)
        pr->bufs[b].first = at;
    if (at > pr->bufs[b].last)
        pr->bufs[b].last = at;
}

static void liveness(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int end = pr->ninsts;
    for (int b = 0; b < pr->nbufs; b++) {
        const Tensor *t = pr->bufs[b].kind == BUF_VALUE ? pr->bufs[b].tensor : NULL;
        /* summed into across the microbatches, or --decode's cache (kept
         * from one position to the next): never shared */
        if (pr->bufs[b].kind == BUF_ACCUM || (t && t->producer && t->producer->op == OP_KV_CACHE_WRITE)) {
            live(pr, b, 0);
            live(pr, b, end > 0 ? end - 1 : 0);
        }
    }
    /* A fused call's members: each one's input is in flight from the
     * call's start, its output from the call's wait (the leader's). */
    for (int m = 0; m < p->nreshards; m++) {
        int r = pr->reshards[m].fused_leader;
        if (r >= 0) {
            live(pr, pr->reshards[m].steps[0].in, pr->reshards[r].start_at);
            live(pr, pr->reshards[m].steps[0].out, pr->reshards[r].wait_at);
        }
    }
    for (int i = 0; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_COMPUTE) {
            const Node *n = in->node;
            for (int k = 0; k < n->ninputs; k++) {
                int tr = k < 2 ? pr->nodes[n->id].mm_view[k] : -1; /* read through to the Transpose's input */
                if (n->inputs[k])
                    live(pr, tr >= 0 ? program_operand_buf(pr, g->nodes[tr], 0) : program_operand_buf(pr, n, k), i);
            }
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k])
                    live(pr, pr->tensor_buf[n->outputs[k]->id], i);
            live(pr, pr->nodes[n->id].scratch, i);
            for (int s = 0; pr->nodes[n->id].wide && s < n->ninputs + n->noutputs; s++)
                live(pr, pr->nodes[n->id].wide[s], i);
            if (pr->nodes[n->id].fused_from >= 0) {
                const Node *add = g->nodes[pr->nodes[n->id].fused_from];
                live(pr, program_operand_buf(pr, add, 0), i);
                live(pr, program_operand_buf(pr, add, 1), i);
            }
        } else if (in->reshard < 0) {
            continue; /* a member of a fused call: nothing happens here */
        } else {
            int r = in->reshard, s0 = pr->reshards[r].start_at, w = pr->reshards[r].wait_at;
            if (pr->reshards[r].fused_leader == r) {
                live(pr, pr->reshards[r].fused_send, s0);
                live(pr, pr->reshards[r].fused_send, w);
                live(pr, pr->reshards[r].fused_recv, s0);
                live(pr, pr->reshards[r].fused_recv, w);
                continue; /* the members: above */
            }
            /* The first step's buffers are in flight from start to wait;
             * later steps run at the wait. */
            for (int j = 0; j < p->reshards[r].r.nsteps; j++) {
                const StepBufs *sb = &pr->reshards[r].steps[j];
                int from = j == 0 ? s0 : w;
                live(pr, sb->in, from);
                live(pr, sb->in, w);
                live(pr, sb->out, from);
                live(pr, sb->out, w);
                live(pr, sb->pack, from);
                live(pr, sb->pack, w);
                live(pr, sb->unpack, from);
                live(pr, sb->unpack, w);
            }
        }
    }
    /* Graph outputs (or their gathered form) survive to the end (with a
     * pipeline, on the last stage, where they are written). */
    for (int i = 0; i < g->noutputs; i++)
        if (program_holds_output(pr, g->outputs[i]))
            live(pr, program_output_buf(pr, i), end);
}

/* Memory plan: buffers in decreasing size (ties: creation order), each at
 * the lowest offset where it meets no placed buffer live at the same time
 * (sizes rounded up to 64 bytes). The placed buffers whose lifetimes meet
 * a new one come from a max-tree over all buffers sorted by first use,
 * holding each placed buffer's last use (-1 until placed): a query enters
 * only subtrees holding one, so the cost is O(log n) per buffer plus the
 * number of live buffers met, not a scan of everything placed. */
typedef struct Pair {
    int64_t a, b;
} Pair; /* a span [a, b) of the arena, or a sort key a with buffer index b */

static int pair_cmp(const void *x, const void *y)
{
    const Pair *p = x, *q = y;
    return p->a != q->a ? (p->a > q->a) - (p->a < q->a) : (p->b > q->b) - (p->b < q->b);
}

typedef struct Placer {
    const Buffer *bufs;
    const Pair *by_first; /* leaf -> (first use, buffer) */
    const int64_t *end;   /* buffer -> offset + rounded size, once placed */
    int *tree;            /* max last use over placed buffers, -1: none */
    int leaves;           /* a power of two */
    Pair *found;          /* spans of the placed buffers met */
    int nfound, cap;
} Placer;

/* Collects the placed buffers among leaves [lo, lo + width) below `node`
 * and before leaf qhi (first use <= the new buffer's last) that are live
 * at `first` or later. */
static void placer_collect(Placer *pl, int node, int lo, int width, int qhi, int first)
{
    if (lo >= qhi || pl->tree[node] < first)
        return;
    if (width == 1) {
        if (pl->nfound == pl->cap) {
            pl->cap = pl->cap ? 2 * pl->cap : 64;
            if (!(pl->found = realloc(pl->found, sizeof(Pair) * (size_t)pl->cap)))
                abort();
        }
        int b = (int)pl->by_first[lo].b;
        pl->found[pl->nfound++] = (Pair){pl->bufs[b].offset, pl->end[b]};
        return;
    }
    placer_collect(pl, 2 * node, lo, width / 2, qhi, first);
    placer_collect(pl, 2 * node + 1, lo + width / 2, width / 2, qhi, first);
}

/* The lowest offset at which [off, off + size) meets none of the spans.
 * Moving off past each span it meets, until it meets none, reaches that
 * offset in any order (it never passes it); a few passes in the order
 * found are linear and usually settle it (same-size buffers stacked one
 * above another), else one pass in offset order does. -1: past 64 bits. */
static int lowest_fit(Pair *s, int n, int64_t size, int64_t *out)
{
    int64_t off = 0, top = size;
    for (int pass = 0, moved = 1; moved; pass++) {
        moved = 0;
        if (pass == 4)
            qsort(s, (size_t)n, sizeof(Pair), pair_cmp);
        for (int k = 0; k < n && !(pass == 4 && s[k].a >= top); k++)
            if (s[k].a < top && off < s[k].b) {
                off = s[k].b;
                moved = pass < 4;
                if (ck_add_i64(off, size, &top))
                    return -1;
            }
    }
    *out = off;
    return 0;
}

/* A buffer's arena footprint: its bytes rounded up to 64. */
static int round64(int64_t bytes, int64_t *out)
{
    if (bytes < 0 || ck_add_i64(bytes, 63, out))
        return -1;
    *out &= ~(int64_t)63;
    return 0;
}

static int place(Program *pr, int stash, int region, int64_t *bytes, Diag *d)
{
    int n = pr->nbufs, m = 0, rc = -1, *leaf = malloc(sizeof(int) * (size_t)(n + 1));
    Pair *by_size = malloc(sizeof(Pair) * (size_t)(n + 1)), *by_first = malloc(sizeof(Pair) * (size_t)(n + 1));
    int64_t *size = malloc(sizeof(int64_t) * (size_t)(n + 1)), *end = malloc(sizeof(int64_t) * (size_t)(n + 1));
    Placer pl = {pr->bufs, by_first, end, NULL, 1, NULL, 0, 0};
    if (!by_size || !by_first || !leaf || !size || !end)
        abort();
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        const Buffer *b = &pr->bufs[i];
        if (b->kind < BUF_VALUE || b->last < 0 || pr->bufs[i].alias_of >= 0 || b->stash != stash ||
            (!stash && b->region != region))
            continue;
        if (round64(b->bytes, &size[i])) {
            diag_add(d, "rank %d: buffer %s (%lld bytes) is too large for a 64-bit arena", pr->rank, b->name,
                     (long long)b->bytes);
            goto cleanup;
        }
        by_size[m] = (Pair){-b->bytes, i};
        by_first[m++] = (Pair){b->first, i};
    }
    qsort(by_size, (size_t)m, sizeof(Pair), pair_cmp);
    qsort(by_first, (size_t)m, sizeof(Pair), pair_cmp);
    while (pl.leaves < m)
        pl.leaves *= 2;
    if (!(pl.tree = malloc(sizeof(int) * 2 * (size_t)pl.leaves)))
        abort();
    for (int i = 0; i < 2 * pl.leaves; i++)
        pl.tree[i] = -1;
    for (int i = 0; i < m; i++)
        leaf[by_first[i].b] = i;
    for (int i = 0; i < m; i++) {
        int bi = (int)by_size[i].b, lo = 0, hi = m;
        Buffer *b = &pr->bufs[bi];
        while (lo < hi) { /* leaves [0, hi) start no later than b ends */
            int mid = lo + (hi - lo) / 2;
            if (by_first[mid].a <= b->last)
                lo = mid + 1;
            else
                hi = mid;
        }
        pl.nfound = 0;
        placer_collect(&pl, 1, 0, pl.leaves, hi, b->first);
        int64_t off, top;
        if (lowest_fit(pl.found, pl.nfound, size[bi], &off) || ck_add_i64(off, size[bi], &top)) {
            diag_add(d, "rank %d: the arena outgrows 64-bit offsets placing buffer %s (%lld bytes)", pr->rank,
                     b->name, (long long)b->bytes);
            goto cleanup;
        }
        b->offset = off;
        end[bi] = top;
        if (top > *bytes)
            *bytes = top;
        int t = pl.leaves + leaf[bi];
        pl.tree[t] = b->last;
        for (t /= 2; t >= 1; t /= 2)
            pl.tree[t] = pl.tree[2 * t] > pl.tree[2 * t + 1] ? pl.tree[2 * t] : pl.tree[2 * t + 1];
    }
    for (int i = 0; i < n; i++) {
        const Buffer *root = pr->bufs[i].alias_of >= 0 ? &pr->bufs[pr->bufs[i].alias_of] : NULL;
        if (root && root->stash == stash && (stash || root->region == region)) {
            pr->bufs[i].offset = root->offset;
            pr->bufs[i].stash = (char)stash;
            pr->bufs[i].region = root->region;
        }
    }
    rc = 0;
cleanup:
    free(pl.tree);
    free(pl.found);
    free(by_size);
    free(by_first);
    free(leaf);
    free(size);
    free(end);
    return rc;
}

int program_plan_memory(Program *pr, Diag *d)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    liveness(pr);
    for (int i = 0; i < pr->nbufs; i++) { /* a view keeps the storage it shares alive */
        Buffer *b = &pr->bufs[i], *root = b->alias_of >= 0 ? &pr->bufs[b->alias_of] : NULL;
        if (root && b->last >= 0) {
            if (root->last < 0 || b->first < root->first)
                root->first = b->first;
            if (b->last > root->last)
                root->last = b->last;
        }
    }
    int64_t woff = 0, sz;
    for (int i = 0; i < pr->nbufs; i++) {
        Buffer *b = &pr->bufs[i];
        if (b->bytes < 0) {
            diag_add(d, "rank %d: buffer %s: its size overflows 64 bits", pr->rank, b->name);
            return -1;
        }
        if (b->kind == BUF_WEIGHT) {
            /* Each weight, then the GEMM panels the compiler packed from
             * it (an inference program's), if any; one stored packed only
             * has no bytes of its own. */
            b->offset = woff;
            if (!b->packed_only && (round64(b->bytes, &sz) || ck_add_i64(woff, sz, &woff))) {
                diag_add(d, "rank %d: the weights outgrow 64-bit offsets at %s", pr->rank, b->name);
                return -1;
            }
            for (int q = 0; q < pr->npacks; q++)
                if (pr->packs[q].buf == i && pr->packs[q].in_file) {
                    pr->packs[q].offset = woff;
                    if (round64(pr->packs[q].bytes, &sz) || ck_add_i64(woff, sz, &woff)) {
                        diag_add(d, "rank %d: the weights outgrow 64-bit offsets at %s's panels", pr->rank, b->name);
                        return -1;
                    }
                }
        } else if ((b->kind == BUF_INPUT || b->kind == BUF_RECV) &&
                   ck_add_i64(pr->input_bytes, b->bytes, &pr->input_bytes)) {
            diag_add(d, "rank %d: the inputs' total size overflows 64 bits at %s", pr->rank, b->name);
            return -1;
        }
    }
    pr->weight_bytes = woff;
    const Pipeline *pp = p->pipe;
    if (pp && pp->train) {
        /* A value live from one of a microbatch's passes into another is
         * kept per microbatch in flight: in its chunk's stash (its forward
         * into its backward), or one for values crossing chunks (with the
         * interleaved schedule). One that lives from a backward pass into
         * the optimizer step (a gradient after the last microbatch) stays
         * in its chunk's arena region, which no later pass touches. Stage
         * 0 holds a slot of its inputs, the others a receive slot per
         * value, per microbatch in flight, and every stage a send slot per
         * microbatch per value it sends. */
        int v = pp->chunks, opt = 2 * v;
        pr->nstash = v + (v > 1);
        for (int k = 0; k < pr->nstash; k++) {
            pr->stash_slots[k] = pipeline_chunk_inflight(pp, pr->stage, k < v ? k : -1);
            if (pr->stash_slots[k] < 1)
                pr->stash_slots[k] = 1;
        }
        for (int i = 0; i < pr->nbufs; i++) {
            Buffer *b = &pr->bufs[i];
            b->stash = 0;
            b->region = 0;
            if (b->kind < BUF_VALUE || b->kind == BUF_RECV || b->alias_of >= 0 || b->last < 0)
                continue;
            int kf = program_inst_pass(pr, b->first), kl = program_inst_pass(pr, b->last);
            int cf = kf < v ? kf : kf < opt ? opt - 1 - kf : 0, cl = kl < v ? kl : kl < opt ? opt - 1 - kl : 0;
            b->region = (char)cf;
            if (b->kind == BUF_ACCUM || kf == kl || (kl == opt && kf >= v))
                continue;
            b->stash = (char)(kf < v && kl >= v && kl < opt && cf == cl ? 1 + cf : v > 1 ? 1 + v : 1);
        }
        int64_t held = 0;
        for (int i = 0; i < pr->nbufs; i++) {
            const Buffer *b = &pr->bufs[i];
            if (b->kind == BUF_INPUT || b->kind == BUF_RECV)
                held += b->bytes * pr->stash_slots[pr->nstash - 1];
            else if (b->kind == BUF_VALUE && b->tensor && pp->readers[b->tensor->id])
                held += b->bytes * pp->microbatches;
        }
        for (int k = 0; k < pr->nstash; k++) {
            if (place(pr, k + 1, 0, &pr->stash_bytes[k], d))
                return -1;
            held += pr->stash_bytes[k] * pr->stash_slots[k];
        }
        pr->input_bytes = held;
        /* The arena: chunk 0's region, then chunk 1's, ... */
        int64_t base = 0;
        for (int c = 0; c < v; c++) {
            int64_t bytes;
            if (place(pr, 0, c, &bytes, d))
                return -1;
            for (int i = 0; i < pr->nbufs; i++)
                if (!pr->bufs[i].stash && pr->bufs[i].region == c && pr->bufs[i].kind >= BUF_VALUE &&
                    pr->bufs[i].last >= 0)
                    pr->bufs[i].offset += base;
            base += bytes;
        }
        pr->arena_bytes = base;
        return 0;
    } else if (pp) {
        /* A stage holds every microbatch's input blocks (stage 0), two
         * slots per value it receives or sends, and every microbatch's
         * output blocks (the last stage). */
        int64_t held = 0;
        for (int i = 0; i < pr->nbufs; i++) {
            const Buffer *b = &pr->bufs[i];
            if (b->kind == BUF_INPUT)
                held += b->bytes * pp->microbatches;
            else if (b->kind == BUF_RECV)
                held += 2 * b->bytes;
            else if (b->kind == BUF_VALUE && b->tensor && pp->readers[b->tensor->id])
                held += 2 * b->bytes;
        }
        for (int i = 0; pr->stage == pp->nstages - 1 && i < g->noutputs; i++)
            held += pr->bufs[program_output_buf(pr, i)].bytes * pp->microbatches;
        pr->input_bytes = held;
    }
    return place(pr, 0, 0, &pr->arena_bytes, d);
}

/* Optimizer state: an initializer an update overwrites other than its
 * weight (AdamW's m and v, SGD's momentum). */
static int is_optimizer_state(const Tensor *t)
{
    for (int c = 0; t && t->is_initializer && c < t->nconsumers; c++) {
        const Node *n = t->consumers[c];
        for (int k = 1; k < n->noutputs; k++) {
            int j = ir_output_in_place(n, k);
            if (j >= 0 && n->inputs[j] == t)
                return 1;
        }
    }
    return 0;
}

/* A gradient: a backward node's value (not a forward node run again by
 * --recompute), or its accumulator. */
static int is_gradient(const Buffer *b)
{
    const Node *n = b->tensor ? b->tensor->producer : NULL;
    return b->kind == BUF_ACCUM || (n && n->grad && !n->recomputed);
}

/* Weights and state as the blob lays them out (64-byte aligned, as
 * program_plan_memory counts them); the arena split at the instruction
 * where the most bytes are live, the gradients there on one side and the
 * rest of the arena (with the gaps the placement left) on the other, so
 * the parts add up to what the program holds. */
void program_memory_split(const Program *pr, MemorySplit *m)
{
    memset(m, 0, sizeof *m);
    int n = pr->ninsts > 0 ? pr->ninsts : 1;
    int64_t *delta = calloc((size_t)n + 1, sizeof(int64_t)), *fwd = calloc((size_t)n + 1, sizeof(int64_t));
    char *grad = calloc((size_t)pr->nbufs + 1, 1);
    if (!delta || !fwd || !grad)
        abort();
    for (int i = 0; i < pr->nbufs; i++)
        grad[i] = (char)is_gradient(&pr->bufs[i]);
    /* A fused call's packed buffers have no tensor: a gradient bucket's,
     * or a fused call over gradients, hold gradients. */
    for (int r = 0; r < pr->plan->nreshards; r++) {
        const ProgramReshard *pk = &pr->reshards[r];
        const Node *lead = pr->plan->reshards[r].tensor->producer;
        if (pk->here && pk->fused_leader == r && (pk->bucket || (lead && lead->grad && !lead->recomputed))) {
            if (pk->fused_send >= 0)
                grad[pk->fused_send] = 1;
            if (pk->fused_recv >= 0)
                grad[pk->fused_recv] = 1;
        }
    }
    for (int i = 0; i < pr->nbufs; i++) {
        const Buffer *b = &pr->bufs[i];
        int64_t sz;
        if (round64(b->bytes, &sz))
            sz = b->bytes; /* program_plan_memory refused it already */
        if (b->kind == BUF_WEIGHT) {
            if (is_optimizer_state(b->tensor))
                m->state += sz;
            else if (!b->packed_only)
                m->weights += sz;
            for (int q = 0; q < pr->npacks; q++) /* its GEMM panels: in the weight file, or made at start-up */
                if (pr->packs[q].buf == i && !round64(pr->packs[q].bytes, &sz))
                    m->weights += sz;
        } else if (b->kind >= BUF_VALUE && b->last >= 0 && b->alias_of < 0) {
            int end = b->last + 1 < n ? b->last + 1 : n;
            delta[b->first] += sz;
            delta[end] -= sz;
            if (!grad[i]) {
                fwd[b->first] += sz;
                fwd[end] -= sz;
            }
        }
    }
    int64_t live = 0, most = -1, flive = 0;
    int peak = 0;
    for (int i = 0; i < n; i++) {
        flive += fwd[i];
        if (flive > m->forward_peak)
            m->forward_peak = flive;
        live += delta[i];
        if (live > most) {
            most = live;
            peak = i;
        }
    }
    for (int i = 0; i < pr->nbufs; i++) {
        const Buffer *b = &pr->bufs[i];
        int64_t sz;
        if (b->kind >= BUF_VALUE && b->last >= 0 && b->alias_of < 0 && b->first <= peak && peak <= b->last &&
            grad[i] && !round64(b->bytes, &sz))
            m->grads += sz;
    }
    m->arena = pr->arena_bytes;
    m->activations = pr->arena_bytes - m->grads + pr->input_bytes;
    m->total = pr->arena_bytes + pr->weight_bytes + pr->input_bytes + pr->packed_bytes;
    free(delta);
    free(fwd);
    free(grad);
}

int64_t program_runtime_bytes(int world)
{
    return (int64_t)(world <= 2 ? 13 : 16) << 20;
}

int64_t program_rank_bytes(const Program *pr)
{
    return pr->arena_bytes + pr->weight_bytes + pr->input_bytes + pr->packed_bytes +
           program_runtime_bytes(plan_world_ranks(pr->plan));
}
