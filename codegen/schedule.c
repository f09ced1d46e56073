/* schedule.c: the order of a rank's instructions, and its cost.
 *
 * Nodes run in graph order; each reshard starts as soon as its input
 * exists (right after the producing node, or before the first node for
 * weights and inputs; weight gathers under --shard-weights a bounded
 * number of nodes ahead) and is waited for just before the first node
 * that reads its result, so communication overlaps the compute in
 * between. Multi-step reshards run their later steps at the wait. Small
 * all-reduces ready together on one group are fused into one call, and
 * weight gradients into DDP buckets (--bucket-mb); a lone
 * all-reduce nothing could overlap is called blocking on the C target.
 * program_estimate runs the cost model over the resulting order. Linear
 * or n log n in the graph (a million-node chain compiles in seconds).
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

/* Groups items 0..n-1 by key (0..nkeys-1; negative: none), in increasing
 * item order within a group: key k's items are items[off[k] .. off[k+1]).
 * Linear, so that the schedule is. */
typedef struct Buckets {
    int *off, *items;
} Buckets;

static Buckets buckets_make(int nkeys, int n, const int *key)
{
    Buckets b = {calloc((size_t)nkeys + 2, sizeof(int)), malloc(sizeof(int) * (size_t)(n + 1))};
    int total = 0;
    if (!b.off || !b.items)
        abort();
    for (int i = 0; i < n; i++)
        if (key[i] >= 0)
            b.off[key[i] + 1]++, total++;
    for (int k = 0; k < nkeys; k++)
        b.off[k + 1] += b.off[k]; /* off[k + 1]: where group k ends */
    for (int i = n - 1; i >= 0; i--)
        if (key[i] >= 0)
            b.items[--b.off[key[i] + 1]] = i; /* leaves off[k + 1] where k starts */
    memmove(b.off, b.off + 1, sizeof(int) * (size_t)nkeys);
    b.off[nkeys] = total;
    return b;
}

/* A weight gather started early enough that the cost model's compute
 * between its start and its reader is this many times its own time.
 * Transfer on CPUs moves only when a rank tests it (between nodes and
 * between a long kernel's blocks), and ranks drift apart, so the plan's
 * time is a floor, not a forecast: the lead is generous. */
#define PREFETCH_COVER 4.0
/* ... but never more than this many weight-reading nodes ahead per
 * prefetch step: where compute is short of the transfers (small models on
 * fast devices) every gather would otherwise start at once and hold every
 * gathered weight for the whole pass. */
#define PREFETCH_WINDOW 8

static double reshard_seconds(const Reshard *rs)
{
    double s = 0;
    for (int j = 0; j < rs->nsteps; j++)
        s += rs->steps[j].seconds;
    return s;
}

/* Instruction order. A reshard of a node's output starts right after that
 * node; a weight gather (--shard-weights) starts `prefetch` weight-reading
 * nodes before its first reader, or earlier (up to PREFETCH_WINDOW times as
 * far) where the compute of those nodes (cost model) is under
 * PREFETCH_COVER times the gather's time, so it
 * overlaps their compute (prefetch 0: right before its reader); any other
 * reshard of a weight or input starts before the first node. Every
 * reshard is waited on right before its first reader (nnodes for graph
 * outputs). Reshards at the same place go in index order. The times are
 * the plan's, the same on every rank, so the ranks of a group start their
 * collectives in one order. */
#define ZERO2_LAG 3

