/* emit_target_mpi.c: the C + MPI target (rank<k>.c, built with mpicc).
 *
 * Kernels are the C templates (templates/kernels*.c, GEMMs through CBLAS);
 * each mesh-axis group is an MPI communicator split from MPI_COMM_WORLD (or
 * from a pipeline stage's); a collective is non-blocking (MPI_Iallreduce,
 * ...) with one MPI_Request per reshard, registered with the runtime
 * (rt_started) so a wait past --timeout names it, and finished by rt_wait
 * at its first reader. An all-reduce that nothing could overlap is called
 * blocking instead (Program.blocking). Pipeline stages exchange values with
 * MPI_Isend/MPI_Irecv on MPI_COMM_WORLD. main() starts MPI, loads the
 * weights and packs the GEMM weights, times the runs with MPI_Wtime between
 * barriers, and writes the outputs.
 */
#include "codegen.h"

static const char *mpi_type(DType t)
{
    switch (t) {
    case DT_F32: return "MPI_FLOAT";
    case DT_F16: return "rt_mpi_f16";
    case DT_BF16: return "rt_mpi_bf16";
    case DT_F64: return "MPI_DOUBLE";
    case DT_I64: return "MPI_INT64_T";
    case DT_I32: return "MPI_INT32_T";
    case DT_U32: return "MPI_UINT32_T";
    case DT_I16: return "MPI_INT16_T";
    case DT_U16: return "MPI_UINT16_T";
    case DT_I8: return "MPI_INT8_T";
    default: return "MPI_UNSIGNED_CHAR";
    }
}

/* MPI's sum for a partial value of type t (runtime.c defines the 16-bit
 * float ones). */
static const char *mpi_sum(DType t)
{
    return t == DT_F16 ? "rt_sum_f16" : t == DT_BF16 ? "rt_sum_bf16" : "MPI_SUM";
}

static void mpi_defines(Emitter *e)
{
    fprintf(e->f, "#define PLANNED_BYTES %lldLL /* this rank's peak, as compile planned it: weights, arena, inputs, "
                  "start-up packs and the runtime (printed beside VmHWM after a timed run) */\n",
            (long long)program_rank_bytes(e->pr));
}

static void mpi_reshard_decl(Emitter *e, int r)
{
    char nm[ESC_NAME_CAP];
    fprintf(e->f, "static MPI_Request req_r%d = MPI_REQUEST_NULL; /* reshard %d: %s */\n", r, r,
            CMT(e->pr->plan->reshards[r].tensor->name, nm));
    MoeMove m;
    if (!emit_moe_move(e->pr, r, &m))
        return;
    fprintf(e->f, "static RtMoeMove moe_move_r%d; /* its MPI_Alltoallv counts, read by MPI until the wait */\n", r);
    if (m.to_experts)
        fprintf(e->f, "/* MoE layer %d's filled columns per (peer, group, expert): [0] of this rank's groups, [1] of\n"
                      " * each peer's groups for this rank's experts (rt_moe_count); its way back reuses them */\n"
                      "static int moe_counts_r%d[2][%lld];\n",
                m.layer, r, (long long)(m.p * m.gl * m.el));
}

/* An MoE layer's all-to-all of filled columns only (runtime.c rt_moe_*):
 * on the way to the experts the counts go first, in a blocking all-to-all
 * of gl * el ints per peer (the receiver must know them to post its
 * receive); the way back reuses them. The columns travel in one
 * MPI_Ialltoallv, waited for where the fixed-size call would be. */
