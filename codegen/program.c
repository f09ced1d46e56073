/* program.c: lowers a Plan to one Program per rank.
 *
 * A Program is the list of buffers this rank holds (local shapes from the
 * plan's layouts), an instruction list, and an arena layout. Schedule:
 * nodes run in graph order; each reshard starts as soon as its input
 * exists (right after the producing node, or before the first node for
 * weights and inputs) and is waited for just before the first node that
 * reads its result, so communication overlaps the compute in between.
 * Multi-step reshards run their later steps at the wait. Memory: every
 * value, reshard step and scratch buffer lives in one arena; a buffer's
 * lifetime runs from its first write to its last read (a collective's
 * input and output stay live until its wait), and buffers are placed in
 * decreasing size, each at the lowest offset free over its lifetime, so
 * buffers whose lifetimes do not overlap share memory. Weights and inputs
 * are persistent, outside the arena. Every pass is linear or n log n in
 * the graph (a million-node chain compiles in seconds).
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

static int buf_new(Program *pr, const char *base, const Tensor *t, BufKind kind, DType dt, int rank,
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
    return buf_new(pr, t->name, t, kind, t->dtype, t->rank, local, s);
}

static void inst_add(Program *pr, InstKind k, const Node *n, int reshard)
{
    if (pr->ninsts == pr->insts_cap) {
        pr->insts_cap = pr->insts_cap ? 2 * pr->insts_cap : 64;
        pr->insts = realloc(pr->insts, (size_t)pr->insts_cap * sizeof(Inst));
        if (!pr->insts)
            abort();
    }
    pr->insts[pr->ninsts++] = (Inst){k, n, reshard};
}

static void live(Program *pr, int b, int at)
{
    if (b < 0)
        return;
    if (at < pr->bufs[b].first)
        pr->bufs[b].first = at;
    if (at > pr->bufs[b].last)
        pr->bufs[b].last = at;
}

/* Pipeline stages: does this program run node n, read tensor t, hold
 * reshard r? (Always, without a pipeline.) */
int program_runs(const Program *pr, const Node *n)
{
    return pr->stage < 0 || pr->plan->pipe->stage_of[n->id] == pr->stage;
}

static int reads(const Program *pr, const Tensor *t)
{
    if (pr->stage < 0)
        return 1;
    for (int c = 0; c < t->nconsumers; c++)
        if (program_runs(pr, t->consumers[c]))
            return 1;
    return t->is_output && pr->stage == pr->plan->pipe->nstages - 1;
}

/* A reshard is held where a node reads its result (one reshard can serve
 * several readers of a tensor), or, for a graph output's, on the last
 * stage. */
static void mark_reshards(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    for (int r = 0; r < p->nreshards; r++)
        pr->here[r] = pr->stage < 0;
    if (pr->stage < 0)
        return;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; program_runs(pr, g->nodes[i]) && k < g->nodes[i]->ninputs; k++)
            if (p->nodes[i].in_reshard[k] >= 0)
                pr->here[p->nodes[i].in_reshard[k]] = 1;
    for (int i = 0; pr->stage == p->pipe->nstages - 1 && i < g->noutputs; i++)
        if (p->out_reshard[i] >= 0)
            pr->here[p->out_reshard[i]] = 1;
}

int program_group_key(const Program *pr, const unsigned char *axes, int naxes)
{
    int key = 0;
    for (int i = 0; i < naxes; i++)
        key = key * pr->plan->mesh.axes[axes[i]].size + pr->coords[axes[i]];
    return key;
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
    return r >= 0 ? pr->reshard_buf[r] : pr->tensor_buf[n->inputs[k]->id];
}

int program_output_buf(const Program *pr, int i)
{
    int r = pr->plan->out_reshard[i];
    return r >= 0 ? pr->reshard_buf[r] : pr->tensor_buf[pr->g->outputs[i]->id];
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
        int out = buf_new(pr, base, t, BUF_RESHARD, t->dtype, t->rank, local, &s->after);
        StepBufs *sb = &pr->steps[r][j];
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
            sb->unpack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, blocks, NULL);
        } else if (padded && s->kind == COLL_REDUCE_SCATTER) {
            memcpy(blocks, local, sizeof blocks);
            blocks[s->dim] *= p;
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, blocks, NULL);
        } else if (s->kind == COLL_ALL_GATHER && outer_of(&ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, local, NULL);
        } else if (s->kind == COLL_ALL_TO_ALL) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
        } else if (s->kind == COLL_REDUCE_SCATTER && outer_of(&ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib.rank, ib.dims, NULL);
        }
        in = out;
    }
    pr->reshard_buf[r] = in;
}

/* Bias fusion: an Add of a row bias whose only reader is the very next
 * node, an elementwise activation or a residual Add, runs inside that node
 * (one pass over the data; its intermediate never exists). Not when the
 * sum is a graph output or is resharded. */
static int is_activation(OpKind op)
{
    return op == OP_GELU || op == OP_RELU || op == OP_SIGMOID || op == OP_TANH;
}

