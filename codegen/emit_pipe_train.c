/* emit_pipe_train.c: a training pipeline stage's passes and its schedule.
 *
 * A stage runs, per microbatch, forward(mb) (its forward nodes) and
 * backward(mb) (the gradient nodes of those), in the order the schedule
 * gives (partition/pipeline.c: GPipe, 1F1B, or interleaved, where each
 * rank runs V model chunks and has forward<c>(mb) and backward<c>(mb) for
 * each), then optimizer_step() on the gradients summed over the
 * microbatches (--accum's accumulators and its last-microbatch
 * collectives: the data-parallel buckets start during the last backward
 * pass). train_step() is that order written out as straight-line calls,
 * one per slot of plan.txt's stage x time table.
 *
 * Between two passes of a microbatch other microbatches' passes run, so
 * what one pass leaves for a later one is kept per microbatch in flight:
 * such values are placed in a stash region (memplan.c: a chunk's, from its
 * forward to its backward, or one for values crossing chunks), with a
 * copy per microbatch the schedule holds there, and use_slot() points the
 * stashes, the receive slots and stage 0's input slots at the
 * microbatch's copies before each pass. Everything else lives in the arena
 * (a region per chunk), which the passes reuse.
 *
 * Values cross stages as in inference, shard to shard (sub-rank r of one
 * stage to sub-rank r of another) with MPI_Isend/MPI_Irecv on
 * MPI_COMM_WORLD: activations forward in the forward passes, their
 * gradients back in the backward ones. A send is copied to its own slot per
 * microbatch and started right after the node computing it; every send is
 * waited for at the end of the step. Each receive is posted as soon as its
 * slot is free (the step's first INFLIGHT microbatches at its start,
 * microbatch mb + INFLIGHT when mb's last pass is done) and waited for at
 * the start of the first pass that reads it. MPI matches a value's
 * messages in the order they are sent, and every stage runs a chunk's
 * microbatches in order, so one tag per value serves every microbatch.
 * The C target only (the driver refuses --target cuda here).
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

/* Is value t made in backward (a gradient) rather than forward? */
static int is_backward_value(const Tensor *t)
{
    return t->producer && (t->producer->grad || ir_in_optimizer_step(t->producer));
}

static const char *direction(const PipeLink *k)
{
    return is_backward_value(k->t) ? "backward" : "forward";
}

void emit_stash_name(const Program *pr, int stash, char *buf, size_t cap)
{
    int v = pr->plan->pipe->chunks;
    if (v == 1)
        snprintf(buf, cap, "g_stash");
    else if (stash - 1 < v)
        snprintf(buf, cap, "g_stash%d", stash - 1);
    else
        snprintf(buf, cap, "g_stash_mb");
}

/* The pass names: forward(mb), or with chunks forward<c>(mb). */
static void pass_name(const Program *pr, int backward, int chunk, char *buf, size_t cap)
{
    if (pr->plan->pipe->chunks == 1)
        snprintf(buf, cap, "%s", backward ? "backward" : "forward");
    else
        snprintf(buf, cap, "%s%d", backward ? "backward" : "forward", chunk);
}