static void mpi_moe_move(Emitter *e, int r, const MoeMove *m, int comm_id, int finish)
{
    FILE *f = e->f;
    const StepBufs *sb = &e->pr->reshards[r].steps[0];
    const char *in = e->pr->bufs[sb->in].name, *out = e->pr->bufs[sb->out].name;
    const char *send = e->pr->bufs[sb->pack].name, *recv = e->pr->bufs[sb->unpack].name;
    int cr = m->counts_r, mine = m->to_experts ? 0 : 1, theirs = 1 - mine;
    long long gl = m->gl, el = m->el, d = m->d, cap = m->cap;
    if (finish) {
        fprintf(f, "    rt_wait(&req_r%d, %d);\n", r, comm_id);
        fprintf(f, "    rt_copy(RT_EV_UNPACK, %d);\n"
                   "    /* unpack into the worst-case layout: the filled columns, zeros after them */\n"
                   "    rt_moe_unpack(%s, %s, moe_counts_r%d[%d], %d, %d, %lld, %lld, %lld, %lld);\n",
                comm_id, out, recv, cr, theirs, m->to_experts ? 0 : 1, m->p, gl, el, d, cap);
        return;
    }
    char comm[96];
    unsigned char axes[MESH_MAX_AXES];
    int na = emit_step_axes(e->pr, r, 0, axes);
    emit_comm_name(e->pr, axes, na, comm, sizeof comm);
    fprintf(f, "    /* MoE layer %d, %s: each (group, expert) block sends only its filled columns */\n", m->layer,
            m->to_experts ? "tokens to their experts" : "expert outputs back to their tokens");
    if (m->to_experts)
        fprintf(f, "    rt_moe_count(moe_counts_r%d[0], %s, %lld, %lld, %d, %lld, %lld); /* this rank's groups: groups, "
                   "pairs, peers, experts per peer, capacity */\n"
                   "    CHECK_MPI_WATCHED(MPI_Alltoall(moe_counts_r%d[0], %lld, MPI_INT, moe_counts_r%d[1], %lld, MPI_INT, "
                   "%s), rt_comms[%d].what); /* the counts first */\n",
                cr, m->slots, gl, (long long)m->pairs, m->p, el, cap, cr, gl * el, cr, gl * el, comm, comm_id);
    fprintf(f, "    rt_copy(RT_EV_PACK, %d);\n"
               "    rt_moe_pack(%s, %s, moe_counts_r%d[%d], %d, %d, %lld, %lld, %lld, %lld, %d, g_moe_moved + %d); "
               "/* token side, peers, groups, experts per peer, D, capacity, this rank's place, its counters */\n"
               "    rt_moe_sizes(moe_counts_r%d[%d], %d, %lld, %lld, %lld, moe_move_r%d.send, moe_move_r%d.sdispl);\n"
               "    rt_moe_sizes(moe_counts_r%d[%d], %d, %lld, %lld, %lld, moe_move_r%d.recv, moe_move_r%d.rdispl);\n"
               "    CHECK_MPI(MPI_Ialltoallv(%s, moe_move_r%d.send, moe_move_r%d.sdispl, MPI_FLOAT, %s, moe_move_r%d.recv, "
               "moe_move_r%d.rdispl, MPI_FLOAT, %s, &req_r%d));\n"
               "    rt_started(%d, &req_r%d);\n",
            comm_id, send, in, cr, mine, m->to_experts, m->p, gl, el, d, cap,
            mesh_block_index(&e->pr->plan->mesh, e->pr->vrank, axes, na), 4 * m->layer + !m->to_experts, cr, mine,
            m->p, gl, el, d, r, r, cr, theirs, m->p, gl, el, d, r, r, send, r, r, recv, r, r, comm, r, comm_id, r);
}

/* A pipeline: every rank splits the world by stage once; the stage's
 * groups are split from its own communicator, so stages may differ in the
 * groups they use. */
static void mpi_init_comms(Emitter *e, const CommGroup *groups, int n)
{
    const Program *pr = e->pr;
    const Plan *p = pr->plan;
    FILE *f = e->f;
    const char *parent = "MPI_COMM_WORLD";
    if (p->pipe && plan_world_ranks(p) > 1) {
        fprintf(f, "    MPI_Comm stage = rt_comm_split(%d, %d); /* the ranks of pipeline stage %d */\n"
                   "    (void)stage; /* (every rank splits: MPI_Comm_split is collective) */\n", pr->stage,
                pipeline_sub_rank(p->pipe, pr->rank), pr->stage);
        parent = "stage";
    }
    for (int k = 0; k < n; k++)
        fprintf(f, "    %s = rt_comm_split_from(%s, %d, %d);\n", groups[k].name, parent, groups[k].color, groups[k].key);
    if (!n && !p->pipe)
        fprintf(f, "    /* this plan needs no collectives */\n");
}

