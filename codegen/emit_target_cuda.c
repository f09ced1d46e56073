/* emit_target_cuda.c: the CUDA + NCCL target (rank<k>.cu, built with nvcc).
 *
 * Kernels are the CUDA templates (templates/cuda*.cu, GEMMs through
 * cuBLAS) on a compute stream; collectives are NCCL calls on a separate
 * communication stream, one communicator per mesh-axis group
 * (ncclCommSplit from a world communicator whose ncclUniqueId rank 0 makes
 * and shares over MPI, or through a file when built with MPI=0 and started
 * by launch.sh). A collective's stream waits for its input on the compute
 * stream (event ev_ready_r<k>), and compute waits for its result at the
 * first reader (ev_done_r<k>, rt_cuda_wait: bounded by --timeout), so the
 * overlap the schedule planned is explicit. Pipeline stages exchange
 * values with ncclSend/ncclRecv on the communication stream, with events
 * guarding each slot.
 *
 * main() picks this rank's GPU (local rank modulo the devices on the
 * node), creates the streams and the cuBLAS handle (float32 math unless
 * --tf32), bootstraps NCCL, uploads this rank's weight shards and input
 * blocks, times the iterations with CUDA events, and downloads the
 * outputs. A one-rank program uses no NCCL. The command line is the C
 * target's: --in, --out, --iters, --timeout, --trace, --comms (overlap or
 * serial; the GPU's collectives progress on their own stream).
 */
#include "codegen.h"

static const char *nccl_type(DType t)
{
    switch (t) {
    case DT_F32: return "ncclFloat32";
    case DT_F16: return "ncclFloat16";
    case DT_BF16: return "ncclBfloat16";
    case DT_F64: return "ncclFloat64";
    case DT_I64: return "ncclInt64";
    case DT_I32: return "ncclInt32";
    case DT_U32: return "ncclUint32";
    case DT_I16: case DT_U16: return "ncclFloat16"; /* moved as 2-byte elements: never summed (cuda_reshard_check) */
    case DT_I8: return "ncclInt8";
    default: return "ncclUint8";
    }
}

static void cuda_defines(Emitter *e)
{
    fprintf(e->f, "#define O2S_CUDA 1\n#define O2S_TF32 %d /* 1: cuBLAS may use TF32 tensor cores (--tf32) */\n",
            e->opt->tf32);
}

static void cuda_reshard_decl(Emitter *e, int r)
{
    char nm[ESC_NAME_CAP];
    fprintf(e->f, "static cudaEvent_t ev_ready_r%d, ev_done_r%d; /* reshard %d: %s */\n", r, r, r,
            CMT(e->pr->plan->reshards[r].tensor->name, nm));
}

/* ncclUniqueId from rank 0 over MPI; one world communicator, split per
 * group (a pipeline's stage first, so stages may differ in the groups they
 * use); events for every collective. */
static void cuda_init_comms(Emitter *e, const CommGroup *groups, int n)
{
    const Program *pr = e->pr;
    const Plan *p = pr->plan;
    FILE *f = e->f;
    int multi = plan_world_ranks(p) > 1;
    if (multi)
        fprintf(f, "    ncclUniqueId id;\n    ncclComm_t world;\n    if (RANK == 0)\n        CHECK_NCCL(ncclGetUniqueId(&id));\n"
                   "    rt_share_nccl_id(&id); /* over MPI, or the bootstrap file without it */\n"
                   "    rt_watch(\"NCCL communicator set-up\"); /* blocking calls: under the --timeout alarm */\n"
                   "    CHECK_NCCL(ncclCommInitRank(&world, WORLD, id, RANK));\n    g_nccl[g_nnccl++] = world;\n");
    for (int r = 0; r < p->nreshards; r++)
        if (emit_reshard_calls(pr, r))
            fprintf(f, "    CHECK_CUDA(cudaEventCreateWithFlags(&ev_ready_r%d, cudaEventDisableTiming));\n"
                       "    CHECK_CUDA(cudaEventCreateWithFlags(&ev_done_r%d, cudaEventDisableTiming));\n", r, r);
    const char *parent = "world";
    if (p->pipe && multi) {
        fprintf(f, "    ncclComm_t stage; /* the ranks of pipeline stage %d */\n"
                   "    CHECK_NCCL(ncclCommSplit(world, %d, %d, &stage, NULL));\n    g_nccl[g_nnccl++] = stage;\n",
                pr->stage, pr->stage, pipeline_sub_rank(p->pipe, pr->rank));
        parent = "stage";
    }
    for (int k = 0; k < n; k++)
        fprintf(f, "    CHECK_NCCL(ncclCommSplit(%s, %d, %d, &%s, NULL));\n    g_nccl[g_nnccl++] = %s;\n", parent,
                groups[k].color, groups[k].key, groups[k].name, groups[k].name);
    if (multi)
        fprintf(f, "    rt_unwatch();\n");
    if (!n && !p->pipe && p->mesh.nranks == 1)
        fprintf(f, "    /* this plan needs no collectives */\n");
}

