/* report.c: the plan as people and tools read it.
 *
 * Text: every tensor (global shape, sharding, local shape, origin), every
 * reshard step (kind, tensor, mesh axes, bytes sent per rank, the consumer
 * and the requirement that caused it), per-rank totals. JSON carries the
 * same. --explain walks one tensor's chain of decisions back to the
 * annotation it came from; --dot draws the graph with tensors coloured by
 * sharding and collectives as nodes of their own. Output is deterministic:
 * graph order throughout, no addresses, no timestamps.
 */
#include "partition.h"

#include <stdlib.h>
#include <string.h>

static void axes_str(const Mesh *m, unsigned axes, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int a = 0; a < m->naxes; a++)
        if (axes & (1u << a))
            off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? "+" : "", m->axes[a].name);
    if (!off)
        snprintf(buf, cap, "-");
}

/* Seconds in the unit that reads best: "12.3 us", "4.56 ms", "1.2 s". */
static const char *tied_name(int tied)
{
    switch (tied) {
    case TIED_EXACT: return "exact";
    case TIED_INEXACT: return "not exact";
    case TIED_UNSOLVED: return "out of time";
    case TIED_DIFFER: return "layers differ";
    default: return "not tried";
    }
}

static const char *time_str(double sec, char *buf, size_t cap)
{
    if (sec < 1e-3)
        snprintf(buf, cap, "%.3g us", sec * 1e6);
    else if (sec < 1)
        snprintf(buf, cap, "%.3g ms", sec * 1e3);
    else
        snprintf(buf, cap, "%.3g s", sec);
    return buf;
}

static const char *origin_name(Origin o)
{
    switch (o) {
    case ORIGIN_USER: return "user";
    case ORIGIN_MODEL: return "model";
    case ORIGIN_PROPAGATED: return "propagated";
    case ORIGIN_OUTPUT: return "output";
    case ORIGIN_AUTO: return "auto";
    case ORIGIN_COST: return "cost";
    default: return "default";
    }
}

static void origin_str(const Plan *p, const Tensor *t, char *buf, size_t cap)
{
    const TensorPlan *tp = &p->tensors[t->id];
    if (tp->sharding.partial && t->producer) {
        snprintf(buf, cap, "partial sum: %s (%s) contracts a split dim", t->producer->label,
                 node_op_name(t->producer));
        return;
    }
    switch (tp->origin) {
    case ORIGIN_USER: snprintf(buf, cap, "annotation %s=%s", t->label, tp->source); break;
    case ORIGIN_MODEL: snprintf(buf, cap, "model sharding spec %s", tp->source); break;
    case ORIGIN_PROPAGATED:
        snprintf(buf, cap, "from %s via %s (%s)", tp->from ? tp->from->label : "-", tp->via->label,
                 node_op_name(tp->via));
        break;
    case ORIGIN_COST:
        snprintf(buf, cap, "%s %s (%s)%s", t->producer ? "computed so by" : "stored as read by", tp->via->label,
                 node_op_name(tp->via), p->nodes[tp->via->id].choice ? ", cheapest of its candidates" : "");
        break;
    case ORIGIN_AUTO:
        if (t->producer)
            snprintf(buf, cap, "--auto: %s (%s), strategy %d of %d", t->producer->label, node_op_name(t->producer),
                     p->auto_report->nodes[t->producer->id].pick + 1,
                     p->auto_report->nodes[t->producer->id].nstrategies);
        else
            snprintf(buf, cap, "--auto: %s as %s (%s) reads it", t->is_input ? "graph input" : "weight",
                     t->consumers[0]->label, node_op_name(t->consumers[0]));
        break;
    default:
        snprintf(buf, cap, t->is_input ? "graph input, replicated by default" : "replicated by default");
        break;
    }
}

void plan_totals(const Plan *p, PlanTotals *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < p->nreshards; i++)
        for (int k = 0; k < p->reshards[i].r.nsteps; k++) {
            const ReshardStep *s = &p->reshards[i].r.steps[k];
            t->count[s->kind]++;
            if (s->kind != COLL_SLICE && s->kind != COLL_PARTIALIZE) {
                t->ncollectives++;
                t->comm_bytes += s->bytes;
            }
        }
    for (int i = 0; i < p->g->noutputs; i++) {
        const Tensor *o = p->g->outputs[i];
        Sharding s = p->tensors[o->id].sharding;
        s.partial = 0; /* reduced in the step */
        if (o->rank > 0 && sharding_used_axes(&s)) {
            t->noutputs_split++;
            t->output_gather_bytes += tensor_numel(o) * (int64_t)dtype_size(o->dtype) - sharding_local_bytes(&s, &p->mesh, o);
        }
    }
    for (int i = 0; i < p->g->ntensors; i++) {
        const Tensor *tt = p->g->tensors[i];
        if (tt->rank < 0 || (!tt->producer && !tt->is_input && !tt->is_initializer))
            continue;
        int64_t b = sharding_local_bytes(&p->tensors[i].sharding, &p->mesh, tt);
        if (tt->is_initializer) {
            if (tt->nconsumers)
                t->weight_bytes += b;
        } else {
            t->activation_bytes += b;
        }
    }
}

static void print_header(const Plan *p, FILE *f)
{
    char mesh[128];
    mesh_str(&p->mesh, mesh, sizeof mesh);
    fprintf(f, "plan     %s\nmesh     %s (%d ranks), device %s\nlinks   ", p->g->path, mesh,
            p->mesh.nranks, p->mesh.device->name);
    for (int a = 0; a < p->mesh.naxes; a++)
        fprintf(f, " %s=%s", p->mesh.axes[a].name, p->mesh.axes[a].link->name);
    fprintf(f, "\n");
}

/* Local dims, a padded one (an uneven split: sharding.c) marked "*". */
static const char *local_str(const Sharding *s, const Mesh *m, const Tensor *t, const int64_t *local, char *buf,
                             size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld%s", i ? ", " : "", (long long)local[i],
                                sharding_dim_uneven(s, m, t, i) ? "*" : "");
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
    return buf;
}

/* A stage's ranks, "3" or "2..3". */
static void stage_ranks(const Pipeline *pp, int s, char *buf, size_t cap)
{
    int r0 = pipeline_world_rank(pp, s, 0), r1 = pipeline_world_rank(pp, s, pp->nsub - 1);
    if (r0 == r1)
        snprintf(buf, cap, "%d", r0);
    else
        snprintf(buf, cap, "%d..%d", r0 < r1 ? r0 : r1, r0 < r1 ? r1 : r0);
}