void emit_pipe_train_decls(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    char nm[ESC_NAME_CAP], sn[32];
    int ns, nr, rank_slots = pr->stash_slots[pr->nstash - 1];
    PipeLink *snd = emit_pipe_links(pr, 1, &ns), *rcv = emit_pipe_links(pr, 0, &nr);
    fprintf(f, "\n/* ---- pipeline training: stage %d of %d, %s schedule", pr->stage, pp->nstages,
            pipe_schedule_name(pp->schedule));
    if (pp->chunks > 1) {
        fprintf(f, ", %d model chunks (virtual stages", pp->chunks);
        for (int c = 0; c < pp->chunks; c++)
            fprintf(f, " %d", c * pp->nstages + pr->stage);
        fprintf(f, ")");
    }
    fprintf(f, ", %d microbatch%s per step ---- */\n\n#define MICROBATCHES %d\n"
               "#define INFLIGHT %d /* microbatches between their first and last passes here at once */\n",
            pp->microbatches, pp->microbatches == 1 ? "" : "es", pp->microbatches, rank_slots);
    for (int k = 0; k < pr->nstash; k++) {
        emit_stash_name(pr, k + 1, sn, sizeof sn);
        fprintf(f, "static unsigned char *%s_slots, *%s; /* %d cop%s of %lld bytes, %s; the current microbatch's */\n",
                sn, sn, pr->stash_slots[k], pr->stash_slots[k] == 1 ? "y" : "ies", (long long)pr->stash_bytes[k],
                pp->chunks == 1 ? "what a microbatch keeps from forward for backward"
                : k < pp->chunks ? "what a microbatch keeps from this chunk's forward for its backward"
                                 : "what a microbatch keeps from one chunk's pass for another's");
    }
    for (int i = 0; i < ns; i++) {
        const Buffer *b = &pr->bufs[snd[i].buf];
        fprintf(f, "static unsigned char *send_%s[MICROBATCHES]; /* %s (%s), %lld bytes, to stage", b->name,
                CMT(snd[i].t->name, nm), direction(&snd[i]), (long long)b->bytes);
        for (int k = 0; k < snd[i].npeer; k++)
            fprintf(f, " %d (rank %d)", snd[i].peer_stage[k], snd[i].peer[k]);
        fprintf(f, " */\nstatic MPI_Request sreq_%s[MICROBATCHES][%d];\n", b->name, snd[i].npeer);
    }
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        fprintf(f, "static unsigned char *slot_%s[INFLIGHT]; /* %s (%s), %lld bytes, from stage %d (rank %d) */\n"
                   "static MPI_Request rreq_%s[INFLIGHT];\n",
                b->name, CMT(rcv[i].t->name, nm), direction(&rcv[i]), (long long)b->bytes, rcv[i].peer_stage[0],
                rcv[i].peer[0], b->name);
    }
    for (int i = 0; pr->stage == 0 && i < g->ninputs; i++) {
        const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
        fprintf(f, "static %s *in_%s[INFLIGHT]; /* graph input %s per microbatch in flight (several batches) */\n",
                emit_ctype(b->dtype), b->name, CMT(g->inputs[i]->name, nm));
    }
    fprintf(f, "\nstatic void pipe_init(void)\n{\n");
    for (int k = 0; k < pr->nstash; k++) {
        emit_stash_name(pr, k + 1, sn, sizeof sn);
        fprintf(f, "    %s = %s_slots = rt_alloc(%dULL * %lldULL);\n", sn, sn, pr->stash_slots[k],
                (long long)(pr->stash_bytes[k] ? pr->stash_bytes[k] : 1));
    }
    for (int i = 0; i < ns; i++) {
        const Buffer *b = &pr->bufs[snd[i].buf];
        fprintf(f, "    for (int mb = 0; mb < MICROBATCHES; mb++) {\n        send_%s[mb] = rt_alloc(%lld);\n"
                   "        for (int k = 0; k < %d; k++)\n            sreq_%s[mb][k] = MPI_REQUEST_NULL;\n    }\n",
                b->name, (long long)b->bytes, snd[i].npeer, b->name);
    }
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        fprintf(f, "    for (int s = 0; s < INFLIGHT; s++) {\n        slot_%s[s] = rt_alloc(%lld);\n"
                   "        rreq_%s[s] = MPI_REQUEST_NULL;\n    }\n",
                b->name, (long long)b->bytes, b->name);
    }
    for (int i = 0; pr->stage == 0 && i < g->ninputs; i++) {
        const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
        fprintf(f, "    for (int s = 0; s < INFLIGHT; s++)\n        in_%s[s] = rt_alloc(%lld);\n", b->name,
                (long long)(b->bytes ? b->bytes : 1));
    }
    fprintf(f, "}\n");
    free(snd);
    free(rcv);
}

/* Sends value k of microbatch mb (in a pass: `mb`). */
static void emit_send(Emitter *e, const PipeLink *k)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    FILE *f = e->f;
    char nm[ESC_NAME_CAP];
    fprintf(f, "\n    /* send %s (%s, %lld bytes) of microbatch mb to stage", CMT(k->t->name, nm), direction(k),
            (long long)b->bytes);
    for (int j = 0; j < k->npeer; j++)
        fprintf(f, " %d (rank %d)", k->peer_stage[j], k->peer[j]);
    fprintf(f, ": copied to its slot, sent while the pass goes on */\n    memcpy(send_%s[mb], %s, %lld);\n",
            b->name, b->name, (long long)b->bytes);
    for (int j = 0; j < k->npeer; j++)
        fprintf(f, "    CHECK_MPI(MPI_Isend(send_%s[mb], %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &sreq_%s[mb][%d]));\n"
                   "    rt_started(%d, &sreq_%s[mb][%d]);\n",
                b->name, (long long)b->bytes, k->peer[j], k->tag, b->name, j, k->comm, b->name, j);
}

