/* emit_c.c: writes rank<k>.c, a standalone C/MPI program for one rank.
 *
 * Layout of the generated file: front matter (tool, command line, model,
 * mesh, rank), the includes of the folder's runtime and kernels headers
 * (headers.c), buffer definitions (weights in the loaded weight blob,
 * inputs in their own allocations, everything else at fixed offsets in one
 * liveness-planned arena), communicators (one MPI_Comm_split per mesh-axis
 * group used), forward() with one block per instruction, and main().
 * Every collective names its tensor, its axes and the reshard that caused
 * it; every wait says what it waits for and why there.
 */
#include "codegen.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Target of the file being written: 0 C + MPI, 1 CUDA + NCCL. The two
 * share everything but the collective calls, the communicators and main(). */
static int g_cuda;

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
    case DT_I16: case DT_U16: return "ncclFloat16"; /* moved as 2-byte elements: never summed (emit_inst) */
    case DT_I8: return "ncclInt8";
    default: return "ncclUint8";
    }
}

/* CUDA: the collective's stream waits for its input on the compute
 * stream; rt_comms[comm] names it in traces. */
static void cuda_before_call(FILE *f, int r, int comm)
{
    if (g_cuda)
        fprintf(f, "    CHECK_CUDA(cudaEventRecord(ev_ready_r%d, g_stream)); /* input complete on the compute stream */\n"
                   "    CHECK_CUDA(cudaStreamWaitEvent(g_comm, ev_ready_r%d, 0));\n    rt_comm_begin(%d);\n", r, r, comm);
}

static void cuda_after_call(FILE *f, int r)
{
    if (g_cuda)
        fprintf(f, "    rt_comm_end();\n"
                   "    CHECK_CUDA(cudaEventRecord(ev_done_r%d, g_comm)); /* compute waits on this at the first reader */\n", r);
}

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

static void contiguous_strides(const int64_t *dims, int rank, int64_t *st)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= dims[i];
    }
}

/* The ordered axes a step works over (group order = block order). */
static int step_axes(const Program *pr, const ReshardStep *s, const Sharding *before, unsigned char *out)
{
    int n = 0;
    switch (s->kind) {
    case COLL_ALL_GATHER:
        for (int k = s->after.naxes[s->dim]; k < before->naxes[s->dim]; k++)
            out[n++] = before->axes[s->dim][k];
        break;
    case COLL_SLICE:
    case COLL_REDUCE_SCATTER: /* the axes it appends to its dim, in order */
        for (int k = before->naxes[s->dim]; k < s->after.naxes[s->dim]; k++)
            out[n++] = s->after.axes[s->dim][k];
        break;
    default:
        for (int a = 0; a < pr->plan->mesh.naxes; a++)
            if (s->axes & (1u << a))
                out[n++] = (unsigned char)a;
    }
    return n;
}

static void comm_name(const Program *pr, const unsigned char *axes, int n, char *buf, size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "comm");
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, cap - off, "_%s", pr->plan->mesh.axes[axes[i]].name);
}

static const Sharding *step_before(const Program *pr, int r, int j)
{
    const PlanReshard *pr_r = &pr->plan->reshards[r];
    return j ? &pr_r->r.steps[j - 1].after : &pr_r->src;
}

/* Does step j of reshard r move a padded dim (an uneven split, sharding.c)?
 * Then the reshard search made it a whole-dim move (reshard.c), and the
 * blocks are cut to their valid part on the way. */
static int step_padded(const Program *pr, int r, int j)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const Mesh *m = &pr->plan->mesh;
    return s->dim >= 0 && (sharding_dim_uneven(step_before(pr, r, j), m, rr->tensor, s->dim) ||
                           sharding_dim_uneven(&s->after, m, rr->tensor, s->dim));
}

/* Opens the loop over the p blocks of a padded dim (a dim of n elements
 * in blocks of len) that packs or unpacks them: valid[q] is block q's part
 * inside the tensor, strides those of the whole tensor, strides_blk those
 * of one block (bdims), and dims block q's valid extent. The caller writes
 * the body and closes both braces. */
static void emit_block_loop(FILE *f, const char *what, int64_t n, int64_t len, int p, int dim, int rank,
                            const int64_t *bdims, const int64_t *swhole, const int64_t *sblk)
{
    fprintf(f, "    { /* %s */\n        static const int64_t valid[] = {", what);
    for (int q = 0; q < p; q++)
        fprintf(f, "%s%lld", q ? ", " : "", (long long)sharding_block_valid(n, len, q));
    fprintf(f, "}, strides[] = ");
    emit_dims(f, swhole, rank);
    fprintf(f, ", strides_blk[] = ");
    emit_dims(f, sblk, rank);
    fprintf(f, ";\n        for (int q = 0; q < %d; q++) {\n            int64_t dims[] = ", p);
    emit_dims(f, bdims, rank);
    fprintf(f, ";\n            dims[%d] = valid[q];\n", dim);
}

static void buf_decl(const Program *pr, const Buffer *b, FILE *f)
{
    char g[128], l[128], s[128], nm[ESC_NAME_CAP];
    const Tensor *t = b->tensor;
    shape_str(b->dims, b->rank, l, sizeof l);
    if (b->kind == BUF_WEIGHT) {
        fprintf(f, "#define %s ((%s *)(g_weights + %lld)) /* %s: local %s of %s, %s */\n", b->name,
                emit_ctype(b->dtype), (long long)b->offset, CMT(t->name, nm), l,
                shape_str(t->dims, t->rank, g, sizeof g), sharding_str(&b->layout, &pr->plan->mesh, s, sizeof s));
    } else if (b->kind == BUF_INPUT) {
        fprintf(f, "static %s *%s; /* graph input %s: local %s of %s, %s */\n", emit_ctype(b->dtype), b->name,
                CMT(t->name, nm), l, shape_str(t->dims, t->rank, g, sizeof g),
                sharding_str(&b->layout, &pr->plan->mesh, s, sizeof s));
    } else if (b->kind == BUF_RECV) {
        fprintf(f, "static %s *%s; /* from stage %d: local %s of %s, %s, in its receive slot */\n",
                emit_ctype(b->dtype), b->name, pr->plan->pipe->tensor_stage[t->id], l,
                shape_str(t->dims, t->rank, g, sizeof g), sharding_str(&b->layout, &pr->plan->mesh, s, sizeof s));
    } else if (b->last >= 0) {
        fprintf(f, "#define %s ((%s *)(g_arena + %lld)) /* %lld bytes, live [%d, %d]", b->name,
                emit_ctype(b->dtype), (long long)b->offset, (long long)b->bytes, b->first, b->last);
        if (t)
            fprintf(f, ": %s local %s, %s", CMT(t->name, nm), l,
                    sharding_str(&b->layout, &pr->plan->mesh, s, sizeof s));
        fprintf(f, " */\n");
    }
}

