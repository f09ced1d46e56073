/* emit_pipe.c: a pipeline stage's forward() and its part of main().
 *
 * A stage's rank runs its nodes once per microbatch, GPipe's forward
 * schedule written as one loop:
 *
 *   for each microbatch mb:
 *       stage 0: point the inputs at their block of mb (and send the
 *                inputs later stages read);
 *       other stages: wait for what mb receives, then post the receives of
 *                mb + 1 (so they land while mb computes);
 *       the stage's nodes and collectives, each value another stage reads
 *       copied into a send slot and sent as soon as it is computed (so it
 *       travels while the rest of mb, and mb + 1, compute);
 *       last stage: keep mb's block of every graph output.
 *
 * Two slots per sent or received value (mb even, mb odd): a slot is reused
 * two microbatches later, after its send (or its reader) is done. Values go
 * shard to shard, sub-rank r of one stage to sub-rank r of another, with
 * MPI_Isend/MPI_Irecv (C) or ncclSend/ncclRecv on the communication stream
 * (CUDA; a microbatch's receives in one group, so their order never
 * matters): the target's pipe_* functions write those calls, their slots'
 * requests or events, and their waits; this file writes the loop around
 * them. Each message's tag is the value's place among the values that
 * cross stages, the same on both sides. After the run the last stage's
 * first rank assembles each output from every microbatch's blocks.
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

/* The values this rank sends (produced here, read by another stage) or
 * receives; *n gets the count. With model chunks (the interleaved
 * schedule) the stages are virtual: a value read by another chunk of the
 * same ranks is no message. */
PipeLink *emit_pipe_links(const Program *pr, int sending, int *n)
{
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    int sub = pipeline_sub_rank(pp, pr->rank), tag = 0;
    PipeLink *l = calloc((size_t)g->ntensors + 1, sizeof(PipeLink));
    if (!l)
        abort();
    *n = 0;
    for (int i = 0; i < g->ntensors; i++) {
        if (!pp->readers[i])
            continue;
        const Tensor *t = g->tensors[i];
        int from = pipeline_rank_stage(pp, pp->tensor_stage[i]);
        unsigned to = 0; /* the reading stages (ranks), but the producing one */
        for (int v = 0; v < pp->nvstages; v++)
            if ((pp->readers[i] & (1u << v)) && pipeline_rank_stage(pp, v) != from)
                to |= 1u << pipeline_rank_stage(pp, v);
        if (!to)
            continue; /* (read by another chunk on the same ranks) */
        PipeLink *k = &l[*n];
        k->t = t;
        k->tag = tag++;
        k->buf = pr->tensor_buf[i];
        if (sending && from == pr->stage) {
            for (int s = 0; s < pp->nstages; s++)
                if (to & (1u << s)) {
                    k->peer_stage[k->npeer] = s;
                    k->peer[k->npeer++] = pipeline_world_rank(pp, s, sub);
                }
            (*n)++;
        } else if (!sending && (to & (1u << pr->stage))) {
            k->peer_stage[0] = from;
            k->peer[0] = pipeline_world_rank(pp, from, sub);
            k->npeer = 1;
            (*n)++;
        }
    }
    return l;
}

static int is_last(const Program *pr)
{
    return pr->stage == pr->plan->pipe->nstages - 1;
}