static void emit_recv_wait(Emitter *e, const PipeLink *k)
{
    char nm[ESC_NAME_CAP];
    fprintf(e->f, "    rt_wait(&rreq_%s[slot], %d); /* %s (%s) of microbatch mb, from stage %d (rank %d) */\n",
            e->pr->bufs[k->buf].name, k->comm, CMT(k->t->name, nm), direction(k), k->peer_stage[0], k->peer[0]);
}

/* Weights read on several stages (tied embeddings): the stage that
 * updated one sends it to the others, shard to shard, before their next
 * forward pass reads it. */
static void emit_weight_sync(Emitter *e)
{
    const Program *pr = e->pr;
    const Pipeline *pp = pr->plan->pipe;
    FILE *f = e->f;
    int sub = pipeline_sub_rank(pp, pr->rank), nreq = 0;
    char nm[ESC_NAME_CAP];
    for (int k = 0; k < pp->nshared; k++) {
        const Tensor *w = pp->shared[k];
        int owner = pipeline_rank_stage(pp, pp->shared_owner[k]);
        unsigned to = 0; /* the other ranks' stages reading it */
        for (int z = 0; z < pp->nvstages; z++)
            if ((pp->shared_readers[k] & (1u << z)) && pipeline_rank_stage(pp, z) != owner)
                to |= 1u << pipeline_rank_stage(pp, z);
        if (!to || (owner != pr->stage && !(to & (1u << pr->stage))))
            continue;
        const Buffer *b = &pr->bufs[pr->tensor_buf[w->id]];
        if (!nreq)
            fprintf(f, "    /* weights read on several stages: the updating stage sends the new values */\n"
                       "    MPI_Request sync[%d];\n    int nsync = 0;\n", PIPE_MAX_STAGES * pp->nshared);
        if (owner == pr->stage) {
            for (int z = 0; z < pp->nstages; z++)
                if (to & (1u << z)) {
                    fprintf(f, "    CHECK_MPI(MPI_Isend(%s, %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &sync[nsync++])); "
                               "/* %s to stage %d */\n",
                            b->name, (long long)b->bytes, pipeline_world_rank(pp, z, sub), 30000 + k,
                            CMT(w->name, nm), z);
                    nreq++;
                }
        } else {
            fprintf(f, "    CHECK_MPI(MPI_Irecv(%s, %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &sync[nsync++])); "
                       "/* %s, updated by stage %d */\n",
                    b->name, (long long)b->bytes, pipeline_world_rank(pp, owner, sub), 30000 + k, CMT(w->name, nm),
                    owner);
            nreq++;
        }
    }
    if (nreq)
        fprintf(f, "    CHECK_MPI(MPI_Waitall(nsync, sync, MPI_STATUSES_IGNORE));\n");
}

