/* pipeline.c: pipeline stages over a mesh axis, and microbatches.
 *
 * With a pipeline axis (pp=4 in --mesh pp=4,tp=2), the graph's nodes, in
 * their topological order, are cut into as many consecutive stages as the
 * axis has coordinates; the ranks at pipeline coordinate s run stage s,
 * each with the intra-operator plan of the other axes. One plan serves
 * every stage: the graph is planned once over the mesh without the
 * pipeline axis, so a value crossing from stage a to stage b has the same
 * layout on both sides and goes shard to shard, sub-rank r of stage a to
 * sub-rank r of stage b, with no gather.
 *
 * Microbatches (--microbatches M) are one more mesh axis, "mb", that is a
 * loop, not ranks: every graph input whose first dim is the batch gets mb
 * outermost on that dim, propagation (or --auto) carries it like data
 * parallelism, and each rank runs its stage once per microbatch on its
 * block. A plan that needs a collective over mb (a node that needs the
 * whole batch, a sum over it) cannot run microbatch by microbatch and is
 * refused, naming the node.
 *
 * The boundaries come from --stage-boundaries (the tensors after whose
 * producers the stages end) or from a dynamic program over the node
 * sequence that minimises the slowest stage's time per microbatch
 * (compute and reshards from the cost model, plus sending what leaves the
 * stage over the pipeline axis's link), under the per-rank memory limit:
 * the inter-operator half of Alpa, over cut positions instead of layers.
 */
#include "partition.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_MAX_CUTS 4096 /* candidate cut positions the search considers */

/* A loop axis: a collective over it would cross microbatches, so its link
 * is priced out of every search. */
static const LinkClass loop_link = {"loop", 1e3, 1.0};

int pipeline_mesh(const Mesh *world, const char *axis, int microbatches, Mesh *spmd, int *pp_axis, Diag *d)
{
    int a = mesh_axis_find(world, axis);
    if (a < 0) {
        diag_add(d, "--pipeline-axis %s: the mesh has no axis of that name", axis);
        return -1;
    }
    if (world->axes[a].size > PIPE_MAX_STAGES) {
        diag_add(d, "--mesh: pipeline axis %s=%d: at most %d stages", axis, world->axes[a].size, PIPE_MAX_STAGES);
        return -1;
    }
    if (microbatches < 1 || microbatches > 4096) {
        diag_add(d, "--microbatches %d: expected 1 to 4096", microbatches);
        return -1;
    }
    memset(spmd, 0, sizeof *spmd);
    spmd->device = world->device;
    spmd->nranks = 1;
    if (microbatches > 1) {
        if (world->naxes == MESH_MAX_AXES) {
            diag_add(d, "--microbatches: the mesh has %d axes, and microbatches need one more", MESH_MAX_AXES);
            return -1;
        }
        MeshAxis *mb = &spmd->axes[spmd->naxes++];
        snprintf(mb->name, sizeof mb->name, "%s", mesh_axis_find(world, "mb") < 0 ? "mb" : "mb_");
        mb->size = microbatches;
        mb->link = &loop_link;
        mb->loop = 1;
        spmd->nranks = microbatches;
    }
    for (int i = 0; i < world->naxes; i++)
        if (i != a) {
            spmd->axes[spmd->naxes++] = world->axes[i];
            spmd->nranks *= world->axes[i].size;
        }
    *pp_axis = a;
    return 0;
}

/* The batch: the first dim of the first graph input with one. */
static int64_t batch_of(const Graph *g)
{
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i]->rank >= 1)
            return g->inputs[i]->dims[0];
    return 0;
}

int pipeline_annotate(AnnotationList *l, Arena *a, const Graph *g, const Mesh *spmd, Diag *d)
{
    int mb = -1;
    for (int i = 0; i < spmd->naxes; i++)
        if (spmd->axes[i].loop)
            mb = i;
    if (mb < 0)
        return 0;
    int64_t batch = batch_of(g), m = spmd->axes[mb].size;
    if (batch < 1 || batch % m) {
        diag_add(d, "--microbatches %lld: the batch (first dim of the first input, %lld) is not a multiple of it",
                 (long long)m, (long long)batch);
        return -1;
    }
    for (int i = 0; i < g->ninputs; i++) {
        const Tensor *t = g->inputs[i];
        if (t->rank < 1 || t->dims[0] != batch)
            continue; /* not batched: every microbatch reads it whole */
        int k = l->by_n > t->id ? l->by_tensor[t->id] - 1 : -1;
        if (k < 0) {
            char spec[256];
            int n = snprintf(spec, sizeof spec, "%s=[%s", "", spmd->axes[mb].name);
            for (int j = 1; j < t->rank && n < (int)sizeof spec - 4; j++)
                n += snprintf(spec + n, sizeof spec - (size_t)n, ",_");
            snprintf(spec + n, sizeof spec - (size_t)n, "]");
            /* The flag form is NAME=SPEC; the name is the tensor's, exactly. */
            size_t len = strlen(t->name) + strlen(spec) + 1;
            char *arg = malloc(len);
            if (!arg)
                abort();
            snprintf(arg, len, "%s%s", t->name, spec);
            int rc = annotate_add_flag(l, a, g, spmd, arg, "--microbatches", d);
            free(arg);
            if (rc)
                return -1;
            continue;
        }
        Annotation *an = &l->items[k];
        Sharding *s = &an->sharding;
        int64_t shards = m * sharding_dim_shards(s, spmd, 0);
        if (batch % shards) {
            diag_add(d, "--microbatches %lld: input \"%s\" is annotated %s, and its batch of %lld does not split into "
                     "%lld microbatches of %lld blocks each", (long long)m, t->label, an->spec, (long long)batch,
                     (long long)m, (long long)(shards / m));
            return -1;
        }
        if (s->naxes[0] >= MESH_MAX_AXES) {
            diag_add(d, "--microbatches: input \"%s\" has no room for the microbatch axis on its first dim", t->label);
            return -1;
        }
        memmove(&s->axes[0][1], &s->axes[0][0], s->naxes[0]);
        s->axes[0][0] = (unsigned char)mb;
        s->naxes[0]++;
        char buf[160];
        an->spec = arena_strdup(a, sharding_str(s, spmd, buf, sizeof buf));
    }
    return 0;
}

