/* emit_main.c: the parts of main() both targets write alike.
 *
 * Each target writes its own main() (emit_target_mpi.c, emit_target_cuda.c:
 * start-up, weights, timed runs, shut-down); these are the pieces they
 * share: the model's exact input and output names, the reading of this
 * rank's input blocks, the trace's start, and the writing of an output
 * (gathered to rank 0 when it is split). Names from the model reach the
 * source only as escaped string literals.
 */
#include "codegen.h"

#include <string.h>

void emit_model_names(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Graph *g = pr->g;
    if (g->decode_slots) { /* the prompt in, the tokens and their logits out */
        fprintf(f, "/* The names --in and --out take: the prompt, the generated tokens and their logits. */\n"
                   "static const char *const model_inputs[] = {");
        esc_c_string(f, g->decode_ids->name);
        fprintf(f, ", NULL};\nstatic const char *const model_outputs[] = {\"tokens\", ");
        esc_c_string(f, ir_output_name(g->decode_logits));
        fprintf(f, ", NULL};\n\n");
        return;
    }
    fprintf(f, "/* The model's input and output names, exactly, for --in and --out. */\n"
               "static const char *const model_inputs[] = {");
    for (int i = 0; i < g->ninputs; i++) {
        esc_c_string(f, g->inputs[i]->name);
        fputs(", ", f);
    }
    fprintf(f, "NULL};\nstatic const char *const model_outputs[] = {");
    for (int i = 0; i < g->noutputs; i++) {
        esc_c_string(f, ir_output_name(g->outputs[i]));
        fputs(", ", f);
    }
    fprintf(f, "NULL};\n\n");
}

/* Code that leaves `void *whole`: output i's whole value (its local
 * buffer `data`) on rank 0, NULL elsewhere. Every rank runs it. Returns
 * 1 when whole is a gathered copy, which the code after it frees (and
 * then `dims` holds the output's shape). */
int emit_output_whole(Emitter *e, int i, const char *data, const char *ind)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Tensor *t = pr->g->outputs[i];
    const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
    const Mesh *m = &pr->plan->mesh;
    if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
        fprintf(f, "%svoid *whole = RANK == 0 ? (void *)%s : NULL; /* every rank holds the whole output */\n", ind,
                data);
        return 0;
    }
    fprintf(f, "%sstatic const int64_t dims[] = ", ind);
    emit_dims(f, t->dims, t->rank);
    fprintf(f, ";\n");
    /* Split: per rank, its block index along each dim (mixed radix over
     * the dim's axes, major first) and whether it sends (coordinate 0 on
     * every axis the layout does not use). */
    char sb[128];
    unsigned used = sharding_used_axes(&b->layout);
    fprintf(f, "%s/* it stays %s over the mesh: rank 0 gathers one copy of each block */\n"
               "%sstatic const int64_t blocks[] = ",
            ind, sharding_str(&b->layout, m, sb, sizeof sb), ind);
    emit_dims(f, b->dims, t->rank);
    fprintf(f, ";\n%sstatic const int64_t index[] = {", ind);
    for (int r = 0; r < m->nranks; r++) {
        for (int d = 0; d < t->rank; d++)
            fprintf(f, "%s%d", r || d ? ", " : "", mesh_block_index(m, r, b->layout.axes[d], b->layout.naxes[d]));
    }
    fprintf(f, "};\n%sstatic const unsigned char sender[] = {", ind);
    for (int r = 0; r < m->nranks; r++) {
        int sends = 1;
        for (int a = 0; a < m->naxes; a++)
            if (!(used & (1u << a)) && mesh_coord(m, r, a) != 0)
                sends = 0;
        fprintf(f, "%s%d", r ? ", " : "", sends);
    }
    fprintf(f, "};\n%svoid *whole = rt_gather_output(%s, 1, %d, dims, blocks, index, sender, %zu, ", ind, b->name,
            t->rank, dtype_size(t->dtype));
    esc_c_string(f, t->label);
    fprintf(f, ", 0);\n");
    return 1;
}