void emit_pipe_decls(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    char nm[ESC_NAME_CAP];
    int ns, nr;
    PipeLink *snd = emit_pipe_links(pr, 1, &ns), *rcv = emit_pipe_links(pr, 0, &nr);
    fprintf(f, "\n/* ---- pipeline: this is stage %d of %d, %d microbatch%s ---- */\n\n#define MICROBATCHES %d\n",
            pr->stage, pp->nstages, pp->microbatches, pp->microbatches == 1 ? "" : "es", pp->microbatches);
    for (int i = 0; i < ns; i++) {
        const Buffer *b = &pr->bufs[snd[i].buf];
        fprintf(f, "static unsigned char *send_%s[2]; /* %s, %lld bytes, to stage", b->name, CMT(snd[i].t->name, nm),
                (long long)b->bytes);
        for (int k = 0; k < snd[i].npeer; k++)
            fprintf(f, " %d (rank %d)", snd[i].peer_stage[k], snd[i].peer[k]);
        fprintf(f, " */\n");
        e->t->pipe_decl(e, &snd[i], 1);
    }
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        fprintf(f, "static unsigned char *slot_%s[2]; /* %s, %lld bytes, from stage %d (rank %d) */\n", b->name,
                CMT(rcv[i].t->name, nm), (long long)b->bytes, rcv[i].peer_stage[0], rcv[i].peer[0]);
        e->t->pipe_decl(e, &rcv[i], 0);
    }
    if (pr->stage == 0)
        for (int i = 0; i < g->ninputs; i++) {
            const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
            fprintf(f, "static %s *mb_%s[MICROBATCHES]; /* graph input %s: each microbatch's block */\n",
                    emit_ctype(b->dtype), b->name, CMT(g->inputs[i]->name, nm));
        }
    if (is_last(pr))
        for (int i = 0; i < g->noutputs; i++) {
            const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
            fprintf(f, "static unsigned char *out%d; /* graph output %s: every microbatch's block, %lld bytes each */\n",
                    i, CMT(g->outputs[i]->name, nm), (long long)b->bytes);
        }
    /* Slots and requests, once. */
    fprintf(f, "\nstatic void pipe_init(void)\n{\n");
    for (int i = 0; i < ns + nr; i++) {
        fprintf(f, "    for (int s = 0; s < 2; s++) {\n");
        e->t->pipe_init(e, i < ns ? &snd[i] : &rcv[i - ns], i < ns);
        fprintf(f, "    }\n");
    }
    if (is_last(pr))
        for (int i = 0; i < g->noutputs; i++)
            e->t->pipe_init_output(e, i, &pr->bufs[program_output_buf(pr, i)]);
    fprintf(f, "}\n");
    free(snd);
    free(rcv);
}

void emit_pipe_recv_comment(Emitter *e, const PipeLink *k, const char *mb, const char *indent)
{
    char nm[ESC_NAME_CAP];
    fprintf(e->f, "%s/* receive %s of microbatch %s from stage %d (rank %d) */\n", indent, CMT(k->t->name, nm), mb,
            k->peer_stage[0], k->peer[0]);
}

/* Sends value k of microbatch mb (in the loop: `mb`, `slot`). */
static void emit_send(Emitter *e, const PipeLink *k)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    char nm[ESC_NAME_CAP];
    fprintf(e->f, "\n    /* send %s (%lld bytes) of this microbatch to stage", CMT(k->t->name, nm), (long long)b->bytes);
    for (int j = 0; j < k->npeer; j++)
        fprintf(e->f, " %d (rank %d)", k->peer_stage[j], k->peer[j]);
    fprintf(e->f, ": copied to its slot, the copy sent while the rest computes */\n");
    e->t->pipe_send(e, k);
}

int emit_pipe_links_register(Emitter *e, PipeLink *snd, int ns, PipeLink *rcv, int nr, int max_tag,
                             const char *(*dir)(const PipeLink *), const char *const overlaps[2])
{
    const Program *pr = e->pr;
    for (int i = 0; i < ns + nr; i++) {
        PipeLink *k = i < ns ? &snd[i] : &rcv[i - ns];
        if (k->tag > max_tag) {
            diag_add(e->d, "pipeline: more than %d values cross stages (at \"%s\"): cut the stages elsewhere",
                     max_tag + 1, k->t->label);
            return -1;
        }
        if (pr->bufs[k->buf].bytes > 0x7fffffff) {
            diag_add(e->d, "pipeline: value \"%s\" crosses stages in blocks of %lld bytes: at most 2 GiB per message",
                     k->t->label, (long long)pr->bufs[k->buf].bytes);
            return -1;
        }
        /* Its rt_comms[] entry: a send's peers, a receive's sender. */
        char what[ESC_TEXT_CAP], peer[256], how[64] = "";
        size_t n = 0;
        for (int j = 0; j < k->npeer && n < sizeof peer; j++)
            n += (size_t)snprintf(peer + n, sizeof peer - n, "%sstage %d (rank %d)", j ? ", " : "", k->peer_stage[j],
                                  k->peer[j]);
        if (dir)
            snprintf(how, sizeof how, " (%s)", dir(k));
        snprintf(what, sizeof what, "%s of %s%s %s %s", i < ns ? "send" : "receive", k->t->label, how,
                 i < ns ? "to" : "from", peer);
        k->comm = trace_comm(&e->trace, what, i < ns ? "send" : "receive", k->t->label, peer, overlaps[i >= ns],
                             (long long)pr->bufs[k->buf].bytes);
    }
    return 0;
}