/* ---- the split ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The min-max split over the candidate cuts pos[0..np) (pos[0] = 0,
 * pos[np - 1] = n): best[k][j] is the slowest stage when k + 1 stages
 * cover items [0, pos[j]), from[k][j] the cut before the last of them.
 * Each start a is final when reached, as it only depends on smaller ones.
 * Ties on the slowest stage (a cut's latency can dominate every split) go
 * to the more even split: the smaller sum of squared stage times. */
static double split_over(int n, const double *prefix, const double *cut, const int64_t *mem, const int64_t *act,
                         const int64_t *stash, const int *inflight, int64_t limit, int nstages, const int *pos, int np,
                         int *first)
{
    size_t cells = (size_t)nstages * (size_t)np;
    double *best = malloc(sizeof(double) * cells), *even = malloc(sizeof(double) * cells);
    int *from = malloc(sizeof(int) * cells);
    if (!best || !even || !from)
        abort();
    for (size_t i = 0; i < cells; i++) {
        best[i] = even[i] = DBL_MAX;
        from[i] = -1;
    }
    for (int a = 0; a + 1 < np; a++) {
        int any = a == 0; /* some stages end at pos[a] */
        for (int k = 1; k < nstages && !any; k++)
            any = best[(size_t)(k - 1) * (size_t)np + (size_t)a] < DBL_MAX;
        if (!any)
            continue;
        int64_t m = 0, peak = 0, kept = 0;
        int at = pos[a], least = 1; /* the fewest microbatches in flight any stage k holds */
        for (int k = 0; inflight && k < nstages; k++)
            if (k == 0 || inflight[k] < least)
                least = inflight[k];
        for (int b = a + 1; b < np; b++) {
            for (; at < pos[b]; at++) {
                m += mem ? mem[at] : 0;
                kept += stash ? stash[at] : 0;
                if (act && act[at] > peak)
                    peak = act[at];
            }
            if (limit > 0 && m + peak + (inflight ? least : 0) * kept > limit)
                break; /* longer stages only hold more */
            double t = prefix[pos[b]] - prefix[pos[a]] + (pos[b] < n ? cut[pos[b]] : 0);
            for (int k = a == 0 ? 0 : 1; k < nstages; k++) {
                double before = k == 0 ? 0 : best[(size_t)(k - 1) * (size_t)np + (size_t)a];
                if (before == DBL_MAX || (k == 0 && a != 0))
                    continue;
                if (limit > 0 && inflight && m + peak + inflight[k] * kept > limit)
                    continue; /* stage k keeps more microbatches in flight than this split affords */
                double v = before > t ? before : t;
                double e = (k == 0 ? 0 : even[(size_t)(k - 1) * (size_t)np + (size_t)a]) + t * t;
                size_t c = (size_t)k * (size_t)np + (size_t)b;
                double tol = 1e-12 * (v > 0 ? v : 1);
                if (v < best[c] - tol || (v <= best[c] + tol && e < even[c])) {
                    best[c] = v;
                    even[c] = e;
                    from[c] = a;
                }
            }
        }
    }
    double result = best[cells - 1];
    if (result == DBL_MAX) {
        result = -1;
    } else {
        for (int k = nstages - 1, j = np - 1; k >= 0; k--) {
            int a = from[(size_t)k * (size_t)np + (size_t)j];
            first[k] = pos[a];
            j = a;
        }
    }
    free(best);
    free(even);
    free(from);
    return result;
}

/* Within this much of the best split over every cut, a split at the
 * cheapest cuts is taken instead. */
#define PIPE_CHEAP_SLACK 0.10

double pipeline_split(int n, const double *cost, const double *cut, const int64_t *mem, const int64_t *act,
                      int64_t limit, int nstages, int *first)
{
    return pipeline_split_train(n, cost, cut, mem, act, NULL, NULL, limit, nstages, first);
}