void emit_output_write(Emitter *e, int i, const char *data)
{
    const Tensor *t = e->pr->g->outputs[i];
    const Buffer *b = &e->pr->bufs[program_output_buf(e->pr, i)];
    if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
        fprintf(e->f, "            static const int64_t dims[] = ");
        emit_dims(e->f, t->dims, t->rank);
        fprintf(e->f, ";\n            if (RANK == 0) /* every rank holds the whole output */\n"
                      "                rt_write_npy(args.out_path[i], %d, %d, dims, %s);\n",
                (int)t->dtype, t->rank, data);
        return;
    }
    emit_output_whole(e, i, data, "            ");
    fprintf(e->f, "            if (RANK == 0)\n"
                  "                rt_write_npy(args.out_path[i], %d, %d, dims, whole);\n            free(whole);\n",
            (int)t->dtype, t->rank);
}

/* rt_trace_init(): the tables, and this rank's place for the trace's
 * process names ("dp=0 tp=1", with its stage in a pipeline). */
void emit_trace_init(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Mesh *m = &pr->plan->mesh;
    char where[256];
    size_t n = 0;
    where[0] = 0;
    if (pr->plan->pipe)
        n += (size_t)snprintf(where, sizeof where, "stage %d", pr->stage);
    for (int a = 0; a < m->naxes && n < sizeof where; a++)
        if (!m->axes[a].loop)
            n += (size_t)snprintf(where + n, sizeof where - n, "%s%s=%d", n ? " " : "", m->axes[a].name, pr->coords[a]);
    fprintf(f, "    rt_trace_init(args.trace, rt_nodes, rt_comms, ");
    esc_c_string(f, where);
    fprintf(f, "); /* --trace FILE: record from here */\n");
}

/* main()'s input handling: refuse unknown --in names, then read each
 * graph input, check its dtype and shape, and keep this rank's block
 * where the target's input_block puts it (the CUDA target uploads it to
 * the device). A pipeline's stage 0 keeps its block of every microbatch
 * (mb_<buffer>[mb]); later stages read none. */
void emit_inputs(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    const Mesh *m = &pr->plan->mesh;
    char buf[256], nm[ESC_NAME_CAP], dst[ESC_NAME_CAP + 16];
    if (pp && pr->stage != 0)
        return;
    if (pp && pp->train)
        pp = NULL; /* a training stage 0 reads each microbatch's batch as it runs (load_batch) */
    const char *in = pp ? "    " : ""; /* inside the loop over microbatches */
    for (int i = 0; i < g->ninputs; i++) {
        const Tensor *t = g->inputs[i];
        const Buffer *b = &pr->bufs[pr->tensor_buf[t->id]];
        fprintf(f, "    { /* graph input %s: %s %s; this rank reads its block %s%s */\n", CMT(t->name, nm),
                dtype_name(t->dtype), shape_str(t->dims, t->rank, buf, sizeof buf),
                sharding_str(&b->layout, m, buf + 128, 128), pp ? " of every microbatch" : "");
        fprintf(f, "        static const int64_t gdims[] = ");
        emit_dims(f, t->dims, t->rank);
        fprintf(f, ", blocks[] = ");
        emit_dims(f, b->dims, t->rank);
        if (pp) {
            /* Microbatch mb is the plan mesh's rank mb * nsub + this rank's
             * place in its stage: the loop axis is outermost. */
            int sub = pipeline_sub_rank(pp, pr->rank);
            fprintf(f, ";\n        static const int64_t index[MICROBATCHES][%d] = {", t->rank ? t->rank : 1);
            for (int mb = 0; mb < pp->microbatches; mb++) {
                int64_t idx[IR_MAX_RANK];
                for (int d = 0; d < t->rank; d++)
                    idx[d] = mesh_block_index(m, mb * pp->nsub + sub, b->layout.axes[d], b->layout.naxes[d]);
                fprintf(f, "%s", mb ? ", " : "");
                emit_dims(f, idx, t->rank);
            }
            fprintf(f, "}");
        } else {
            int64_t idx[IR_MAX_RANK];
            for (int k = 0; k < t->rank; k++)
                idx[k] = mesh_block_index(&pr->plan->mesh, pr->vrank, b->layout.axes[k], b->layout.naxes[k]);
            fprintf(f, ", index[] = ");
            emit_dims(f, idx, t->rank);
        }
        /* The exact name is matched against --in; the label (terminal-safe)
         * is what errors print. Neither is ever a format string. */
        fprintf(f, ";\n        static const char name[] = ");
        esc_c_string(f, t->name);
        fprintf(f, ", label[] = ");
        esc_c_string(f, t->label);
        fprintf(f, ";\n        const char *path = rt_find_arg(args.in_name, args.in_path, args.nin, name);\n"
                   "        if (!path)\n            rt_die(\"missing --in %%s=FILE (%s %s)\", label);\n",
                dtype_name(t->dtype), shape_str(t->dims, t->rank, buf, sizeof buf));
        if (program_trains(pr) && !pp)
            fprintf(f, "        RtTensor t;\n        rt_read_tensor(path, &t);\n"
                       "        g_batches[%d] = rt_check_batches(label, path, &t, %d, %d, gdims); /* batch 0 first */\n"
                       "        g_data[%d] = t;\n",
                    i, (int)t->dtype, t->rank, i);
        else
            fprintf(f, "        RtTensor t;\n        rt_read_tensor(path, &t);\n"
                       "        rt_check_input(label, path, &t, %d, %d, gdims);\n",
                    (int)t->dtype, t->rank);
        if (pp)
            fprintf(f, "        for (int mb = 0; mb < MICROBATCHES; mb++) {\n");
        fprintf(f, "%s        void *block = rt_alloc(%lld);\n"
                   "%s        rt_take_block(block, t.data, %d, gdims, blocks, index%s, %zu);\n",
                in, (long long)b->bytes, in, t->rank, pp ? "[mb]" : "", dtype_size(t->dtype));
        snprintf(dst, sizeof dst, pp ? "mb_%s[mb]" : "%s", b->name);
        e->t->input_block(e, in, dst, b);
        fprintf(f, "%s    }\n", pp ? "        }\n" : "");
    }
}

