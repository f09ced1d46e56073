/* program.c: a Program's records and buffers, and the helpers every pass
 * of the lowering shares (lower.c lists the passes).
 *
 * A Program is the list of buffers this rank holds (local shapes from the
 * plan's layouts), one record per node and per reshard of what this rank
 * decided for it (codegen.h ProgramNode, ProgramReshard), an instruction
 * list (schedule.c) and an arena layout (memplan.c). program_new makes the
 * buffers: weights, inputs, node outputs, each reshard step's send and
 * receive buffers, compute-type copies of narrow types, Conv's scratch.
 * Buffer names are C identifiers made from the ONNX names, unique through
 * a hash set, so that making them stays linear.
 */
#include "codegen.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Buffer names in an open-addressing hash set (index + 1, 0 empty), so
 * making them unique stays linear in the number of buffers. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int name_taken(const Program *pr, const char *name)
{
    if (!pr->name_cap)
        return 0;
    for (size_t i = name_hash(name) & (size_t)(pr->name_cap - 1);; i = (i + 1) & (size_t)(pr->name_cap - 1)) {
        int b = pr->name_set[i];
        if (!b)
            return 0;
        if (strcmp(pr->bufs[b - 1].name, name) == 0)
            return 1;
    }
}

static void name_insert(Program *pr, int b)
{
    if (2 * (pr->nbufs + 1) > pr->name_cap) {
        int cap = pr->name_cap ? 2 * pr->name_cap : 256;
        free(pr->name_set);
        pr->name_set = calloc((size_t)cap, sizeof(int));
        if (!pr->name_set)
            abort();
        pr->name_cap = cap;
        for (int i = 0; i < pr->nbufs; i++)
            if (i != b)
                name_insert(pr, i);
    }
    size_t i = name_hash(pr->bufs[b].name) & (size_t)(pr->name_cap - 1);
    while (pr->name_set[i])
        i = (i + 1) & (size_t)(pr->name_cap - 1);
    pr->name_set[i] = b + 1;
}

int program_buf_new(Program *pr, const char *base, const Tensor *t, BufKind kind, DType dt, int rank,
                   const int64_t *dims, const Sharding *layout)
{
    /* Growing arrays are realloc'd (program_free frees them), not left
     * behind in the arena at every doubling; so no Buffer pointer
     * survives a buf_new, and dims may point into pr->bufs: copied. */
    int64_t d[IR_MAX_RANK];
    memcpy(d, dims, (size_t)rank * sizeof(int64_t));
    dims = d;
    if (pr->nbufs == pr->bufs_cap) {
        pr->bufs_cap = pr->bufs_cap ? 2 * pr->bufs_cap : 64;
        pr->bufs = realloc(pr->bufs, (size_t)pr->bufs_cap * sizeof(Buffer));
        if (!pr->bufs)
            abort();
    }
    Buffer *b = &pr->bufs[pr->nbufs];
    memset(b, 0, sizeof(*b));
    b->alias_of = -1;
    /* A C identifier generated from the ONNX name: a kind prefix, then the
     * name's ASCII letters and digits with everything else as '_', cut to
     * fit, then a counter if an earlier buffer already has it. Nothing of
     * the model's bytes but [A-Za-z0-9] reaches it. */
    char id[100];
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)base; *s && k < sizeof id - 1; s++)
        id[k++] = (*s < 0x80 && isalnum(*s)) ? (char)*s : '_';
    id[k] = 0;
    const char *prefix = kind == BUF_WEIGHT ? "W" : kind == BUF_INPUT ? "I" : kind == BUF_RECV ? "R" : "B";
    snprintf(b->name, sizeof b->name, "%s_%s", prefix, id);
    for (int n = 2; name_taken(pr, b->name); n++)
        snprintf(b->name, sizeof b->name, "%s_%s_%d", prefix, id, n);
    name_insert(pr, pr->nbufs);
    b->tensor = t;
    b->kind = kind;
    b->dtype = dt;
    b->rank = rank;
    memcpy(b->dims, dims, (size_t)rank * sizeof(int64_t));
    if (layout)
        b->layout = *layout;
    /* -1: the size overflows (or a dim is negative); program_build
     * reports it. */
    b->bytes = (int64_t)dtype_size(dt);
    for (int i = 0; i < rank && b->bytes >= 0; i++)
        if (ck_mul_i64(b->bytes, dims[i], &b->bytes))
            b->bytes = -1;
    b->first = 1 << 30;
    b->last = -1;
    return pr->nbufs++;
}