static void schedule(Program *pr, int prefetch)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int nr = p->nreshards, nn = g->nnodes;
    /* (calloc: gcc 12 cannot see that the loop below sets every entry) */
    int *reader = malloc(sizeof(int) * (size_t)(nr + 1)), *start_before = calloc((size_t)nr + 1, sizeof(int));
    int *after = calloc((size_t)nr + 1, sizeof(int));
    int *reader_pos = malloc(sizeof(int) * (size_t)(nn + 1)), *readers = malloc(sizeof(int) * (size_t)(nn + 1));
    char *is_reader = calloc((size_t)nn + 2, 1);
    int nreaders = 0;
    if (!reader || !start_before || !after || !reader_pos || !readers || !is_reader)
        abort();
    /* cum[i]: planned compute of the nodes before node i that run here
     * (a reshape that only renames its input's storage computes nothing). */
    double *cum = malloc(sizeof(double) * (size_t)(nn + 1));
    if (!cum)
        abort();
    cum[0] = 0;
    for (int i = 0; i < nn; i++)
        cum[i + 1] = cum[i] + (program_runs(pr, g->nodes[i]) && pr->nodes[i].view_into < 0
                                   ? plan_node_planned_seconds(p, g->nodes[i]) : 0);
    for (int r = 0; r < nr; r++)
        reader[r] = pr->reshards[r].here ? nn : -1;
    /* One pass over every operand: its first reader is the lowest node. */
    for (int i = nn - 1; i >= 0; i--)
        for (int k = 0; program_runs(pr, g->nodes[i]) && k < g->nodes[i]->ninputs; k++) {
            int r = p->nodes[i].in_reshard[k];
            if (r >= 0 && r < nr)
                reader[r] = i;
        }
    /* ZeRO-2: a gradient's reduce-scatter is waited for ZERO2_LAG nodes
     * after the one that computed it (not at its optimizer update), so the
     * full gradient's buffer is free from there and only the block lives
     * on to the update. */
    for (int i = 0; p->zero >= 2 && i < nn; i++) {
        const Node *n = g->nodes[i];
        int r = ir_output_in_place(n, 0) >= 0 && n->ninputs > 1 ? p->nodes[i].in_reshard[1] : -1;
        const Node *prod = r >= 0 ? p->reshards[r].tensor->producer : NULL;
        if (prod && program_runs(pr, prod) && prod->id + ZERO2_LAG < reader[r])
            reader[r] = prod->id + ZERO2_LAG;
    }
    for (int r = 0; r < nr; r++)
        if (p->reshards[r].weight_gather && reader[r] >= 0 && reader[r] < nn)
            is_reader[reader[r]] = 1;
    for (int i = 0; i < nn; i++)
        if (is_reader[i]) {
            reader_pos[i] = nreaders;
            readers[nreaders++] = i;
        }
    for (int r = 0; r < nr; r++) {
        start_before[r] = -1; /* -1: program start; -2: after its producer; -3: not here */
        after[r] = -1;
        const Node *prod = p->reshards[r].tensor->producer;
        if (!pr->reshards[r].here) {
            start_before[r] = -3;
        } else if (prod && !program_runs(pr, prod)) {
            /* received from another stage: starts when the step does */
        } else if (prod) {
            start_before[r] = -2;
            after[r] = p->reshards[r].tensor->producer->id;
        } else if (p->reshards[r].weight_gather && reader[r] >= 0 && reader[r] < nn) {
            int j = reader_pos[reader[r]], at = j - prefetch >= 0 ? readers[j - prefetch] : -1;
            int far = j - PREFETCH_WINDOW * prefetch >= 0 ? readers[j - PREFETCH_WINDOW * prefetch] : -1;
            double need = PREFETCH_COVER * reshard_seconds(&p->reshards[r].r);
            while (prefetch > 0 && at > far && cum[reader[r]] - cum[at] < need)
                at--; /* one more node of compute ahead */
            start_before[r] = at;
        }
    }
    /* A training pipeline runs a microbatch's passes (forward, backward,
     * per model chunk) apart, other microbatches' passes between them: a
     * reshard whose reader runs in another pass than its start starts
     * right before that pass's first node, so no collective is in flight
     * from one pass into another; except one started in backward and
     * waited for in the optimizer step (the last microbatch's gradient
     * reductions, started as backward goes). */
    const Pipeline *pp = p->pipe;
    if (pp && pp->train) {
        int npass = 2 * pp->chunks + 1, first_of[2 * PIPE_MAX_STAGES + 1];
        for (int k = 0; k < npass; k++)
            first_of[k] = -1;
        for (int i = nn - 1; i >= 0; i--)
            if (program_runs(pr, g->nodes[i]))
                first_of[program_pass(pr, g->nodes[i])] = i;
        for (int r = 0; r < nr; r++) {
            if (start_before[r] == -3)
                continue;
            int rp = reader[r] < nn ? program_pass(pr, g->nodes[reader[r]]) : npass - 1;
            int sp = start_before[r] >= 0 ? program_pass(pr, g->nodes[start_before[r]])
                     : start_before[r] == -2 ? program_pass(pr, g->nodes[after[r]]) : 0;
            if (sp == rp || (rp == npass - 1 && sp >= pp->chunks) || first_of[rp] < 0)
                continue;
            start_before[r] = first_of[rp];
            after[r] = -1;
        }
    }
    Buckets starts = buckets_make(nn, nr, start_before), waits = buckets_make(nn + 1, nr, reader),
            posts = buckets_make(nn, nr, after);
    pr->ninsts = 0;
    for (int r = 0; r < nr; r++)
        if (start_before[r] == -1) {
            pr->reshards[r].start_at = pr->ninsts;
            program_inst_add(pr, INST_START, NULL, r);
        }
    for (int i = 0; i < nn; i++) {
        const Node *n = g->nodes[i];
        for (int q = starts.off[i]; q < starts.off[i + 1]; q++) {
            int r = starts.items[q];
            pr->reshards[r].start_at = pr->ninsts;
            program_inst_add(pr, INST_START, n, r);
        }
        for (int q = waits.off[i]; q < waits.off[i + 1]; q++) {
            int r = waits.items[q];
            pr->reshards[r].wait_at = pr->ninsts;
            program_inst_add(pr, INST_WAIT, n, r);
        }
        int fused_away = (i + 1 < nn && pr->nodes[i + 1].fused_from == i) || pr->nodes[i].view_into >= 0;
        if (!fused_away && program_runs(pr, n))
            program_inst_add(pr, INST_COMPUTE, n, -1);
        for (int q = posts.off[i]; q < posts.off[i + 1]; q++) {
            int r = posts.items[q];
            pr->reshards[r].start_at = pr->ninsts;
            program_inst_add(pr, INST_START, n, r);
        }
    }
    for (int q = waits.off[nn]; q < waits.off[nn + 1]; q++) {
        int r = waits.items[q];
        pr->reshards[r].wait_at = pr->ninsts;
        program_inst_add(pr, INST_WAIT, NULL, r);
    }
    /* A training pipeline's instructions by pass (graph order keeps a
     * pass's nodes together but for a few: recomputations, a weight's
     * summed gradient), so each pass is one run of them. */
    if (pp && pp->train) {
        int n = pr->ninsts, npass = 2 * pp->chunks + 1;
        int *key = malloc(sizeof(int) * (size_t)(n + 1)), *count = calloc((size_t)npass + 1, sizeof(int));
        Inst *sorted = malloc(sizeof(Inst) * (size_t)(n + 1));
        if (!key || !count || !sorted)
            abort();
        for (int i = 0; i < n; i++) {
            key[i] = program_inst_pass(pr, i);
            count[key[i] + 1]++;
        }
        for (int k = 0; k < npass; k++)
            count[k + 1] += count[k];
        for (int i = 0; i < n; i++) {
            int at = count[key[i]]++;
            sorted[at] = pr->insts[i];
            if (sorted[at].kind == INST_START)
                pr->reshards[sorted[at].reshard].start_at = at;
            else if (sorted[at].kind == INST_WAIT)
                pr->reshards[sorted[at].reshard].wait_at = at;
        }
        memcpy(pr->insts, sorted, sizeof(Inst) * (size_t)n);
        free(key);
        free(count);
        free(sorted);
    }
    Buckets all[] = {starts, waits, posts};
    for (int k = 0; k < 3; k++) {
        free(all[k].off);
        free(all[k].items);
    }
    free(reader);
    free(start_before);
    free(after);
    free(reader_pos);
    free(readers);
    free(is_reader);
    free(cum);
}