static int cmp_time(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --train: the stages with forward, backward and update times, their
 * memory (weights with gradients and optimizer state, the stash a
 * microbatch keeps and how many the schedule holds at once), and the
 * schedule as a stage x time table of F and B slots, laid out by the cost
 * model's run of it (a column per moment some pass starts). */
static void print_pipeline_train(const Plan *p, FILE *f)
{
    const Pipeline *pp = p->pipe;
    const Graph *g = p->g;
    int ns = pp->nstages, nv = pp->nvstages, m = pp->microbatches;
    char t1[32], t2[32], t3[32], t4[32];
    fprintf(f, "\npipeline %d stages over %s (%d rank%s each), %d microbatch%s per step, %s schedule; boundaries %s\n",
            ns, pp->world.axes[pp->axis].name, pp->nsub, pp->nsub == 1 ? "" : "s", m, m == 1 ? "" : "es",
            pp->chunks > 1 ? "interleaved (virtual stages: chunk c of stage s is c x p + s)" : pipe_schedule_name(pp->schedule),
            pp->automatic ? "chosen by the search (the slowest stage's forward and backward as fast as they can be)"
                          : "from --stage-boundaries");
    fprintf(f, "  %-5s %-5s %-22s %-22s %9s %9s %9s %9s %12s %10s %6s %11s\n", "stage", "ranks", "first node",
            "last node", "forward", "backward", "send", "update", "weights", "stash/mb", "held", "boundaries");
    fprintf(f, "  (per rank, per microbatch; weights with their gradients and optimizer state; stash: what a\n"
               "  microbatch keeps from forward to backward, held for that many microbatches at once; boundaries:\n"
               "  a send slot per microbatch, a receive slot per microbatch held)\n");
    for (int s = 0; s < nv; s++) {
        const PipelineStage *st = &pp->stages[s];
        char ranks[32];
        stage_ranks(pp, pipeline_rank_stage(pp, s), ranks, sizeof ranks);
        fprintf(f, "  %-5d %-5s %-22.22s %-22.22s %9s %9s %9s %9s %12lld %10lld %6d %11lld\n", s, ranks,
                g->nodes[st->first]->label, g->nodes[st->last]->label, time_str(st->compute_s, t1, sizeof t1),
                time_str(st->backward_s, t2, sizeof t2), time_str(st->send_s, t3, sizeof t3),
                time_str(st->update_s, t4, sizeof t4), (long long)st->weight_bytes, (long long)st->stash_bytes,
                st->inflight, (long long)st->boundary_bytes);
    }
    if (pp->chunks > 1)
        fprintf(f, "  bubble        (p-1)/(V M+p-1) = %d/%d = %.1f%% of the schedule\n", ns - 1, pp->chunks * m + ns - 1,
                100.0 * (ns - 1) / (pp->chunks * m + ns - 1));
    else
        fprintf(f, "  bubble        (p-1)/(M+p-1) = %d/%d = %.1f%% of the schedule\n", ns - 1, m + ns - 1,
                100.0 * (ns - 1) / (m + ns - 1));
    fprintf(f, "  step          %s: the schedule below on the cost model, each stage's updates after its last pass\n",
            time_str(pp->step_s, t1, sizeof t1));
    int nx = 0;
    for (int i = 0; i < g->ntensors; i++)
        nx += pp->readers[i] != 0;
    fprintf(f, "  crossing      %d value%s, each shard to shard (activations forward, their gradients back)\n", nx,
            nx == 1 ? "" : "s");
    for (int k = 0; k < pp->nshared; k++) {
        int owner = pipeline_rank_stage(pp, pp->shared_owner[k]), any = 0;
        for (int s = 0; s < nv; s++)
            any |= (pp->shared_readers[k] & (1u << s)) && pipeline_rank_stage(pp, s) != owner;
        if (!any)
            continue; /* read by other chunks of the same ranks only */
        fprintf(f, "  shared        weight %s: updated by stage %d, sent after each step to stage", pp->shared[k]->label,
                pp->shared_owner[k]);
        for (int s = 0; s < nv; s++)
            if ((pp->shared_readers[k] & (1u << s)) && pipeline_rank_stage(pp, s) != owner)
                fprintf(f, " %d", s);
        fprintf(f, "\n");
    }
    /* The table: a column per distinct start time. */
    int nt = 0;
    for (int s = 0; s < ns; s++)
        nt += pp->nops[s];
    double *times = malloc(sizeof(double) * (size_t)(nt + 1));
    if (!times)
        abort();
    nt = 0;
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < pp->nops[s]; i++)
            times[nt++] = pp->ops[s][i].start_s;
    qsort(times, (size_t)nt, sizeof(double), cmp_time);
    int nc = 0;
    for (int i = 0; i < nt; i++)
        if (nc == 0 || times[i] > times[nc - 1] + 1e-15)
            times[nc++] = times[i];
    int shown = nc < 40 ? nc : 40;
    if (pp->chunks > 1)
        fprintf(f, "  schedule      stage x time: Fk.c, Bk.c the forward, backward pass of microbatch k through chunk c;"
                   " -- still running it\n");
    else
        fprintf(f, "  schedule      stage x time: Fk, Bk the forward, backward pass of microbatch k; -- still running it\n");
    for (int s = 0; s < ns; s++) {
        fprintf(f, "  %5d  ", s);
        int at = 0;
        for (int c = 0; c < shown; c++) {
            while (at < pp->nops[s] && pp->ops[s][at].end_s <= times[c] + 1e-15)
                at++;
            const PipeOp *o = at < pp->nops[s] ? &pp->ops[s][at] : NULL;
            char cell[16];
            if (o && o->start_s <= times[c] + 1e-15 && o->start_s > times[c] - 1e-15) {
                if (pp->chunks > 1)
                    snprintf(cell, sizeof cell, "%c%d.%d", o->backward ? 'B' : 'F', o->mb, o->chunk);
                else
                    snprintf(cell, sizeof cell, "%c%d", o->backward ? 'B' : 'F', o->mb);
            } else {
                snprintf(cell, sizeof cell, o && o->start_s < times[c] ? "--" : " .");
            }
            fprintf(f, " %-*s", pp->chunks > 1 ? 5 : 3, cell);
        }
        fprintf(f, "%s\n", shown < nc ? " ..." : "");
    }
    free(times);
}

/* The stages: their nodes, time per microbatch, memory per rank; the
 * bubble; and GPipe's forward schedule as a stage x time table. */