static void mpi_collective(Emitter *e, const CollCall *c)
{
    FILE *f = e->f;
    const char *ty = mpi_type(c->dtype);
    long long n = (long long)c->count;
    switch (c->kind) {
    case COLL_ALL_REDUCE:
        if (c->blocking) {
            fprintf(f, "    { /* blocking: its reader comes before any other compute */\n"
                       "        double t0 = rt_block_begin();\n"
                       "        CHECK_MPI_WATCHED(MPI_Allreduce(%s, %s, %lld, %s, %s, %s), rt_comms[%d].what);\n"
                       "        rt_block_end(%d, t0);\n    }\n",
                    c->send, c->recv, n, ty, mpi_sum(c->dtype), c->comm, c->comm_id, c->comm_id);
            return;
        }
        fprintf(f, "    CHECK_MPI(MPI_Iallreduce(%s, %s, %lld, %s, %s, %s, &req_r%d));\n", c->send, c->recv, n, ty,
                mpi_sum(c->dtype), c->comm, c->r);
        break;
    case COLL_ALL_GATHER:
        fprintf(f, "    CHECK_MPI(MPI_Iallgather(%s, %lld, %s, %s, %lld, %s, %s, &req_r%d));\n", c->send, n, ty, c->recv,
                n, ty, c->comm, c->r);
        break;
    case COLL_ALL_TO_ALL:
        fprintf(f, "    CHECK_MPI(MPI_Ialltoall(%s, %lld, %s, %s, %lld, %s, %s, &req_r%d));\n", c->send, n, ty, c->recv,
                n, ty, c->comm, c->r);
        break;
    case COLL_REDUCE_SCATTER:
        fprintf(f, "    CHECK_MPI(MPI_Ireduce_scatter_block(%s, %s, %lld, %s, %s, %s, &req_r%d));\n", c->send, c->recv,
                n, ty, mpi_sum(c->dtype), c->comm, c->r);
        break;
    default:
        return;
    }
    fprintf(f, "    rt_started(%d, &req_r%d);\n", c->comm_id, c->r);
}

static void mpi_wait(Emitter *e, int r, int comm_id, int blocking)
{
    if (blocking)
        fprintf(e->f, "    /* (completed in its blocking call above) */\n");
    else
        fprintf(e->f, "    rt_wait(&req_r%d, %d);\n", r, comm_id);
}

/* ---- pipeline: MPI_Isend / MPI_Irecv on MPI_COMM_WORLD, a request per slot */

static void mpi_pipe_decl(Emitter *e, const PipeLink *k, int sending)
{
    const char *b = e->pr->bufs[k->buf].name;
    if (sending)
        fprintf(e->f, "static MPI_Request sreq_%s[2][%d];\n", b, k->npeer);
    else
        fprintf(e->f, "static MPI_Request rreq_%s[2];\n", b);
}

static void mpi_pipe_init(Emitter *e, const PipeLink *k, int sending)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    if (sending)
        fprintf(e->f, "        send_%s[s] = rt_alloc(%lld);\n"
                      "        for (int k = 0; k < %d; k++)\n            sreq_%s[s][k] = MPI_REQUEST_NULL;\n",
                b->name, (long long)b->bytes, k->npeer, b->name);
    else
        fprintf(e->f, "        slot_%s[s] = rt_alloc(%lld);\n        rreq_%s[s] = MPI_REQUEST_NULL;\n", b->name,
                (long long)b->bytes, b->name);
}

static void mpi_pipe_init_output(Emitter *e, int i, const Buffer *b)
{
    fprintf(e->f, "    out%d = rt_alloc(%lld);\n", i, (long long)(b->bytes * e->pr->plan->pipe->microbatches));
}

static void mpi_pipe_recvs(Emitter *e, const PipeLink *rcv, int nr, const char *mb, const char *slot,
                           const char *indent)
{
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &e->pr->bufs[rcv[i].buf];
        emit_pipe_recv_comment(e, &rcv[i], mb, indent);
        fprintf(e->f, "%sCHECK_MPI(MPI_Irecv(slot_%s[%s], %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &rreq_%s[%s]));\n"
                      "%srt_started(%d, &rreq_%s[%s]);\n",
                indent, b->name, slot, (long long)b->bytes, rcv[i].peer[0], rcv[i].tag, b->name, slot, indent,
                rcv[i].comm, b->name, slot);
    }
}