/* Fills each reshard's blocking flag (see codegen.h). */
static void find_blocking(Program *pr)
{
    const Plan *p = pr->plan;
    for (int r = 0; r < p->nreshards; r++) {
        const Reshard *rs = &p->reshards[r].r;
        pr->reshards[r].blocking = 0;
        if (pr->cuda || rs->nsteps != 1 || rs->steps[0].kind != COLL_ALL_REDUCE || pr->reshards[r].fused_leader >= 0)
            continue; /* (fused calls are packed and started together) */
        if (pr->reshards[r].start_at < 0 || pr->reshards[r].wait_at <= pr->reshards[r].start_at)
            continue;
        int compute = 0;
        for (int i = pr->reshards[r].start_at + 1; i < pr->reshards[r].wait_at && !compute; i++)
            compute = pr->insts[i].kind == INST_COMPUTE;
        pr->reshards[r].blocking = !compute;
    }
}

/* One fused call: the members' calls become the leader's, over a packed
 * buffer, started where the last member would have been and waited on
 * where the first member would have been, so no member is waited on later
 * than before. */
static void fuse_group(Program *pr, const int *group, int ng, int bucket)
{
    const Plan *p = pr->plan;
    int leader = group[0], last_start = pr->reshards[group[ng - 1]].start_at, first_wait = pr->reshards[leader].wait_at;
    int64_t total = 0;
    for (int k = 0; k < ng; k++) {
        pr->reshards[group[k]].fused_leader = leader;
        if (total >= 0 && ck_add_i64(total, pr->bufs[pr->reshards[group[k]].steps[0].in].bytes, &total))
            total = -1;
        if (pr->reshards[group[k]].wait_at < first_wait)
            first_wait = pr->reshards[group[k]].wait_at;
    }
    pr->reshards[leader].bucket = (char)bucket;
    int64_t elems = total < 0 ? -1 : total / (int64_t)dtype_size(p->reshards[leader].tensor->dtype);
    char base[160];
    snprintf(base, sizeof base, "%s_r%d_send", bucket ? "bucket" : "fused", leader);
    pr->reshards[leader].fused_send =
        program_buf_new(pr, base, NULL, BUF_RESHARD, p->reshards[leader].tensor->dtype, 1, &elems, NULL);
    snprintf(base, sizeof base, "%s_r%d_recv", bucket ? "bucket" : "fused", leader);
    pr->reshards[leader].fused_recv =
        program_buf_new(pr, base, NULL, BUF_RESHARD, p->reshards[leader].tensor->dtype, 1, &elems, NULL);
    /* Only the leader's START (at the last member's place) and the
     * leader's WAIT (at the earliest member wait) remain. */
    for (int k = 0; k < ng; k++) {
        pr->insts[pr->reshards[group[k]].start_at].reshard = -1 - group[k];
        pr->insts[pr->reshards[group[k]].wait_at].reshard = -1 - group[k];
    }
    pr->insts[last_start].reshard = leader;
    pr->insts[first_wait].reshard = leader;
    for (int k = 0; k < ng; k++) {
        pr->reshards[group[k]].start_at = last_start;
        pr->reshards[group[k]].wait_at = first_wait;
    }
}