static int64_t numel(const Buffer *b)
{
    return b->bytes / (int64_t)dtype_size(b->dtype);
}

/* rt_comms[] entry of each reshard's first step (or fused call), set where
 * it starts, read where it is waited for. */
static int *g_comm_of;

/* The mesh axes of a step, as a trace names them: "dp,tp". */
static void axes_list(const Program *pr, const unsigned char *axes, int n, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? "," : "", pr->plan->mesh.axes[axes[i]].name);
}

/* Registers step j of reshard r in rt_comms[]; `overlaps` says what the
 * schedule runs while it is in flight. A local step (a slice) is
 * registered on the C target only, where a trace names its copy by it. */
static int step_comm(const Program *pr, int r, int j, const char *overlaps)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    if (s->kind == COLL_SLICE || s->kind == COLL_PARTIALIZE) {
        if (g_cuda)
            return -1;
        char what[ESC_TEXT_CAP];
        snprintf(what, sizeof what, "%s of %s (reshard %d, local)", coll_name(s->kind), rr->tensor->label, r);
        return trace_comm(what, coll_name(s->kind), rr->tensor->label, "", "nothing: a copy on this rank", 0);
    }
    unsigned char axes[MESH_MAX_AXES];
    int na = step_axes(pr, s, step_before(pr, r, j), axes);
    char what[ESC_TEXT_CAP], al[96];
    if (rr->r.nsteps > 1)
        snprintf(what, sizeof what, "%s of %s (reshard %d, step %d of %d)", coll_name(s->kind), rr->tensor->label, r,
                 j + 1, rr->r.nsteps);
    else
        snprintf(what, sizeof what, "%s of %s (reshard %d)", coll_name(s->kind), rr->tensor->label, r);
    axes_list(pr, axes, na, al, sizeof al);
    return trace_comm(what, coll_name(s->kind), rr->tensor->label, al, overlaps, (long long)s->bytes);
}

/* Step j of reshard r is a blocking all-reduce (pr->blocking). */
static int blocking_all_reduce(const Program *pr, int r, int j)
{
    return j == 0 && pr->blocking[r];
}

/* Starts step j of reshard r (a local step runs to completion here);
 * `comm_id` is its rt_comms[] entry. */