static void print_pipeline(const Plan *p, FILE *f)
{
    const Pipeline *pp = p->pipe;
    const Graph *g = p->g;
    int ns = pp->nstages, m = pp->microbatches;
    char t1[32], t2[32], t3[32];
    fprintf(f, "\npipeline %d stages over %s (%d rank%s each), %d microbatch%s; boundaries %s\n", ns,
            pp->world.axes[pp->axis].name, pp->nsub, pp->nsub == 1 ? "" : "s", m, m == 1 ? "" : "es",
            pp->automatic ? "chosen by the search (the slowest stage as fast as it can be)" : "from --stage-boundaries");
    fprintf(f, "  %-5s %-5s %-24s %-24s %10s %10s %10s %12s %12s %12s\n", "stage", "ranks", "first node", "last node",
            "compute", "send", "per mb", "weights", "activations", "boundaries");
    fprintf(f, "  (per rank; activations: one microbatch's peak, as a forward pass holds one at a time; boundaries:\n"
               "  two send and two receive slots per value crossing)\n");
    for (int s = 0; s < ns; s++) {
        const PipelineStage *st = &pp->stages[s];
        char ranks[32];
        stage_ranks(pp, s, ranks, sizeof ranks);
        fprintf(f, "  %-5d %-5s %-24.24s %-24.24s %10s %10s %10s %12lld %12lld %12lld\n", s, ranks,
                g->nodes[st->first]->label, g->nodes[st->last]->label, time_str(st->compute_s, t1, sizeof t1),
                time_str(st->send_s, t2, sizeof t2), time_str(pipeline_stage_seconds(pp, s), t3, sizeof t3),
                (long long)st->weight_bytes, (long long)st->activation_bytes, (long long)st->boundary_bytes);
    }
    fprintf(f, "  bubble        (p-1)/(M+p-1) = %d/%d = %.1f%% of the schedule\n", ns - 1, m + ns - 1,
            100.0 * (ns - 1) / (m + ns - 1));
    fprintf(f, "  batch         %s: (M+p-1) x the slowest stage, per microbatch\n",
            time_str(pipeline_batch_seconds(pp), t1, sizeof t1));
    fprintf(f, "  (the estimate above is per microbatch, all stages' nodes on one rank)\n");
    /* Values crossing stages. */
    int nx = 0;
    for (int i = 0; i < g->ntensors; i++)
        nx += pp->readers[i] != 0;
    fprintf(f, "  crossing      %d value%s, each shard to shard (sub-rank r of one stage to sub-rank r of another)\n",
            nx, nx == 1 ? "" : "s");
    for (int i = 0, shown = 0; i < g->ntensors && shown < 16; i++) {
        if (!pp->readers[i])
            continue;
        const Tensor *t = g->tensors[i];
        char lay[128];
        fprintf(f, "    %-24.24s %-16s stage %d ->", t->label, sharding_str(&p->tensors[i].sharding, &p->mesh, lay, sizeof lay),
                pp->tensor_stage[i]);
        for (int s = 0; s < ns; s++)
            if (pp->readers[i] & (1u << s))
                fprintf(f, " %d", s);
        fprintf(f, "  %lld bytes\n", (long long)sharding_local_bytes(&p->tensors[i].sharding, &p->mesh, t));
        if (++shown == 16 && nx > 16)
            fprintf(f, "    ... and %d more\n", nx - 16);
    }
    /* The schedule: time slot t runs microbatch t - s on stage s. */
    int slots = m + ns - 1, shown = slots < 24 ? slots : 24;
    fprintf(f, "  schedule      stage x time slot: the microbatch each stage runs (GPipe forward)\n        ");
    for (int t = 0; t < shown; t++)
        fprintf(f, " %3d", t);
    fprintf(f, "%s\n", shown < slots ? " ..." : "");
    for (int s = 0; s < ns; s++) {
        fprintf(f, "  %5d ", s);
        for (int t = 0; t < shown; t++) {
            int mb = t - s;
            if (mb >= 0 && mb < m)
                fprintf(f, " %3d", mb);
            else
                fprintf(f, "   .");
        }
        fprintf(f, "\n");
    }
}


/* --zero 1/2: each update runs on this rank's block of its weight and is
 * followed by an in-place all-gather of the blocks (codegen's write-back,
 * not a reshard of the plan): counted here, per step. */
static void zero_write_back(const Plan *p, FILE *f)
{
    const Graph *g = p->g;
    int64_t bytes = 0;
    int calls = 0;
    for (int i = 0; p->zero_axis >= 0 && p->zero < 3 && i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        int r = ir_output_in_place(n, 0) >= 0 ? p->nodes[i].in_reshard[0] : -1;
        unsigned ax = 1u << p->zero_axis;
        if (r < 0 || !(sharding_used_axes(&p->reshards[r].dst) & ax) || (sharding_used_axes(&p->reshards[r].src) & ax))
            continue;
        int64_t whole = sharding_local_bytes(&p->reshards[r].src, &p->mesh, n->inputs[0]);
        int sz = p->mesh.axes[p->zero_axis].size;
        bytes += whole / sz * (sz - 1);
        calls++;
    }
    if (calls)
        fprintf(f, "                and %lld bytes in %d all-gathers of updated weight blocks (--zero %d)\n",
                (long long)bytes, calls, p->zero);
}

/* compile --decode: each cache the program keeps, its layout and bytes
 * per rank, and whether its heads (dim 1 of [batch, heads, positions,
 * head_dim]) are split or every rank keeps all of them. */
/* One key-value cache of a decoding program (ir/decode.c): its bytes on a
 * rank and how its heads are laid out, in words. */
static int64_t decode_cache(const Plan *p, const Tensor *t, char *why, size_t cap)
{
    const Mesh *m = &p->mesh;
    const Sharding *sh = &p->tensors[t->id].sharding;
    int64_t local[IR_MAX_RANK], bytes = (int64_t)dtype_size(t->dtype);
    sharding_local_dims(sh, m, t, local);
    for (int k = 0; k < t->rank; k++)
        bytes *= local[k];
    int parts = 1;
    for (int k = 0; k < sh->naxes[1]; k++)
        parts *= m->axes[sh->axes[1][k]].size;
    why[0] = 0;
    if (t->rank == 4 && sh->naxes[1] && local[1] * parts > t->dims[1])
        snprintf(why, cap, "split unevenly: %lld heads over %d ranks, %lld per rank, padded", (long long)t->dims[1],
                 parts, (long long)local[1]);
    else if (t->rank == 4 && sh->naxes[1])
        snprintf(why, cap, "split: %lld of %lld per rank", (long long)local[1], (long long)t->dims[1]);
    else if (t->rank == 4) {
        int big = -1; /* an axis the cache is not split over: does it have more ranks than heads? */
        for (int a2 = 0; a2 < m->naxes; a2++)
            if (!(sharding_used_axes(sh) & (1u << a2)) && m->axes[a2].size > 1 && !m->axes[a2].loop)
                big = big < 0 || m->axes[a2].size > m->axes[big].size ? a2 : big;
        if (big >= 0 && t->dims[1] < m->axes[big].size)
            snprintf(why, cap, "replicated: %lld key-value heads, fewer than %s=%d", (long long)t->dims[1],
                     m->axes[big].name, m->axes[big].size);
        else
            snprintf(why, cap, "all %lld on every rank", (long long)t->dims[1]);
    }
    return bytes;
}

/* How the next token is chosen, in words. */
static void decode_choice(const Graph *g, char *buf, size_t cap)
{
    if (g->decode_temperature > 0)
        snprintf(buf, cap, "sampled at temperature %g, seed %llu", g->decode_temperature,
                 (unsigned long long)g->decode_seed);
    else
        snprintf(buf, cap, "greedy");
}

static void print_decode(const Plan *p, FILE *f)
{
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == OP_KV_CACHE_WRITE;
    char choice[96];
    decode_choice(g, choice, sizeof choice);
    fprintf(f, "\ndecode   the prompt, then %d tokens (%s), one position per step; %d caches of %lld positions "
               "(--max-seq), kept in place\n  %-22s %-16s %-14s %12s  %s\n",
            g->decode_generate, choice, n, (long long)g->decode_slots, "cache", "global", "sharding", "bytes/rank",
            "heads");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *nd = g->nodes[i];
        if (nd->op != OP_KV_CACHE_WRITE)
            continue;
        const Tensor *t = nd->outputs[0];
        char a[128], b[128], why[160];
        int64_t bytes = decode_cache(p, t, why, sizeof why);
        fprintf(f, "  %-22s %-16s %-14s %12lld  %s\n", t->label, shape_str(t->dims, t->rank, a, sizeof a),
                sharding_str(&p->tensors[t->id].sharding, m, b, sizeof b), (long long)bytes, why);
    }
}

/* One mixture-of-experts layer (ir/moe.c), read off its MoeDispatch. */
typedef struct {
    int64_t groups, ng, k, e, cap, worst;
    int dropless;                /* no --capacity-factor: the capacity is a group's tokens */
    int64_t buf_bytes, balanced; /* the dispatch buffer per rank; what a balanced routing fills of it */
    const Tensor *w1, *w2;       /* the stacked expert weights, NULL if not found */
} MoeLayer;