int emit_pipe_forward(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Graph *g = pr->g;
    int ns, nr;
    PipeLink *snd = emit_pipe_links(pr, 1, &ns), *rcv = emit_pipe_links(pr, 0, &nr);
    static const char *const overlaps[2] = {"the rest of the microbatch and the next one (two slots)",
                                            "the microbatch before it (two slots)"};
    if (emit_pipe_links_register(e, snd, ns, rcv, nr, 32767, NULL, overlaps)) { /* MPI guarantees tags to 32767 */
        free(snd);
        free(rcv);
        return -1;
    }
    /* Which node's compute each send follows (inputs: the microbatch start). */
    int *after = malloc(sizeof(int) * (size_t)(ns + 1));
    if (!after)
        abort();
    for (int i = 0; i < ns; i++)
        after[i] = snd[i].t->producer ? snd[i].t->producer->id : -1;
    /* step(): the stage's nodes on one microbatch, with its sends. */
    fprintf(f, "\n/* ---- stage %d on one microbatch ---- */\n\nstatic void step(int mb, int slot)\n{\n"
               "    (void)mb;\n    (void)slot;\n", pr->stage);
    if (pr->stage == 0)
        for (int i = 0; i < g->ninputs; i++) {
            const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
            fprintf(f, "    %s = mb_%s[mb];\n", b->name, b->name);
        }
    for (int i = 0; i < ns; i++)
        if (after[i] < 0)
            emit_send(e, &snd[i]);
    for (int i = 0; i < pr->ninsts; i++) {
        emit_inst(e, i);
        const Inst *in = &pr->insts[i];
        if (in->kind != INST_COMPUTE)
            continue;
        for (int k = 0; k < ns; k++)
            if (after[k] == in->node->id)
                emit_send(e, &snd[k]);
    }
    if (is_last(pr)) {
        fprintf(f, "\n    /* keep this microbatch's block of every graph output */\n");
        for (int i = 0; i < g->noutputs; i++) {
            e->t->pipe_keep_output(e, i, &pr->bufs[program_output_buf(pr, i)]);
        }
    }
    fprintf(f, "}\n");
    /* forward(): GPipe's schedule on this stage. */
    fprintf(f, "\n/* ---- one forward pass: stage %d, every microbatch in turn ---- */\n\nstatic void forward(void)\n{\n"
               "    rt_step_begin();\n", pr->stage);
    if (nr)
        e->t->pipe_recvs(e, rcv, nr, "0", "0", "    ");
    fprintf(f, "    for (int mb = 0; mb < MICROBATCHES; mb++) {\n        const int slot = mb & 1; /* of the send and receive slots */\n");
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        e->t->pipe_wait_recv(e, &rcv[i]);
        fprintf(f, "        %s = (%s *)slot_%s[slot];\n", b->name, emit_ctype(b->dtype), b->name);
    }
    if (nr) {
        fprintf(f, "        if (mb + 1 < MICROBATCHES) { /* the next microbatch lands while this one computes */\n");
        e->t->pipe_recvs(e, rcv, nr, "mb + 1", "slot ^ 1", "            ");
        fprintf(f, "        }\n");
    }
    fprintf(f, "        step(mb, slot);\n");
    for (int i = 0; i < nr; i++) /* the slot may be received into again */
        e->t->pipe_read_done(e, &rcv[i]);
    fprintf(f, "    }\n");
    for (int i = 0; i < ns; i++)
        e->t->pipe_wait_sends(e, &snd[i]);
    fprintf(f, "    rt_step_end();\n}\n");
    free(after);
    free(snd);
    free(rcv);
    return 0;
}