static void find_fusions(Program *pr)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    for (int i = 0; i < g->nnodes; i++)
        pr->fused_from[i] = -1;
    char *resharded = calloc((size_t)g->ntensors + 1, 1);
    if (!resharded)
        abort();
    for (int r = 0; r < p->nreshards; r++)
        resharded[p->reshards[r].tensor->id] = 1;
    for (int i = 0; i + 1 < g->nnodes; i++) {
        const Node *n = g->nodes[i], *u = g->nodes[i + 1];
        const Tensor *t = n->outputs[0];
        if (p->pipe && (!program_runs(pr, n) || p->pipe->stage_of[i] != p->pipe->stage_of[i + 1] ||
                        (t && p->pipe->readers[t->id])))
            continue; /* another stage's, or a value another stage reads: it must exist */
        /* The reader: an activation of t, or a residual Add of t and a
         * tensor of the same shape. */
        int slot = u->inputs[0] == t ? 0 : u->ninputs > 1 && u->inputs[1] == t ? 1 : -1;
        int residual = u->op == OP_ADD && slot >= 0 && u->inputs[1 - slot] != t &&
                       u->outputs[0]->rank == t->rank && tensor_numel(u->outputs[0]) == tensor_numel(t) &&
                       u->inputs[1 - slot]->dtype == DT_F32 &&
                       tensor_numel(u->inputs[1 - slot]) == tensor_numel(t);
        if (n->op != OP_ADD || (!(is_activation(u->op) && slot == 0) && !residual))
            continue;
        if (t->dtype != DT_F32 || t->nconsumers != 1 || t->consumers[0] != u || t->is_output ||
            p->nodes[u->id].in_reshard[slot] >= 0)
            continue;
        if (residual) {
            const Buffer *rb = &pr->bufs[program_operand_buf(pr, u, 1 - slot)];
            if (rb->bytes != pr->bufs[pr->tensor_buf[t->id]].bytes)
                continue;
        }
        const Buffer *y = &pr->bufs[pr->tensor_buf[t->id]];
        int bias = pr->bufs[program_operand_buf(pr, n, 0)].bytes != y->bytes ? 0 : 1; /* bias + x: the same sum */
        const Buffer *a = &pr->bufs[program_operand_buf(pr, n, 1 - bias)];
        const Buffer *b = &pr->bufs[program_operand_buf(pr, n, bias)];
        int64_t cols = y->rank ? y->dims[y->rank - 1] : 1;
        if (resharded[t->id] || a->bytes != y->bytes || a->dtype != DT_F32 || b->dtype != DT_F32 ||
            !(b->bytes == y->bytes || (b->bytes / 4 == cols && b->rank >= 1 && b->dims[b->rank - 1] == cols)))
            continue;
        pr->fused_from[u->id] = n->id;
        pr->fused_bias[u->id] = bias;
    }
    free(resharded);
}

/* Transposes folded into GEMMs: a float32 MatMul operand made by a
 * Transpose read by nothing else is, on this rank's local blocks, a
 * strided view of the Transpose's input. When each matrix of the view has
 * a unit stride along its rows or its columns (the permutation keeps the
 * input's last dim in one of the two matrix dims), BLAS reads it in place
 * (transposed or with a leading dimension) and the copy never runs. Only
 * the plain cases: a shared 2-D right operand, or operands and result of
 * one rank with equal batch dims (no broadcasting), and no widened
 * operands, reshards, graph outputs or other readers of the view. */
static int view_usable(const Program *pr, const Node *mm, int k)
{
    const Plan *p = pr->plan;
    const Tensor *t = mm->inputs[k];
    const Node *tr = t ? t->producer : NULL;
    if (!tr || tr->op != OP_TRANSPOSE || !program_runs(pr, tr) || pr->wide[tr->id] || pr->wide[mm->id])
        return 0;
    if (t->nconsumers != 1 || t->is_output || t->dtype != DT_F32 || tr->inputs[0]->dtype != DT_F32 ||
        p->nodes[mm->id].in_reshard[k] >= 0 || (mm->inputs[0] == mm->inputs[1]))
        return 0;
    if (p->pipe && (p->pipe->stage_of[tr->id] != p->pipe->stage_of[mm->id] || p->pipe->readers[t->id]))
        return 0;
    for (int r = 0; r < p->nreshards; r++)
        if (p->reshards[r].tensor == t)
            return 0;
    const Buffer *x = &pr->bufs[program_operand_buf(pr, tr, 0)], *v = &pr->bufs[pr->tensor_buf[t->id]];
    const Buffer *y = &pr->bufs[pr->tensor_buf[mm->outputs[0]->id]];
    const Buffer *o = &pr->bufs[program_operand_buf(pr, mm, 1 - k)];
    const Attr *perm = node_attr(tr, "perm");
    int r = v->rank;
    if (r < 2 || x->rank != r || x->bytes != v->bytes || v->bytes == 0 || o->dtype != DT_F32 || y->dtype != DT_F32)
        return 0;
    int last = perm ? (int)perm->ints[r - 1] : 0, row = perm ? (int)perm->ints[r - 2] : 1;
    if (last != r - 1 && row != r - 1)
        return 0; /* neither matrix dim has unit stride */
    if (k == 1 && r == 2 && o->rank >= 2)
        return 1; /* a shared right operand: the batch folds into M */
    if (o->rank != r || y->rank != r)
        return 0;
    for (int i = 0; i < r - 2; i++)
        if (o->dims[i] != y->dims[i] || v->dims[i] != y->dims[i])
            return 0;
    return 1;
}

static void find_views(Program *pr)
{
    const Graph *g = pr->g;
    for (int i = 0; i < g->nnodes; i++) {
        pr->mm_view[2 * i] = pr->mm_view[2 * i + 1] = -1;
        pr->view_into[i] = -1;
    }
    if (pr->cuda)
        return; /* the CUDA kernels take contiguous operands */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op != OP_MATMUL || n->ninputs != 2 || !program_runs(pr, n))
            continue;
        for (int k = 0; k < 2; k++)
            if (view_usable(pr, n, k)) {
                const Node *tr = n->inputs[k]->producer;
                pr->mm_view[2 * i + k] = tr->id;
                pr->view_into[tr->id] = n->id;
            }
    }
}

/* Weights packed for the C GEMM kernel (codegen.h packed_b): a MatMul
 * (not read through a Transpose view) or a Gemm (A not transposed, alpha
 * 1) whose B is a float32 weight matrix of this rank, A float32 with at
 * least K_PACK_MIN_ROWS rows (fewer fill too little of the kernel's row
 * block). A weight is packed once; a second GEMM that reads it the other
 * way round (transB) reads it unpacked. */
#define K_PACK_MIN_ROWS 8
#define K_PACK_MAX_PANEL 32 /* columns per panel with AVX-512 (templates/kernels.c K_NR) */