static void mpi_pipe_wait_recv(Emitter *e, const PipeLink *k)
{
    fprintf(e->f, "        rt_wait(&rreq_%s[slot], %d);\n", e->pr->bufs[k->buf].name, k->comm);
}

static void mpi_pipe_send(Emitter *e, const PipeLink *k)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    fprintf(e->f, "    for (int k = 0; k < %d; k++) /* the slot's send two microbatches ago is done */\n"
                  "        rt_wait(&sreq_%s[slot][k], %d);\n"
                  "    memcpy(send_%s[slot], %s, %lld);\n",
            k->npeer, b->name, k->comm, b->name, b->name, (long long)b->bytes);
    for (int j = 0; j < k->npeer; j++)
        fprintf(e->f, "    CHECK_MPI(MPI_Isend(send_%s[slot], %lld, MPI_BYTE, %d, %d, MPI_COMM_WORLD, &sreq_%s[slot][%d]));\n"
                      "    rt_started(%d, &sreq_%s[slot][%d]);\n",
                b->name, (long long)b->bytes, k->peer[j], k->tag, b->name, j, k->comm, b->name, j);
}

static void mpi_pipe_read_done(Emitter *e, const PipeLink *k)
{
    (void)e; /* the slot's next receive is posted after this microbatch ran: nothing to record */
    (void)k;
}

static void mpi_pipe_wait_sends(Emitter *e, const PipeLink *k)
{
    fprintf(e->f, "    for (int s = 0; s < 2; s++)\n        for (int k = 0; k < %d; k++)\n"
                  "            rt_wait(&sreq_%s[s][k], %d);\n",
            k->npeer, e->pr->bufs[k->buf].name, k->comm);
}

static void mpi_pipe_keep_output(Emitter *e, int i, const Buffer *b)
{
    fprintf(e->f, "    memcpy(out%d + (size_t)mb * %lld, %s, %lld);\n", i, (long long)b->bytes, b->name,
            (long long)b->bytes);
}

/* ---- main() ---------------------------------------------------------------- */

static void mpi_input_block(Emitter *e, const char *indent, const char *dst, const Buffer *b)
{
    fprintf(e->f, "%s        %s = (%s *)block;\n", indent, dst, emit_ctype(b->dtype));
}

static void mpi_input_refresh(Emitter *e, const Buffer *b)
{
    fprintf(e->f, "        memcpy(%s, block, %lld);\n", b->name, (long long)b->bytes);
}

static int mpi_output_whole(Emitter *e, int i, const char *indent)
{
    return emit_output_whole(e, i, e->pr->bufs[program_output_buf(e->pr, i)].name, indent);
}