static void emit_step_start(const Program *pr, int r, int j, int comm_id, FILE *f)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const StepBufs *sb = &pr->steps[r][j];
    const Buffer *in = &pr->bufs[sb->in], *out = &pr->bufs[sb->out];
    const Sharding *before = step_before(pr, r, j);
    unsigned char axes[MESH_MAX_AXES];
    int na = step_axes(pr, s, before, axes), p = mesh_group_size(&pr->plan->mesh, s->axes);
    char comm[96], bs[128], as[128], nm[ESC_NAME_CAP];
    comm_name(pr, axes, na, comm, sizeof comm);
    size_t es = dtype_size(in->dtype);
    int64_t sin[IR_MAX_RANK], sout[IR_MAX_RANK];
    contiguous_strides(in->dims, in->rank, sin);
    contiguous_strides(out->dims, out->rank, sout);
    fprintf(f, "    /* %s of %s over %s: %s -> %s, %lld bytes sent per rank */\n", coll_name(s->kind),
            CMT(rr->tensor->name, nm), comm + 5, sharding_str(before, &pr->plan->mesh, bs, sizeof bs),
            sharding_str(&s->after, &pr->plan->mesh, as, sizeof as), (long long)s->bytes);
    int padded = step_padded(pr, r, j);
    int64_t gn = s->dim >= 0 ? rr->tensor->dims[s->dim] : 0;
    if (!g_cuda && (s->kind == COLL_SLICE || s->kind == COLL_PARTIALIZE))
        fprintf(f, "    rt_copy(RT_EV_LOCAL, %d);\n", comm_id);
    else if (!g_cuda && sb->pack >= 0)
        fprintf(f, "    rt_copy(RT_EV_PACK, %d);\n", comm_id);
    switch (s->kind) {
    case COLL_SLICE: {
        int key = program_group_key(pr, axes, na);
        if (padded) { /* from the whole dim: the block's valid part, then zeros */
            int64_t len = out->dims[s->dim], valid = sharding_block_valid(gn, len, key), dims[IR_MAX_RANK];
            memcpy(dims, out->dims, sizeof dims);
            dims[s->dim] = valid;
            fprintf(f, "    { /* block %d of %d: %lld of its %lld along dim %d are inside the tensor */\n"
                       "        static const int64_t dims[] = ", key, p, (long long)valid, (long long)len, s->dim);
            emit_dims(f, dims, out->rank);
            fprintf(f, ", strides[] = ");
            emit_dims(f, sout, out->rank);
            fprintf(f, ", strides_in[] = ");
            emit_dims(f, sin, in->rank);
            fprintf(f, ";\n        k_strided_move(%s, strides, 0, %s, strides_in, %lld, %zu, %d, dims);\n", out->name,
                    in->name, (long long)(key * len * sin[s->dim]), es, in->rank);
            if (valid < len) {
                dims[s->dim] = len - valid;
                fprintf(f, "        static const int64_t pad[] = ");
                emit_dims(f, dims, out->rank);
                fprintf(f, ";\n        k_strided_zero(%s, %zu, %d, pad, strides, %lld); /* padding */\n", out->name, es,
                        out->rank, (long long)(valid * sout[s->dim]));
            }
            fprintf(f, "    }\n");
            break;
        }
        fprintf(f, "    {\n        static const int64_t dims[] = ");
        emit_dims(f, out->dims, out->rank);
        fprintf(f, ", strides[] = ");
        emit_dims(f, sin, in->rank);
        fprintf(f, ";\n        k_strided_copy(%s, %s, %zu, %d, dims, strides, %lld); /* block %d of %d */\n    }\n",
                out->name, in->name, es, in->rank, (long long)(key * out->dims[s->dim] * sin[s->dim]), key, p);
        break;
    }
    case COLL_PARTIALIZE: {
        int key = program_group_key(pr, axes, na);
        if (key == 0)
            fprintf(f, "    k_copy(%s, %s, %lld); /* this rank keeps the value */\n", out->name, in->name,
                    (long long)in->bytes);
        else
            fprintf(f, "    k_zero(%s, %lld); /* coordinate %d holds zeros */\n", out->name, (long long)out->bytes,
                    key);
        break;
    }
    case COLL_ALL_REDUCE:
        cuda_before_call(f, r, comm_id);
        if (g_cuda)
            fprintf(f, "    CHECK_NCCL(ncclAllReduce(%s, %s, %lld, %s, ncclSum, %s, g_comm));\n", in->name, out->name,
                    (long long)numel(in), nccl_type(in->dtype), comm);
        else if (blocking_all_reduce(pr, r, j))
            fprintf(f, "    { /* blocking: its reader comes before any other compute */\n"
                       "        double t0 = rt_block_begin();\n"
                       "        CHECK_MPI_WATCHED(MPI_Allreduce(%s, %s, %lld, %s, %s, %s), rt_comms[%d].what);\n"
                       "        rt_block_end(%d, t0);\n    }\n",
                    in->name, out->name, (long long)numel(in), mpi_type(in->dtype), mpi_sum(in->dtype), comm,
                    comm_id, comm_id);
        else
            fprintf(f, "    CHECK_MPI(MPI_Iallreduce(%s, %s, %lld, %s, %s, %s, &req_r%d));\n", in->name, out->name,
                    (long long)numel(in), mpi_type(in->dtype), mpi_sum(in->dtype), comm, r);
        cuda_after_call(f, r);
        break;
    case COLL_ALL_GATHER:
        cuda_before_call(f, r, comm_id);
        if (g_cuda)
            fprintf(f, "    CHECK_NCCL(ncclAllGather(%s, %s, %lld, %s, %s, g_comm));\n", in->name,
                    sb->unpack >= 0 ? pr->bufs[sb->unpack].name : out->name, (long long)numel(in),
                    nccl_type(in->dtype), comm);
        else
            fprintf(f, "    CHECK_MPI(MPI_Iallgather(%s, %lld, %s, %s, %lld, %s, %s, &req_r%d));\n", in->name,
                    (long long)numel(in), mpi_type(in->dtype), sb->unpack >= 0 ? pr->bufs[sb->unpack].name : out->name,
                    (long long)numel(in), mpi_type(in->dtype), comm, r);
        cuda_after_call(f, r);
        break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL: {
        int dim = s->kind == COLL_ALL_TO_ALL ? s->dim_to : s->dim;
        int64_t bdims[IR_MAX_RANK];
        memcpy(bdims, in->dims, sizeof bdims);
        bdims[dim] /= p;
        int64_t blk = numel(in) / p;
        const char *send = in->name;
        if (padded) { /* reduce-scatter from the whole dim: p zero-padded blocks */
            int64_t len = out->dims[dim], sblk[IR_MAX_RANK];
            blk = numel(out);
            send = pr->bufs[sb->pack].name;
            contiguous_strides(out->dims, out->rank, sblk);
            char what[128];
            snprintf(what, sizeof what, "pack: block q of dim %d (valid[q] of its %lld, then zeros) goes to group rank q",
                     dim, (long long)len);
            emit_block_loop(f, what, gn, len, p, dim, in->rank, out->dims, sin, sblk);
            fprintf(f, "            if (valid[q] < %lld)\n                k_zero(%s + q * %lld, %lld);\n"
                       "            k_strided_move(%s + q * %lld, strides_blk, 0, %s, strides, q * %lld, %zu, %d, dims);\n"
                       "        }\n    }\n",
                    (long long)len, send, (long long)blk, (long long)(blk * (int64_t)es), send, (long long)blk,
                    in->name, (long long)(len * sin[dim]), es, in->rank);
        } else if (sb->pack >= 0) {
            send = pr->bufs[sb->pack].name;
            fprintf(f, "    { /* pack: block q of dim %d goes to group rank q */\n"
                       "        static const int64_t dims[] = ", dim);
            emit_dims(f, bdims, in->rank);
            fprintf(f, ", strides[] = ");
            emit_dims(f, sin, in->rank);
            fprintf(f, ";\n        for (int q = 0; q < %d; q++)\n"
                       "            k_strided_copy(%s + q * %lld, %s, %zu, %d, dims, strides, q * %lld);\n    }\n",
                    p, send, (long long)blk, in->name, es, in->rank, (long long)(bdims[dim] * sin[dim]));
        }
        cuda_before_call(f, r, comm_id);
        if (g_cuda && s->kind == COLL_ALL_TO_ALL)
            fprintf(f, "    CHECK_NCCL(ncclGroupStart()); /* all-to-all: a send and a receive per peer */\n"
                       "    for (int q = 0; q < %d; q++) {\n"
                       "        CHECK_NCCL(ncclSend(%s + q * %lld, %lld, %s, q, %s, g_comm));\n"
                       "        CHECK_NCCL(ncclRecv(%s + q * %lld, %lld, %s, q, %s, g_comm));\n    }\n"
                       "    CHECK_NCCL(ncclGroupEnd());\n",
                    p, send, (long long)blk, (long long)blk, nccl_type(in->dtype), comm, pr->bufs[sb->unpack].name,
                    (long long)blk, (long long)blk, nccl_type(in->dtype), comm);
        else if (g_cuda)
            fprintf(f, "    CHECK_NCCL(ncclReduceScatter(%s, %s, %lld, %s, ncclSum, %s, g_comm));\n", send, out->name,
                    (long long)blk, nccl_type(in->dtype), comm);
        else if (s->kind == COLL_ALL_TO_ALL)
            fprintf(f, "    CHECK_MPI(MPI_Ialltoall(%s, %lld, %s, %s, %lld, %s, %s, &req_r%d));\n", send,
                    (long long)blk, mpi_type(in->dtype), pr->bufs[sb->unpack].name, (long long)blk,
                    mpi_type(in->dtype), comm, r);
        else
            fprintf(f, "    CHECK_MPI(MPI_Ireduce_scatter_block(%s, %s, %lld, %s, %s, %s, &req_r%d));\n", send,
                    out->name, (long long)blk, mpi_type(in->dtype), mpi_sum(in->dtype), comm, r);
        cuda_after_call(f, r);
        break;
    }
    default:
        break;
    }
    if (!g_cuda && s->kind != COLL_SLICE && s->kind != COLL_PARTIALIZE && !blocking_all_reduce(pr, r, j))
        fprintf(f, "    rt_started(%d, &req_r%d);\n", comm_id, r);
}