double pipeline_split_train(int n, const double *cost, const double *cut, const int64_t *mem, const int64_t *act,
                            const int64_t *stash, const int *inflight, int64_t limit, int nstages, int *first)
{
    if (nstages < 1 || n < nstages)
        return -1;
    double *prefix = malloc(sizeof(double) * (size_t)(n + 1));
    int *pos = malloc(sizeof(int) * (size_t)(n + 2)), *cheap = malloc(sizeof(int) * (size_t)(n + 2));
    int *alt = malloc(sizeof(int) * (size_t)(nstages + 1));
    if (!prefix || !pos || !cheap || !alt)
        abort();
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + cost[i];
    /* Every cut (before item i, 1 <= i < n), or past PIPE_MAX_CUTS the
     * cheapest to cross, in position order. */
    int np = 0;
    pos[np++] = 0;
    if (n - 1 <= PIPE_MAX_CUTS) {
        for (int i = 1; i < n; i++)
            pos[np++] = i;
    } else {
        double *sorted = malloc(sizeof(double) * (size_t)n);
        if (!sorted)
            abort();
        memcpy(sorted, cut + 1, sizeof(double) * (size_t)(n - 1));
        qsort(sorted, (size_t)(n - 1), sizeof(double), cmp_double);
        double bar = sorted[PIPE_MAX_CUTS - 1];
        for (int i = 1; i < n && np <= PIPE_MAX_CUTS; i++)
            if (cut[i] <= bar)
                pos[np++] = i;
        free(sorted);
    }
    pos[np++] = n;
    double result = split_over(n, prefix, cut, mem, act, stash, inflight, limit, nstages, pos, np, first);
    /* The cuts that cost the least to cross (within 1%): a transformer's
     * layer boundaries, where only the residual stream crosses. Stages
     * that end there, as Megatron and Alpa cut them, are taken when they
     * are within PIPE_CHEAP_SLACK of the best split. */
    double least = DBL_MAX;
    for (int j = 1; j + 1 < np; j++)
        if (cut[pos[j]] < least)
            least = cut[pos[j]];
    int nc = 0;
    cheap[nc++] = 0;
    for (int j = 1; j + 1 < np; j++)
        if (cut[pos[j]] <= least * 1.01)
            cheap[nc++] = pos[j];
    cheap[nc++] = n;
    if (result >= 0 && nc < np) {
        double r2 = split_over(n, prefix, cut, mem, act, stash, inflight, limit, nstages, cheap, nc, alt);
        if (r2 >= 0 && r2 <= result * (1 + PIPE_CHEAP_SLACK)) {
            result = r2;
            memcpy(first, alt, sizeof(int) * (size_t)nstages);
        }
    }
    free(prefix);
    free(pos);
    free(cheap);
    free(alt);
    return result;
}

/* ---- ranks ---------------------------------------------------------------- */

int pipeline_stage_of_rank(const Pipeline *pp, int world_rank)
{
    return mesh_coord(&pp->world, world_rank, pp->axis);
}

int pipeline_sub_rank(const Pipeline *pp, int world_rank)
{
    int r = 0;
    for (int a = 0; a < pp->world.naxes; a++)
        if (a != pp->axis)
            r = r * pp->world.axes[a].size + mesh_coord(&pp->world, world_rank, a);
    return r;
}

int pipeline_world_rank(const Pipeline *pp, int stage, int sub)
{
    /* The sub-rank's coordinates, last axis fastest, then the stage's. */
    int coord[MESH_MAX_AXES];
    for (int a = pp->world.naxes - 1; a >= 0; a--) {
        if (a == pp->axis) {
            coord[a] = stage;
            continue;
        }
        coord[a] = sub % pp->world.axes[a].size;
        sub /= pp->world.axes[a].size;
    }
    int r = 0;
    for (int a = 0; a < pp->world.naxes; a++)
        r = r * pp->world.axes[a].size + coord[a];
    return r;
}

/* ---- the stages ----------------------------------------------------------- */

/* Point-to-point time of a value's local block over the pipeline link. */
static double send_seconds(const Plan *p, const Pipeline *pp, const Tensor *t)
{
    const LinkClass *l = pp->world.axes[pp->axis].link;
    int64_t b = sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
    return l->latency_s + (double)b / l->bandwidth_Bps;
}

/* Compute time of node i per microbatch: its kernel on the local shard and
 * the reshards of its operands. */
static double node_seconds(const Plan *p, int i)
{
    const Node *n = p->g->nodes[i];
    const NodePlan *np = &p->nodes[i];
    double s = plan_node_planned_seconds(p, n);
    for (int k = 0; k < n->ninputs; k++)
        if (np->in_reshard[k] >= 0)
            s += p->reshards[np->in_reshard[k]].r.seconds;
    return s;
}

/* Weights and Constant values: every stage that reads one holds it. */
static int is_weight(const Tensor *t)
{
    return t && (t->producer ? t->producer->op == OP_CONSTANT : !t->is_input);
}

static int is_weight(const Tensor *t);

/* Checks the plan runs microbatch by microbatch: no collective over mb,
 * and no weight split over it (a weight as long as the batch, met
 * elementwise): a rank stores one block of each weight, and every
 * microbatch would read microbatch 0's. */