/* Fusion, two kinds.
 *
 * Small all-reduces: on the same group and dtype, run in the same
 * microbatches under --accum (last_micro), each smaller than fuse_bytes, started one after another with none of them waited on in
 * between, become one call.
 *
 * Gradient buckets (--train, as PyTorch DDP): the all-reduces of weight
 * gradients that optimizer updates wait for, in the order backward
 * computes them (reverse parameter order), fill buckets on the same group
 * and dtype; a bucket is started as soon as its last gradient is computed
 * and it holds bucket_bytes, or when the next gradient goes elsewhere,
 * or at the end of backward. Waits of other reshards in between do not
 * close it: its members are waited for only at their optimizer updates,
 * and each update waits for its own bucket only. bucket_bytes 0: one
 * bucket per gradient. */
static void fuse(Program *pr, int64_t fuse_bytes, int64_t bucket_bytes)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int nr = p->nreshards;
    char *grad = calloc((size_t)nr + 1, 1);
    int *small = malloc(sizeof(int) * (size_t)(nr + 1)), *bucket = malloc(sizeof(int) * (size_t)(nr + 1));
    if (!grad || !small || !bucket)
        abort();
    for (int r = 0; r < nr; r++) {
        pr->reshards[r].fused_leader = -1;
        pr->reshards[r].bucket = 0;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        int r = ir_output_in_place(n, 0) >= 0 && n->ninputs > 1 ? p->nodes[i].in_reshard[1] : -1;
        if (r >= 0 && pr->reshards[r].here && p->reshards[r].r.nsteps == 1 &&
            p->reshards[r].r.steps[0].kind == COLL_ALL_REDUCE)
            grad[r] = 1;
    }
    int ns = 0, nb = 0;
    int64_t filled = 0;
    for (int i = 0; i <= pr->ninsts; i++) {
        const Inst *in = i < pr->ninsts ? &pr->insts[i] : NULL;
        int r = in ? in->reshard : -1;
        int start = in && in->kind == INST_START && r >= 0, wait = in && in->kind == INST_WAIT && r >= 0;
        /* the gradient bucket */
        if (start && grad[r]) {
            int joins = nb > 0 && p->reshards[r].r.steps[0].axes == p->reshards[bucket[0]].r.steps[0].axes &&
                        p->reshards[r].tensor->dtype == p->reshards[bucket[0]].tensor->dtype &&
                        pr->reshards[r].last_micro == pr->reshards[bucket[0]].last_micro;
            if (nb > 0 && !joins) {
                if (nb >= 2)
                    fuse_group(pr, bucket, nb, 1);
                nb = 0;
                filled = 0;
            }
            bucket[nb++] = r;
            filled += pr->bufs[pr->reshards[r].steps[0].in].bytes;
            if (filled >= bucket_bytes) {
                if (nb >= 2)
                    fuse_group(pr, bucket, nb, 1);
                nb = 0;
                filled = 0;
            }
            continue;
        }
        int member = 0;
        for (int k = 0; wait && k < nb; k++)
            member |= bucket[k] == r;
        if (!in || member) {
            if (nb >= 2)
                fuse_group(pr, bucket, nb, 1);
            nb = 0;
            filled = 0;
        }
        /* small all-reduces */
        int cand = fuse_bytes > 0 && start && p->reshards[r].r.nsteps == 1 &&
                   p->reshards[r].r.steps[0].kind == COLL_ALL_REDUCE &&
                   pr->bufs[pr->reshards[r].steps[0].in].bytes < fuse_bytes;
        int joins = cand && ns > 0 && ns < 64 && p->reshards[r].r.steps[0].axes == p->reshards[small[0]].r.steps[0].axes &&
                    p->reshards[r].tensor->dtype == p->reshards[small[0]].tensor->dtype &&
                    pr->reshards[r].last_micro == pr->reshards[small[0]].last_micro;
        int breaks = !in || (in->kind == INST_WAIT && ns > 0) || (cand && !joins);
        if (breaks && ns >= 2)
            fuse_group(pr, small, ns, 0);
        if (breaks)
            ns = 0;
        if (cand && (ns == 0 || joins))
            small[ns++] = r;
    }
    free(grad);
    free(small);
    free(bucket);
}