/* Completes step j of reshard r (wait and unpack); local steps are no-ops. */
static void emit_step_finish(const Program *pr, int r, int j, int comm_id, FILE *f)
{
    const ReshardStep *s = &pr->plan->reshards[r].r.steps[j];
    const StepBufs *sb = &pr->steps[r][j];
    if (s->kind == COLL_SLICE || s->kind == COLL_PARTIALIZE)
        return;
    const Buffer *in = &pr->bufs[sb->in], *out = &pr->bufs[sb->out];
    if (g_cuda)
        fprintf(f, "    rt_cuda_wait(ev_done_r%d, %d);\n", r, comm_id);
    else if (blocking_all_reduce(pr, r, j))
        fprintf(f, "    /* (completed in its blocking call above) */\n");
    else
        fprintf(f, "    rt_wait(&req_r%d, %d);\n", r, comm_id);
    if (sb->unpack < 0)
        return;
    if (!g_cuda)
        fprintf(f, "    rt_copy(RT_EV_UNPACK, %d);\n", comm_id);
    int p = mesh_group_size(&pr->plan->mesh, s->axes);
    size_t es = dtype_size(in->dtype);
    int64_t sout[IR_MAX_RANK], bdims[IR_MAX_RANK];
    contiguous_strides(out->dims, out->rank, sout);
    if (s->kind == COLL_ALL_GATHER && step_padded(pr, r, j)) {
        int64_t len = in->dims[s->dim], sin[IR_MAX_RANK];
        contiguous_strides(in->dims, in->rank, sin);
        char what[128];
        snprintf(what, sizeof what, "unpack: the block from group rank q lands at q * %lld of dim %d, its padding dropped",
                 (long long)len, s->dim);
        emit_block_loop(f, what, pr->plan->reshards[r].tensor->dims[s->dim], len, p, s->dim, in->rank, in->dims, sout,
                        sin);
        fprintf(f, "            k_strided_move(%s, strides, q * %lld, %s + q * %lld, strides_blk, 0, %zu, %d, dims);\n"
                   "        }\n    }\n",
                out->name, (long long)(len * sout[s->dim]), pr->bufs[sb->unpack].name, (long long)numel(in), es,
                in->rank);
        return;
    }
    memcpy(bdims, in->dims, sizeof bdims);
    if (s->kind == COLL_ALL_TO_ALL)
        bdims[s->dim_to] /= p;
    int64_t blk = numel(in) / p * (s->kind == COLL_ALL_GATHER ? p : 1);
    if (s->kind == COLL_ALL_GATHER)
        blk = numel(in);
    fprintf(f, "    { /* unpack: the block from group rank q lands at position q of dim %d */\n"
               "        static const int64_t dims[] = ", s->dim);
    emit_dims(f, bdims, in->rank);
    fprintf(f, ", strides[] = ");
    emit_dims(f, sout, out->rank);
    fprintf(f, ";\n        for (int q = 0; q < %d; q++)\n"
               "            k_strided_store(%s, %s + q * %lld, %zu, %d, dims, strides, q * %lld);\n    }\n",
            p, out->name, pr->bufs[sb->unpack].name, (long long)blk, es, in->rank,
            (long long)(in->dims[s->dim] * sout[s->dim]));
}

/* A fused all-reduce: members packed into one buffer, one call, unpacked
 * at the wait. */
/* Members of each fused call in reshard order: g_fused_next[m] is the next
 * member after m (-1 at the end), built once per file so a program with
 * many fused calls stays linear. */
static int *g_fused_next;

static void fused_index(const Program *pr)
{
    int n = pr->plan->nreshards;
    g_fused_next = malloc((size_t)(n + 1) * sizeof(int));
    int *last = malloc((size_t)(n + 1) * sizeof(int));
    if (!g_fused_next || !last)
        abort();
    for (int m = 0; m < n; m++)
        g_fused_next[m] = last[m] = -1;
    for (int m = 0; m < n; m++) {
        int l = pr->fused_leader[m];
        if (l < 0 || l == m)
            continue;
        g_fused_next[last[l] >= 0 ? last[l] : l] = m;
        last[l] = m;
    }
    free(last);
}