static int check_microbatches(const Plan *p, int mb, Diag *d)
{
    for (int r = 0; r < p->nreshards; r++) {
        const PlanReshard *pr = &p->reshards[r];
        for (int j = 0; j < pr->r.nsteps; j++)
            if (pr->r.steps[j].axes & (1u << mb)) {
                char a[160], b[160];
                sharding_str(&pr->src, &p->mesh, a, sizeof a);
                sharding_str(&pr->dst, &p->mesh, b, sizeof b);
                if (pr->consumer)
                    diag_add(d, "--microbatches: node \"%s\" (%s) needs \"%s\" as %s, not %s: a collective (%s) across "
                             "microbatches, which run one after another (split the batch over a mesh axis instead)",
                             pr->consumer->label, node_op_name(pr->consumer), pr->tensor->label, b, a,
                             coll_name(pr->r.steps[j].kind));
                else
                    diag_add(d, "--microbatches: graph output \"%s\" is a sum over the microbatches (%s): it cannot "
                             "be computed one microbatch at a time", pr->tensor->label, a);
                return -1;
            }
    }
    for (int i = 0; i < p->g->ntensors; i++) {
        const Tensor *t = p->g->tensors[i];
        if (t->rank > 0 && is_weight(t) && t->nconsumers &&
            (sharding_used_axes(&p->tensors[i].sharding) & (1u << mb))) {
            char a[160];
            diag_add(d, "--microbatches: weight \"%s\" would be split by microbatch (%s), as node \"%s\" (%s) meets it "
                     "with the batch: each microbatch needs its own part of it, which a stored weight cannot give",
                     t->label, sharding_str(&p->tensors[i].sharding, &p->mesh, a, sizeof a),
                     t->consumers[0]->label, node_op_name(t->consumers[0]));
            return -1;
        }
    }
    return 0;
}

/* ---- training ------------------------------------------------------------- */

const char *pipe_schedule_name(PipeSchedule s)
{
    return s == PIPE_GPIPE ? "gpipe" : s == PIPE_INTERLEAVED ? "interleaved" : "1f1b";
}

/* A forward node: the model's own (or a --precision Cast), not backward,
 * not recomputed, not the optimizer step. */
static int is_forward(const Node *n)
{
    return !n->grad && !n->recomputed && !ir_in_optimizer_step(n);
}

/* The order stage s runs its passes in. GPipe: every forward, then every
 * backward. 1F1B: p - s - 1 forwards (the warm-up), then one forward and
 * one backward in turn, then the remaining backwards (the cool-down).
 * Interleaved (Megatron-LM's, V chunks): the same over the M x V passes of
 * (microbatch, chunk), p microbatches at a time through each chunk in
 * turn (backward through the chunks in reverse), with a warm-up of
 * 2 (p - s - 1) + (V - 1) p forwards. */
static int schedule_ops(PipeSchedule sch, int p, int v, int m, int s, PipeOp *ops)
{
    int n = 0, total = m * v, group = p * v;
    int warm = sch == PIPE_GPIPE ? total : sch == PIPE_INTERLEAVED ? 2 * (p - s - 1) + (v - 1) * p : p - s - 1;
    if (warm > total)
        warm = total;
#define PASS(k, b) (PipeOp){(b), (b) ? v - 1 - ((k) % group) / p : ((k) % group) / p, ((k) / group) * p + (k) % p, 0, 0}
    for (int i = 0; i < warm; i++)
        ops[n++] = PASS(i, 0);
    for (int i = 0; i + warm < total; i++) {
        ops[n++] = PASS(i + warm, 0);
        ops[n++] = PASS(i, 1);
    }
    for (int i = total - warm; i < total; i++)
        ops[n++] = PASS(i, 1);
#undef PASS
    return n;
}

/* The most microbatches between their first forward pass (chunk 0) and
 * their last backward pass (chunk 0) at once, in an order of passes. */
static int ops_inflight(const PipeOp *ops, int n)
{
    int live = 0, most = 0;
    for (int i = 0; i < n; i++)
        if (ops[i].chunk == 0) {
            live += ops[i].backward ? -1 : 1;
            if (live > most)
                most = live;
        }
    return most;
}

int pipeline_chunk_inflight(const Pipeline *pp, int stage, int chunk)
{
    int live = 0, most = 0, c = chunk < 0 ? 0 : chunk;
    for (int i = 0; i < pp->nops[stage]; i++) {
        const PipeOp *o = &pp->ops[stage][i];
        if (o->chunk != c)
            continue;
        live += o->backward ? -1 : 1;
        if (live > most)
            most = live;
    }
    return most;
}

int pipeline_inflight(PipeSchedule s, int nstages, int chunks, int microbatches, int stage)
{
    PipeOp *ops = malloc(sizeof(PipeOp) * (size_t)(2 * microbatches * chunks + 1));
    if (!ops)
        abort();
    int n = ops_inflight(ops, schedule_ops(s, nstages, chunks, microbatches, stage, ops));
    free(ops);
    return n;
}

/* The cost model's run of the schedule: a stage's pass starts when the
 * stage is free and what it reads has arrived (F after the previous
 * stage's F of the microbatch, B after the next stage's B and its own F);
 * each pass takes its compute and its sends. */