/* --accum K: every value the optimizer step reads from the microbatch
 * loop (the weights' gradients, or with --clip-norm the gradients the norm
 * is taken of) and the loss are summed over the microbatches in
 * accumulators that live throughout (the last microbatch leaves their mean
 * in the value itself), and every reshard that moves one of them, or is
 * waited for in optimizer_step() (after the microbatch loop), runs in the
 * last microbatch only. */
static void mark_accum(Program *pr)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    for (int i = 0; i < g->nnodes; i++)
        pr->nodes[i].accum_buf = -1;
    for (int r = 0; r < p->nreshards; r++)
        pr->reshards[r].last_micro = 0;
    pr->first_update = pr->ninsts;
    for (int i = pr->ninsts - 1; i >= 0; i--)
        if (pr->insts[i].kind == INST_COMPUTE && ir_in_optimizer_step(pr->insts[i].node))
            pr->first_update = i;
    if (g->accum <= 1)
        return;
    char *acc = calloc((size_t)g->ntensors + 1, 1);
    if (!acc)
        abort();
    for (int i = 0; i <= g->nnodes; i++) {
        const Node *n = i < g->nnodes ? g->nodes[i] : NULL;
        if (n && !ir_in_optimizer_step(n))
            continue;
        for (int k = 0; k < (n ? n->ninputs : 1); k++) {
            const Tensor *t = n ? n->inputs[k] : g->loss;
            const Node *prod = t ? t->producer : NULL;
            if (!prod || ir_in_optimizer_step(prod) || !program_runs(pr, prod) || acc[t->id])
                continue;
            /* (a vjp rule's value: its node's only output, so the node's
             * accumulator is this value's) */
            IR_ASSERT(prod->outputs[0] == t);
            acc[t->id] = 1;
            const Buffer *b = &pr->bufs[pr->tensor_buf[t->id]];
            char base[160];
            snprintf(base, sizeof base, "acc_%s", b->name + 2);
            Sharding lay = b->layout;
            pr->nodes[prod->id].accum_buf = program_buf_new(pr, base, t, BUF_ACCUM, b->dtype, b->rank, b->dims, &lay);
        }
    }
    int first_update = pr->first_update;
    for (int r = 0; r < p->nreshards; r++)
        pr->reshards[r].last_micro = pr->reshards[r].here &&
                                     (acc[p->reshards[r].tensor->id] ||
                                      (pr->reshards[r].start_at < first_update && pr->reshards[r].wait_at >= first_update));
    free(acc);
}

