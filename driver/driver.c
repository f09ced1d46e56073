/* driver.c: the stages from a model file to a plan or a compiled folder.
 *
 * See driver.h for the order main.c calls them in. Each stage reads the
 * options and what the stages before it left in Driven, and adds to it;
 * every failure is a Diag and a non-zero return, and nothing is written
 * to the output folder until driver_emit (which writes it whole or not at
 * all, see codegen/output.c).
 */
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

int driver_check_output(const DriverOptions *o, Driven *r, Diag *d)
{
    /* "out/" is the folder "out". */
    size_t len = strlen(o->out_dir);
    while (len > 1 && o->out_dir[len - 1] == '/')
        len--;
    r->out_dir = arena_strndup(&r->arena, o->out_dir, len);
    return codegen_check_out_dir(r->out_dir, o->model, d);
}

/* The most any rank's program holds (arena + weights + inputs + GEMM
 * panels packed at start-up), from the
 * programs' own memory plan, and that rank's split (split may be NULL);
 * -1 with a diagnostic if one cannot be built. */
static int64_t program_bytes_max(const Plan *p, const ProgramOptions *popt, int fitted, MemorySplit *split, Diag *d)
{
    ProgramOptions po = *popt;
    po.mem_limit = 0;
    int64_t most = 0;
    for (int r = 0; r < plan_world_ranks(p); r++) {
        /* fitted: as compile builds it, under --mem-limit with a shallower
         * prefetch or GEMM weights left unpacked where that fits; else (or
         * when nothing fits) the program as built without a limit. */
        Program *pr = NULL;
        if (fitted && popt->mem_limit) {
            Diag over;
            diag_init(&over, NULL);
            pr = program_build(p, r, popt, &over);
            diag_free(&over);
        }
        if (!pr)
            pr = program_build(p, r, &po, d);
        if (!pr)
            return -1;
        int64_t total = pr->arena_bytes + pr->weight_bytes + pr->input_bytes + pr->packed_bytes;
        if (total > most || r == 0) {
            most = total;
            if (split)
                program_memory_split(pr, split);
        }
        program_free(pr);
    }
    return most;
}

static Plan *auto_plan(const Graph *g, const Mesh *m, const AnnotationList *ann, const AutoOptions *aopt,
                       const char *shard_weights, Diag *d)
{
    Plan *p = partition_auto(g, m, ann, aopt, d);
    if (p && shard_weights && partition_shard_weights(p, shard_weights, d)) {
        plan_free(p);
        return NULL;
    }
    return p;
}

/* --auto under --mem-limit: the integer program bounds weights and live
 * values; the per-rank programs also hold reshard buffers, scratch and
 * alignment. Build every rank's program and, while one is over the limit,
 * solve again with the limit lowered by the largest overshoot (a few
 * rounds), so plan and compile agree on what fits. */
static Plan *auto_plan_fitted(const Graph *g, const Mesh *m, const AnnotationList *ann, AutoOptions aopt,
                              const ProgramOptions *popt, const char *shard_weights, Diag *d)
{
    Plan *p = auto_plan(g, m, ann, &aopt, shard_weights, d);
    for (int round = 0; p && aopt.mem_limit > 0 && round < 4; round++) {
        int64_t most = program_bytes_max(p, popt, 1, NULL, d);
        if (most < 0) {
            plan_free(p);
            return NULL;
        }
        int64_t over = most - popt->mem_limit;
        if (over <= 0)
            break;
        /* The programs hold what the search does not model (scratch, pack
         * buffers, alignment): leave that much room below the limit, and
         * at least the overshoot less than last time. */
        PlanEstimate e;
        plan_estimate(p, &e);
        int64_t room = popt->mem_limit - (most - e.memory_bytes);
        aopt.mem_limit = room < aopt.mem_limit - over ? room : aopt.mem_limit - over;
        plan_free(p);
        if (aopt.mem_limit <= 0) {
            diag_add(d, "--auto: no plan fits --mem-limit %lld bytes per rank", (long long)popt->mem_limit);
            return NULL;
        }
        Diag again;
        diag_init(&again, NULL);
        p = auto_plan(g, m, ann, &aopt, shard_weights, &again);
        diag_free(&again);
        if (!p) {
            diag_add(d, "--auto: no plan fits --mem-limit %lld bytes per rank (with the reshard buffers and "
                     "scratch the per-rank programs need)", (long long)popt->mem_limit);
            return NULL;
        }
    }
    return p;
}