/* One --out branch's body in a pipeline: output i, held by the ranks of
 * `stage` (nmb microbatch blocks each, from `data`), gathered to the
 * stage's first rank, which writes it. */
void emit_pipe_gather_output(Emitter *e, int i, int stage, int nmb, const char *data)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Tensor *t = pr->g->outputs[i];
    const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
    const Mesh *m = &pr->plan->mesh;
    int root = pipeline_world_rank(pp, stage, 0);
    char sb[128];
    fprintf(f, "            static const int64_t dims[] = ");
    emit_dims(f, t->dims, t->rank);
    fprintf(f, ", blocks[] = ");
    emit_dims(f, b->dims, t->rank);
    unsigned used = sharding_used_axes(&b->layout);
    fprintf(f, ";\n            /* %s over stage %d's ranks%s: rank %d gathers one copy of each block */\n"
               "            static const int64_t index[] = {",
            sharding_str(&b->layout, m, sb, sizeof sb), stage, nmb > 1 ? " and microbatches" : "", root);
    int first = 1;
    for (int r = 0; r < pp->world.nranks; r++)
        for (int mb = 0; mb < nmb; mb++) {
            int v = mb * pp->nsub + pipeline_sub_rank(pp, r);
            for (int d = 0; d < (t->rank ? t->rank : 1); d++) {
                int idx = t->rank ? mesh_block_index(m, v, b->layout.axes[d], b->layout.naxes[d]) : 0;
                fprintf(f, "%s%d", first ? "" : ", ", idx);
                first = 0;
            }
        }
    fprintf(f, "};\n            static const unsigned char sender[] = {");
    for (int r = 0; r < pp->world.nranks; r++) {
        int sends = pipeline_stage_of_rank(pp, r) == stage;
        int v = pipeline_sub_rank(pp, r);
        for (int a = 0; a < m->naxes; a++)
            if (!(used & (1u << a)) && !m->axes[a].loop && mesh_coord(m, v, a) != 0)
                sends = 0;
        fprintf(f, "%s%d", r ? ", " : "", sends);
    }
    fprintf(f, "};\n            void *whole = rt_gather_output(%s, %d, %d, dims, blocks, index, sender, %zu, ", data, nmb,
            t->rank, dtype_size(t->dtype));
    esc_c_string(f, t->label);
    fprintf(f, ", %d);\n            if (RANK == %d)\n"
               "                rt_write_npy(args.out_path[i], %d, %d, dims, whole);\n            free(whole);\n"
               "            continue;\n        }\n",
            root, root, (int)t->dtype, t->rank);
}

/* main()'s --out on the last stage: its first rank assembles each output
 * from every microbatch's blocks. Other stages write nothing. */
void emit_pipe_outputs(Emitter *e)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    int last = pp->nstages - 1, root = pipeline_world_rank(pp, last, 0);
    if (!is_last(pr)) {
        fprintf(f, "    /* --out: the last stage (ranks from %d) writes the outputs */\n", root);
        return;
    }
    fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
    for (int i = 0; i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
        fprintf(f, "        if (strcmp(args.out_name[i], ");
        esc_c_string(f, t->name);
        fprintf(f, ") == 0) {\n");
        /* An output the same in every microbatch is taken from the first. */
        int nmb = pp->mb_axis >= 0 && (sharding_used_axes(&b->layout) & (1u << pp->mb_axis)) ? pp->microbatches : 1;
        char data[32];
        snprintf(data, sizeof data, "out%d", i);
        emit_pipe_gather_output(e, i, last, nmb, data);
    }
    fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
}