static void find_packs(Program *pr, int packs)
{
    const Graph *g = pr->g;
    pr->npacks = 0;
    pr->packed_bytes = 0;
    for (int i = 0; i < g->nnodes; i++)
        pr->packed_b[i] = -1;
    if (pr->cuda || !packs)
        return;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if ((n->op != OP_MATMUL && n->op != OP_GEMM) || n->ninputs < 2 || !program_runs(pr, n) || pr->wide[i])
            continue;
        int tb = 0;
        if (n->op == OP_MATMUL && (pr->mm_view[2 * i] >= 0 || pr->mm_view[2 * i + 1] >= 0))
            continue;
        if (n->op == OP_GEMM) {
            if (node_attr_int(n, "transA", 0) != 0 || node_attr_float(n, "alpha", 1.0f) != 1.0f)
                continue;
            tb = node_attr_int(n, "transB", 0) != 0;
        }
        const Buffer *a = &pr->bufs[program_operand_buf(pr, n, 0)], *b = &pr->bufs[program_operand_buf(pr, n, 1)];
        const Buffer *y = &pr->bufs[pr->tensor_buf[n->outputs[0]->id]];
        if (b->kind != BUF_WEIGHT || b->dtype != DT_F32 || b->rank != 2 || a->dtype != DT_F32 || y->dtype != DT_F32 ||
            a->rank < 2 || (n->op == OP_GEMM && a->rank != 2))
            continue;
        int64_t rows = 1, k = b->dims[tb], cols = b->dims[1 - tb];
        for (int d = 0; d < a->rank - 1; d++)
            rows *= a->dims[d];
        if (rows < K_PACK_MIN_ROWS || k == 0 || cols == 0)
            continue;
        int bi = (int)(b - pr->bufs), found = -1;
        for (int q = 0; q < pr->npacks; q++)
            if (pr->packs[q].buf == bi)
                found = q;
        if (found >= 0) {
            if (pr->packs[found].trans == tb)
                pr->packed_b[i] = found;
            continue;
        }
        if (!pr->packs)
            pr->packs = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(*pr->packs));
        pr->packs[pr->npacks] = (struct PackedWeight){bi, tb, k, cols};
        pr->packed_b[i] = pr->npacks++;
        pr->packed_bytes += (cols + K_PACK_MAX_PANEL - 1) / K_PACK_MAX_PANEL * K_PACK_MAX_PANEL * k * 4;
    }
}

/* Reshapes that alias: a shape-only node (same bytes, new shape) whose
 * float32/int64 input is an arena value read by nothing else gives its
 * output the input's storage, so no copy runs. The two buffers are placed
 * as one, live from the input's first use to the output's last. Not for
 * weights, graph inputs or outputs, resharded values or widened operands
 * (a collective or a conversion then writes one of them on its own). */
static int is_shape_only(OpKind op)
{
    return op == OP_RESHAPE || op == OP_SQUEEZE || op == OP_UNSQUEEZE || op == OP_FLATTEN || op == OP_IDENTITY;
}

/* A bias Add folded into the packed GEMM before it (codegen.h gemm_bias):
 * the MatMul's result is read by that Add alone, the Add's other operand
 * is a float32 weight row over the last dim, nothing is resharded, widened,
 * a graph output or read by another stage, and the Add is not itself
 * fused into the node after it. The Add's output becomes a view of the
 * MatMul's, which the GEMM writes with the bias already in. */
static void fold_gemm_bias(Program *pr, int i, const char *resharded)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    const Node *n = g->nodes[i];
    pr->gemm_bias[i] = -1;
    if (n->op != OP_MATMUL || pr->packed_b[i] < 0)
        return;
    const Tensor *t = n->outputs[0];
    const Node *u = t->nconsumers == 1 ? t->consumers[0] : NULL;
    if (!u || u->op != OP_ADD || u->ninputs != 2 || !program_runs(pr, u) || pr->wide[u->id] || !u->outputs[0] ||
        (u->inputs[0] == t) == (u->inputs[1] == t))
        return;
    int slot = u->inputs[1] == t;
    const Tensor *o = u->outputs[0];
    if (t->is_output || o->is_output || resharded[t->id] || resharded[o->id] || p->nodes[u->id].in_reshard[0] >= 0 ||
        p->nodes[u->id].in_reshard[1] >= 0 || pr->fused_from[u->id] >= 0 ||
        (u->id + 1 < g->nnodes && pr->fused_from[u->id + 1] == u->id))
        return;
    if (p->pipe && (p->pipe->stage_of[u->id] != p->pipe->stage_of[i] || p->pipe->readers[t->id] ||
                    p->pipe->readers[o->id]))
        return;
    int tb = pr->tensor_buf[t->id], ob = pr->tensor_buf[o->id], bb = program_operand_buf(pr, u, 1 - slot);
    const Buffer *y = &pr->bufs[tb], *z = &pr->bufs[ob], *b = &pr->bufs[bb];
    int64_t cols = y->dims[y->rank - 1];
    if (y->kind != BUF_VALUE || z->kind != BUF_VALUE || y->bytes != z->bytes || z->dtype != DT_F32 ||
        b->kind != BUF_WEIGHT || b->dtype != DT_F32 || b->rank < 1 || b->dims[b->rank - 1] != cols ||
        b->bytes != cols * 4)
        return;
    pr->gemm_bias[i] = bb;
    pr->alias_of[ob] = tb;
    pr->alias_node[u->id] = 1;
}

static void find_aliases(Program *pr)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    for (int b = 0; b < pr->nbufs; b++)
        pr->alias_of[b] = -1;
    for (int i = 0; i < g->nnodes; i++)
        pr->alias_node[i] = 0;
    char *resharded = calloc((size_t)g->ntensors + 1, 1);
    if (!resharded)
        abort();
    for (int r = 0; r < p->nreshards; r++)
        resharded[p->reshards[r].tensor->id] = 1;
    for (int i = 0; i < g->nnodes; i++)
        fold_gemm_bias(pr, i, resharded);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (!is_shape_only(n->op) || !program_runs(pr, n) || n->noutputs != 1 || !n->outputs[0] || !n->inputs[0] ||
            pr->wide[i] || pr->view_into[i] >= 0)
            continue;
        const Tensor *x = n->inputs[0], *t = n->outputs[0];
        if (x->nconsumers != 1 || x->is_output || t->is_output || resharded[x->id] || resharded[t->id] ||
            p->nodes[i].in_reshard[0] >= 0 || (p->pipe && (p->pipe->readers[x->id] || p->pipe->readers[t->id])))
            continue;
        int xb = pr->tensor_buf[x->id], yb = pr->tensor_buf[t->id];
        const Buffer *bx = &pr->bufs[xb], *by = &pr->bufs[yb];
        if (bx->kind != BUF_VALUE || by->kind != BUF_VALUE || bx->bytes != by->bytes || bx->dtype != by->dtype ||
            (by->dtype != DT_F32 && by->dtype != DT_I64))
            continue;
        pr->alias_of[yb] = pr->alias_of[xb] >= 0 ? pr->alias_of[xb] : xb;
        pr->alias_node[i] = 1;
    }
    free(resharded);
}