static MoeLayer moe_layer(const Plan *p, const Node *nd)
{
    const Tensor *ids = nd->inputs[1], *buf = nd->outputs[0], *slots = nd->outputs[1];
    MoeLayer l = {.groups = ids->dims[0], .ng = ids->dims[1], .k = ids->dims[2], .e = buf->dims[1],
                  .cap = node_attr_int(nd, "capacity", 0), .dropless = node_attr_float(nd, "capacity_factor", 0) <= 0};
    l.worst = l.groups * l.k * (l.ng - l.cap);
    l.buf_bytes = sharding_local_bytes(&p->tensors[buf->id].sharding, &p->mesh, buf);
    /* Balanced: each expert gets k * ng / E of a group's pairs, at most its capacity. */
    double fill = (double)(l.k * l.ng) / (double)l.e / (double)l.cap;
    l.balanced = (int64_t)((double)l.buf_bytes * (fill < 1 ? fill : 1) + 0.5);
    /* W1 is the GEMM reading the buffer; W2 the one the combine reads. */
    for (int c = 0; c < buf->nconsumers && !l.w1; c++) {
        const Node *r = buf->consumers[c];
        if (!r->folded && !r->grad && r->op == OP_MATMUL && r->inputs[1] == buf)
            l.w1 = r->inputs[0];
    }
    for (int c = 0; c < slots->nconsumers && !l.w2; c++) {
        const Node *r = slots->consumers[c];
        const Node *m2 = !r->folded && !r->grad && r->op == OP_MOE_COMBINE ? r->inputs[0]->producer : NULL;
        if (m2 && m2->op == OP_MATMUL)
            l.w2 = m2->inputs[0];
    }
    return l;
}

/* Mixture-of-experts layers: each dispatch's groups, experts, capacity and
 * how much the capacity can drop; where the experts live and how the
 * tokens reach them. */
static void print_moe(const Plan *p, FILE *f)
{
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    int layer = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *nd = g->nodes[i];
        if (nd->folded || nd->op != OP_MOE_DISPATCH)
            continue;
        MoeLayer l = moe_layer(p, nd);
        if (!layer++ && l.dropless)
            fprintf(f, "\nmoe      %d layer%s: dropless, every (token, expert) pair computed as the model does (an "
                       "expert's capacity is its group's tokens; --capacity-factor F drops instead)\n",
                    moe_layers(g), moe_layers(g) == 1 ? "" : "s");
        else if (layer == 1)
            fprintf(f, "\nmoe      %d layer%s: tokens in groups, each sending at most its capacity to an expert "
                       "(--capacity-factor %g); the program's --stats counts the pairs dropped\n",
                    moe_layers(g), moe_layers(g) == 1 ? "" : "s", (double)node_attr_float(nd, "capacity_factor", 0));
        char a[128], b[128];
        const Sharding *ts = &p->tensors[nd->inputs[0]->id].sharding;
        char drops[128] = "no pair is ever dropped";
        if (l.worst > 0)
            snprintf(drops, sizeof drops, "up to %lld of %lld pairs dropped when the routing is skewed",
                     (long long)l.worst, (long long)(l.groups * l.ng * l.k));
        fprintf(f, "  %s\n    %lld group%s of %lld token%s, top-%lld of %lld experts, capacity %lld per expert per "
                   "group: %s\n",
                nd->label, (long long)l.groups, l.groups == 1 ? "" : "s", (long long)l.ng, l.ng == 1 ? "" : "s",
                (long long)l.k, (long long)l.e, (long long)l.cap, drops);
        fprintf(f, "    expert buffer %lld bytes per rank%s; a balanced routing fills %lld of them\n",
                (long long)l.buf_bytes, l.dropless ? " (the worst case: a group's every token on one expert)" : "",
                (long long)l.balanced);
        if (l.w1)
            fprintf(f, "    experts %s (%s), tokens %s\n", l.w1->label,
                    sharding_str(&p->tensors[l.w1->id].sharding, m, a, sizeof a), sharding_str(ts, m, b, sizeof b));
    }
}

/* The same two sections for plan --json ("decode", "moe"). */
static void print_decode_moe_json(const Plan *p, FILE *f)
{
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    char b[256], why[160];
    if (g->decode_slots) {
        fprintf(f, ",\n  \"decode\": {\"generate\": %d, \"max_seq\": %lld, ", g->decode_generate,
                (long long)g->decode_slots);
        if (g->decode_temperature > 0)
            fprintf(f, "\"choice\": \"sample\", \"temperature\": %.9g, \"seed\": %llu", g->decode_temperature,
                    (unsigned long long)g->decode_seed);
        else
            fprintf(f, "\"choice\": \"greedy\"");
        fprintf(f, ", \"caches\": [");
        int n = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const Node *nd = g->nodes[i];
            if (nd->op != OP_KV_CACHE_WRITE)
                continue;
            const Tensor *t = nd->outputs[0];
            int64_t bytes = decode_cache(p, t, why, sizeof why);
            fprintf(f, "%s{\"name\": ", n++ ? ", " : "");
            json_write_str(f, t->name);
            fprintf(f, ", \"shape\": ");
            json_write_dims(f, t->dims, t->rank);
            fprintf(f, ", \"sharding\": ");
            json_write_str(f, sharding_str(&p->tensors[t->id].sharding, m, b, sizeof b));
            fprintf(f, ", \"bytes_per_rank\": %lld, \"heads\": ", (long long)bytes);
            json_write_str(f, why);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    int layer = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *nd = g->nodes[i];
        if (nd->folded || nd->op != OP_MOE_DISPATCH)
            continue;
        MoeLayer l = moe_layer(p, nd);
        if (!layer++)
            fprintf(f, ",\n  \"moe\": {\"dropless\": %s, \"capacity_factor\": %.9g, \"layers\": [",
                    l.dropless ? "true" : "false", (double)node_attr_float(nd, "capacity_factor", 0));
        fprintf(f, "%s{\"dispatch\": ", layer > 1 ? ", " : "");
        json_write_str(f, nd->name);
        fprintf(f, ", \"groups\": %lld, \"tokens_per_group\": %lld, \"top_k\": %lld, \"experts\": %lld, "
                   "\"capacity\": %lld, \"pairs\": %lld, \"worst_dropped\": %lld, \"buffer_bytes_per_rank\": %lld, "
                   "\"balanced_bytes_per_rank\": %lld, \"tokens_sharding\": ",
                (long long)l.groups, (long long)l.ng, (long long)l.k, (long long)l.e, (long long)l.cap,
                (long long)(l.groups * l.ng * l.k), (long long)(l.worst > 0 ? l.worst : 0), (long long)l.buf_bytes,
                (long long)l.balanced);
        json_write_str(f, sharding_str(&p->tensors[nd->inputs[0]->id].sharding, m, b, sizeof b));
        const Tensor *ws[2] = {l.w1, l.w2};
        for (int w = 0; w < 2; w++) {
            fprintf(f, ", \"%s\": ", w ? "down_weight" : "up_weight");
            if (!ws[w]) {
                fprintf(f, "null");
                continue;
            }
            fprintf(f, "{\"name\": ");
            json_write_str(f, ws[w]->name);
            fprintf(f, ", \"sharding\": ");
            json_write_str(f, sharding_str(&p->tensors[ws[w]->id].sharding, m, b, sizeof b));
            fprintf(f, "}");
        }
        fprintf(f, "}");
    }
    if (layer)
        fprintf(f, "]}");
}