int emit_pipe_train(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    int ns, nr, v = pp->chunks;
    char sn[32], name[32];
    PipeLink *snd = emit_pipe_links(pr, 1, &ns), *rcv = emit_pipe_links(pr, 0, &nr);
    /* (MPI guarantees tags up to 32767; tied weights' syncs use 30000 up) */
    static const char *const overlaps[2] = {"the rest of the step (a slot per microbatch)",
                                            "the passes before its reader (a slot per microbatch in flight)"};
    if (emit_pipe_links_register(e, snd, ns, rcv, nr, 29999, direction, overlaps)) {
        free(snd);
        free(rcv);
        return -1;
    }
    /* Each pass's instructions (sorted by pass: schedule.c), and the
     * first pass that reads each received value. */
    int npass = 2 * v + 1, from[2 * PIPE_MAX_STAGES + 2], to[2 * PIPE_MAX_STAGES + 2];
    for (int k = 0; k < npass; k++)
        from[k] = to[k] = -1;
    for (int i = pr->ninsts - 1; i >= 0; i--) {
        int k = program_inst_pass(pr, i);
        from[k] = i;
        if (to[k] < 0)
            to[k] = i + 1;
    }
    for (int k = 0; k < npass; k++)
        if (to[k] < 0)
            from[k] = to[k] = 0; /* an empty pass */
    int *first_read = malloc(sizeof(int) * (size_t)(nr + 1));
    if (!first_read)
        abort();
    for (int i = 0; i < nr; i++) {
        first_read[i] = npass - 1;
        const Tensor *t = rcv[i].t;
        for (int c = 0; c < t->nconsumers; c++)
            if (program_runs(pr, t->consumers[c]) && program_pass(pr, t->consumers[c]) < first_read[i])
                first_read[i] = program_pass(pr, t->consumers[c]);
    }
    fprintf(f, "\n/* ---- training state ---- */\n\n"
               "static int64_t g_step; /* optimizer steps taken, counted from 1 (AdamW's bias correction) */\n"
               "#define ACCUM MICROBATCHES /* the gradients of every microbatch are summed before the update */\n"
               "static int g_micro = 1; /* the microbatch a pass runs, 1..ACCUM */\n");
    if (pr->stage == 0)
        fprintf(f, "static void load_batch(long batch);\nstatic int64_t g_batches[%d];\n",
                g->ninputs ? g->ninputs : 1);
    /* use_slot(): the stashes, receive slots and inputs of a microbatch. */
    fprintf(f, "\n/* Points the stash%s, receive slots and input blocks at microbatch mb's copies. */\n"
               "static void use_slot(int chunk, int mb)\n{\n    const int slot = mb %% INFLIGHT;\n",
            pr->nstash > 1 ? "es" : "");
    /* Every chunk's: a value chunk 0 keeps from its forward for its
     * backward may be read by chunk 1's passes in between, and the
     * microbatch's copy stays in its slot until that backward is done. */
    for (int k = 0; k < pr->nstash; k++) {
        emit_stash_name(pr, k + 1, sn, sizeof sn);
        fprintf(f, "    %s = %s_slots + (size_t)(mb %% %d) * %lldULL;\n", sn, sn, pr->stash_slots[k],
                (long long)pr->stash_bytes[k]);
    }
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        fprintf(f, "    %s = (%s *)slot_%s[slot];\n", b->name, emit_ctype(b->dtype), b->name);
    }
    for (int i = 0; pr->stage == 0 && i < g->ninputs; i++) {
        const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
        fprintf(f, "    if (g_batches[%d] > 1) /* (one batch: every microbatch reads the same block) */\n"
                   "        %s = in_%s[slot];\n", i, b->name, b->name);
    }
    fprintf(f, "    (void)chunk;\n    (void)slot;\n}\n");
    /* post_receives(mb): into the slot its microbatch uses. */
    fprintf(f, "\n/* Posts microbatch mb's receives, into its slot (free: the microbatch INFLIGHT before\n"
               " * it has finished its last pass). */\nstatic void post_receives(int mb)\n{\n"
               "    const int slot = mb %% INFLIGHT;\n    (void)slot;\n");
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        char nm[ESC_NAME_CAP];
        fprintf(f, "    /* receive %s (%s) of microbatch mb from stage %d (rank %d) */\n"
                   "    CHECK_MPI(MPI_Irecv(slot_%s[slot], %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &rreq_%s[slot]));\n"
                   "    rt_started(%d, &rreq_%s[slot]);\n",
                CMT(rcv[i].t->name, nm), direction(&rcv[i]), rcv[i].peer_stage[0], rcv[i].peer[0], b->name,
                (long long)b->bytes, rcv[i].peer[0], rcv[i].tag, b->name, rcv[i].comm, b->name);
    }
    fprintf(f, "}\n");
    /* The passes, chunk by chunk. */
    for (int c = 0; c < v; c++)
        for (int bw = 0; bw < 2; bw++) {
            int k = bw ? 2 * v - 1 - c : c, vs = c * pp->nstages + pr->stage;
            pass_name(pr, bw, c, name, sizeof name);
            fprintf(f, "\n/* ---- %s pass of microbatch mb: stage %d", bw ? "the backward" : "the forward",
                    pr->stage);
            if (v > 1)
                fprintf(f, ", chunk %d (virtual stage %d)", c, vs);
            fprintf(f, " ---- */\n\nstatic void %s(int mb)\n{\n    const int slot = mb %% INFLIGHT;\n    (void)slot;\n"
                       "    use_slot(%d, mb);\n    g_micro = mb + 1;\n",
                    name, c);
            if (pr->stage == 0 && k == 0)
                fprintf(f, "    load_batch((long)g_step * ACCUM + mb + 1);\n");
            for (int i = 0; i < nr; i++)
                if (first_read[i] == k)
                    emit_recv_wait(e, &rcv[i]);
            for (int q = 0; q < ns && k == 0; q++)
                if (!snd[q].t->producer)
                    emit_send(e, &snd[q]);
            for (int i = from[k]; i < to[k]; i++) {
                emit_inst(e, i);
                const Inst *in = &pr->insts[i];
                if (in->kind != INST_COMPUTE)
                    continue;
                for (int q = 0; q < ns; q++)
                    if (snd[q].t->producer == in->node)
                        emit_send(e, &snd[q]);
            }
            if (bw && c == 0)
                fprintf(f, "    if (mb + INFLIGHT < MICROBATCHES) /* its last pass: the slot is free */\n"
                           "        post_receives(mb + INFLIGHT);\n");
            fprintf(f, "}\n");
        }
    free(first_read);
    /* optimizer_step() */
    fprintf(f, "\n/* ---- the optimizer: this stage's weights, updated in place ---- */\n\n"
               "static void optimizer_step(void)\n{\n    g_step++;\n");
    for (int i = from[npass - 1]; i < to[npass - 1]; i++)
        emit_inst(e, i);
    fprintf(f, "}\n");
    /* train_step(): the schedule */
    const PipeOp *ops = pp->ops[pr->stage];
    int nops = pp->nops[pr->stage];
    fprintf(f, "\n/* ---- one training step: stage %d's part of the %s schedule ---- */\n\n"
               "static void train_step(void)\n{\n    rt_step_begin();\n"
               "    for (int mb = 0; mb < INFLIGHT; mb++)\n        post_receives(mb);\n",
            pr->stage, pipe_schedule_name(pp->schedule));
    int warm = 0;
    while (warm < nops && !ops[warm].backward)
        warm++;
    int cool = nops;
    while (cool > 0 && ops[cool - 1].backward)
        cool--;
    for (int i = 0; i < nops; i++) {
        if (i == 0 && pp->schedule == PIPE_GPIPE)
            fprintf(f, "    /* every forward pass, then every backward pass */\n");
        else if (i == 0 && warm < nops && cool > warm)
            fprintf(f, "    /* warm-up: %d forward pass%s before the first backward */\n", warm - 1 > 0 ? warm - 1 : 0,
                    warm - 1 == 1 ? "" : "es");
        if (pp->schedule != PIPE_GPIPE && i == warm - 1 && cool > warm)
            fprintf(f, "    /* steady state: one forward, one backward */\n");
        if (pp->schedule != PIPE_GPIPE && i == cool && cool > warm)
            fprintf(f, "    /* cool-down: the remaining backward passes */\n");
        pass_name(pr, ops[i].backward, ops[i].chunk, name, sizeof name);
        fprintf(f, "    %s(%d);\n", name, ops[i].mb);
    }
    fprintf(f, "    g_micro = ACCUM;\n    optimizer_step();\n");
    emit_weight_sync(e);
    for (int i = 0; i < ns; i++)
        fprintf(f, "    for (int mb = 0; mb < MICROBATCHES; mb++) /* the slots are reused next step */\n"
                   "        for (int k = 0; k < %d; k++)\n            rt_wait(&sreq_%s[mb][k], %d);\n",
                snd[i].npeer, pr->bufs[snd[i].buf].name, snd[i].comm);
    fprintf(f, "    rt_step_end();\n}\n");
    free(snd);
    free(rcv);
    return 0;
}