/* Groups items 0..n-1 by key (0..nkeys-1; negative: none), in increasing
 * item order within a group: key k's items are items[off[k] .. off[k+1]).
 * Linear, so that the schedule is. */
typedef struct Buckets {
    int *off, *items;
} Buckets;

static Buckets buckets_make(int nkeys, int n, const int *key)
{
    Buckets b = {calloc((size_t)nkeys + 2, sizeof(int)), malloc(sizeof(int) * (size_t)(n + 1))};
    int total = 0;
    if (!b.off || !b.items)
        abort();
    for (int i = 0; i < n; i++)
        if (key[i] >= 0)
            b.off[key[i] + 1]++, total++;
    for (int k = 0; k < nkeys; k++)
        b.off[k + 1] += b.off[k]; /* off[k + 1]: where group k ends */
    for (int i = n - 1; i >= 0; i--)
        if (key[i] >= 0)
            b.items[--b.off[key[i] + 1]] = i; /* leaves off[k + 1] where k starts */
    memmove(b.off, b.off + 1, sizeof(int) * (size_t)nkeys);
    b.off[nkeys] = total;
    return b;
}

/* A weight gather started early enough that the cost model's compute
 * between its start and its reader is this many times its own time.
 * Transfer on CPUs moves only when a rank tests it (between nodes and
 * between a long kernel's blocks), and ranks drift apart, so the plan's
 * time is a floor, not a forecast: the lead is generous. */
#define PREFETCH_COVER 4.0
/* ... but never more than this many weight-reading nodes ahead per
 * prefetch step: where compute is short of the transfers (small models on
 * fast devices) every gather would otherwise start at once and hold every
 * gathered weight for the whole pass. */
#define PREFETCH_WINDOW 8

static double reshard_seconds(const Reshard *rs)
{
    double s = 0;
    for (int j = 0; j < rs->nsteps; j++)
        s += rs->steps[j].seconds;
    return s;
}

/* Instruction order. A reshard of a node's output starts right after that
 * node; a weight gather (--shard-weights) starts `prefetch` weight-reading
 * nodes before its first reader, or earlier (up to PREFETCH_WINDOW times as
 * far) where the compute of those nodes (cost model) is under
 * PREFETCH_COVER times the gather's time, so it
 * overlaps their compute (prefetch 0: right before its reader); any other
 * reshard of a weight or input starts before the first node. Every
 * reshard is waited on right before its first reader (nnodes for graph
 * outputs). Reshards at the same place go in index order. The times are
 * the plan's, the same on every rank, so the ranks of a group start their
 * collectives in one order. */
static void schedule(Program *pr, int prefetch)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int nr = p->nreshards, nn = g->nnodes;
    int *reader = malloc(sizeof(int) * (size_t)(nr + 1)), *start_before = malloc(sizeof(int) * (size_t)(nr + 1));
    int *after = malloc(sizeof(int) * (size_t)(nr + 1));
    int *reader_pos = malloc(sizeof(int) * (size_t)(nn + 1)), *readers = malloc(sizeof(int) * (size_t)(nn + 1));
    char *is_reader = calloc((size_t)nn + 2, 1);
    int nreaders = 0;
    if (!reader || !start_before || !after || !reader_pos || !readers || !is_reader)
        abort();
    /* cum[i]: planned compute of the nodes before node i that run here
     * (a reshape that only renames its input's storage computes nothing). */
    double *cum = malloc(sizeof(double) * (size_t)(nn + 1));
    if (!cum)
        abort();
    cum[0] = 0;
    for (int i = 0; i < nn; i++)
        cum[i + 1] = cum[i] + (program_runs(pr, g->nodes[i]) && pr->view_into[i] < 0
                                   ? plan_node_planned_seconds(p, g->nodes[i]) : 0);
    for (int r = 0; r < nr; r++)
        reader[r] = pr->here[r] ? nn : -1;
    /* One pass over every operand: its first reader is the lowest node. */
    for (int i = nn - 1; i >= 0; i--)
        for (int k = 0; program_runs(pr, g->nodes[i]) && k < g->nodes[i]->ninputs; k++) {
            int r = p->nodes[i].in_reshard[k];
            if (r >= 0 && r < nr)
                reader[r] = i;
        }
    for (int r = 0; r < nr; r++)
        if (p->reshards[r].weight_gather && reader[r] >= 0 && reader[r] < nn)
            is_reader[reader[r]] = 1;
    for (int i = 0; i < nn; i++)
        if (is_reader[i]) {
            reader_pos[i] = nreaders;
            readers[nreaders++] = i;
        }
    for (int r = 0; r < nr; r++) {
        start_before[r] = -1; /* -1: program start; -2: after its producer; -3: not here */
        after[r] = -1;
        const Node *prod = p->reshards[r].tensor->producer;
        if (!pr->here[r]) {
            start_before[r] = -3;
        } else if (prod && !program_runs(pr, prod)) {
            /* received from another stage: starts when the step does */
        } else if (prod) {
            start_before[r] = -2;
            after[r] = p->reshards[r].tensor->producer->id;
        } else if (p->reshards[r].weight_gather && reader[r] >= 0 && reader[r] < nn) {
            int j = reader_pos[reader[r]], at = j - prefetch >= 0 ? readers[j - prefetch] : -1;
            int far = j - PREFETCH_WINDOW * prefetch >= 0 ? readers[j - PREFETCH_WINDOW * prefetch] : -1;
            double need = PREFETCH_COVER * reshard_seconds(&p->reshards[r].r);
            while (prefetch > 0 && at > far && cum[reader[r]] - cum[at] < need)
                at--; /* one more node of compute ahead */
            start_before[r] = at;
        }
    }
    Buckets starts = buckets_make(nn, nr, start_before), waits = buckets_make(nn + 1, nr, reader),
            posts = buckets_make(nn, nr, after);
    pr->ninsts = 0;
    for (int r = 0; r < nr; r++)
        if (start_before[r] == -1) {
            pr->start_at[r] = pr->ninsts;
            inst_add(pr, INST_START, NULL, r);
        }
    for (int i = 0; i < nn; i++) {
        const Node *n = g->nodes[i];
        for (int q = starts.off[i]; q < starts.off[i + 1]; q++) {
            int r = starts.items[q];
            pr->start_at[r] = pr->ninsts;
            inst_add(pr, INST_START, n, r);
        }
        for (int q = waits.off[i]; q < waits.off[i + 1]; q++) {
            int r = waits.items[q];
            pr->wait_at[r] = pr->ninsts;
            inst_add(pr, INST_WAIT, n, r);
        }
        int fused_away = (i + 1 < nn && pr->fused_from[i + 1] == i) || pr->view_into[i] >= 0;
        if (!fused_away && program_runs(pr, n))
            inst_add(pr, INST_COMPUTE, n, -1);
        for (int q = posts.off[i]; q < posts.off[i + 1]; q++) {
            int r = posts.items[q];
            pr->start_at[r] = pr->ninsts;
            inst_add(pr, INST_START, n, r);
        }
    }
    for (int q = waits.off[nn]; q < waits.off[nn + 1]; q++) {
        int r = waits.items[q];
        pr->wait_at[r] = pr->ninsts;
        inst_add(pr, INST_WAIT, NULL, r);
    }
    Buckets all[] = {starts, waits, posts};
    for (int k = 0; k < 3; k++) {
        free(all[k].off);
        free(all[k].items);
    }
    free(reader);
    free(start_before);
    free(after);
    free(reader_pos);
    free(readers);
    free(is_reader);
    free(cum);
}