void plan_print_text(const Plan *p, const PlanFacts *x, FILE *f)
{
    const PlanSchedule *sched = x ? x->sched : NULL;
    int64_t program_bytes = x ? x->program_bytes : 0;
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    char a[128], b[128], c[128], o[256];
    print_header(p, f);
    if (g->decode_slots)
        print_decode(p, f);
    print_moe(p, f);
    if (p->auto_report) {
        const AutoReport *ar = p->auto_report;
        char t0[32];
        fprintf(f, "\nauto     %d choices (%d options), %d edges; integer program %d rows x %d columns, "
                   "%d nonzeros\n         %s: %s, objective %s (compute + reshards, no overlap)\n",
                ar->nchoices, ar->noptions, ar->nedges, ar->rows, ar->cols, ar->nonzeros, ar->solver,
                ar->optimal ? "optimal" : "best found within the time limit",
                time_str(ar->objective_s, t0, sizeof t0));
        if (!ar->optimal)
            fprintf(f, "         (at most %.1f%% above the optimum: the gap to the best bound when the time ran out)\n",
                    100 * ar->gap);
        char t1[32], t2[32];
        if (ar->tied == TIED_EXACT)
            fprintf(f, "         %d identical layers of %d choices solved once: exact, the tied optimum (%s) meets "
                       "the bound that solves each layer on its own (%s)\n",
                    ar->layers, ar->layer_choices, time_str(ar->tied_s, t1, sizeof t1),
                    time_str(ar->bound_s, t2, sizeof t2));
        else if (ar->tied == TIED_INEXACT)
            fprintf(f, "         %d identical layers of %d choices, not solved once: the tied optimum (%s) stays "
                       "above the bound (%s), so the whole program was solved\n",
                    ar->layers, ar->layer_choices, time_str(ar->tied_s, t1, sizeof t1),
                    time_str(ar->bound_s, t2, sizeof t2));
        else if (ar->tied == TIED_UNSOLVED)
            fprintf(f, "         %d identical layers of %d choices, not solved once: the tied program or its bound "
                       "ran out of time, so the whole program was solved\n",
                    ar->layers, ar->layer_choices);
        else if (ar->tied == TIED_DIFFER)
            fprintf(f, "         %d identical layers of %d choices, not solved once: they do not meet the rest of "
                       "the graph alike, so the whole program was solved\n",
                    ar->layers, ar->layer_choices);
        if (ar->bytes_pass == 1)
            fprintf(f, "         then the fewest bytes within 1%% of the fastest (%s): this plan\n",
                    time_str(ar->best_s, t1, sizeof t1));
        else if (ar->bytes_pass == 2)
            fprintf(f, "         no plan within 1%% of that time sends fewer bytes\n");
        else if (ar->bytes_pass == -1)
            fprintf(f, "         the fewest-bytes pass (within 1%% of that time) ran out of nodes: the fastest plan stands\n");
    }
    int npadded = 0;
    fprintf(f, "\ntensors\n  %-22s %-16s %-22s %-16s %s\n", "name", "global", "sharding", "local", "origin");
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->rank < 0 || (!t->producer && !t->is_input && !(t->is_initializer && t->nconsumers)))
            continue;
        int64_t local[IR_MAX_RANK];
        sharding_local_dims(&p->tensors[i].sharding, m, t, local);
        origin_str(p, t, o, sizeof o);
        local_str(&p->tensors[i].sharding, m, t, local, c, sizeof c);
        npadded += strchr(c, '*') != NULL;
        fprintf(f, "  %-22s %-16s %-22s %-16s %s\n", t->label, shape_str(t->dims, t->rank, a, sizeof a),
                sharding_str(&p->tensors[i].sharding, m, b, sizeof b), c, o);
    }
    if (npadded)
        fprintf(f, "  (* %d tensors split unevenly: blocks of ceil(n/shards), the last ones padded to that size)\n",
                npadded);
    fprintf(f, "\ncollectives\n  %-3s %-15s %-18s %-6s %12s  %-36s %s\n", "#", "kind", "tensor", "axes",
            "bytes/rank", "layout change", "cause");
    int idx = 0;
    for (int i = 0; i < p->nreshards; i++) {
        const PlanReshard *r = &p->reshards[i];
        for (int k = 0; k < r->r.nsteps; k++) {
            const ReshardStep *s = &r->r.steps[k];
            const Sharding *before = k ? &r->r.steps[k - 1].after : &r->src;
            char change[300];
            snprintf(change, sizeof change, "%s -> %s", sharding_str(before, m, b, sizeof b),
                     sharding_str(&s->after, m, c, sizeof c));
            axes_str(m, s->axes, a, sizeof a);
            fprintf(f, "  %-3d %-15s %-18s %-6s %12lld  %-36s ", ++idx, coll_name(s->kind),
                    r->tensor->label, a, (long long)s->bytes, change);
            if (r->consumer)
                fprintf(f, "for %s (%s): %s", r->consumer->label, node_op_name(r->consumer), r->reason);
            else
                fprintf(f, "%s", r->reason);
            fprintf(f, "%s\n", r->r.full_gather ? " [full gather-then-slice: nothing cheaper]" : "");
            if (sched && k == 0) {
                fprintf(f, "      starts %s %s, waited on before %s", sched->start_after[i] ? "at" : "at the start of",
                        sched->start_after[i] ? sched->start_after[i] : "forward()",
                        sched->wait_before[i] ? sched->wait_before[i] : "the outputs are written");
                if (sched->fused_with[i] >= 0)
                    fprintf(f, "; fused into one call with reshard %d's group", sched->fused_with[i]);
                fprintf(f, "\n");
            }
        }
    }
    if (!idx)
        fprintf(f, "  (none)\n");
    PlanTotals t;
    plan_totals(p, &t);
    fprintf(f, "\nper rank\n  communication %lld bytes in %d collectives", (long long)t.comm_bytes,
            t.ncollectives);
    for (int k = 0; k < COLL_COUNT; k++)
        if (t.count[k] && k != COLL_SLICE && k != COLL_PARTIALIZE)
            fprintf(f, ", %d %s", t.count[k], coll_name((CollKind)k));
    fprintf(f, "\n");
    zero_write_back(p, f);
    fprintf(f, "  weights       %lld bytes\n  activations   %lld bytes (all values, before liveness)\n",
            (long long)t.weight_bytes, (long long)t.activation_bytes);
    if (t.noutputs_split)
        fprintf(f, "  outputs       %d stay split; --out gathers %lld bytes to rank 0, once after the run "
                   "(not in the step)\n", t.noutputs_split, (long long)t.output_gather_bytes);
    PlanEstimate e;
    plan_estimate(p, &e);
    char t1[32], t2[32], t3[32], t4[32], t5[32];
    fprintf(f, "\nestimate (cost model, device %s)\n"
               "  compute       %s per rank\n"
               "  communication %s: %s exposed, %s overlapped with compute\n"
               "  step          %s (two-stream schedule)\n"
               "  memory        %lld bytes per rank: weights %lld + peak activations %lld\n",
            p->mesh.device->name, time_str(e.compute_s, t1, sizeof t1), time_str(e.comm_s, t2, sizeof t2),
            time_str(e.exposed_s, t3, sizeof t3), time_str(e.overlapped_s, t4, sizeof t4),
            time_str(e.step_s, t5, sizeof t5), (long long)e.memory_bytes, (long long)e.weight_bytes,
            (long long)e.peak_activation_bytes);
    if (sched) {
        char s1[32], s2[32], s3[32];
        fprintf(f, "  as scheduled  rank 0's program (its starts and waits): communication %s, %s exposed, "
                   "%s overlapped\n",
                time_str(sched->comm_s, s1, sizeof s1), time_str(sched->exposed_s, s2, sizeof s2),
                time_str(sched->comm_s - sched->exposed_s, s3, sizeof s3));
    }
    if (program_bytes > 0)
        fprintf(f, "  programs      %lld bytes per rank at most (arena + weights + inputs, from their memory plan)\n",
                (long long)program_bytes);
    if (program_bytes > 0 && x->runtime_bytes)
        fprintf(f, "  rank peak     %.1f MiB at most, with the runtime: what a rank's VmHWM reads (compile and the "
                   "program print it per rank)\n", (double)(program_bytes + x->runtime_bytes) / 1048576.0);
    plan_print_precision(p, f);
    plan_print_train_memory(x, f);
    if (p->pipe)
        (p->pipe->train ? print_pipeline_train : print_pipeline)(p, f);
}