void program_schedule(Program *pr, int prefetch, int64_t fuse_bytes, int64_t bucket_bytes)
{
    schedule(pr, prefetch);
    mark_accum(pr); /* before fuse: one call carries reshards that run in the same microbatches */
    fuse(pr, fuse_bytes, bucket_bytes);
    find_blocking(pr);
}

/* The cost model run over this program's own schedule (plan_estimate's
 * simulation assumes every collective starts as soon as its input exists;
 * the program starts weight gathers only `prefetch` nodes ahead and waits
 * at first readers). Compute in instruction order on one stream; each
 * start on the communication stream once it is free; a wait holds compute
 * until its collective is done; later steps of a reshard run blocking at
 * its wait. Fused members cost as their leader's call carries them. */
void program_estimate(const Program *pr, ProgramEstimate *e)
{
    const Plan *p = pr->plan;
    memset(e, 0, sizeof *e);
    double *done = calloc((size_t)p->nreshards + 1, sizeof(double));
    if (!done)
        abort();
    double tc = 0, tm = 0;
    for (int i = 0; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_COMPUTE) {
            double c = plan_node_planned_seconds(p, in->node);
            if (pr->nodes[in->node->id].fused_from >= 0) /* the bias Add it carries */
                c += plan_node_planned_seconds(p, pr->g->nodes[pr->nodes[in->node->id].fused_from]);
            e->compute_s += c;
            tc += c;
            continue;
        }
        if (in->reshard < 0)
            continue; /* a member of a fused call: the leader's instruction */
        int r = in->reshard;
        const Reshard *rs = &p->reshards[r].r;
        if (in->kind == INST_START) {
            double s = rs->nsteps ? rs->steps[0].seconds : 0;
            for (int m = r + 1; pr->reshards[r].fused_leader == r && m < p->nreshards; m++)
                if (pr->reshards[m].fused_leader == r) /* a member riding in the leader's call */
                    s += p->reshards[m].r.nsteps ? p->reshards[m].r.steps[0].seconds : 0;
            double t0 = tc > tm ? tc : tm;
            done[r] = tm = t0 + s;
            e->comm_s += s;
            continue;
        }
        if (done[r] > tc) {
            e->exposed_s += done[r] - tc;
            tc = done[r];
        }
        for (int j = 1; j < rs->nsteps; j++) { /* blocking, at the wait */
            e->comm_s += rs->steps[j].seconds;
            e->exposed_s += rs->steps[j].seconds;
            tc += rs->steps[j].seconds;
        }
    }
    if (e->exposed_s > e->comm_s)
        e->exposed_s = e->comm_s; /* (t0 + s) - t0 rounds above s: not more exposed than sent */
    e->step_s = tc > tm ? tc : tm;
    free(done);
}