static int tensor_buf(Program *pr, const Tensor *t, BufKind kind)
{
    const Sharding *s = &pr->plan->tensors[t->id].sharding;
    int64_t local[IR_MAX_RANK];
    sharding_local_dims(s, &pr->plan->mesh, t, local);
    return program_buf_new(pr, t->name, t, kind, t->dtype, t->rank, local, s);
}

void program_inst_add(Program *pr, InstKind k, const Node *n, int reshard)
{
    if (pr->ninsts == pr->insts_cap) {
        pr->insts_cap = pr->insts_cap ? 2 * pr->insts_cap : 64;
        pr->insts = realloc(pr->insts, (size_t)pr->insts_cap * sizeof(Inst));
        if (!pr->insts)
            abort();
    }
    pr->insts[pr->ninsts++] = (Inst){k, n, reshard};
}

/* Pipeline stages: does this program run node n, read tensor t, hold
 * reshard r? (Always, without a pipeline.) */
int program_runs(const Program *pr, const Node *n)
{
    return pr->stage < 0 || pipeline_rank_stage(pr->plan->pipe, pr->plan->pipe->stage_of[n->id]) == pr->stage;
}

int program_pass(const Program *pr, const Node *n)
{
    const Pipeline *pp = pr->plan->pipe;
    if (!pp || !pp->train)
        return 0;
    int v = pp->chunks, c = pp->stage_of[n->id] / pp->nstages;
    if (ir_in_optimizer_step(n))
        return 2 * v;
    return n->grad || n->recomputed ? v + (v - 1 - c) : c;
}

int program_inst_pass(const Program *pr, int i)
{
    if (i >= pr->ninsts)
        return 2 * (pr->plan->pipe ? pr->plan->pipe->chunks : 1);
    const Node *n = pr->insts[i].node;
    if (n)
        return program_pass(pr, n);
    for (int j = i - 1; j >= 0; j--) /* of no node: the program's start, or after every node its end */
        if (pr->insts[j].node)
            return 2 * (pr->plan->pipe ? pr->plan->pipe->chunks : 1);
    return 0;
}

int program_holds_output(const Program *pr, const Tensor *t)
{
    const Pipeline *pp = pr->plan->pipe;
    if (!pp)
        return 1;
    if (pp->train) /* a training stage writes the weights it updates; the last, the loss */
        return (pp->tensor_stage[t->id] >= 0 && pipeline_rank_stage(pp, pp->tensor_stage[t->id]) == pr->stage) ||
               (pp->tensor_stage[t->id] < 0 && pr->stage == 0);
    return pr->stage == pp->nstages - 1;
}

static int reads(const Program *pr, const Tensor *t)
{
    if (pr->stage < 0)
        return 1;
    for (int c = 0; c < t->nconsumers; c++)
        if (program_runs(pr, t->consumers[c]))
            return 1;
    return t->is_output && program_holds_output(pr, t);
}

/* A reshard is held where a node reads its result (one reshard can serve
 * several readers of a tensor), or, for a graph output's, on the last
 * stage; one no node reads any more (--zero 3's update of a weight stored
 * as it updates it, partition/fsdp.c) nowhere. */