static void schedule_times(Pipeline *pp)
{
    int p = pp->nstages, nv = pp->nvstages, m = pp->microbatches;
    double *fend = calloc((size_t)(nv * m), sizeof(double)), *bend = calloc((size_t)(nv * m), sizeof(double));
    int at[PIPE_MAX_STAGES] = {0};
    double free_at[PIPE_MAX_STAGES] = {0};
    if (!fend || !bend)
        abort();
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (at[s] < pp->nops[s]) {
                PipeOp *o = &pp->ops[s][at[s]];
                int v = o->chunk * p + s; /* its virtual stage */
                double ready = free_at[s];
                if (!o->backward && v > 0) {
                    double t = fend[(v - 1) * m + o->mb];
                    if (t <= 0)
                        break;
                    ready = t > ready ? t : ready;
                }
                if (o->backward) {
                    double t = v + 1 < nv ? bend[(v + 1) * m + o->mb] : fend[v * m + o->mb];
                    if (t <= 0 || fend[v * m + o->mb] <= 0)
                        break;
                    ready = t > ready ? t : ready;
                }
                const PipelineStage *st = &pp->stages[v];
                double dur = (o->backward ? st->backward_s : st->compute_s) + st->send_s;
                o->start_s = ready;
                o->end_s = ready + (dur > 0 ? dur : 1e-12);
                (o->backward ? bend : fend)[v * m + o->mb] = o->end_s;
                free_at[s] = o->end_s;
                at[s]++;
                progress = 1;
            }
    }
    pp->step_s = 0;
    for (int s = 0; s < p; s++) {
        double end = free_at[s];
        for (int v = s; v < nv; v += p)
            end += pp->stages[v].update_s;
        if (end > pp->step_s)
            pp->step_s = end;
    }
    free(fend);
    free(bend);
}

/* --train: the stage of every node that is not a forward one. A gradient
 * rule's node (or a recomputed one) runs where its forward node does; the
 * rest (a weight's summed gradient, its update) where the backward values
 * they read are made, or else (the seed, which reads constants and the
 * loss's shape) on the latest stage that reads them. */
static int assign_training(Plan *p, Pipeline *pp, Diag *d)
{
    const Graph *g = p->g;
    int n = g->nnodes;
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        if (is_forward(nd))
            continue;
        const Node *f = nd->fwd;
        while (f && f->fwd)
            f = f->fwd;
        pp->stage_of[i] = f ? pp->stage_of[f->id] : -1;
    }
    /* A recomputed node runs where its value is read again (the latest
     * such stage: backward flows down), not where it first ran: a copy
     * made on an earlier stage would reach a later one's backward only
     * after that had to run. */
    for (int i = n - 1; i >= 0; i--) {
        const Node *nd = g->nodes[i];
        if (!nd->recomputed)
            continue;
        int s = -1;
        for (int k = 0; k < nd->noutputs; k++)
            for (int c = 0; nd->outputs[k] && c < nd->outputs[k]->nconsumers; c++)
                if (pp->stage_of[nd->outputs[k]->consumers[c]->id] > s)
                    s = pp->stage_of[nd->outputs[k]->consumers[c]->id];
        if (s >= 0)
            pp->stage_of[i] = s;
    }
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        if (pp->stage_of[i] >= 0)
            continue;
        for (int k = 0; k < nd->ninputs; k++) { /* (forward values may be read from any stage) */
            const Tensor *t = nd->inputs[k];
            if (t && t->producer && !is_forward(t->producer) && pp->stage_of[t->producer->id] > pp->stage_of[i])
                pp->stage_of[i] = pp->stage_of[t->producer->id];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        const Node *nd = g->nodes[i];
        if (pp->stage_of[i] >= 0)
            continue;
        int s = -1; /* the latest stage reading it: backward values flow to earlier stages */
        for (int k = 0; k < nd->noutputs; k++)
            for (int c = 0; nd->outputs[k] && c < nd->outputs[k]->nconsumers; c++) {
                int cs = pp->stage_of[nd->outputs[k]->consumers[c]->id];
                if (cs > s)
                    s = cs;
            }
        pp->stage_of[i] = s >= 0 ? s : pp->nvstages - 1;
    }
    /* A weight that trains is updated on one stage; one that other stages
     * read too (tied embeddings) is sent to them after each update. */
    pp->shared = arena_alloc(&p->arena, sizeof(Tensor *) * (size_t)(n + 1));
    pp->shared_owner = arena_alloc(&p->arena, sizeof(int) * (size_t)(n + 1));
    pp->shared_readers = arena_alloc(&p->arena, sizeof(unsigned) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        if (ir_output_in_place(nd, 0) < 0)
            continue;
        const Tensor *w = nd->inputs[0];
        unsigned others = 0;
        for (int c = 0; c < w->nconsumers; c++)
            if (pp->stage_of[w->consumers[c]->id] != pp->stage_of[i])
                others |= 1u << pp->stage_of[w->consumers[c]->id];
        if (!others)
            continue;
        if (pp->nshared >= 2000) {
            diag_add(d, "--train: more than 2000 weights are read on several pipeline stages (at \"%s\")", w->label);
            return -1;
        }
        pp->shared[pp->nshared] = w;
        pp->shared_owner[pp->nshared] = pp->stage_of[i];
        pp->shared_readers[pp->nshared++] = others;
    }
    return 0;
}