void emit_train_loop(Emitter *e, const char *loss, const char *blob, const char *barrier, const char *sync)
{
    /* The loss's printer: rank 0, or in a pipeline the last stage's first
     * rank (which computes it); a stage without it prints nothing. It
     * reads the loss every step: one that is not finite stops every rank
     * (rt_die aborts the job) with the step and the value, unless fp16
     * loss scaling is on, whose overflowing steps are skipped by design. */
    const Pipeline *pp = e->pr->plan->pipe;
    int printer = pp ? pipeline_world_rank(pp, pp->nstages - 1, 0) : 0;
    char cond[64];
    snprintf(cond, sizeof cond, loss ? "RANK == %d" : "0", printer);
    const char *check = e->pr->g->loss_scale
                            ? "            /* fp16 loss scaling: an overflowing step is skipped, not fatal */\n"
                            : "            if (!isfinite(loss_now))\n"
                              "                rt_die(\"step %ld: the loss is %g, not finite: training stopped (a learning \"\n"
                              "                       \"rate too high, or inputs out of range?)\", (long)g_step, loss_now);\n";
    fprintf(e->f, "    double t_timed = 0; /* from the start of step 2: step 1 is the warm-up */\n"
                  "    for (long s = 1; s <= args.steps; s++) {\n"
                  "        if (s == 2) {\n"
                  "            %s;\n"
                  "            %s;\n"
                  "            t_timed = rt_now();\n"
                  "        }\n"
                  "        train_step();\n"
                  "        if (%s) {\n"
                  "            double loss_now = %s;\n"
                  "%s"
                  "            if (g_step %% args.log_every == 0 || s == args.steps)\n"
                  "                printf(\"step %%ld loss %%.9g\\n\", (long)g_step, loss_now);\n"
                  "        }\n"
                  "        if (args.save && ((args.save_every && g_step %% args.save_every == 0) || s == args.steps)) {\n"
                  "            /* every rank its file, then rank 0 publishes the step (rt_ckpt_write) */\n"
                  "            rt_ckpt_write(args.save, RANK, WORLD, (long)g_step, %s, WEIGHT_BYTES);\n"
                  "            %s;\n"
                  "            if (RANK == 0)\n"
                  "                rt_ckpt_publish(args.save, (long)g_step);\n"
                  "            %s;\n"
                  "        }\n"
                  "    }\n"
                  "    if (args.steps > 1) {\n"
                  "        %s;\n"
                  "        %s;\n"
                  "        if (RANK == 0)\n"
                  "            printf(\"time per step: %%.3f ms (%%ld steps after 1 warm-up, %%d ranks)\\n\"\n"
                  "                   \"peak memory: %%.1f MiB (rank 0, VmHWM)\\n\",\n"
                  "                   (rt_now() - t_timed) * 1e3 / (double)(args.steps - 1), args.steps - 1, WORLD,\n"
                  "                   rt_peak_rss_kib() / 1024.0);\n",
            sync, barrier, cond, loss ? loss : "0.0", check, blob, barrier, barrier, sync, barrier);
    if (!e->pr->cuda) /* every rank's peak beside the plan's figure for it */
        fprintf(e->f, "        rt_report_memory(PLANNED_BYTES, WORLD);\n");
    else if (pp && pp->train) /* each stage holds its own weights, stashes and slots */
        fprintf(e->f, "        double mine = rt_peak_rss_kib() / 1024.0, all[WORLD];\n"
                      "        CHECK_MPI(MPI_Gather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));\n"
                      "        if (RANK == 0) {\n"
                      "            printf(\"peak memory per rank (MiB, VmHWM):\");\n"
                      "            for (int r = 0; r < WORLD; r++)\n"
                      "                printf(\" %%.1f\", all[r]);\n"
                      "            printf(\"\\n\");\n"
                      "        }\n");
    fprintf(e->f, "    }\n");
}