/* NCCL has no 16-bit integer type: a partial sum stored as one cannot be
 * reduced. */
static int cuda_reshard_check(Emitter *e, int r)
{
    const PlanReshard *rr = &e->pr->plan->reshards[r];
    for (int j = 0; j < rr->r.nsteps; j++) {
        CollKind k = rr->r.steps[j].kind;
        DType dt = rr->tensor->dtype;
        if ((k == COLL_ALL_REDUCE || k == COLL_REDUCE_SCATTER) && (dt == DT_I16 || dt == DT_U16)) {
            diag_add(e->d, "tensor \"%s\": a partial sum stored as %s cannot be reduced by NCCL (no 16-bit integer "
                           "type); shard it so it is not partial, or use --target c", rr->tensor->label, dtype_name(dt));
            return -1;
        }
    }
    return 0;
}

/* The collective's stream waits for its input on the compute stream;
 * compute waits for ev_done at the first reader. rt_comms[comm_id] names
 * it in traces. */
static void cuda_collective(Emitter *e, const CollCall *c)
{
    FILE *f = e->f;
    const char *ty = nccl_type(c->dtype);
    long long n = (long long)c->count;
    fprintf(f, "    CHECK_CUDA(cudaEventRecord(ev_ready_r%d, g_stream)); /* input complete on the compute stream */\n"
               "    CHECK_CUDA(cudaStreamWaitEvent(g_comm, ev_ready_r%d, 0));\n    rt_comm_begin(%d);\n",
            c->r, c->r, c->comm_id);
    switch (c->kind) {
    case COLL_ALL_REDUCE:
        fprintf(f, "    CHECK_NCCL(ncclAllReduce(%s, %s, %lld, %s, ncclSum, %s, g_comm));\n", c->send, c->recv, n, ty,
                c->comm);
        break;
    case COLL_ALL_GATHER:
        fprintf(f, "    CHECK_NCCL(ncclAllGather(%s, %s, %lld, %s, %s, g_comm));\n", c->send, c->recv, n, ty, c->comm);
        break;
    case COLL_ALL_TO_ALL:
        fprintf(f, "    CHECK_NCCL(ncclGroupStart()); /* all-to-all: a send and a receive per peer */\n"
                   "    for (int q = 0; q < %d; q++) {\n"
                   "        CHECK_NCCL(ncclSend(%s + q * %lld, %lld, %s, q, %s, g_comm));\n"
                   "        CHECK_NCCL(ncclRecv(%s + q * %lld, %lld, %s, q, %s, g_comm));\n    }\n"
                   "    CHECK_NCCL(ncclGroupEnd());\n",
                c->peers, c->send, n, n, ty, c->comm, c->recv, n, n, ty, c->comm);
        break;
    case COLL_REDUCE_SCATTER:
        fprintf(f, "    CHECK_NCCL(ncclReduceScatter(%s, %s, %lld, %s, ncclSum, %s, g_comm));\n", c->send, c->recv, n,
                ty, c->comm);
        break;
    default:
        break;
    }
    fprintf(f, "    rt_comm_end();\n"
               "    CHECK_CUDA(cudaEventRecord(ev_done_r%d, g_comm)); /* compute waits on this at the first reader */\n",
            c->r);
}