/* Fills pr->blocking (see codegen.h). */
static void find_blocking(Program *pr)
{
    const Plan *p = pr->plan;
    pr->blocking = arena_alloc(&pr->arena, (size_t)p->nreshards + 1);
    for (int r = 0; r < p->nreshards; r++) {
        const Reshard *rs = &p->reshards[r].r;
        pr->blocking[r] = 0;
        if (pr->cuda || rs->nsteps != 1 || rs->steps[0].kind != COLL_ALL_REDUCE || pr->fused_leader[r] >= 0)
            continue; /* (fused calls are packed and started together) */
        if (pr->start_at[r] < 0 || pr->wait_at[r] <= pr->start_at[r])
            continue;
        int compute = 0;
        for (int i = pr->start_at[r] + 1; i < pr->wait_at[r] && !compute; i++)
            compute = pr->insts[i].kind == INST_COMPUTE;
        pr->blocking[r] = !compute;
    }
}

/* Fusion: all-reduces on the same group and dtype, each smaller than
 * fuse_bytes, started one after another with none of them waited on in
 * between, become one call over a packed buffer. The call starts where
 * the last of them would have and is waited on where the first would
 * have been, so no member is waited on later than before. */
static void fuse(Program *pr, int64_t fuse_bytes)
{
    const Plan *p = pr->plan;
    int nr = p->nreshards;
    for (int r = 0; r < nr; r++)
        pr->fused_leader[r] = -1;
    if (fuse_bytes <= 0)
        return;
    int group[64], ng = 0;
    for (int i = 0; i <= pr->ninsts; i++) {
        const Inst *in = i < pr->ninsts ? &pr->insts[i] : NULL;
        int r = in ? in->reshard : -1;
        int cand = in && in->kind == INST_START && p->reshards[r].r.nsteps == 1 &&
                   p->reshards[r].r.steps[0].kind == COLL_ALL_REDUCE &&
                   pr->bufs[pr->steps[r][0].in].bytes < fuse_bytes;
        int joins = cand && ng > 0 && ng < 64 &&
                    p->reshards[r].r.steps[0].axes == p->reshards[group[0]].r.steps[0].axes &&
                    p->reshards[r].tensor->dtype == p->reshards[group[0]].tensor->dtype;
        int breaks = !in || (in->kind == INST_WAIT && ng > 0) || (cand && !joins);
        if (in && in->kind == INST_WAIT)
            for (int k = 0; k < ng; k++)
                breaks |= group[k] == r;
        if (breaks && ng >= 2) {
            int leader = group[0], last_start = pr->start_at[group[ng - 1]], first_wait = pr->wait_at[leader];
            int64_t total = 0;
            for (int k = 0; k < ng; k++) {
                pr->fused_leader[group[k]] = leader;
                if (total >= 0 && ck_add_i64(total, pr->bufs[pr->steps[group[k]][0].in].bytes, &total))
                    total = -1;
                if (pr->wait_at[group[k]] < first_wait)
                    first_wait = pr->wait_at[group[k]];
            }
            int64_t elems = total < 0 ? -1 : total / (int64_t)dtype_size(p->reshards[leader].tensor->dtype);
            char base[160];
            snprintf(base, sizeof base, "fused_r%d_send", leader);
            pr->fused_send[leader] = buf_new(pr, base, NULL, BUF_RESHARD, p->reshards[leader].tensor->dtype, 1,
                                             &elems, NULL);
            snprintf(base, sizeof base, "fused_r%d_recv", leader);
            pr->fused_recv[leader] = buf_new(pr, base, NULL, BUF_RESHARD, p->reshards[leader].tensor->dtype, 1,
                                             &elems, NULL);
            /* Only the leader's START (at the last member's place) and the
             * leader's WAIT (at the earliest member wait) remain. */
            for (int k = 0; k < ng; k++) {
                pr->insts[pr->start_at[group[k]]].reshard = -1 - group[k];
                pr->insts[pr->wait_at[group[k]]].reshard = -1 - group[k];
            }
            pr->insts[last_start].reshard = leader;
            pr->insts[first_wait].reshard = leader;
            for (int k = 0; k < ng; k++) {
                pr->start_at[group[k]] = last_start;
                pr->wait_at[group[k]] = first_wait;
            }
        }
        if (breaks)
            ng = 0;
        if (cand && (ng == 0 || joins))
            group[ng++] = r;
    }
}