static void emit_fused(const Program *pr, int leader, int start, int at, FILE *f)
{
    const Plan *p = pr->plan;
    const Buffer *send = &pr->bufs[pr->fused_send[leader]], *recv = &pr->bufs[pr->fused_recv[leader]];
    unsigned char axes[MESH_MAX_AXES];
    const ReshardStep *s0 = &p->reshards[leader].r.steps[0];
    int na = step_axes(pr, s0, &p->reshards[leader].src, axes);
    char comm[96], nm[ESC_NAME_CAP];
    comm_name(pr, axes, na, comm, sizeof comm);
    if (start) {
        char what[ESC_TEXT_CAP], tensors[ESC_TEXT_CAP], al[96], overlaps[ESC_TEXT_CAP];
        size_t n = 0;
        int64_t bytes = 0;
        tensors[0] = 0;
        for (int m = leader; m >= 0 && n < sizeof tensors; m = g_fused_next[m]) {
            n += (size_t)snprintf(tensors + n, sizeof tensors - n, "%s%s", n ? ", " : "", p->reshards[m].tensor->label);
            bytes += p->reshards[m].r.steps[0].bytes;
        }
        snprintf(what, sizeof what, "fused all-reduce (reshard %d)", leader);
        axes_list(pr, axes, na, al, sizeof al);
        trace_overlaps(pr, at, overlaps, sizeof overlaps);
        g_comm_of[leader] = trace_comm(what, "all-reduce", tensors, al, overlaps, (long long)bytes);
        fprintf(f, "\n    /* start fused all-reduce over %s of", comm + 5);
        for (int m = leader; m >= 0; m = g_fused_next[m])
            fprintf(f, " %s", CMT(p->reshards[m].tensor->name, nm));
        fprintf(f, ": small all-reduces ready together, one call over a packed buffer (--fuse-bytes) */\n");
    } else {
        fprintf(f, "\n    /* wait for the fused all-reduce of reshard %d here: its first member's reader is next */\n",
                leader);
        if (g_cuda)
            fprintf(f, "    rt_cuda_wait(ev_done_r%d, %d);\n", leader, g_comm_of[leader]);
        else
            fprintf(f, "    rt_wait(&req_r%d, %d);\n", leader, g_comm_of[leader]);
    }
    if (!g_cuda)
        fprintf(f, "    rt_copy(%s, %d);\n", start ? "RT_EV_PACK" : "RT_EV_UNPACK", g_comm_of[leader]);
    int64_t off = 0;
    for (int m = leader; m >= 0; m = g_fused_next[m]) {
        const Buffer *in = &pr->bufs[pr->steps[m][0].in], *out = &pr->bufs[pr->steps[m][0].out];
        if (start)
            fprintf(f, "    k_copy((char *)%s + %lld, %s, %lld);\n", send->name, (long long)off, in->name,
                    (long long)in->bytes);
        else
            fprintf(f, "    k_copy(%s, (char *)%s + %lld, %lld);\n", out->name, recv->name, (long long)off,
                    (long long)out->bytes);
        off += in->bytes;
    }
    if (start && g_cuda) {
        cuda_before_call(f, leader, g_comm_of[leader]);
        fprintf(f, "    CHECK_NCCL(ncclAllReduce(%s, %s, %lld, %s, ncclSum, %s, g_comm));\n", send->name, recv->name,
                (long long)(off / (int64_t)dtype_size(send->dtype)), nccl_type(send->dtype), comm);
        cuda_after_call(f, leader);
    } else if (start) {
        fprintf(f, "    CHECK_MPI(MPI_Iallreduce(%s, %s, %lld, %s, %s, %s, &req_r%d));\n", send->name, recv->name,
                (long long)(off / (int64_t)dtype_size(send->dtype)), mpi_type(send->dtype), mpi_sum(send->dtype), comm, leader);
        fprintf(f, "    rt_started(%d, &req_r%d);\n", g_comm_of[leader], leader);
    }
}

void emit_c_inst(const Program *pr, int i, FILE *f, Diag *d, int *rc)
{
    const Inst *in = &pr->insts[i];
    if (in->kind == INST_COMPUTE) {
        if (emit_c_node(pr, in->node, f, d))
            *rc = -1;
        return;
    }
    if (in->reshard < 0) {
        int m = -1 - in->reshard;
        char nm[ESC_NAME_CAP];
        fprintf(f, "\n    /* reshard %d of %s: %s in the fused call of reshard %d */\n", m,
                CMT(pr->plan->reshards[m].tensor->name, nm), in->kind == INST_START ? "started" : "completed",
                pr->fused_leader[m]);
        return;
    }
    const PlanReshard *rr = &pr->plan->reshards[in->reshard];
    int r = in->reshard;
    for (int j = 0; g_cuda && in->kind == INST_START && j < rr->r.nsteps; j++) {
        CollKind k = rr->r.steps[j].kind;
        DType dt = rr->tensor->dtype;
        if ((k == COLL_ALL_REDUCE || k == COLL_REDUCE_SCATTER) && (dt == DT_I16 || dt == DT_U16)) {
            diag_add(d, "tensor \"%s\": a partial sum stored as %s cannot be reduced by NCCL (no 16-bit integer "
                        "type); shard it so it is not partial, or use --target c", rr->tensor->label, dtype_name(dt));
            *rc = -1;
            return;
        }
    }
    if (pr->fused_leader[r] == r) {
        emit_fused(pr, r, in->kind == INST_START, i, f);
        return;
    }
    char nm[ESC_NAME_CAP], why[ESC_TEXT_CAP], who[ESC_NAME_CAP];
    if (in->kind == INST_START) {
        fprintf(f, "\n    /* start reshard %d of %s: %s */\n", r, CMT(rr->tensor->name, nm), CMT(rr->reason, why));
        emit_rt_node(f, in->node ? in->node->label : "(start)");
        char overlaps[ESC_TEXT_CAP];
        trace_overlaps(pr, i, overlaps, sizeof overlaps);
        g_comm_of[r] = step_comm(pr, r, 0, overlaps);
        emit_step_start(pr, r, 0, g_comm_of[r], f);
        return;
    }
    fprintf(f, "\n    /* wait for reshard %d of %s here: %s is its first reader */\n", r, CMT(rr->tensor->name, nm),
            in->node ? CMT(in->node->name, who) : "the graph output");
    emit_rt_node(f, in->node ? in->node->label : "(outputs)");
    emit_step_finish(pr, r, 0, g_comm_of[r], f);
    for (int j = 1; j < rr->r.nsteps; j++) {
        int c = step_comm(pr, r, j, "nothing: a later step, run at the wait of the first");
        emit_step_start(pr, r, j, c, f);
        emit_step_finish(pr, r, j, c, f);
    }
}

void emit_model_names(const Program *pr, FILE *f)
{
    const Graph *g = pr->g;
    fprintf(f, "/* The model's input and output names, exactly, for --in and --out. */\n"
               "static const char *const model_inputs[] = {");
    for (int i = 0; i < g->ninputs; i++) {
        esc_c_string(f, g->inputs[i]->name);
        fputs(", ", f);
    }
    fprintf(f, "NULL};\nstatic const char *const model_outputs[] = {");
    for (int i = 0; i < g->noutputs; i++) {
        esc_c_string(f, g->outputs[i]->name);
        fputs(", ", f);
    }
    fprintf(f, "NULL};\n\n");
}