static void cuda_wait(Emitter *e, int r, int comm_id, int blocking)
{
    (void)blocking; /* (never: NCCL calls are on their own stream) */
    fprintf(e->f, "    rt_cuda_wait(ev_done_r%d, %d);\n", r, comm_id);
}

/* ---- pipeline: ncclSend / ncclRecv on the communication stream, events per slot */

static void cuda_pipe_decl(Emitter *e, const PipeLink *k, int sending)
{
    const char *b = e->pr->bufs[k->buf].name;
    if (sending)
        fprintf(e->f, "static cudaEvent_t ready_%s[2], sent_%s[2];\n", b, b);
    else
        fprintf(e->f, "static cudaEvent_t landed_%s[2], read_%s[2];\n", b, b);
}

static void cuda_pipe_init(Emitter *e, const PipeLink *k, int sending)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    if (sending)
        fprintf(e->f, "        CHECK_CUDA(cudaMalloc((void **)&send_%s[s], %lld));\n"
                      "        CHECK_CUDA(cudaEventCreateWithFlags(&ready_%s[s], cudaEventDisableTiming));\n"
                      "        CHECK_CUDA(cudaEventCreateWithFlags(&sent_%s[s], cudaEventDisableTiming));\n"
                      "        CHECK_CUDA(cudaEventRecord(sent_%s[s], g_comm));\n",
                b->name, (long long)(b->bytes ? b->bytes : 64), b->name, b->name, b->name);
    else
        fprintf(e->f, "        CHECK_CUDA(cudaMalloc((void **)&slot_%s[s], %lld));\n"
                      "        CHECK_CUDA(cudaEventCreateWithFlags(&landed_%s[s], cudaEventDisableTiming));\n"
                      "        CHECK_CUDA(cudaEventCreateWithFlags(&read_%s[s], cudaEventDisableTiming));\n"
                      "        CHECK_CUDA(cudaEventRecord(read_%s[s], g_stream));\n",
                b->name, (long long)(b->bytes ? b->bytes : 64), b->name, b->name, b->name);
}

static void cuda_pipe_init_output(Emitter *e, int i, const Buffer *b)
{
    fprintf(e->f, "    CHECK_CUDA(cudaMalloc((void **)&out%d, %lld));\n", i,
            (long long)(b->bytes > 0 ? b->bytes * e->pr->plan->pipe->microbatches : 64));
}

/* A microbatch's receives in one NCCL group, after each slot's last reader. */
static void cuda_pipe_recvs(Emitter *e, const PipeLink *rcv, int nr, const char *mb, const char *slot,
                            const char *indent)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    for (int i = 0; i < nr; i++) /* the slot's last reader is done */
        fprintf(f, "%sCHECK_CUDA(cudaStreamWaitEvent(g_comm, read_%s[%s], 0));\n", indent, pr->bufs[rcv[i].buf].name,
                slot);
    fprintf(f, "%srt_comm_begin(%d); /* traced as the first receive */\n%sCHECK_NCCL(ncclGroupStart());\n", indent,
            rcv[0].comm, indent);
    for (int i = 0; i < nr; i++) {
        const Buffer *b = &pr->bufs[rcv[i].buf];
        emit_pipe_recv_comment(e, &rcv[i], mb, indent);
        fprintf(f, "%sCHECK_NCCL(ncclRecv(slot_%s[%s], %lld, ncclChar, %d, g_nccl[0], g_comm));\n", indent, b->name,
                slot, (long long)b->bytes, rcv[i].peer[0]);
    }
    fprintf(f, "%sCHECK_NCCL(ncclGroupEnd());\n%srt_comm_end();\n", indent, indent);
    for (int i = 0; i < nr; i++)
        fprintf(f, "%sCHECK_CUDA(cudaEventRecord(landed_%s[%s], g_comm));\n", indent, pr->bufs[rcv[i].buf].name, slot);
}

static void cuda_pipe_wait_recv(Emitter *e, const PipeLink *k)
{
    fprintf(e->f, "        rt_cuda_wait(landed_%s[slot], %d);\n", e->pr->bufs[k->buf].name, k->comm);
}