static void liveness(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int end = pr->ninsts;
    /* A fused call's members: each one's input is in flight from the
     * call's start, its output from the call's wait (the leader's). */
    for (int m = 0; m < p->nreshards; m++) {
        int r = pr->fused_leader[m];
        if (r >= 0) {
            live(pr, pr->steps[m][0].in, pr->start_at[r]);
            live(pr, pr->steps[m][0].out, pr->wait_at[r]);
        }
    }
    for (int i = 0; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_COMPUTE) {
            const Node *n = in->node;
            for (int k = 0; k < n->ninputs; k++) {
                int tr = k < 2 ? pr->mm_view[2 * n->id + k] : -1; /* read through to the Transpose's input */
                if (n->inputs[k])
                    live(pr, tr >= 0 ? program_operand_buf(pr, g->nodes[tr], 0) : program_operand_buf(pr, n, k), i);
            }
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k])
                    live(pr, pr->tensor_buf[n->outputs[k]->id], i);
            live(pr, pr->node_scratch[n->id], i);
            for (int s = 0; pr->wide[n->id] && s < n->ninputs + n->noutputs; s++)
                live(pr, pr->wide[n->id][s], i);
            if (pr->fused_from[n->id] >= 0) {
                const Node *add = g->nodes[pr->fused_from[n->id]];
                live(pr, program_operand_buf(pr, add, 0), i);
                live(pr, program_operand_buf(pr, add, 1), i);
            }
        } else if (in->reshard < 0) {
            continue; /* a member of a fused call: nothing happens here */
        } else {
            int r = in->reshard, s0 = pr->start_at[r], w = pr->wait_at[r];
            if (pr->fused_leader[r] == r) {
                live(pr, pr->fused_send[r], s0);
                live(pr, pr->fused_send[r], w);
                live(pr, pr->fused_recv[r], s0);
                live(pr, pr->fused_recv[r], w);
                continue; /* the members: above */
            }
            /* The first step's buffers are in flight from start to wait;
             * later steps run at the wait. */
            for (int j = 0; j < p->reshards[r].r.nsteps; j++) {
                const StepBufs *sb = &pr->steps[r][j];
                int from = j == 0 ? s0 : w;
                live(pr, sb->in, from);
                live(pr, sb->in, w);
                live(pr, sb->out, from);
                live(pr, sb->out, w);
                live(pr, sb->pack, from);
                live(pr, sb->pack, w);
                live(pr, sb->unpack, from);
                live(pr, sb->unpack, w);
            }
        }
    }
    /* Graph outputs (or their gathered form) survive to the end (with a
     * pipeline, on the last stage, where they are written). */
    for (int i = 0; (pr->stage < 0 || pr->stage == p->pipe->nstages - 1) && i < g->noutputs; i++)
        live(pr, program_output_buf(pr, i), end);
}

/* Memory plan: buffers in decreasing size (ties: creation order), each at
 * the lowest offset where it meets no placed buffer live at the same time
 * (sizes rounded up to 64 bytes). The placed buffers whose lifetimes meet
 * a new one come from a max-tree over all buffers sorted by first use,
 * holding each placed buffer's last use (-1 until placed): a query enters
 * only subtrees holding one, so the cost is O(log n) per buffer plus the
 * number of live buffers met, not a scan of everything placed. */
typedef struct Pair {
    int64_t a, b;
} Pair; /* a span [a, b) of the arena, or a sort key a with buffer index b */

static int pair_cmp(const void *x, const void *y)
{
    const Pair *p = x, *q = y;
    return p->a != q->a ? (p->a > q->a) - (p->a < q->a) : (p->b > q->b) - (p->b < q->b);
}

typedef struct Placer {
    const Buffer *bufs;
    const Pair *by_first; /* leaf -> (first use, buffer) */
    const int64_t *end;   /* buffer -> offset + rounded size, once placed */
    int *tree;            /* max last use over placed buffers, -1: none */
    int leaves;           /* a power of two */
    Pair *found;          /* spans of the placed buffers met */
    int nfound, cap;
} Placer;

/* Collects the placed buffers among leaves [lo, lo + width) below `node`
 * and before leaf qhi (first use <= the new buffer's last) that are live
 * at `first` or later. */
static void placer_collect(Placer *pl, int node, int lo, int width, int qhi, int first)
{
    if (lo >= qhi || pl->tree[node] < first)
        return;
    if (width == 1) {
        if (pl->nfound == pl->cap) {
            pl->cap = pl->cap ? 2 * pl->cap : 64;
            if (!(pl->found = realloc(pl->found, sizeof(Pair) * (size_t)pl->cap)))
                abort();
        }
        int b = (int)pl->by_first[lo].b;
        pl->found[pl->nfound++] = (Pair){pl->bufs[b].offset, pl->end[b]};
        return;
    }
    placer_collect(pl, 2 * node, lo, width / 2, qhi, first);
    placer_collect(pl, 2 * node + 1, lo + width / 2, width / 2, qhi, first);
}

/* The lowest offset at which [off, off + size) meets none of the spans.
 * Moving off past each span it meets, until it meets none, reaches that
 * offset in any order (it never passes it); a few passes in the order
 * found are linear and usually settle it (same-size buffers stacked one
 * above another), else one pass in offset order does. -1: past 64 bits. */
static int lowest_fit(Pair *s, int n, int64_t size, int64_t *out)
{
    int64_t off = 0, top = size;
    for (int pass = 0, moved = 1; moved; pass++) {
        moved = 0;
        if (pass == 4)
            qsort(s, (size_t)n, sizeof(Pair), pair_cmp);
        for (int k = 0; k < n && !(pass == 4 && s[k].a >= top); k++)
            if (s[k].a < top && off < s[k].b) {
                off = s[k].b;
                moved = pass < 4;
                if (ck_add_i64(off, size, &top))
                    return -1;
            }
    }
    *out = off;
    return 0;
}