/* --auto --train without --zero: the ZeRO stages in the order of their
 * cost in time, each adding communication (1: the updated blocks
 * all-gathered back; 2: as 1, the gradients freed early; 3: every weight
 * gathered before use). First each stage's fastest plan (the search
 * without memory rows): the first whose programs fit --mem-limit is taken
 * (without one, stage 0). Only when none does, each stage again with the
 * limit in the search, which trades layouts for memory (slower to solve):
 * the first that fits. plan (report_trials) plans all four stages' fastest
 * plans for its table; a row shows the plan taken for that stage, or its
 * fastest plan. */
static Plan *auto_plan_zero(const DriverOptions *o, Driven *r, const Graph *g, const Mesh *m, AutoOptions aopt,
                            const ProgramOptions *po, Diag *d)
{
    const char *axis = r->ann.zero_axis;
    int64_t limit = aopt.mem_limit;
    Plan *taken = NULL;
    for (int pass = 0; pass < 2 && !taken && (pass == 0 || limit > 0); pass++) {
        for (int stage = 0; stage <= 3 && (!taken || (pass == 0 && o->report_trials)); stage++) {
            const char *sw = stage == 3 ? axis : NULL;
            r->ann.zero = stage;
            Plan *p;
            if (pass == 0) {
                AutoOptions fastest = aopt;
                fastest.mem_limit = 0;
                Diag later; /* a stage after the one taken, for the table only: its failure is not the plan's */
                diag_init(&later, NULL);
                p = auto_plan(g, m, &r->ann, &fastest, sw, taken ? &later : d);
                diag_free(&later);
                if (!p && taken)
                    break;
                if (!p)
                    return NULL;
            } else {
                Diag quiet; /* "does not fit" is this pass's answer, not an error */
                diag_init(&quiet, NULL);
                p = auto_plan_fitted(g, m, &r->ann, aopt, po, sw, &quiet);
                diag_free(&quiet);
                if (!p)
                    continue;
            }
            ZeroTrial t = {.stage = stage};
            /* (whole: a stage fits with its GEMM weights packed, so one
             * byte under a stage's total takes the next) */
            if (program_bytes_max(p, po, 0, &t.mem, d) < 0) {
                plan_free(p);
                plan_free(taken);
                return NULL;
            }
            t.fits = limit <= 0 || t.mem.total <= limit;
            if (pass == 0 || t.fits) {
                r->zero_trials[stage] = t;
                r->nzero_trials = stage + 1 > r->nzero_trials ? stage + 1 : r->nzero_trials;
            }
            if (t.fits && !taken) {
                taken = p;
                r->zero_chosen = stage;
                r->zero = stage;
            } else {
                plan_free(p);
            }
        }
    }
    r->ann.zero = r->zero;
    if (!taken) {
        int least = 0;
        for (int i = 1; i < r->nzero_trials; i++)
            if (r->zero_trials[i].mem.total < r->zero_trials[least].mem.total)
                least = i;
        diag_add(d, "--auto --train: no ZeRO stage fits --mem-limit %lld bytes per rank; the smallest plan found "
                 "needs %lld (--zero %d)", (long long)limit, (long long)r->zero_trials[least].mem.total, least);
    }
    return taken;
}

static ProgramOptions program_options(const DriverOptions *o)
{
    ProgramOptions po = o->prog;
    po.cuda = o->target && strcmp(o->target, "cuda") == 0;
    return po;
}

/* --shard NAME=SPEC, or --shard experts=AXIS: every MoE block's stacked
 * expert weights split over AXIS along their experts (ir/moe.c). */