void plan_print_json(const Plan *p, const PlanFacts *x, FILE *f)
{
    const PlanSchedule *sched = x ? x->sched : NULL;
    int64_t program_bytes = x ? x->program_bytes : 0;
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    char b[256];
    fprintf(f, "{\n  \"model\": ");
    json_write_str(f, g->path);
    fprintf(f, ",\n  \"mesh\": {\"ranks\": %d, \"device\": \"%s\", \"axes\": [", m->nranks, m->device->name);
    for (int a = 0; a < m->naxes; a++)
        fprintf(f, "%s{\"name\": \"%s\", \"size\": %d, \"link\": \"%s\"}", a ? ", " : "",
                m->axes[a].name, m->axes[a].size, m->axes[a].link->name);
    fprintf(f, "]},\n  \"tensors\": [");
    int first = 1;
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->rank < 0 || (!t->producer && !t->is_input && !(t->is_initializer && t->nconsumers)))
            continue;
        const TensorPlan *tp = &p->tensors[i];
        int64_t local[IR_MAX_RANK];
        sharding_local_dims(&tp->sharding, m, t, local);
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = 0;
        json_write_str(f, t->name);
        fprintf(f, ", \"dtype\": \"%s\", \"shape\": ", dtype_name(t->dtype));
        json_write_dims(f, t->dims, t->rank);
        fprintf(f, ", \"sharding\": ");
        json_write_str(f, sharding_str(&tp->sharding, m, b, sizeof b));
        fprintf(f, ", \"local_shape\": ");
        json_write_dims(f, local, t->rank);
        if (sharding_is_uneven(&tp->sharding, m, t)) { /* per dim: the padding past the dim's end */
            int64_t pad[IR_MAX_RANK];
            for (int k = 0; k < t->rank; k++)
                pad[k] = local[k] * sharding_dim_shards(&tp->sharding, m, k) - t->dims[k];
            fprintf(f, ", \"padding\": ");
            json_write_dims(f, pad, t->rank);
        }
        fprintf(f, ", \"origin\": \"%s\"", origin_name(tp->origin));
        if (tp->origin == ORIGIN_PROPAGATED || tp->origin == ORIGIN_COST) {
            fprintf(f, ", \"via\": ");
            json_write_str(f, tp->via->name);
            if (tp->from) {
                fprintf(f, ", \"from\": ");
                json_write_str(f, tp->from->name);
            }
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"collectives\": [");
    first = 1;
    for (int i = 0; i < p->nreshards; i++) {
        const PlanReshard *r = &p->reshards[i];
        for (int k = 0; k < r->r.nsteps; k++) {
            const ReshardStep *s = &r->r.steps[k];
            const Sharding *before = k ? &r->r.steps[k - 1].after : &r->src;
            fprintf(f, "%s\n    {\"kind\": \"%s\", \"tensor\": ", first ? "" : ",", coll_name(s->kind));
            first = 0;
            json_write_str(f, r->tensor->name);
            fprintf(f, ", \"axes\": [");
            for (int a = 0, fa = 1; a < m->naxes; a++)
                if (s->axes & (1u << a)) {
                    fprintf(f, "%s\"%s\"", fa ? "" : ", ", m->axes[a].name);
                    fa = 0;
                }
            fprintf(f, "], \"dim\": %d, \"bytes_per_rank\": %lld, \"seconds\": %.3e, \"from\": ",
                    s->dim, (long long)s->bytes, s->seconds);
            json_write_str(f, sharding_str(before, m, b, sizeof b));
            fprintf(f, ", \"to\": ");
            json_write_str(f, sharding_str(&s->after, m, b, sizeof b));
            fprintf(f, ", \"consumer\": ");
            if (r->consumer)
                json_write_str(f, r->consumer->name);
            else
                fprintf(f, "null");
            fprintf(f, ", \"reason\": ");
            json_write_str(f, r->reason);
            fprintf(f, ", \"full_gather\": %s}", r->r.full_gather ? "true" : "false");
        }
    }
    PlanTotals t;
    plan_totals(p, &t);
    PlanEstimate e;
    plan_estimate(p, &e);
    fprintf(f, "\n  ],\n  \"per_rank\": {\"communication_bytes\": %lld, \"collectives\": %d, "
               "\"weight_bytes\": %lld, \"activation_bytes\": %lld, \"output_gather_bytes\": %lld},\n",
            (long long)t.comm_bytes, t.ncollectives, (long long)t.weight_bytes,
            (long long)t.activation_bytes, (long long)t.output_gather_bytes);
    fprintf(f, "  \"estimate\": {\"device\": \"%s\", \"compute_s\": %.9g, \"communication_s\": %.9g, "
               "\"exposed_s\": %.9g, \"overlapped_s\": %.9g, \"step_s\": %.9g, \"memory_bytes\": %lld, "
               "\"peak_activation_bytes\": %lld, \"program_bytes\": %lld, \"rank_peak_bytes\": %lld",
            p->mesh.device->name, e.compute_s, e.comm_s, e.exposed_s, e.overlapped_s, e.step_s,
            (long long)e.memory_bytes, (long long)e.peak_activation_bytes, (long long)program_bytes,
            (long long)(program_bytes > 0 && x && x->runtime_bytes ? program_bytes + x->runtime_bytes : 0));
    if (sched)
        fprintf(f, ",\n    \"as_scheduled\": {\"compute_s\": %.9g, \"communication_s\": %.9g, \"exposed_s\": %.9g, "
                   "\"overlapped_s\": %.9g, \"step_s\": %.9g}",
                sched->compute_s, sched->comm_s, sched->exposed_s, sched->comm_s - sched->exposed_s, sched->step_s);
    fprintf(f, "}");
    plan_print_train_memory_json(x, f);
    print_decode_moe_json(p, f);
    if (p->auto_report) {
        const AutoReport *ar = p->auto_report;
        fprintf(f, ",\n  \"auto\": {\"choices\": %d, \"options\": %d, \"edges\": %d, \"rows\": %d, "
                   "\"columns\": %d, \"nonzeros\": %d, \"solver\": \"%s\", \"optimal\": %s, \"gap\": %.6g, "
                   "\"objective_s\": %.9g, \"fastest_s\": %.9g, \"bytes_pass\": \"%s\", "
                   "\"layers\": {\"count\": %d, \"choices\": %d, \"tied\": \"%s\", \"tied_s\": %.9g, "
                   "\"bound_s\": %.9g}}",
                ar->nchoices, ar->noptions, ar->nedges, ar->rows, ar->cols, ar->nonzeros, ar->solver,
                ar->optimal ? "true" : "false", ar->gap, ar->objective_s, ar->best_s,
                ar->bytes_pass == 1 ? "taken" : ar->bytes_pass == 2 ? "none fewer" : ar->bytes_pass == -1 ? "out of nodes"
                                                                                                   : "not run",
                ar->layers, ar->layer_choices, tied_name(ar->tied), ar->tied_s, ar->bound_s);
    }
    if (p->pipe) {
        const Pipeline *pp = p->pipe;
        fprintf(f, ",\n  \"pipeline\": {\"axis\": \"%s\", \"stages\": %d, \"microbatches\": %d, \"ranks_per_stage\": %d, "
                   "\"automatic\": %s, \"bubble\": %.6g, \"batch_s\": %.9g, ",
                pp->world.axes[pp->axis].name, pp->nstages, pp->microbatches, pp->nsub, pp->automatic ? "true" : "false",
                (double)(pp->nstages - 1) / (pp->microbatches + pp->nstages - 1), pipeline_batch_seconds(pp));
        if (pp->train) {
            fprintf(f, "\"schedule\": \"%s\", \"chunks\": %d, \"step_s\": %.9g, \"slots\": [",
                    pipe_schedule_name(pp->schedule), pp->chunks, pp->step_s);
            for (int s = 0; s < pp->nstages; s++) {
                fprintf(f, "%s[", s ? ", " : "");
                for (int i = 0; i < pp->nops[s]; i++)
                    fprintf(f, "%s{\"pass\": \"%c\", \"chunk\": %d, \"microbatch\": %d, \"start_s\": %.9g, "
                               "\"end_s\": %.9g}",
                            i ? ", " : "", pp->ops[s][i].backward ? 'B' : 'F', pp->ops[s][i].chunk, pp->ops[s][i].mb,
                            pp->ops[s][i].start_s, pp->ops[s][i].end_s);
                fprintf(f, "]");
            }
            fprintf(f, "], ");
        }
        fprintf(f, "\"per_stage\": [");
        for (int s = 0; s < pp->nvstages; s++) {
            const PipelineStage *st = &pp->stages[s];
            fprintf(f, "%s{\"first_node\": ", s ? ", " : "");
            json_write_str(f, g->nodes[st->first]->name);
            fprintf(f, ", \"last_node\": ");
            json_write_str(f, g->nodes[st->last]->name);
            fprintf(f, ", \"nodes\": %d, \"compute_s\": %.9g, \"send_s\": %.9g, \"weight_bytes\": %lld, "
                       "\"activation_bytes\": %lld, \"boundary_bytes\": %lld",
                    st->last - st->first + 1, st->compute_s, st->send_s, (long long)st->weight_bytes,
                    (long long)st->activation_bytes, (long long)st->boundary_bytes);
            if (pp->train)
                fprintf(f, ", \"backward_s\": %.9g, \"update_s\": %.9g, \"stash_bytes\": %lld, \"inflight\": %d",
                        st->backward_s, st->update_s, (long long)st->stash_bytes, st->inflight);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n}\n");
}