/* A buffer's arena footprint: its bytes rounded up to 64. */
static int round64(int64_t bytes, int64_t *out)
{
    if (bytes < 0 || ck_add_i64(bytes, 63, out))
        return -1;
    *out &= ~(int64_t)63;
    return 0;
}

static int place(Program *pr, Diag *d)
{
    int n = pr->nbufs, m = 0, rc = -1, *leaf = malloc(sizeof(int) * (size_t)(n + 1));
    Pair *by_size = malloc(sizeof(Pair) * (size_t)(n + 1)), *by_first = malloc(sizeof(Pair) * (size_t)(n + 1));
    int64_t *size = malloc(sizeof(int64_t) * (size_t)(n + 1)), *end = malloc(sizeof(int64_t) * (size_t)(n + 1));
    Placer pl = {pr->bufs, by_first, end, NULL, 1, NULL, 0, 0};
    if (!by_size || !by_first || !leaf || !size || !end)
        abort();
    pr->arena_bytes = 0;
    for (int i = 0; i < n; i++) {
        const Buffer *b = &pr->bufs[i];
        if (b->kind < BUF_VALUE || b->last < 0 || pr->alias_of[i] >= 0)
            continue;
        if (round64(b->bytes, &size[i])) {
            diag_add(d, "rank %d: buffer %s (%lld bytes) is too large for a 64-bit arena", pr->rank, b->name,
                     (long long)b->bytes);
            goto cleanup;
        }
        by_size[m] = (Pair){-b->bytes, i};
        by_first[m++] = (Pair){b->first, i};
    }
    qsort(by_size, (size_t)m, sizeof(Pair), pair_cmp);
    qsort(by_first, (size_t)m, sizeof(Pair), pair_cmp);
    while (pl.leaves < m)
        pl.leaves *= 2;
    if (!(pl.tree = malloc(sizeof(int) * 2 * (size_t)pl.leaves)))
        abort();
    for (int i = 0; i < 2 * pl.leaves; i++)
        pl.tree[i] = -1;
    for (int i = 0; i < m; i++)
        leaf[by_first[i].b] = i;
    for (int i = 0; i < m; i++) {
        int bi = (int)by_size[i].b, lo = 0, hi = m;
        Buffer *b = &pr->bufs[bi];
        while (lo < hi) { /* leaves [0, hi) start no later than b ends */
            int mid = lo + (hi - lo) / 2;
            if (by_first[mid].a <= b->last)
                lo = mid + 1;
            else
                hi = mid;
        }
        pl.nfound = 0;
        placer_collect(&pl, 1, 0, pl.leaves, hi, b->first);
        int64_t off, top;
        if (lowest_fit(pl.found, pl.nfound, size[bi], &off) || ck_add_i64(off, size[bi], &top)) {
            diag_add(d, "rank %d: the arena outgrows 64-bit offsets placing buffer %s (%lld bytes)", pr->rank,
                     b->name, (long long)b->bytes);
            goto cleanup;
        }
        b->offset = off;
        end[bi] = top;
        if (top > pr->arena_bytes)
            pr->arena_bytes = top;
        int t = pl.leaves + leaf[bi];
        pl.tree[t] = b->last;
        for (t /= 2; t >= 1; t /= 2)
            pl.tree[t] = pl.tree[2 * t] > pl.tree[2 * t + 1] ? pl.tree[2 * t] : pl.tree[2 * t + 1];
    }
    for (int i = 0; i < n; i++)
        if (pr->alias_of[i] >= 0)
            pr->bufs[i].offset = pr->bufs[pr->alias_of[i]].offset;
    rc = 0;
cleanup:
    free(pl.tree);
    free(pl.found);
    free(by_size);
    free(by_first);
    free(leaf);
    free(size);
    free(end);
    return rc;
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
    pr->wide[n->id] = NULL;
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
        w[s] = buf_new(pr, base, NULL, BUF_SCRATCH, dt, copy.rank, copy.dims, &copy.layout);
    }
    pr->wide[n->id] = w;
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
    return buf_new(pr, base, NULL, BUF_SCRATCH, DT_F32, 1, &k, NULL);
}

static Program *build_once(const Plan *p, int rank, const ProgramOptions *opt, int prefetch, int packs,
                           Diag *d);

Program *program_build(const Plan *p, int rank, const ProgramOptions *opt, Diag *d)
{
    static const ProgramOptions none = {0};
    if (!opt)
        opt = &none;
    /* Deeper prefetch holds more gathered weights at once; back off until
     * the rank fits its memory limit. Packed GEMM weights are a copy,
     * made only where they fit too: each depth is tried with, then
     * without them. */
    for (int k = opt->prefetch; k >= 0; k--)
        for (int packs = 1; packs >= 0; packs--) {
            Program *pr = build_once(p, rank, opt, k, packs, d);
            if (!pr)
                return NULL;
            int64_t total;
            if (ck_add_i64(pr->arena_bytes, pr->weight_bytes, &total) || ck_add_i64(total, pr->input_bytes, &total) ||
                ck_add_i64(total, pr->packed_bytes, &total))
                total = INT64_MAX; /* over any limit */
            if (!opt->mem_limit || total <= opt->mem_limit) {
                pr->prefetch_used = k;
                return pr;
            }
            int last = !packs || !pr->npacks; /* without packs: the same program */
            if (k == 0 && last) {
                diag_add(d, "rank %d needs %lld bytes (arena %lld, weights %lld, inputs %lld), over --mem-limit %lld",
                         rank, (long long)total, (long long)pr->arena_bytes, (long long)pr->weight_bytes,
                         (long long)pr->input_bytes, (long long)opt->mem_limit);
                program_free(pr);
                return NULL;
            }
            program_free(pr);
            if (last)
                break;
        }
    return NULL;
}