static void mpi_main(Emitter *e)
{
    const Program *pr = e->pr;
    const Graph *g = pr->g;
    FILE *f = e->f;
    if (pr->packed_bytes) {
        fprintf(f, "static void pack_weights(void)\n{\n");
        for (int q = 0; q < pr->npacks; q++) {
            const struct PackedWeight *pw = &pr->packs[q];
            const char *w = pr->bufs[pw->buf].name;
            fprintf(f, "    P%s = k_pack_b_f32(%s, %lld, %lld, %d);\n", w + 1, w, (long long)pw->k, (long long)pw->n,
                    pw->trans);
        }
        fprintf(f, "}\n\n");
    }
    if (g->decode_slots)
        emit_decode_helpers(e);
    fprintf(f, "int main(int argc, char **argv)\n{\n    RtArgs args;\n"
               "    rt_parse_args(argc, argv, &args, model_inputs, model_outputs); /* before any MPI work */\n"
               "    rt_init_mpi(&argc, &argv);\n"
               "    openblas_set_num_threads(1);\n"
               "    init_comms();\n"
               "    /* mapped, not copied: %s */\n"
               "    g_weights = rt_map_weights(argv[0], \"weights.rank%d.bin\", WEIGHT_BYTES, WEIGHT_CHECKSUM, K_PANEL, %d);\n"
               "    g_arena = rt_alloc(%lld);\n",
            program_trains(pr) ? "copy-on-write, as the optimizer updates them" : "read-only", pr->rank,
            program_trains(pr), (long long)pr->arena_bytes);
    if (program_trains(pr))
        fprintf(f, "    if (args.resume) /* the weights and optimizer state of a checkpoint instead */\n"
                   "        g_step = rt_ckpt_read(args.resume, RANK, WORLD, g_weights, WEIGHT_BYTES);\n");
    if (pr->packed_bytes)
        fprintf(f, "    pack_weights();\n");
    if (pr->plan->pipe)
        fprintf(f, "    pipe_init();\n");
    emit_moe_init(e);
    if (g->decode_slots) {
        emit_decode_main(e);
        fprintf(f, "    CHECK_MPI_WATCHED(MPI_Finalize(), \"MPI_Finalize (the other ranks to finish)\");\n    return 0;\n}\n");
        return;
    }
    emit_inputs(e);
    emit_trace_init(e);
    if (program_trains(pr)) {
        char loss[200];
        int li = program_loss_output(pr);
        if (program_holds_output(pr, g->outputs[li]))
            snprintf(loss, sizeof loss, "(double)%s[0]", pr->bufs[program_output_buf(pr, li)].name);
        emit_train_loop(e, program_holds_output(pr, g->outputs[li]) ? loss : NULL, "g_weights",
                        "CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), \"MPI_Barrier (checkpoint or timing)\")",
                        "(void)0");
        fprintf(f, "    rt_trace_write();\n");
    } else
    fprintf(f, "    if (args.iters > 0) {\n        forward(); /* warm-up */\n"
               "        CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), \"MPI_Barrier (before timing)\");\n"
               "        double t0 = MPI_Wtime();\n"
               "        for (int i = 0; i < args.iters; i++)\n            forward();\n"
               "        CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), \"MPI_Barrier (after timing)\");\n"
               "        double t1 = MPI_Wtime();\n"
               "        if (RANK == 0)\n"
               "            printf(\"time per iteration: %%.3f ms (%%d iterations after 1 warm-up, %%d ranks)\\n\"\n"
               "                   \"peak memory: %%.1f MiB (rank 0, VmHWM)\\n\",\n"
               "                   (t1 - t0) * 1e3 / args.iters, args.iters, WORLD, rt_peak_rss_kib() / 1024.0);\n"
               "        rt_report_memory(PLANNED_BYTES, WORLD);\n"
               "    } else {\n        forward();\n    }\n"
               "    rt_trace_write();\n");
    emit_moe_stats(e);
    if (pr->plan->pipe && pr->plan->pipe->train) {
        emit_pipe_train_outputs(e);
    } else if (pr->plan->pipe) {
        emit_pipe_outputs(e);
    } else {
        fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
        for (int i = 0; i < g->noutputs; i++) {
            const Tensor *t = g->outputs[i];
            const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
            fprintf(f, "        if (strcmp(args.out_name[i], ");
            esc_c_string(f, ir_output_name(t));
            fprintf(f, ") == 0) {\n");
            emit_output_write(e, i, b->name);
            fprintf(f, "            continue;\n        }\n");
        }
        fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
    }
    fprintf(f, "    CHECK_MPI_WATCHED(MPI_Finalize(), \"MPI_Finalize (the other ranks to finish)\");\n    return 0;\n}\n");
}

const EmitTarget emit_target_mpi = {
    .ext = "c",
    .kernels = 0,
    .comm_type = "MPI_Comm",
    .traces_copies = 1,
    .defines = mpi_defines,
    .reshard_decl = mpi_reshard_decl,
    .init_comms = mpi_init_comms,
    .reshard_check = NULL,
    .collective = mpi_collective,
    .wait = mpi_wait,
    .moe_move = mpi_moe_move,
    .pipe_decl = mpi_pipe_decl,
    .pipe_init = mpi_pipe_init,
    .pipe_init_output = mpi_pipe_init_output,
    .pipe_recvs = mpi_pipe_recvs,
    .pipe_wait_recv = mpi_pipe_wait_recv,
    .pipe_send = mpi_pipe_send,
    .pipe_read_done = mpi_pipe_read_done,
    .pipe_wait_sends = mpi_pipe_wait_sends,
    .pipe_keep_output = mpi_pipe_keep_output,
    .input_block = mpi_input_block,
    .input_refresh = mpi_input_refresh,
    .output_whole = mpi_output_whole,
    .main = mpi_main,
};