static int add_shard(Driven *r, const Graph *g, const Mesh *mesh, const char *arg, Diag *d)
{
    if (strncmp(arg, "experts=", 8) != 0 || strchr(arg, '[') || graph_tensor_find(g, "experts"))
        return annotate_add_flag(&r->ann, &r->arena, g, mesh, arg, "--shard", d);
    if (!g->nmoe_weights) {
        diag_add(d, "--shard %s: the model has no mixture-of-experts block in the form expert parallelism takes "
                 "(a Gather of stacked expert weights by the router's top-k ids)", arg);
        return -1;
    }
    if (mesh_axis_find(mesh, arg + 8) < 0) {
        diag_add(d, "--shard %.100s: the mesh has no axis of that name", arg);
        return -1;
    }
    for (int i = 0; i < g->nmoe_weights; i++) {
        char spec[300];
        const Tensor *w = g->moe_weights[i];
        snprintf(spec, sizeof spec, "=[%.32s%s]", arg + 8, w->rank == 3 ? ",_,_" : "");
        char *full = malloc(strlen(w->name) + strlen(spec) + 1);
        if (!full)
            abort();
        strcpy(full, w->name);
        strcat(full, spec);
        int rc = annotate_add_flag(&r->ann, &r->arena, g, mesh, full, "--shard experts", d);
        free(full);
        if (rc)
            return -1;
    }
    return 0;
}