/* The layouts a factor sharding gives a node's tensors, as "x [_,tp], W
 * [tp,_] -> y [_,_] partial(tp)". */
static void strategy_str(const Plan *p, const Node *n, const unsigned char *fn,
                         const unsigned char (*fa)[MESH_MAX_AXES], char *buf, size_t cap)
{
    const FactorRule *r = &p->nodes[n->id].rule;
    size_t off = 0;
    buf[0] = 0;
    for (int t = 0; t < r->ntensors && off < cap; t++) {
        const Tensor *tt = r->tensors[t];
        if (!tt || tt->rank < 0 || (t < n->ninputs && tt->rank == 0))
            continue;
        Sharding l;
        rule_project(r, t, fn, fa, &p->mesh, &l);
        if (t >= n->ninputs)
            l.partial = rule_reduced_axes(r, fn, fa);
        char sb[96];
        off += (size_t)snprintf(buf + off, cap - off, "%s%s %s", t == n->ninputs ? " -> " : off ? ", " : "",
                                tt->label, sharding_str(&l, &p->mesh, sb, sizeof sb));
    }
}

/* --explain for a layout --auto chose: the node's choice, its cost, and
 * the cheapest alternatives with what switching to them would add. */
static void explain_auto(const Plan *p, const Tensor *t, FILE *f)
{
    char b[128], buf[512], tm[32];
    sharding_str(&p->tensors[t->id].sharding, &p->mesh, b, sizeof b);
    if (!t->producer) {
        fprintf(f, "  %s is %s: chosen by --auto: this %s is stored as node \"%s\" (%s) reads it\n", t->label, b,
                t->is_input ? "graph input" : "weight", t->consumers[0]->label, node_op_name(t->consumers[0]));
        const Tensor *y = t->consumers[0]->outputs[0];
        if (y && y->producer && p->tensors[y->id].origin == ORIGIN_AUTO)
            explain_auto(p, y, f);
        return;
    }
    const Node *n = t->producer;
    const AutoNodeInfo *info = &p->auto_report->nodes[n->id];
    const NodePlan *np = &p->nodes[n->id];
    strategy_str(p, n, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, buf, sizeof buf);
    fprintf(f, "  %s is %s: chosen by --auto for node \"%s\" (%s): %s\n", t->label, b, n->label, node_op_name(n),
            buf);
    if (info->leader != n->id) {
        const Node *l = p->g->nodes[info->leader];
        fprintf(f, "    it only maps or moves values, so it follows the choice of \"%s\" (%s)\n", l->label,
                node_op_name(l));
        n = l;
        info = &p->auto_report->nodes[n->id];
    }
    fprintf(f, "    strategy %d of %d, its cost %s (compute and the reshards inside its group)\n", info->pick + 1,
            info->nstrategies, time_str(info->cost_s, tm, sizeof tm));
    for (int k = 0; k < info->nalt; k++) {
        strategy_str(p, n, info->alt_fn[k], (const unsigned char (*)[MESH_MAX_AXES])info->alt_fa[k], buf,
                     sizeof buf);
        double dl = info->alt_delta_s[k];
        fprintf(f, "    alternative: %s: %s%s if \"%s\" alone switched%s\n", buf, dl < 0 ? "-" : "+",
                time_str(dl < 0 ? -dl : dl, tm, sizeof tm), n->label,
                dl >= 0 ? "" : p->auto_report->optimal ? " (cheaper alone, but the plan would break --mem-limit)"
                                                        : " (cheaper alone: the search stopped at its time limit)");
    }
}

/* --explain for a layout settled when lowering node `via` (propagate.c):
 * the candidates its tensors' layouts proposed, what each costs, and the
 * pick. */