void emit_batch_loader(Emitter *e)
{
    const Program *pr = e->pr;
    const Graph *g = pr->g;
    FILE *f = e->f;
    char nm[ESC_NAME_CAP];
    if (!program_trains(pr) || (pr->plan->pipe && (!pr->plan->pipe->train || pr->stage != 0)))
        return;
    fprintf(f, "/* Training data: each --in file holds the model's input, or k batches of it along\n"
               " * dim 0; batch b (from 1: the step, or with --accum (step-1) * ACCUM + microbatch)\n"
               " * reads batch (b-1) mod k, counted on from the checkpoint's step on --resume, this\n"
               " * rank its block of it. */\n"
               "static RtTensor g_data[%d];\n",
            g->ninputs ? g->ninputs : 1);
    if (!pr->plan->pipe) /* (a pipeline stage declared it before its passes) */
        fprintf(f, "static int64_t g_batches[%d];\n", g->ninputs ? g->ninputs : 1);
    fprintf(f, "\nstatic void load_batch(long batch)\n{\n");
    for (int i = 0; i < g->ninputs; i++) {
        const Tensor *t = g->inputs[i];
        const Buffer *b = &pr->bufs[pr->tensor_buf[t->id]];
        int64_t idx[IR_MAX_RANK], batch = tensor_numel(t) * (int64_t)dtype_size(t->dtype);
        for (int k = 0; k < t->rank; k++)
            idx[k] = mesh_block_index(&pr->plan->mesh, pr->vrank, b->layout.axes[k], b->layout.naxes[k]);
        fprintf(f, "    if (g_batches[%d] > 1) { /* %s */\n        static const int64_t gdims[] = ", i,
                CMT(t->name, nm));
        emit_dims(f, t->dims, t->rank);
        fprintf(f, ", blocks[] = ");
        emit_dims(f, b->dims, t->rank);
        fprintf(f, ", index[] = ");
        emit_dims(f, idx, t->rank);
        fprintf(f, ";\n        static void *block;\n        if (!block)\n            block = rt_alloc(%lld);\n"
                   "        const char *src = (const char *)g_data[%d].data + ((batch - 1) %% g_batches[%d]) * %lldLL;\n"
                   "        rt_take_block(block, src, %d, gdims, blocks, index, %zu);\n",
                (long long)(b->bytes ? b->bytes : 1), i, i, (long long)batch, t->rank, dtype_size(t->dtype));
        e->t->input_refresh(e, b);
        fprintf(f, "    }\n");
    }
    fprintf(f, "    (void)batch;\n}\n\n");
}