int driver_plan(const DriverOptions *o, Driven *r, Diag *d)
{
    Mesh mesh;
    if (mesh_parse(o->mesh, &mesh, d))
        return -1;
    if (o->device && !(mesh.device = device_preset_find(o->device))) {
        diag_add(d, "--device %s: unknown device (H100, H200, A100, cpu)", o->device);
        return -1;
    }
    /* CPU ranks talk through the host's shared memory unless --link says
     * otherwise (an NVLink default would price their transfers at 450 GB/s). */
    if (o->device && strcmp(mesh.device->name, "cpu") == 0)
        for (int a = 0; a < mesh.naxes; a++)
            mesh.axes[a].link = link_preset_find("shm");
    if (o->links && mesh_links_parse(&mesh, o->links, d))
        return -1;

    /* A pipeline: the stages are planned on the other axes (and the
     * microbatches' loop axis); world keeps the mesh as given. */
    Mesh world = mesh;
    const char *pipeline_axis = o->pipeline_axis;
    int pp_axis = -1;
    if (!pipeline_axis && mesh_axis_find(&mesh, "pp") >= 0)
        pipeline_axis = "pp";
    if (!pipeline_axis && (o->microbatches > 1 || o->stage_boundaries)) {
        diag_add(d, "%s: the mesh has no pipeline axis (name one pp, or give --pipeline-axis)",
                 o->stage_boundaries ? "--stage-boundaries" : "--microbatches");
        return -1;
    }
    /* Training through a pipeline: the microbatches are --accum's, each
     * the model's batch, so the stages are planned without a loop axis. */
    TrainOptions topt = o->trainopt;
    if (o->train && pipeline_axis) {
        if (o->microbatches > 1 && topt.accum > 1 && o->microbatches != topt.accum) {
            diag_add(d, "--train: --microbatches %d and --accum %d: in a pipeline they are the same count (give one)",
                     o->microbatches, topt.accum);
            return -1;
        }
        if (o->microbatches > 1)
            topt.accum = o->microbatches;
        if (topt.clip_norm > 0 || topt.precision == DT_F16) {
            diag_add(d, "%s: the gradients' global %s spans every pipeline stage, which does not train with it yet; "
                     "drop the %s axis or the flag", topt.clip_norm > 0 ? "--clip-norm" : "--precision fp16",
                     topt.clip_norm > 0 ? "norm" : "overflow check", pipeline_axis);
            return -1;
        }
        if (o->target && strcmp(o->target, "cuda") == 0) {
            diag_add(d, "--train --target cuda: pipeline stages train on the C target only so far (drop the %s axis, "
                     "or --target c)", pipeline_axis);
            return -1;
        }
        if (o->virtual_stages && o->schedule != PIPE_INTERLEAVED) {
            diag_add(d, "--virtual-stages %d: model chunks per rank are for --schedule interleaved", o->virtual_stages);
            return -1;
        }
        int a = mesh_axis_find(&mesh, pipeline_axis), p = a >= 0 ? mesh.axes[a].size : 1, m = topt.accum > 1 ? topt.accum : 1;
        if (o->schedule == PIPE_INTERLEAVED && o->virtual_stages == 1) {
            diag_add(d, "--virtual-stages 1: the interleaved schedule needs 2 or more chunks per rank (or use "
                     "--schedule 1f1b)");
            return -1;
        }
        if (o->schedule == PIPE_INTERLEAVED && m % p) {
            diag_add(d, "--schedule interleaved: %d microbatches do not go through %d stages in whole groups (give a "
                     "multiple of %d, as Megatron-LM requires)", m, p, p);
            return -1;
        }
    } else if (o->schedule_set || o->virtual_stages) {
        diag_add(d, "%s: pipeline schedules are for --train on a mesh with a pipeline axis",
                 o->schedule_set ? "--schedule" : "--virtual-stages");
        return -1;
    }
    if (o->decode && pipeline_axis) {
        diag_add(d, "--decode: decoding runs on meshes without a pipeline axis so far (drop the %s axis)",
                 pipeline_axis);
        return -1;
    }
    if (pipeline_axis &&
        pipeline_mesh(&world, pipeline_axis, o->train ? 1 : o->microbatches, &mesh, &pp_axis, d))
        return -1;

    const char *ctx = d->context;
    int rc = -1;
    d->context = o->model;
    if (frontend_load_file(o->model, &o->frontend, &r->graph, d))
        goto out;
    MoeOptions moe = o->moeopt;
    if (!moe.groups) { /* one group of tokens per rank of a stage (GShard's) */
        moe.groups = 1;
        for (int a = 0; a < mesh.naxes; a++)
            if (a != pp_axis && !mesh.axes[a].loop)
                moe.groups *= mesh.axes[a].size;
    }
    if (ir_split_mean_losses(r->graph, d)) /* before autodiff, which builds the backward of the sum */
        goto out;
    /* The model-parallel axes (all but the pipeline's, a loop's and the
     * data-parallel one) are those that may split an LM head's classes:
     * with any, cross-entropy keeps its class dim split (ir/loss_vocab.c);
     * without, the fused loss kernel stays. */
    int64_t vocab_groups = 1;
    const char *data_axis = o->zero_axis ? o->zero_axis : "dp";
    for (int a = 0; a < mesh.naxes; a++)
        if (a != pp_axis && !mesh.axes[a].loop && strcmp(mesh.axes[a].name, data_axis) != 0)
            vocab_groups *= mesh.axes[a].size;
    if (ir_split_vocab_losses(r->graph, vocab_groups, d)) /* after the mean's split, before autodiff */
        goto out;
    if (ir_build_moe(r->graph, &moe, d)) /* before autodiff: the backward of dispatch is a combine */
        goto out;
    if (o->train && ir_build_training(r->graph, &topt, d))
        goto out;
    if (o->decode && ir_build_decode(r->graph, &o->decodeopt, d))
        goto out;
    if (o->moe_flag && !r->graph->nmoe_weights) {
        diag_add(d, "%s: the model has no mixture-of-experts block in the form expert parallelism takes (a Gather "
                 "of stacked expert weights by the router's top-k ids)", o->moe_flag);
        goto out;
    }
    r->ann.zero = r->zero = o->zero;
    r->ann.zero_axis = o->zero_axis ? o->zero_axis : "dp";
    int zax = mesh_axis_find(&mesh, r->ann.zero_axis);
    if (zax >= 0 && mesh.axes[zax].size == 1 && r->zero < 3)
        r->ann.zero = r->zero = 0; /* ZeRO-1/2 over one rank splits nothing: no blocks, no write-back */
    int choose_zero = o->train && o->use_auto && !o->zero_set && zax >= 0 && mesh.axes[zax].size > 1;
    const Graph *g = r->graph;
    if (annotate_add_model(&r->ann, &r->arena, g, &mesh, d))
        goto out;
    d->context = ctx;
    for (int i = 0; i < o->nshards; i++)
        if (add_shard(r, g, &mesh, o->shards[i], d))
            goto out;
    if (o->shardings && annotate_add_file(&r->ann, &r->arena, g, &mesh, o->shardings, d))
        goto out;
    if (pipeline_axis && pipeline_annotate(&r->ann, &r->arena, g, &mesh, d))
        goto out;

    d->context = o->model;
    ProgramOptions po = program_options(o);
    if (o->use_auto) {
        AutoOptions aopt = o->autoopt;
        aopt.mem_limit = po.mem_limit;
        if (choose_zero)
            r->plan = auto_plan_zero(o, r, g, &mesh, aopt, &po, d);
        else
            r->plan = auto_plan_fitted(g, &mesh, &r->ann, aopt, &po, o->shard_weights, d);
    } else {
        r->plan = partition_propagate(g, &mesh, &r->ann, d);
    }
    if (!r->plan)
        goto out;
    d->context = ctx;
    if (!o->use_auto && o->shard_weights && partition_shard_weights(r->plan, o->shard_weights, d))
        goto out;
    if (pipeline_axis) {
        PipelineOptions pop = {.microbatches = o->train ? (topt.accum > 1 ? topt.accum : 1) : o->microbatches,
                               .boundaries = o->stage_boundaries, .mem_limit = po.mem_limit, .train = o->train,
                               .schedule = o->schedule,
                               .chunks = o->virtual_stages ? o->virtual_stages : 2};
        if (pipeline_build(r->plan, &world, pp_axis, &pop, d))
            goto out;
    }
    r->nranks = plan_world_ranks(r->plan);
    rc = 0;
out:
    d->context = ctx;
    return rc;
}