int pipeline_build(Plan *p, const Mesh *world, int pp_axis, const PipelineOptions *o, Diag *d)
{
    const Graph *g = p->g;
    int n = g->nnodes;
    Pipeline *pp = arena_alloc(&p->arena, sizeof(Pipeline));
    memset(pp, 0, sizeof *pp);
    pp->world = *world;
    pp->axis = pp_axis;
    pp->nstages = world->axes[pp_axis].size;
    pp->microbatches = o->microbatches;
    pp->nsub = world->nranks / pp->nstages;
    pp->mb_axis = -1;
    pp->train = o->train;
    pp->schedule = o->schedule;
    pp->chunks = o->train && o->schedule == PIPE_INTERLEAVED && o->chunks > 1 ? o->chunks : 1;
    pp->nvstages = pp->nstages * pp->chunks;
    if (pp->nvstages > PIPE_MAX_STAGES) {
        diag_add(d, "--virtual-stages %d: %d stages x %d chunks is more than %d virtual stages", pp->chunks,
                 pp->nstages, pp->chunks, PIPE_MAX_STAGES);
        return -1;
    }
    int nv = pp->nvstages;
    for (int a = 0; a < p->mesh.naxes; a++)
        if (p->mesh.axes[a].loop)
            pp->mb_axis = a;
    if (pp->mb_axis >= 0 && check_microbatches(p, pp->mb_axis, d))
        return -1;
    /* The items the stages cut: the forward nodes (every node, inferring). */
    int *item = malloc(sizeof(int) * (size_t)(n + 1)), *pos_of = malloc(sizeof(int) * (size_t)(n + 1));
    if (!item || !pos_of)
        abort();
    int ni = 0;
    for (int i = 0; i < n; i++) {
        pos_of[i] = -1;
        if (!pp->train || is_forward(g->nodes[i])) {
            pos_of[i] = ni;
            item[ni++] = i;
        }
    }
    if (ni < nv) {
        diag_add(d, "--mesh: %d pipeline stages for a graph of %d %snode%s (a stage needs one)", nv, ni,
                 pp->train ? "forward " : "", ni == 1 ? "" : "s");
        free(item);
        free(pos_of);
        return -1;
    }
    pp->stage_of = arena_alloc(&p->arena, sizeof(int) * (size_t)(n + 1));
    pp->tensor_stage = arena_alloc(&p->arena, sizeof(int) * (size_t)(g->ntensors + 1));
    pp->readers = arena_alloc(&p->arena, sizeof(unsigned) * (size_t)(g->ntensors + 1));
    int first[PIPE_MAX_STAGES + 1], inflight[PIPE_MAX_STAGES];
    for (int v = 0; v < nv; v++) /* a virtual stage holds what its ranks do */
        inflight[v] = pipeline_inflight(pp->schedule, pp->nstages, pp->chunks, pp->microbatches, v % pp->nstages);
    /* Per item: its time (training: with its gradient nodes'), the weights
     * it is the first to read (training: with their gradient and optimizer
     * state), the live bytes at it, what it keeps for backward; per cut
     * position: the time to send what crosses it (training: and its
     * gradient back). */
    double *cost = calloc((size_t)ni + 1, sizeof(double)), *cut = calloc((size_t)ni + 2, sizeof(double));
    int64_t *mem = calloc((size_t)ni + 1, sizeof(int64_t)), *act = calloc((size_t)ni + 2, sizeof(int64_t));
    int64_t *stash = calloc((size_t)ni + 1, sizeof(int64_t));
    int *last = malloc(sizeof(int) * (size_t)(g->ntensors + 1)), *owner = malloc(sizeof(int) * (size_t)(n + 1));
    char *read = calloc((size_t)g->ntensors + 1, 1);
    if (!cost || !cut || !mem || !act || !stash || !last || !owner || !read)
        abort();
    /* owner[i]: the item node i's cost and memory count with. */
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i], *f = nd->fwd;
        while (f && f->fwd)
            f = f->fwd;
        owner[i] = pos_of[i] >= 0 ? pos_of[i] : f && pos_of[f->id] >= 0 ? pos_of[f->id] : -1;
    }
    for (int i = 0; i < n; i++) { /* the rest: with the item that made what they read */
        const Node *nd = g->nodes[i];
        for (int k = 0; owner[i] < 0 && k < nd->ninputs; k++)
            if (nd->inputs[k] && nd->inputs[k]->producer && owner[nd->inputs[k]->producer->id] >= 0)
                owner[i] = owner[nd->inputs[k]->producer->id];
        if (owner[i] < 0)
            owner[i] = ni - 1;
    }
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        if (pos_of[i] < 0 && ir_output_in_place(nd, 0) >= 0)
            continue; /* an update: once per step, not per microbatch (its state below) */
        cost[owner[i]] += node_seconds(p, i);
        for (int k = 0; pos_of[i] >= 0 && k < nd->ninputs; k++) {
            const Tensor *t = nd->inputs[k];
            if (is_weight(t) && !read[t->id]) {
                read[t->id] = 1;
                mem[pos_of[i]] += sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
            }
        }
    }
    for (int i = 0; pp->train && i < n; i++) {
        const Node *nd = g->nodes[i];
        if (ir_output_in_place(nd, 0) < 0)
            continue;
        for (int k = 1; k < nd->ninputs; k++) /* the gradient and the optimizer state */
            if (nd->inputs[k])
                mem[owner[i]] += sharding_local_bytes(&p->tensors[nd->inputs[k]->id].sharding, &p->mesh,
                                                      nd->inputs[k]);
    }
    /* Readers among the items only: a value's last item reader; in
     * training, a forward value a backward node reads is kept for it. */
    for (int i = 0; i < g->ntensors; i++)
        last[i] = -1;
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        for (int k = 0; k < nd->ninputs; k++) {
            const Tensor *t = nd->inputs[k];
            if (!t)
                continue;
            if (pos_of[i] >= 0 && pos_of[i] > last[t->id])
                last[t->id] = pos_of[i];
            if (pos_of[i] < 0 && pp->train && !read[t->id] && !is_weight(t) && t->producer &&
                pos_of[t->producer->id] >= 0) {
                read[t->id] = 1; /* (weights were marked above: never stashed) */
                stash[pos_of[t->producer->id]] += sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
            }
        }
    }
    for (int i = 0; !pp->train && i < g->noutputs; i++)
        last[g->outputs[i]->id] = ni; /* the last stage writes the outputs */
    /* A value produced before cut c and read at or after it crosses c;
     * the live bytes at an item, by the same sweep over [producer, last]. */
    double *dcut = calloc((size_t)ni + 2, sizeof(double));
    int64_t *dact = calloc((size_t)ni + 2, sizeof(int64_t));
    if (!dcut || !dact)
        abort();
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->rank < 0 || is_weight(t) || last[t->id] < 0)
            continue;
        if (t->producer && pos_of[t->producer->id] < 0)
            continue; /* a backward value: not cut by the forward order */
        int at = t->producer ? pos_of[t->producer->id] : -1, end = last[t->id];
        if (end <= at)
            continue;
        double sec = send_seconds(p, pp, t) * (pp->train && dtype_is_float(t->dtype) ? 2 : 1);
        dcut[at + 1] += sec;
        dcut[end + 1] -= sec;
        int64_t b = sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
        dact[at < 0 ? 0 : at] += b;
        dact[end < ni ? end + 1 : ni + 1] -= b;
    }
    double run = 0;
    int64_t live = 0;
    for (int i = 0; i <= ni; i++) {
        run += dcut[i];
        cut[i] = run > 0 ? run : 0;
        live += dact[i];
        if (i < ni)
            act[i] = live;
    }
    free(dcut);
    free(dact);
    int rc = -1;
    if (o->boundaries) {
        /* The stages end after the producers of the named tensors. */
        int nb = 0;
        const char *s = o->boundaries;
        while (*s) {
            const char *e = strchr(s, ',');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            char name[1024];
            if (len >= sizeof name) {
                diag_add(d, "--stage-boundaries: a tensor name longer than %zu bytes", sizeof name - 1);
                goto done;
            }
            memcpy(name, s, len);
            name[len] = 0;
            const Tensor *t = graph_tensor_find(g, name);
            if (!t) {
                diag_add(d, "--stage-boundaries: no tensor named \"%s\" in the model", name);
                goto done;
            }
            if (!t->producer || pos_of[t->producer->id] < 0) {
                diag_add(d, "--stage-boundaries: \"%s\" is %s: name a tensor a forward node produces", t->label,
                         t->producer ? "a backward value" : "a graph input or weight");
                goto done;
            }
            if (nb + 1 >= nv) {
                diag_add(d, "--stage-boundaries: more than %d tensors for %d stages", nv - 1, nv);
                goto done;
            }
            int at = pos_of[t->producer->id] + 1;
            if (at >= ni || (nb > 0 && at <= first[nb])) {
                diag_add(d, "--stage-boundaries: \"%s\" %s", t->label,
                         at >= ni ? "is produced by the last node: the last stage would be empty"
                                  : "is not produced after the previous boundary (list them in graph order)");
                goto done;
            }
            first[++nb] = at;
            s = e ? e + 1 : s + len;
        }
        if (nb != nv - 1) {
            diag_add(d, "--stage-boundaries: %d tensor%s for %d stages (name %d)", nb, nb == 1 ? "" : "s",
                     nv, nv - 1);
            goto done;
        }
        first[0] = 0;
    } else {
        pp->automatic = 1;
        if (pipeline_split_train(ni, cost, cut, mem, act, pp->train ? stash : NULL, pp->train ? inflight : NULL,
                                 o->mem_limit, nv, first) < 0) {
            diag_add(d, "--mesh: no split into %d pipeline stages fits --mem-limit %lld bytes per rank", nv,
                     (long long)o->mem_limit);
            goto done;
        }
    }
    first[nv] = ni;
    for (int s = 0; s < nv; s++) {
        PipelineStage *st = &pp->stages[s];
        st->first = item[first[s]];
        st->last = item[first[s + 1] - 1];
        for (int j = first[s]; j < first[s + 1]; j++)
            pp->stage_of[item[j]] = s;
    }
    if (pp->train && assign_training(p, pp, d))
        goto done;
    for (int i = 0; i < n; i++) {
        PipelineStage *st = &pp->stages[pp->stage_of[i]];
        const Node *nd = g->nodes[i];
        double sec = node_seconds(p, i);
        if (pos_of[i] >= 0 || !pp->train)
            st->compute_s += sec;
        else if (ir_in_optimizer_step(nd))
            st->update_s += sec;
        else
            st->backward_s += sec;
    }
    /* Output reshards (a partial output's reduction) run on its stage. */
    for (int i = 0; i < g->noutputs; i++)
        if (p->out_reshard[i] >= 0) {
            const Node *prod = g->outputs[i]->producer;
            int s = pp->train && prod ? pp->stage_of[prod->id] : nv - 1;
            pp->stages[s].compute_s += p->reshards[p->out_reshard[i]].r.seconds;
        }
    /* Who produces and who reads each value. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        pp->tensor_stage[i] = is_weight(t) ? -1 : t->producer ? pp->stage_of[t->producer->id] : 0;
        pp->readers[i] = 0;
        if (pp->tensor_stage[i] < 0)
            continue;
        for (int c = 0; c < t->nconsumers; c++) {
            int s = pp->stage_of[t->consumers[c]->id];
            if (s != pp->tensor_stage[i])
                pp->readers[i] |= 1u << s;
        }
        if (!pp->train && t->is_output && pp->tensor_stage[i] != nv - 1)
            pp->readers[i] |= 1u << (nv - 1);
    }
    /* Training: every value must cross in the direction its passes run:
     * forward values to later stages (a later forward, or any backward),
     * backward values to earlier stages' backward. Anything else would
     * wait for a pass the schedule runs after it. */
    for (int i = 0; pp->train && i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (!pp->readers[i])
            continue;
        int from = pp->tensor_stage[i], fwd_value = !t->producer || is_forward(t->producer);
        for (int c = 0; c < t->nconsumers; c++) {
            const Node *r = t->consumers[c];
            int to = pp->stage_of[r->id], fwd_reader = is_forward(r);
            if (to == from || (fwd_value && (to > from || !fwd_reader)) || (!fwd_value && !fwd_reader && to < from))
                continue;
            diag_add(d, "--train: value \"%s\" (%s pass of stage %d) is read by node \"%s\" in the %s pass of stage "
                     "%d, which the schedule runs before it: cut the stages elsewhere (--stage-boundaries)",
                     t->label, fwd_value ? "forward" : "backward", from, r->label, fwd_reader ? "forward" : "backward",
                     to);
            goto done;
        }
    }
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (!pp->readers[i])
            continue;
        int64_t b = sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
        PipelineStage *src = &pp->stages[pp->tensor_stage[i]];
        /* Inferring: two slots each side. Training: a send slot per
         * microbatch, and a receive slot per microbatch in flight. */
        for (int s = 0; s < nv; s++)
            if ((pp->readers[i] & (1u << s)) && s % pp->nstages != pp->tensor_stage[i] % pp->nstages) {
                src->send_s += send_seconds(p, pp, t);
                src->boundary_bytes += (pp->train ? pp->microbatches : 2) * b;
                pp->stages[s].boundary_bytes += (pp->train ? inflight[s] : 2) * b;
            }
    }
    /* Weights per stage, each once; peak live values over the stage's
     * items; training: the stash per microbatch and the microbatches held. */
    for (int s = 0; s < nv; s++) {
        PipelineStage *st = &pp->stages[s];
        st->inflight = pp->train ? inflight[s] : 1;
        for (int j = first[s]; j < first[s + 1]; j++) {
            st->stash_bytes += stash[j];
            if (act[j] > st->activation_bytes)
                st->activation_bytes = act[j];
        }
    }
    for (int i = 0; i < g->ntensors; i++)
        last[i] = -1; /* now: the stage that counted it */
    for (int i = 0; i < n; i++) {
        const Node *nd = g->nodes[i];
        PipelineStage *st = &pp->stages[pp->stage_of[i]];
        for (int k = 0; k < nd->ninputs; k++) {
            const Tensor *t = nd->inputs[k];
            int state = pp->train && k > 0 && ir_output_in_place(nd, 0) >= 0; /* a gradient or optimizer state */
            if (t && (is_weight(t) || state) && last[t->id] != pp->stage_of[i]) {
                last[t->id] = pp->stage_of[i];
                st->weight_bytes += sharding_local_bytes(&p->tensors[t->id].sharding, &p->mesh, t);
            }
        }
    }
    if (pp->train) {
        for (int s = 0; s < pp->nstages; s++) {
            pp->ops[s] = arena_alloc(&p->arena, sizeof(PipeOp) * (size_t)(2 * pp->microbatches * pp->chunks));
            pp->nops[s] = schedule_ops(pp->schedule, pp->nstages, pp->chunks, pp->microbatches, s, pp->ops[s]);
        }
        schedule_times(pp);
    }
    p->pipe = pp;
    rc = 0;
done:
    free(item);
    free(pos_of);
    free(cost);
    free(cut);
    free(mem);
    free(act);
    free(stash);
    free(last);
    free(owner);
    free(read);
    return rc;
}

double pipeline_stage_seconds(const Pipeline *pp, int s)
{
    const PipelineStage *st = &pp->stages[s];
    return st->compute_s + st->send_s + (pp->train ? st->backward_s + st->send_s : 0);
}

double pipeline_batch_seconds(const Pipeline *pp)
{
    if (pp->train)
        return pp->step_s;
    double slow = 0;
    for (int s = 0; s < pp->nstages; s++)
        if (pipeline_stage_seconds(pp, s) > slow)
            slow = pipeline_stage_seconds(pp, s);
    return slow * (pp->microbatches + pp->nstages - 1);
}