/* main()'s --out: each trained weight from the stage that updates it (its
 * first rank gathers the blocks), the loss from the last stage. */
void emit_pipe_train_outputs(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
    for (int i = 0; i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        int hs = pp->tensor_stage[t->id] < 0 ? 0 : pipeline_rank_stage(pp, pp->tensor_stage[t->id]);
        int root = pipeline_world_rank(pp, hs, 0);
        fprintf(f, "        if (strcmp(args.out_name[i], ");
        esc_c_string(f, ir_output_name(t));
        if (!program_holds_output(pr, t)) {
            fprintf(f, ") == 0)\n            continue; /* written by stage %d (rank %d) */\n", hs, root);
            continue;
        }
        const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
        if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
            fprintf(f, ") == 0) {\n            static const int64_t dims[] = ");
            emit_dims(f, t->dims, t->rank);
            fprintf(f, ";\n            if (RANK == %d) /* every rank of stage %d holds it whole */\n"
                       "                rt_write_npy(args.out_path[i], %d, %d, dims, %s);\n            continue;\n        }\n",
                    root, hs, (int)t->dtype, t->rank, b->name);
            continue;
        }
        fprintf(f, ") == 0) {\n");
        emit_pipe_gather_output(e, i, hs, 1, b->name);
    }
    fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
}