static void explain_cost(const Plan *p, const Tensor *t, FILE *f)
{
    const TensorPlan *tp = &p->tensors[t->id];
    const Node *n = tp->via;
    const CostChoice *cc = p->nodes[n->id].choice;
    char b[128], buf[512], tm[32];
    sharding_str(&tp->sharding, &p->mesh, b, sizeof b);
    if (t->producer)
        fprintf(f, "  %s is %s: node \"%s\" (%s) computes it so, not as propagation proposed\n", t->label, b,
                n->label, node_op_name(n));
    else
        fprintf(f, "  %s is %s: a weight, stored as its first reader \"%s\" (%s) computes on it\n", t->label, b,
                n->label, node_op_name(n));
    if (!cc) {
        fprintf(f, "    its operands arrive in layouts that give it this one; nothing disagreed\n");
        return;
    }
    /* Bytes decide (the merge keeps ties), then time: see lower_choose. */
    fprintf(f, "    the cost model compared bytes per rank (operand reshards + reducing the result), then time:\n");
    for (int i = 0; i < cc->ncand; i++) {
        strategy_str(p, n, cc->fn[i], (const unsigned char (*)[MESH_MAX_AXES])cc->fa[i], buf, sizeof buf);
        char from[160];
        if (i == 0)
            snprintf(from, sizeof from, "propagation's merge");
        else if (cc->anchor[i])
            snprintf(from, sizeof from, "from %s's layout", cc->anchor[i]);
        else
            snprintf(from, sizeof from, "computed replicated");
        if (cc->cost_s[i] < 0)
            fprintf(f, "    %s %s: %s: breaks an annotation\n", i == cc->pick ? "*" : " ", from, buf);
        else
            fprintf(f, "    %s %s: %s: %lld bytes, %s\n", i == cc->pick ? "*" : " ", from, buf,
                    (long long)cc->bytes[i], time_str(cc->cost_s[i], tm, sizeof tm));
    }
}

int plan_print_explain(const Plan *p, const char *name, FILE *f, Diag *d)
{
    const Tensor *t = graph_tensor_find(p->g, name);
    if (!t || t->rank < 0) {
        diag_add(d, "--explain %s: no tensor named \"%s\" in the model", name, name);
        return -1;
    }
    const Mesh *m = &p->mesh;
    char a[128], b[128];
    fprintf(f, "%s %s: %s\n", t->label, shape_str(t->dims, t->rank, a, sizeof a),
            sharding_str(&p->tensors[t->id].sharding, m, b, sizeof b));
    for (const Tensor *cur = t; cur;) {
        const TensorPlan *tp = &p->tensors[cur->id];
        sharding_str(&tp->sharding, m, b, sizeof b);
        switch (tp->origin) {
        case ORIGIN_PROPAGATED:
            fprintf(f, "  %s is %s: propagated by node \"%s\" (%s) from \"%s\"\n", cur->label, b,
                    tp->via->label, node_op_name(tp->via), tp->from ? tp->from->label : "?");
            cur = tp->from;
            continue;
        case ORIGIN_USER:
            fprintf(f, "  %s is %s: user annotation (--shard / --shardings)\n", cur->label, b);
            break;
        case ORIGIN_MODEL:
            fprintf(f, "  %s is %s: the model's own ONNX sharding spec\n", cur->label, b);
            break;
        case ORIGIN_AUTO:
            explain_auto(p, cur, f);
            break;
        case ORIGIN_COST:
            explain_cost(p, cur, f);
            break;
        default:
            fprintf(f, "  %s is %s: %s\n", cur->label, b,
                    cur->is_input ? "graph input, replicated unless annotated"
                                  : "no annotation reaches it, replicated by default");
            break;
        }
        break;
    }
    /* Producer's view: partial results come from split reduction factors. */
    if (p->tensors[t->id].sharding.partial && t->producer)
        fprintf(f, "  partial: node \"%s\" (%s) contracts a dim split over those axes\n",
                t->producer->label, node_op_name(t->producer));
    for (int i = 0; i < p->nreshards; i++) {
        const PlanReshard *r = &p->reshards[i];
        if (r->tensor != t)
            continue;
        fprintf(f, "  reshard %s -> %s for %s: %s\n", sharding_str(&r->src, m, a, sizeof a),
                sharding_str(&r->dst, m, b, sizeof b), r->consumer ? r->consumer->label : "graph output",
                r->reason);
        for (int k = 0; k < r->r.nsteps; k++) {
            char ax[64];
            axes_str(m, r->r.steps[k].axes, ax, sizeof ax);
            fprintf(f, "    %s over %s, %lld bytes per rank\n", coll_name(r->r.steps[k].kind), ax,
                    (long long)r->r.steps[k].bytes);
        }
    }
    return 0;
}

void plan_print_dot(const Plan *p, FILE *f)
{
    static const char *const palette[] = {"#ffffff", "#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f",
                                          "#cab2d6", "#ffff99", "#1f78b4", "#33a02c", "#e31a1c"};
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    char b[128];
    /* One colour per distinct sharding, in order of first appearance. */
    char seen[10][128];
    int nseen = 0;
    fprintf(f, "digraph plan {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->rank < 0 || (!t->producer && !t->is_input && !(t->is_initializer && t->nconsumers)))
            continue;
        sharding_str(&p->tensors[i].sharding, m, b, sizeof b);
        int c = 0;
        while (c < nseen && strcmp(seen[c], b) != 0)
            c++;
        if (c == nseen && nseen < 10)
            snprintf(seen[nseen++], sizeof seen[0], "%s", b);
        /* The name goes through the DOT writer; the sharding is ours. */
        fprintf(f, "  t%d [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"", i, palette[c < 10 ? c : 9]);
        dot_write_str(f, t->name);
        fprintf(f, "\\n%s\"];\n", b);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        fprintf(f, "  n%d [shape=box, label=\"", i);
        dot_write_str(f, n->name);
        fprintf(f, "\\n%s\"];\n", node_op_name(n));
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k])
                fprintf(f, "  n%d -> t%d;\n", i, n->outputs[k]->id);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) {
            const Tensor *t = n->inputs[k];
            if (!t || (t->is_initializer && !t->nconsumers))
                continue;
            /* The last reshard of t recorded for n (t's own list only). */
            int via = -1;
            for (int r = p->tensor_reshard ? p->tensor_reshard[t->id] : -1; r >= 0; r = p->reshards[r].next_of_tensor)
                if (p->reshards[r].consumer == n && r > via)
                    via = r;
            if (via < 0) {
                fprintf(f, "  t%d -> n%d;\n", t->id, i);
                continue;
            }
            fprintf(f, "  r%d [shape=diamond, style=filled, fillcolor=\"#ff7f00\", label=\"", via);
            for (int s = 0; s < p->reshards[via].r.nsteps; s++)
                fprintf(f, "%s%s", s ? "\\n" : "", coll_name(p->reshards[via].r.steps[s].kind));
            fprintf(f, "\"];\n  t%d -> r%d;\n  r%d -> n%d;\n", t->id, via, via, i);
        }
    }
    for (int r = 0; r < p->nreshards; r++)
        if (!p->reshards[r].consumer)
            fprintf(f, "  r%d [shape=diamond, style=filled, fillcolor=\"#ff7f00\", label=\"%s\"];\n"
                       "  t%d -> r%d;\n",
                    r, coll_name(p->reshards[r].r.steps[0].kind), p->reshards[r].tensor->id, r);
    fprintf(f, "}\n");
}