void emit_output_write(const Program *pr, int i, const char *data, FILE *f)
{
    const Tensor *t = pr->g->outputs[i];
    const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
    const Mesh *m = &pr->plan->mesh;
    fprintf(f, "            static const int64_t dims[] = ");
    emit_dims(f, t->dims, t->rank);
    fprintf(f, ";\n");
    if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
        fprintf(f, "            if (RANK == 0) /* every rank holds the whole output */\n"
                   "                rt_write_npy(args.out_path[i], %d, %d, dims, %s);\n",
                (int)t->dtype, t->rank, data);
        return;
    }
    /* Split: per rank, its block index along each dim (mixed radix over
     * the dim's axes, major first) and whether it sends (coordinate 0 on
     * every axis the layout does not use). */
    char sb[128];
    unsigned used = sharding_used_axes(&b->layout);
    fprintf(f, "            /* it stays %s over the mesh: rank 0 gathers one copy of each block */\n"
               "            static const int64_t blocks[] = ",
            sharding_str(&b->layout, m, sb, sizeof sb));
    emit_dims(f, b->dims, t->rank);
    fprintf(f, ";\n            static const int64_t index[] = {");
    for (int r = 0; r < m->nranks; r++) {
        for (int d = 0; d < t->rank; d++)
            fprintf(f, "%s%d", r || d ? ", " : "", mesh_block_index(m, r, b->layout.axes[d], b->layout.naxes[d]));
    }
    fprintf(f, "};\n            static const unsigned char sender[] = {");
    for (int r = 0; r < m->nranks; r++) {
        int sends = 1;
        for (int a = 0; a < m->naxes; a++)
            if (!(used & (1u << a)) && mesh_coord(m, r, a) != 0)
                sends = 0;
        fprintf(f, "%s%d", r ? ", " : "", sends);
    }
    fprintf(f, "};\n            void *whole = rt_gather_output(%s, 1, %d, dims, blocks, index, sender, %zu, ", b->name,
            t->rank, dtype_size(t->dtype));
    esc_c_string(f, t->label);
    fprintf(f, ", 0);\n            if (RANK == 0)\n"
               "                rt_write_npy(args.out_path[i], %d, %d, dims, whole);\n            free(whole);\n",
            (int)t->dtype, t->rank);
}

/* rt_trace_init(): the tables, and this rank's place for the trace's
 * process names ("dp=0 tp=1", with its stage in a pipeline). */
void emit_trace_init(const Program *pr, FILE *f)
{
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

void emit_rt_node(FILE *f, const char *label)
{
    fputs("    rt_node = ", f);
    esc_c_string(f, label);
    fputs(";\n", f);
}

/* main()'s input handling: refuse unknown --in names, then read each
 * graph input, check its dtype and shape, and keep this rank's block (on
 * the CUDA target, uploaded to the device). A pipeline's stage 0 keeps its
 * block of every microbatch (mb_<buffer>[mb]); later stages read none. */
void emit_inputs(const Program *pr, FILE *f, int cuda)
{
    const Pipeline *pp = pr->plan->pipe;
    const Graph *g = pr->g;
    const Mesh *m = &pr->plan->mesh;
    char buf[256], nm[ESC_NAME_CAP], dst[ESC_NAME_CAP + 16];
    if (pp && pr->stage != 0)
        return;
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
                idx[k] = program_group_key(pr, b->layout.axes[k], b->layout.naxes[k]);
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
                   "        if (!path)\n            rt_die(\"missing --in %%s=FILE (%s %s)\", label);\n"
                   "        RtTensor t;\n        rt_read_tensor(path, &t);\n"
                   "        rt_check_input(label, path, &t, %d, %d, gdims);\n",
                dtype_name(t->dtype), shape_str(t->dims, t->rank, buf, sizeof buf), (int)t->dtype, t->rank);
        if (pp)
            fprintf(f, "        for (int mb = 0; mb < MICROBATCHES; mb++) {\n");
        fprintf(f, "%s        void *block = rt_alloc(%lld);\n"
                   "%s        rt_take_block(block, t.data, %d, gdims, blocks, index%s, %zu);\n",
                in, (long long)b->bytes, in, t->rank, pp ? "[mb]" : "", dtype_size(t->dtype));
        snprintf(dst, sizeof dst, pp ? "mb_%s[mb]" : "%s", b->name);
        if (cuda)
            fprintf(f, "%s        CHECK_CUDA(cudaMalloc((void **)&%s, %lld));\n"
                       "%s        CHECK_CUDA(cudaMemcpy(%s, block, %lld, cudaMemcpyHostToDevice));\n%s        free(block);\n",
                    in, dst, (long long)(b->bytes ? b->bytes : 1), in, dst, (long long)b->bytes, in);
        else
            fprintf(f, "%s        %s = (%s *)block;\n", in, dst, emit_ctype(b->dtype));
        fprintf(f, "%s    }\n", pp ? "        }\n" : "");
    }
}