static void mark_reshards(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    for (int r = 0; r < p->nreshards; r++)
        pr->reshards[r].here = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; program_runs(pr, g->nodes[i]) && k < g->nodes[i]->ninputs; k++)
            if (p->nodes[i].in_reshard[k] >= 0)
                pr->reshards[p->nodes[i].in_reshard[k]].here = 1;
    for (int i = 0; i < g->noutputs; i++)
        if (p->out_reshard[i] >= 0 && program_holds_output(pr, g->outputs[i]))
            pr->reshards[p->out_reshard[i]].here = 1;
}

int program_group_color(const Program *pr, unsigned axes)
{
    int color = 0;
    for (int a = 0; a < pr->plan->mesh.naxes; a++)
        if (!(axes & (1u << a)))
            color = color * pr->plan->mesh.axes[a].size + pr->coords[a];
    return color;
}

int program_operand_buf(const Program *pr, const Node *n, int k)
{
    int r = pr->plan->nodes[n->id].in_reshard[k];
    return r >= 0 ? pr->reshards[r].buf : pr->tensor_buf[n->inputs[k]->id];
}

int program_output_buf(const Program *pr, int i)
{
    int r = pr->plan->out_reshard[i];
    return r >= 0 ? pr->reshards[r].buf : pr->tensor_buf[pr->g->outputs[i]->id];
}

/* Product of local dims before `dim`: 1 means the dim is outermost in
 * memory and a collective on it needs no packing. */
static int64_t outer_of(const Buffer *b, int dim)
{
    int64_t o = 1;
    for (int i = 0; i < dim; i++)
        o *= b->dims[i];
    return o;
}

static void build_reshard_bufs(Program *pr, int r)
{
    const PlanReshard *pr_r = &pr->plan->reshards[r];
    const Tensor *t = pr_r->tensor;
    int in = pr->tensor_buf[t->id];
    for (int j = 0; j < pr_r->r.nsteps; j++) {
        const ReshardStep *s = &pr_r->r.steps[j];
        int64_t local[IR_MAX_RANK];
        char base[160];
        sharding_local_dims(&s->after, &pr->plan->mesh, t, local);
        snprintf(base, sizeof base, "%s_r%d_s%d", t->name, r, j);
        int out = program_buf_new(pr, base, t, BUF_RESHARD, t->dtype, t->rank, local, &s->after);
        StepBufs *sb = &pr->reshards[r].steps[j];
        sb->in = in;
        sb->out = out;
        sb->pack = sb->unpack = -1;
        const Buffer ib = pr->bufs[in]; /* a copy: buf_new may move pr->bufs */
        /* A padded dim (sharding.c) is gathered into p whole blocks and
         * unpacked without their padding, and scattered from p whole
         * blocks packed with zero padding, wherever it lies in memory. */
        const Sharding *before = j ? &pr_r->r.steps[j - 1].after : &pr_r->src;
        int p = mesh_group_size(&pr->plan->mesh, s->axes);
        int padded = s->dim >= 0 && (sharding_dim_uneven(before, &pr->plan->mesh, t, s->dim) ||
                                     sharding_dim_uneven(&s->after, &pr->plan->mesh, t, s->dim));
        int64_t blocks[IR_MAX_RANK];
        if (padded && s->kind == COLL_ALL_GATHER) {
            memcpy(blocks, ib.dims, sizeof blocks);
            blocks[s->dim] *= p;
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, blocks, NULL);
        } else if (padded && s->kind == COLL_REDUCE_SCATTER) {
            memcpy(blocks, local, sizeof blocks);
            blocks[s->dim] *= p;
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, blocks, NULL);
        } else if (s->kind == COLL_ALL_GATHER && outer_of(&ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, local, NULL);
        } else if (s->kind == COLL_ALL_TO_ALL) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
        } else if (s->kind == COLL_REDUCE_SCATTER && outer_of(&ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = program_buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
        }
        in = out;
    }
    pr->reshards[r].buf = in;
}

/* Ops that only move elements (copies, strided copies, gathers by index,
 * selects) work on any element size; every other kernel computes in
 * float32, int64 or bool, so an operand stored narrower (or as float64)
 * is converted into a scratch buffer of the compute type before the node
 * and each such result converted back after it (ir.h: storage and
 * compute types). Cast converts between any two types itself. */