static void cuda_pipe_send(Emitter *e, const PipeLink *k)
{
    const Buffer *b = &e->pr->bufs[k->buf];
    FILE *f = e->f;
    fprintf(f, "    rt_cuda_wait(sent_%s[slot], %d); /* the slot's last send is done */\n"
               "    CHECK_CUDA(cudaMemcpyAsync(send_%s[slot], %s, %lld, cudaMemcpyDeviceToDevice, g_stream));\n"
               "    CHECK_CUDA(cudaEventRecord(ready_%s[slot], g_stream));\n"
               "    CHECK_CUDA(cudaStreamWaitEvent(g_comm, ready_%s[slot], 0));\n"
               "    rt_comm_begin(%d);\n    CHECK_NCCL(ncclGroupStart());\n",
            b->name, k->comm, b->name, b->name, (long long)b->bytes, b->name, b->name, k->comm);
    for (int j = 0; j < k->npeer; j++)
        fprintf(f, "    CHECK_NCCL(ncclSend(send_%s[slot], %lld, ncclChar, %d, g_nccl[0], g_comm));\n", b->name,
                (long long)b->bytes, k->peer[j]);
    fprintf(f, "    CHECK_NCCL(ncclGroupEnd());\n    rt_comm_end();\n"
               "    CHECK_CUDA(cudaEventRecord(sent_%s[slot], g_comm));\n", b->name);
}

static void cuda_pipe_read_done(Emitter *e, const PipeLink *k)
{
    fprintf(e->f, "        CHECK_CUDA(cudaEventRecord(read_%s[slot], g_stream));\n", e->pr->bufs[k->buf].name);
}

static void cuda_pipe_wait_sends(Emitter *e, const PipeLink *k)
{
    fprintf(e->f, "    for (int s = 0; s < 2; s++)\n        rt_cuda_wait(sent_%s[s], %d);\n", e->pr->bufs[k->buf].name,
            k->comm);
}

static void cuda_pipe_keep_output(Emitter *e, int i, const Buffer *b)
{
    fprintf(e->f, "    CHECK_CUDA(cudaMemcpyAsync(out%d + (size_t)mb * %lld, %s, %lld, "
                  "cudaMemcpyDeviceToDevice, g_stream));\n",
            i, (long long)b->bytes, b->name, (long long)b->bytes);
}

/* ---- main() ---------------------------------------------------------------- */

static void cuda_input_block(Emitter *e, const char *in, const char *dst, const Buffer *b)
{
    fprintf(e->f, "%s        CHECK_CUDA(cudaMalloc((void **)&%s, %lld));\n"
                  "%s        CHECK_CUDA(cudaMemcpy(%s, block, %lld, cudaMemcpyHostToDevice));\n%s        free(block);\n",
            in, dst, (long long)(b->bytes ? b->bytes : 1), in, dst, (long long)b->bytes, in);
}

static void cuda_input_refresh(Emitter *e, const Buffer *b)
{
    /* ordered after the last step's kernels on the compute stream; from
     * pageable memory, so the host block is free again on return */
    fprintf(e->f, "        CHECK_CUDA(cudaMemcpyAsync(%s, block, %lld, cudaMemcpyHostToDevice, g_stream));\n", b->name,
            (long long)b->bytes);
}

/* The output's kernels ran on the compute stream: finish them, then copy
 * (replicated) or gather from the devices (split). */
static int cuda_output_whole(Emitter *e, int i, const char *ind)
{
    const Program *pr = e->pr;
    const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
    const Tensor *t = pr->g->outputs[i];
    fprintf(e->f, "%srt_cuda_sync(g_stream, \"the forward pass\");\n", ind);
    if (t->rank > 0 && sharding_used_axes(&b->layout))
        return emit_output_whole(e, i, b->name, ind);
    fprintf(e->f, "%svoid *whole = NULL; /* every rank holds the whole output: rank 0 copies its own */\n"
                  "%sif (RANK == 0) {\n%s    whole = rt_alloc(%lld);\n"
                  "%s    CHECK_CUDA(cudaMemcpy(whole, %s, %lld, cudaMemcpyDeviceToHost));\n%s}\n",
            ind, ind, ind, (long long)b->bytes, ind, b->name, (long long)b->bytes, ind);
    return 1;
}