int emit_c(const Program *pr, const EmitOptions *opt, FILE *f, Diag *d)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    const Mesh *m = &p->mesh;
    char buf[256];
    int rc = 0;
    g_cuda = opt->cuda;
    mesh_str(m, buf, sizeof buf);
    fprintf(f, "/* rank%d.%s: generated by onnx2spmd %s; do not edit.\n", pr->rank, g_cuda ? "cu" : "c",
            ONNX2SPMD_VERSION);
    char cmd[ESC_TEXT_CAP], model[ESC_TEXT_CAP];
    if (p->pipe) {
        char wb[256];
        mesh_str(&p->pipe->world, wb, sizeof wb);
        fprintf(f, " * command: %s\n * model:   %s\n * mesh:    %s (%d ranks): pipeline stage %d of %d over %s; "
                   "each stage's plan on %s, this rank at",
                CMT(opt->command_line, cmd), CMT(opt->model, model), wb, p->pipe->world.nranks, pr->stage,
                p->pipe->nstages, p->pipe->world.axes[p->pipe->axis].name, buf);
    } else {
        fprintf(f, " * command: %s\n * model:   %s\n * mesh:    %s (%d ranks); this is rank %d at",
                CMT(opt->command_line, cmd), CMT(opt->model, model), buf, m->nranks, pr->rank);
    }
    for (int a = 0; a < m->naxes; a++)
        if (!m->axes[a].loop)
            fprintf(f, " %s=%d", m->axes[a].name, pr->coords[a]);
    fprintf(f, "\n * memory:  arena %lld bytes (liveness-planned), weights %lld bytes, %s %lld bytes\n",
            (long long)pr->arena_bytes, (long long)pr->weight_bytes,
            p->pipe ? "inputs, send/receive slots and outputs of every microbatch" : "inputs", (long long)pr->input_bytes);
    if (pr->npacks)
        fprintf(f, " *          and up to %lld bytes of GEMM weights packed at start-up\n", (long long)pr->packed_bytes);
    fprintf(f, " */\n");
    fprintf(f, "#define RANK %d\n#define WORLD %d\n", pr->rank, plan_world_ranks(p));
    if (g_cuda)
        fprintf(f, "#define O2S_CUDA 1\n#define O2S_TF32 %d /* 1: cuBLAS may use TF32 tensor cores (--tf32) */\n",
                opt->tf32);
    /* The runtime and the kernels stand once in the folder (headers.c). */
    fprintf(f, "\n#include \"%s\"\n#include \"%s\"\n", HEADER_RUNTIME, g_cuda ? HEADER_KERNELS_CUDA : HEADER_KERNELS_C);
    fprintf(f, "\n/* ---- buffers ---- */\n\nstatic unsigned char *g_arena, *g_weights;\n");
    for (int i = 0; i < pr->nbufs; i++)
        buf_decl(pr, &pr->bufs[i], f);
    if (pr->npacks)
        fprintf(f, "\n/* GEMM weights, packed by pack_weights() at start-up into the column panels\n"
                   " * k_matmul_packed_f32 reads (NULL where that kernel is not built). */\n");
    for (int q = 0; q < pr->npacks; q++) {
        const struct PackedWeight *pw = &pr->packs[q];
        const char *w = pr->bufs[pw->buf].name;
        fprintf(f, "static float *P%s; /* %s as B, %lld x %lld%s */\n", w + 1, w, (long long)pw->k, (long long)pw->n,
                pw->trans ? ", stored transposed" : "");
    }

    /* Communicators: one per ordered axis group any step uses. */
    char names[64][256];
    int nnames = 0;
    fprintf(f, "\n/* ---- communicators and requests ---- */\n\n");
    for (int r = 0; r < p->nreshards; r++)
        for (int j = 0; pr->here[r] && j < p->reshards[r].r.nsteps; j++) {
            const ReshardStep *s = &p->reshards[r].r.steps[j];
            if (s->kind == COLL_SLICE || s->kind == COLL_PARTIALIZE)
                continue;
            unsigned char axes[MESH_MAX_AXES];
            int na = step_axes(pr, s, step_before(pr, r, j), axes);
            comm_name(pr, axes, na, buf, sizeof buf);
            int seen = 0;
            for (int k = 0; k < nnames; k++)
                seen |= strcmp(names[k], buf) == 0;
            if (!seen && nnames < 64) {
                snprintf(names[nnames++], sizeof names[0], "%s", buf);
                fprintf(f, "static %s %s; /* ranks that differ only in %s; this rank is %d of %d */\n",
                        g_cuda ? "ncclComm_t" : "MPI_Comm", buf, buf + 5, program_group_key(pr, axes, na),
                        mesh_group_size(m, s->axes));
            }
        }
    for (int r = 0; r < p->nreshards; r++) {
        int comm_steps = 0;
        for (int j = 0; pr->here[r] && j < p->reshards[r].r.nsteps; j++)
            comm_steps += p->reshards[r].r.steps[j].kind != COLL_SLICE && p->reshards[r].r.steps[j].kind != COLL_PARTIALIZE;
        if (comm_steps && (pr->fused_leader[r] < 0 || pr->fused_leader[r] == r) &&
            !(pr->here[r] && blocking_all_reduce(pr, r, 0))) { /* (a blocking call needs no request) */
            char nm[ESC_NAME_CAP];
            if (g_cuda)
                fprintf(f, "static cudaEvent_t ev_ready_r%d, ev_done_r%d; /* reshard %d: %s */\n", r, r, r,
                        CMT(p->reshards[r].tensor->name, nm));
            else
                fprintf(f, "static MPI_Request req_r%d = MPI_REQUEST_NULL; /* reshard %d: %s */\n", r, r,
                        CMT(p->reshards[r].tensor->name, nm));
        }
    }
    fprintf(f, "\nstatic void init_comms(void)\n{\n");
    if (g_cuda) {
        /* ncclUniqueId from rank 0 over MPI; one world communicator, split
         * per group; events for every collective. */
        if (plan_world_ranks(p) > 1)
            fprintf(f, "    ncclUniqueId id;\n    ncclComm_t world;\n    if (RANK == 0)\n        CHECK_NCCL(ncclGetUniqueId(&id));\n"
                       "    rt_share_nccl_id(&id); /* over MPI, or the bootstrap file without it */\n"
                       "    rt_watch(\"NCCL communicator set-up\"); /* blocking calls: under the --timeout alarm */\n"
                       "    CHECK_NCCL(ncclCommInitRank(&world, WORLD, id, RANK));\n    g_nccl[g_nnccl++] = world;\n");
        for (int r = 0; r < p->nreshards; r++) {
            int comm_steps = 0;
            for (int j = 0; pr->here[r] && j < p->reshards[r].r.nsteps; j++)
                comm_steps += p->reshards[r].r.steps[j].kind != COLL_SLICE && p->reshards[r].r.steps[j].kind != COLL_PARTIALIZE;
            if (comm_steps && (pr->fused_leader[r] < 0 || pr->fused_leader[r] == r))
                fprintf(f, "    CHECK_CUDA(cudaEventCreateWithFlags(&ev_ready_r%d, cudaEventDisableTiming));\n"
                           "    CHECK_CUDA(cudaEventCreateWithFlags(&ev_done_r%d, cudaEventDisableTiming));\n", r, r);
        }
    }
    /* A pipeline: every rank splits the world by stage once; the stage's
     * groups are split from its own communicator, so stages may differ
     * in the groups they use. */
    const char *parent = g_cuda ? "world" : "MPI_COMM_WORLD";
    if (p->pipe && plan_world_ranks(p) > 1) {
        int sub = pipeline_sub_rank(p->pipe, pr->rank);
        if (g_cuda)
            fprintf(f, "    ncclComm_t stage; /* the ranks of pipeline stage %d */\n"
                       "    CHECK_NCCL(ncclCommSplit(world, %d, %d, &stage, NULL));\n    g_nccl[g_nnccl++] = stage;\n",
                    pr->stage, pr->stage, sub);
        else
            fprintf(f, "    MPI_Comm stage = rt_comm_split(%d, %d); /* the ranks of pipeline stage %d */\n"
                       "    (void)stage; /* (every rank splits: MPI_Comm_split is collective) */\n", pr->stage, sub,
                    pr->stage);
        parent = "stage";
    }
    for (int k = 0; k < nnames; k++) {
        /* Recover the ordered axes from the name. */
        unsigned char axes[MESH_MAX_AXES];
        int na = 0;
        unsigned mask = 0;
        char copy[96];
        snprintf(copy, sizeof copy, "%s", names[k] + 5);
        for (char *save = NULL, *tok = strtok_r(copy, "_", &save); tok; tok = strtok_r(NULL, "_", &save)) {
            int a = mesh_axis_find(m, tok);
            if (a >= 0 && na < MESH_MAX_AXES) {
                axes[na++] = (unsigned char)a;
                mask |= 1u << a;
            }
        }
        if (g_cuda)
            fprintf(f, "    CHECK_NCCL(ncclCommSplit(%s, %d, %d, &%s, NULL));\n    g_nccl[g_nnccl++] = %s;\n", parent,
                    program_group_color(pr, mask), program_group_key(pr, axes, na), names[k], names[k]);
        else
            fprintf(f, "    %s = rt_comm_split_from(%s, %d, %d);\n", names[k], parent, program_group_color(pr, mask),
                    program_group_key(pr, axes, na));
    }
    if (g_cuda && plan_world_ranks(p) > 1)
        fprintf(f, "    rt_unwatch();\n");
    if (!nnames && !p->pipe && (!g_cuda || m->nranks == 1))
        fprintf(f, "    /* this plan needs no collectives */\n");
    fprintf(f, "}\n");

    /* forward() goes to memory first: the trace tables it fills come before it. */
    fused_index(pr);
    g_comm_of = malloc(sizeof(int) * ((size_t)p->nreshards + 1));
    char *fw_text = NULL;
    size_t fw_len = 0;
    FILE *fw = open_memstream(&fw_text, &fw_len);
    if (!g_comm_of || !fw)
        abort();
    for (int r = 0; r <= p->nreshards; r++)
        g_comm_of[r] = -1; /* set at each start */
    trace_tables_begin();
    if (p->pipe) {
        emit_pipe_decls(pr, f, g_cuda);
        if (emit_pipe_forward(pr, fw, g_cuda, d, &rc))
            rc = -1;
    } else {
        fprintf(fw, "\n/* ---- one forward pass ---- */\n\nstatic void forward(void)\n{\n    rt_step_begin();\n");
        for (int i = 0; i < pr->ninsts; i++)
            emit_c_inst(pr, i, fw, d, &rc);
        fprintf(fw, "    rt_step_end();\n}\n");
    }
    fclose(fw);
    trace_tables_write(f);
    fwrite(fw_text, 1, fw_len, f);
    free(fw_text);
    free(g_fused_next);
    g_fused_next = NULL;
    free(g_comm_of);
    g_comm_of = NULL;

    /* main: flags, weights, inputs, runs, outputs. */
    uint64_t sum = 0;
    int64_t wbytes = 0;
    unsigned char *blob = weights_pack(pr, &wbytes, &sum, d);
    free(blob);
    if (g_cuda) {
        emit_cuda_main(pr, wbytes, sum, f);
        return rc;
    }
    fprintf(f, "\n/* ---- main ---- */\n\n#define WEIGHT_BYTES %lldULL\n#define WEIGHT_CHECKSUM 0x%016llxULL\n\n",
            (long long)wbytes, (unsigned long long)sum);
    emit_model_names(pr, f);
    if (pr->npacks) {
        fprintf(f, "static void pack_weights(void)\n{\n");
        for (int q = 0; q < pr->npacks; q++) {
            const struct PackedWeight *pw = &pr->packs[q];
            const char *w = pr->bufs[pw->buf].name;
            fprintf(f, "    P%s = k_pack_b_f32(%s, %lld, %lld, %d);\n", w + 1, w, (long long)pw->k, (long long)pw->n,
                    pw->trans);
        }
        fprintf(f, "}\n\n");
    }
    fprintf(f, "int main(int argc, char **argv)\n{\n    RtArgs args;\n"
               "    rt_parse_args(argc, argv, &args, model_inputs, model_outputs); /* before any MPI work */\n"
               "    rt_init_mpi(&argc, &argv);\n"
               "    openblas_set_num_threads(1);\n"
               "    init_comms();\n"
               "    g_weights = rt_load_weights(argv[0], \"weights.rank%d.bin\", WEIGHT_BYTES, WEIGHT_CHECKSUM);\n"
               "    g_arena = rt_alloc(%lld);\n",
            pr->rank, (long long)pr->arena_bytes);
    if (pr->npacks)
        fprintf(f, "    pack_weights();\n");
    if (p->pipe)
        fprintf(f, "    pipe_init();\n");
    emit_inputs(pr, f, 0);
    emit_trace_init(pr, f);
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
               "    } else {\n        forward();\n    }\n"
               "    rt_trace_write();\n");
    if (p->pipe) {
        emit_pipe_outputs(pr, f);
    } else {
        fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
        for (int i = 0; i < g->noutputs; i++) {
            const Tensor *t = g->outputs[i];
            const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
            fprintf(f, "        if (strcmp(args.out_name[i], ");
            esc_c_string(f, t->name);
            fprintf(f, ") == 0) {\n");
            emit_output_write(pr, i, b->name, f);
            fprintf(f, "            continue;\n        }\n");
        }
        fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
    }
    fprintf(f, "    CHECK_MPI_WATCHED(MPI_Finalize(), \"MPI_Finalize (the other ranks to finish)\");\n    return 0;\n}\n");
    return rc;
}