static DType widen_to(const Program *pr, const Node *n, int is_out, int k)
{
    const Tensor *t = is_out ? (k < n->noutputs ? n->outputs[k] : NULL) : (k < n->ninputs ? n->inputs[k] : NULL);
    if (!t || dtype_compute(t->dtype) == t->dtype)
        return DT_UNDEFINED;
    /* On CUDA a 16-bit MatMul runs as one: cuBLAS reads float16/bfloat16
     * and accumulates in float32 (k_matmul_f16/bf16, cublasGemmEx). */
    if (pr->cuda && n->op == OP_MATMUL && (t->dtype == DT_F16 || t->dtype == DT_BF16) &&
        n->inputs[0]->dtype == t->dtype && n->inputs[1]->dtype == t->dtype)
        return DT_UNDEFINED;
    switch (n->op) {
    case OP_CAST: case OP_CONSTANT: case OP_BITCAST:
    case OP_IDENTITY: case OP_RESHAPE: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_FLATTEN:
    case OP_TRANSPOSE: case OP_CONCAT: case OP_SPLIT: case OP_SLICE: case OP_WHERE: case OP_DROPOUT:
        return DT_UNDEFINED;
    case OP_GATHER: case OP_GATHER_ELEMENTS: case OP_GATHER_ND:
        return !is_out && k == 1 ? DT_I64 : DT_UNDEFINED; /* int32 indices; the data moves as is */
    default:
        return dtype_compute(t->dtype);
    }
}

static void widen_bufs(Program *pr, const Node *n)
{
    int slots = n->ninputs + n->noutputs, any = 0;
    for (int s = 0; s < slots; s++)
        any |= widen_to(pr, n, s >= n->ninputs, s >= n->ninputs ? s - n->ninputs : s) != DT_UNDEFINED;
    pr->nodes[n->id].wide = NULL;
    if (!any)
        return;
    int *w = arena_alloc(&pr->arena, (size_t)slots * sizeof(int));
    for (int s = 0; s < slots; s++) {
        int is_out = s >= n->ninputs, k = is_out ? s - n->ninputs : s;
        DType dt = widen_to(pr, n, is_out, k);
        w[s] = -1;
        if (dt == DT_UNDEFINED)
            continue;
        const Buffer *b = &pr->bufs[is_out ? pr->tensor_buf[n->outputs[k]->id] : program_operand_buf(pr, n, k)];
        char base[160];
        snprintf(base, sizeof base, "%s_%s", b->name + 2, dtype_name(dt));
        Buffer copy = *b; /* buf_new may move pr->bufs */
        w[s] = program_buf_new(pr, base, NULL, BUF_SCRATCH, dt, copy.rank, copy.dims, &copy.layout);
    }
    pr->nodes[n->id].wide = w;
}

static int conv_scratch(Program *pr, const Node *n)
{
    if (n->op != OP_CONV)
        return -1;
    const Buffer *x = &pr->bufs[program_operand_buf(pr, n, 0)];
    const Buffer *y = &pr->bufs[pr->tensor_buf[n->outputs[0]->id]];
    int64_t group = node_attr_int(n, "group", 1), k = group > 0 ? x->dims[1] / group : -1;
    for (int i = 2; i < x->rank && k >= 0; i++)
        if (ck_mul_i64(k, pr->bufs[program_operand_buf(pr, n, 1)].dims[i], &k))
            k = -1;
    for (int i = 2; i < y->rank && k >= 0; i++)
        if (ck_mul_i64(k, y->dims[i], &k))
            k = -1; /* buf_new marks the size as overflowed */
    char base[160];
    snprintf(base, sizeof base, "%s_im2col", n->name);
    return program_buf_new(pr, base, NULL, BUF_SCRATCH, DT_F32, 1, &k, NULL);
}

/* A Program for `rank` with its buffers: weights first (initializers in
 * model order, then Constant values), then inputs, then node outputs in
 * graph order, then each reshard's steps, the compute-type copies of
 * narrow types and Conv's scratch. */