static Program *build_once(const Plan *p, int rank, const ProgramOptions *opt, int prefetch, int packs,
                           Diag *d)
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
    pr->here = arena_alloc(&pr->arena, (size_t)p->nreshards + 1);
    mark_reshards(pr);
    pr->tensor_buf = arena_alloc(&pr->arena, (size_t)(g->ntensors + 1) * sizeof(int));
    pr->reshard_buf = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->steps = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(*pr->steps));
    pr->node_scratch = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->wide = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int *));
    pr->start_at = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->wait_at = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->fused_leader = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->fused_from = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->fused_bias = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->mm_view = arena_alloc(&pr->arena, (size_t)(2 * g->nnodes + 2) * sizeof(int));
    pr->view_into = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->packed_b = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->gemm_bias = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->fused_send = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->fused_recv = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    for (int i = 0; i < g->ntensors; i++)
        pr->tensor_buf[i] = -1;
    /* Weights first (initializers in model order, then Constant values),
     * then inputs, then node outputs in graph order. */
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
        if (pr->here[r])
            build_reshard_bufs(pr, r);
        else
            pr->reshard_buf[r] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        pr->wide[i] = NULL;
        pr->node_scratch[i] = -1;
        if (program_runs(pr, g->nodes[i])) {
            widen_bufs(pr, g->nodes[i]);
            pr->node_scratch[i] = conv_scratch(pr, g->nodes[i]);
        }
    }
    find_fusions(pr);
    find_views(pr);
    find_packs(pr, packs);
    schedule(pr, prefetch);
    fuse(pr, opt->fuse_bytes);
    find_blocking(pr);
    pr->alias_of = arena_alloc(&pr->arena, (size_t)(pr->nbufs + 1) * sizeof(int));
    pr->alias_node = arena_alloc(&pr->arena, (size_t)g->nnodes + 1);
    find_aliases(pr);
    liveness(pr);
    for (int i = 0; i < pr->nbufs; i++) { /* a view keeps the storage it shares alive */
        Buffer *b = &pr->bufs[i], *root = pr->alias_of[i] >= 0 ? &pr->bufs[pr->alias_of[i]] : NULL;
        if (root && b->last >= 0) {
            if (root->last < 0 || b->first < root->first)
                root->first = b->first;
            if (b->last > root->last)
                root->last = b->last;
        }
    }
    int64_t woff = 0, sz;
    for (int i = 0; i < pr->nbufs; i++) {
        Buffer *b = &pr->bufs[i];
        if (b->bytes < 0) {
            diag_add(d, "rank %d: buffer %s: its size overflows 64 bits", rank, b->name);
            goto fail;
        }
        if (b->kind == BUF_WEIGHT) {
            b->offset = woff;
            if (round64(b->bytes, &sz) || ck_add_i64(woff, sz, &woff)) {
                diag_add(d, "rank %d: the weights outgrow 64-bit offsets at %s", rank, b->name);
                goto fail;
            }
        } else if ((b->kind == BUF_INPUT || b->kind == BUF_RECV) &&
                   ck_add_i64(pr->input_bytes, b->bytes, &pr->input_bytes)) {
            diag_add(d, "rank %d: the inputs' total size overflows 64 bits at %s", rank, b->name);
            goto fail;
        }
    }
    pr->weight_bytes = woff;
    if (p->pipe) {
        /* A stage holds every microbatch's input blocks (stage 0), two
         * slots per value it receives or sends, and every microbatch's
         * output blocks (the last stage). */
        const Pipeline *pp = p->pipe;
        int64_t held = 0;
        for (int i = 0; i < pr->nbufs; i++) {
            const Buffer *b = &pr->bufs[i];
            if (b->kind == BUF_INPUT)
                held += b->bytes * pp->microbatches;
            else if (b->kind == BUF_RECV)
                held += 2 * b->bytes;
            else if (b->kind == BUF_VALUE && b->tensor && pp->readers[b->tensor->id])
                held += 2 * b->bytes;
        }
        for (int i = 0; pr->stage == pp->nstages - 1 && i < g->noutputs; i++)
            held += pr->bufs[program_output_buf(pr, i)].bytes * pp->microbatches;
        pr->input_bytes = held;
    }
    if (place(pr, d))
        goto fail;
    return pr;
fail:
    program_free(pr);
    return NULL;
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

/* The cost model run over this program's own schedule (plan_estimate's
 * simulation assumes every collective starts as soon as its input exists;
 * the program starts weight gathers only `prefetch` nodes ahead and waits
 * at first readers). Compute in instruction order on one stream; each
 * start on the communication stream once it is free; a wait holds compute
 * until its collective is done; later steps of a reshard run blocking at
 * its wait. Fused members cost as their leader's call carries them. */
void program_estimate(const Program *pr, ProgramEstimate *e)
{
    const Plan *p = pr->plan;
    memset(e, 0, sizeof *e);
    double *done = calloc((size_t)p->nreshards + 1, sizeof(double));
    if (!done)
        abort();
    double tc = 0, tm = 0;
    for (int i = 0; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_COMPUTE) {
            double c = plan_node_planned_seconds(p, in->node);
            if (pr->fused_from[in->node->id] >= 0) /* the bias Add it carries */
                c += plan_node_planned_seconds(p, pr->g->nodes[pr->fused_from[in->node->id]]);
            e->compute_s += c;
            tc += c;
            continue;
        }
        if (in->reshard < 0)
            continue; /* a member of a fused call: the leader's instruction */
        int r = in->reshard;
        const Reshard *rs = &p->reshards[r].r;
        if (in->kind == INST_START) {
            double s = rs->nsteps ? rs->steps[0].seconds : 0;
            for (int m = r + 1; pr->fused_leader[r] == r && m < p->nreshards; m++)
                if (pr->fused_leader[m] == r) /* a member riding in the leader's call */
                    s += p->reshards[m].r.nsteps ? p->reshards[m].r.steps[0].seconds : 0;
            double t0 = tc > tm ? tc : tm;
            done[r] = tm = t0 + s;
            e->comm_s += s;
            continue;
        }
        if (done[r] > tc) {
            e->exposed_s += done[r] - tc;
            tc = done[r];
        }
        for (int j = 1; j < rs->nsteps; j++) { /* blocking, at the wait */
            e->comm_s += rs->steps[j].seconds;
            e->exposed_s += rs->steps[j].seconds;
            tc += rs->steps[j].seconds;
        }
    }
    if (e->exposed_s > e->comm_s)
        e->exposed_s = e->comm_s; /* (t0 + s) - t0 rounds above s: not more exposed than sent */
    e->step_s = tc > tm ? tc : tm;
    free(done);
}