static void cuda_main(Emitter *e)
{
    const Program *pr = e->pr;
    const Graph *g = pr->g;
    FILE *f = e->f;
    if (g->decode_slots)
        emit_decode_helpers(e);
    fprintf(f, "int main(int argc, char **argv)\n{\n    RtArgs args;\n    int ndev = 0;\n"
               "    rt_parse_args(argc, argv, &args, model_inputs, model_outputs); /* before any launch or CUDA work */\n"
               "    rt_launch_init(&argc, &argv);\n"
               "    /* One GPU per rank: the local rank on this node picks it. */\n"
               "    int local = rt_local_rank();\n"
               "    CHECK_CUDA(cudaGetDeviceCount(&ndev));\n"
               "    if (local >= ndev)\n"
               "        rt_die(\"this is rank %%d on its node, which has %%d GPU(s): NCCL needs a GPU per rank \"\n"
               "               \"(start at most %%d ranks per node)\", local, ndev, ndev);\n"
               "    CHECK_CUDA(cudaSetDevice(local));\n"
               "    CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));\n"
               "    CHECK_CUDA(cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking));\n"
               "    CHECK_CUBLAS(cublasCreate(&g_blas));\n"
               "    CHECK_CUBLAS(cublasSetStream(g_blas, g_stream));\n"
               "    /* float32 GEMMs match the goldens; TF32 only when compiled with --tf32. */\n"
               "    CHECK_CUBLAS(cublasSetMathMode(g_blas, O2S_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));\n"
               "    init_comms();\n"
               "    {\n        unsigned char *host = rt_load_weights(argv[0], \"weights.rank%d.bin\", WEIGHT_BYTES, WEIGHT_CHECKSUM, K_PANEL);\n"
               "%s"
               "        CHECK_CUDA(cudaMalloc((void **)&g_weights, WEIGHT_BYTES + 64));\n"
               "        CHECK_CUDA(cudaMemcpy(g_weights, host, WEIGHT_BYTES, cudaMemcpyHostToDevice));\n"
               "        free(host);\n    }\n"
               "    CHECK_CUDA(cudaMalloc((void **)&g_arena, %lld));\n",
            pr->rank,
            program_trains(pr) ? "        if (args.resume) /* the weights and optimizer state of a checkpoint instead */\n"
                                 "            g_step = rt_ckpt_read(args.resume, RANK, WORLD, host, WEIGHT_BYTES);\n"
                               : "",
            (long long)(pr->arena_bytes ? pr->arena_bytes : 64));
    if (pr->plan->pipe)
        fprintf(f, "    pipe_init();\n");
    emit_moe_init(e);
    if (g->decode_slots) {
        emit_decode_main(e);
        if (plan_world_ranks(pr->plan) > 1)
            fprintf(f, "    for (int i = 0; i < g_nnccl; i++)\n        CHECK_NCCL(ncclCommDestroy(g_nccl[i]));\n");
        fprintf(f, "    CHECK_CUBLAS(cublasDestroy(g_blas));\n    rt_launch_finish();\n    return 0;\n}\n");
        return;
    }
    emit_inputs(e);
    fprintf(f, "    /* The uploads above ran on the legacy stream, and a pageable cudaMemcpy may\n"
               "     * return before its DMA lands: finish them before the first kernel on the\n"
               "     * non-blocking compute stream. */\n"
               "    CHECK_CUDA(cudaDeviceSynchronize());\n");
    emit_trace_init(e);
    if (program_trains(pr)) {
        char loss[200];
        snprintf(loss, sizeof loss, "rt_cuda_read_f32(g_stream, %s)",
                 pr->bufs[program_output_buf(pr, program_loss_output(pr))].name);
        emit_train_loop(e, loss, "rt_cuda_to_host(g_stream, g_weights, WEIGHT_BYTES)",
                        "rt_barrier(\"the other ranks (checkpoint or timing)\")",
                        "rt_cuda_sync(g_stream, \"the training steps\")");
        fprintf(f, "    rt_cuda_sync(g_stream, \"the training steps\");\n    rt_trace_write();\n");
    } else
    fprintf(f, "    if (args.iters > 0) {\n        cudaEvent_t t0, t1;\n"
               "        CHECK_CUDA(cudaEventCreate(&t0));\n        CHECK_CUDA(cudaEventCreate(&t1));\n"
               "        forward(); /* warm-up */\n        rt_cuda_sync(g_stream, \"the warm-up pass\");\n"
               "        rt_barrier(\"the other ranks (barrier before timing)\");\n"
               "        CHECK_CUDA(cudaEventRecord(t0, g_stream));\n"
               "        for (int i = 0; i < args.iters; i++)\n            forward();\n"
               "        CHECK_CUDA(cudaEventRecord(t1, g_stream));\n        rt_cuda_sync(g_stream, \"the timed passes\");\n"
               "        float ms = 0;\n        CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));\n"
               "        if (RANK == 0)\n"
               "            printf(\"time per iteration: %%.3f ms (%%d iterations after 1 warm-up, %%d ranks, CUDA events)\\n\"\n"
               "                   \"peak host memory: %%.1f MiB (rank 0, VmHWM); device: arena %%lld + weights %%llu bytes\\n\",\n"
               "                   ms / args.iters, args.iters, WORLD, rt_peak_rss_kib() / 1024.0, %lldLL, WEIGHT_BYTES);\n"
               "    } else {\n        forward();\n    }\n    rt_cuda_sync(g_stream, \"the forward pass\");\n"
               "    rt_trace_write();\n",
            (long long)pr->arena_bytes);
    emit_moe_stats(e);
    if (pr->plan->pipe)
        emit_pipe_outputs(e);
    for (int i = 0; !pr->plan->pipe && i == 0; i++)
        fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
    for (int i = 0; !pr->plan->pipe && i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
        fprintf(f, "        if (strcmp(args.out_name[i], ");
        esc_c_string(f, ir_output_name(t));
        fprintf(f, ") == 0) {\n");
        if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
            fprintf(f, "            void *host = rt_alloc(%lld);\n"
                       "            CHECK_CUDA(cudaMemcpy(host, %s, %lld, cudaMemcpyDeviceToHost));\n",
                    (long long)b->bytes, b->name, (long long)b->bytes);
            emit_output_write(e, i, "host");
            fprintf(f, "            free(host);\n");
        } else {
            emit_output_write(e, i, b->name); /* from the device, block by block */
        }
        fprintf(f, "            continue;\n        }\n");
    }
    if (!pr->plan->pipe)
        fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
    if (plan_world_ranks(pr->plan) > 1)
        fprintf(f, "    for (int i = 0; i < g_nnccl; i++)\n        CHECK_NCCL(ncclCommDestroy(g_nccl[i]));\n");
    fprintf(f, "    CHECK_CUBLAS(cublasDestroy(g_blas));\n    rt_launch_finish();\n    return 0;\n}\n");
}

const EmitTarget emit_target_cuda = {
    .ext = "cu",
    .kernels = 1,
    .comm_type = "ncclComm_t",
    .traces_copies = 0,
    .defines = cuda_defines,
    .reshard_decl = cuda_reshard_decl,
    .init_comms = cuda_init_comms,
    .reshard_check = cuda_reshard_check,
    .collective = cuda_collective,
    .wait = cuda_wait,
    .pipe_decl = cuda_pipe_decl,
    .pipe_init = cuda_pipe_init,
    .pipe_init_output = cuda_pipe_init_output,
    .pipe_recvs = cuda_pipe_recvs,
    .pipe_wait_recv = cuda_pipe_wait_recv,
    .pipe_send = cuda_pipe_send,
    .pipe_read_done = cuda_pipe_read_done,
    .pipe_wait_sends = cuda_pipe_wait_sends,
    .pipe_keep_output = cuda_pipe_keep_output,
    .input_block = cuda_input_block,
    .input_refresh = cuda_input_refresh,
    .output_whole = cuda_output_whole,
    .main = cuda_main,
};