Program *program_new(const Plan *p, int rank, const ProgramOptions *opt)
{
    const Graph *g = p->g;
    Program *pr = calloc(1, sizeof(Program));
    if (!pr)
        abort();
    pr->plan = p;
    pr->g = g;
    pr->cuda = opt->cuda;
    pr->rank = rank;
    pr->stage = -1;
    int vrank = rank; /* this rank's place in the plan's mesh */
    if (p->pipe) {
        pr->stage = pipeline_stage_of_rank(p->pipe, rank);
        vrank = pipeline_sub_rank(p->pipe, rank); /* microbatch 0 (the loop axis is outermost) */
    }
    for (int a = 0; a < p->mesh.naxes; a++)
        pr->coords[a] = mesh_coord(&p->mesh, vrank, a);
    pr->vrank = vrank;
    pr->nodes = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(ProgramNode));
    pr->reshards = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(ProgramReshard));
    mark_reshards(pr);
    pr->tensor_buf = arena_alloc(&pr->arena, (size_t)(g->ntensors + 1) * sizeof(int));
    for (int i = 0; i < g->ntensors; i++)
        pr->tensor_buf[i] = -1;
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        /* A graph output can be a constant too (folded shape arithmetic). */
        if (t->is_initializer && (t->nconsumers || t->is_output) && reads(pr, t))
            pr->tensor_buf[i] = tensor_buf(pr, t, BUF_WEIGHT);
    }
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_CONSTANT && reads(pr, g->nodes[i]->outputs[0]))
            pr->tensor_buf[g->nodes[i]->outputs[0]->id] = tensor_buf(pr, g->nodes[i]->outputs[0], BUF_WEIGHT);
    /* With a pipeline, stage 0 reads the inputs; a stage receives what it
     * reads from another (inputs included). */
    for (int i = 0; i < g->ninputs; i++)
        if (pr->stage <= 0)
            pr->tensor_buf[g->inputs[i]->id] = tensor_buf(pr, g->inputs[i], BUF_INPUT);
        else if (reads(pr, g->inputs[i]))
            pr->tensor_buf[g->inputs[i]->id] = tensor_buf(pr, g->inputs[i], BUF_RECV);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int k = 0; k < n->noutputs; k++) {
            const Tensor *t = n->outputs[k];
            if (!t || pr->tensor_buf[t->id] >= 0)
                continue;
            if (program_runs(pr, n))
                pr->tensor_buf[t->id] = tensor_buf(pr, t, BUF_VALUE);
            else if (reads(pr, t))
                pr->tensor_buf[t->id] = tensor_buf(pr, t, BUF_RECV);
        }
    }
    for (int r = 0; r < p->nreshards; r++)
        if (pr->reshards[r].here)
            build_reshard_bufs(pr, r);
        else
            pr->reshards[r].buf = -1;
    for (int i = 0; i < g->nnodes; i++) {
        pr->nodes[i].wide = NULL;
        pr->nodes[i].scratch = -1;
        if (program_runs(pr, g->nodes[i])) {
            widen_bufs(pr, g->nodes[i]);
            pr->nodes[i].scratch = conv_scratch(pr, g->nodes[i]);
        }
    }
    return pr;
}

void program_free(Program *pr)
{
    if (!pr)
        return;
    free(pr->bufs);
    free(pr->insts);
    free(pr->name_set);
    arena_free(&pr->arena);
    free(pr);
}


int program_trains(const Program *pr)
{
    for (int i = 0; i < pr->g->noutputs; i++) {
        const Node *n = pr->g->outputs[i]->producer;
        if (n && ir_output_in_place(n, 0) >= 0)
            return 1;
    }
    return 0;
}

int program_loss_output(const Program *pr)
{
    for (int i = 0; i < pr->g->noutputs; i++)
        if (pr->g->outputs[i] == pr->g->loss)
            return i;
    return -1;
}