/* plan --train: the same flags under each --recompute mode (the ZeRO
 * stage as planned), each a fresh load, so the table shows what the
 * programs would hold. Under --auto the other modes get their fastest
 * plan, without --mem-limit in the search. A mode with no plan is shown
 * as such. */
static void recompute_trials(const DriverOptions *o, Driven *r)
{
    for (int mode = RECOMPUTE_NONE; mode <= RECOMPUTE_FULL; mode++) {
        RecomputeTrial *t = &r->recompute[r->nrecompute];
        t->mode = mode;
        if (mode == (int)o->trainopt.recompute) {
            t->planned = 1;
            t->mem = r->split;
            r->recompute_chosen = r->nrecompute++;
            continue;
        }
        r->nrecompute++;
        DriverOptions o2 = *o;
        o2.trainopt.recompute = (Recomputation)mode;
        o2.report_trials = 0;
        o2.prog.mem_limit = 0; /* --auto: the mode's fastest plan (a search under the limit is slow to solve) */
        o2.zero = r->zero;
        o2.zero_set = 1;
        if (r->nzero_trials && r->zero == 3)
            o2.shard_weights = r->ann.zero_axis;
        Driven r2 = {0};
        Diag quiet;
        diag_init(&quiet, NULL);
        t->planned = !driver_plan(&o2, &r2, &quiet) && !driver_measure(&o2, &r2, &quiet);
        if (t->planned)
            t->mem = r2.split;
        diag_free(&quiet);
        driver_free(&r2);
    }
}

int driver_measure(const DriverOptions *o, Driven *r, Diag *d)
{
    ProgramOptions po = program_options(o);
    r->program_bytes = program_bytes_max(r->plan, &po, 1, &r->split, d);
    if (r->program_bytes < 0)
        return -1;
    if (o->train && o->report_trials)
        recompute_trials(o, r);
    return 0;
}

int driver_emit(const DriverOptions *o, Driven *r, Diag *d)
{
    r->arena_bytes = arena_alloc(&r->arena, (size_t)r->nranks * sizeof(int64_t));
    r->weight_bytes = arena_alloc(&r->arena, (size_t)r->nranks * sizeof(int64_t));
    r->held_bytes = arena_alloc(&r->arena, (size_t)r->nranks * sizeof(int64_t));
    r->rank_bytes = arena_alloc(&r->arena, (size_t)r->nranks * sizeof(int64_t));
    CompileOptions co = {.prog = program_options(o), .out_dir = r->out_dir, .target = o->target,
                         .tf32 = o->tf32, .cuda_arch = o->cuda_arch, .command_line = o->command_line,
                         .model = o->model, .arena_bytes = r->arena_bytes, .weight_bytes = r->weight_bytes,
                         .held_bytes = r->held_bytes, .rank_bytes = r->rank_bytes};
    const char *ctx = d->context;
    d->context = o->model;
    int rc = codegen_compile(r->plan, &co, d);
    d->context = ctx;
    return rc;
}

void driver_free(Driven *r)
{
    plan_free(r->plan);
    graph_free(r->graph);
    free(r->ann.items);
    arena_free(&r->arena);
    memset(r, 0, sizeof *r);
}
