/* views.c: what a rank's program need not compute or copy.
 *
 * Before the schedule: a bias Add read only by the next activation or
 * residual Add runs inside it; a Transpose read only by a MatMul becomes a
 * strided operand (CblasTrans or a leading dimension); float32 weight
 * matrices a GEMM multiplies by are packed once at start-up for the C
 * GEMM kernel. After it: a bias Add read only from a packed GEMM's result
 * is folded into the GEMM, and shape-only nodes (Reshape, Squeeze,
 * Unsqueeze, Flatten, Identity) become views of their input's storage.
 * Each pass records its decision in the node's record (codegen.h
 * ProgramNode); the emitters read it there.
 */
#include "codegen.h"

#include "templates/bodies.h" /* K_PANEL, k_panels_bytes: the packed layout */

#include <stdlib.h>
#include <string.h>

/* Bias fusion: an Add of a row bias whose only reader is the very next
 * node, an elementwise activation or a residual Add, runs inside that node
 * (one pass over the data; its intermediate never exists). Not when the
 * sum is a graph output or is resharded, nor when the Add is itself a
 * residual Add with a bias Add fused in (a chain of three Adds). */
static int is_activation(OpKind op)
{
    return op == OP_GELU || op == OP_RELU || op == OP_SIGMOID || op == OP_TANH;
}

static void find_fusions(Program *pr)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    for (int i = 0; i < g->nnodes; i++)
        pr->nodes[i].fused_from = -1;
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
        if (pr->nodes[n->id].fused_from >= 0)
            continue; /* n runs the Add before it inside itself: fused away, neither would run */
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
        pr->nodes[u->id].fused_from = n->id;
        pr->nodes[u->id].fused_bias = bias;
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
    if (!tr || tr->op != OP_TRANSPOSE || !program_runs(pr, tr) || pr->nodes[tr->id].wide || pr->nodes[mm->id].wide)
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
        pr->nodes[i].mm_view[0] = pr->nodes[i].mm_view[1] = -1;
        pr->nodes[i].view_into = -1;
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
                pr->nodes[i].mm_view[k] = tr->id;
                pr->nodes[tr->id].view_into = n->id;
            }
    }
}

/* Weights packed for the C GEMM kernel (codegen.h packed_b): a MatMul
 * (not read through a Transpose view) or a Gemm (A not transposed, alpha
 * 1) whose B is a float32 weight matrix of this rank, A float32 with at
 * least K_PACK_MIN_ROWS rows (fewer fill too little of the kernel's row
 * block). A weight is packed once; a second GEMM that reads it the other
 * way round (transB) reads it unpacked. An inference program's packs are
 * made by the compiler, into the weight file; then a weight read by
 * nothing but its packed GEMMs is stored packed only (packed_only), so
 * the rank holds each weight once. */
#define K_PACK_MIN_ROWS 8

/* Is buffer bi read by anything but the packed GEMMs of pack q (operand
 * 1): another node, a reshard, an alias, a graph output? */
static int read_unpacked(const Program *pr, int bi, int q)
{
    const Graph *g = pr->g;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (!program_runs(pr, n))
            continue;
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] && program_operand_buf(pr, n, k) == bi && (k != 1 || pr->nodes[i].packed_b != q))
                return 1;
    }
    for (int r = 0; r < pr->plan->nreshards; r++) {
        const ProgramReshard *pk = &pr->reshards[r];
        if (!pk->here)
            continue;
        if (pk->buf == bi || pr->tensor_buf[pr->plan->reshards[r].tensor->id] == bi)
            return 1;
        for (int s = 0; s < RESHARD_MAX_STEPS; s++)
            if (pk->steps[s].in == bi || pk->steps[s].out == bi)
                return 1;
    }
    for (int i = 0; i < pr->nbufs; i++)
        if (pr->bufs[i].alias_of == bi)
            return 1;
    for (int i = 0; i < g->noutputs; i++)
        if (program_holds_output(pr, g->outputs[i]) && program_output_buf(pr, i) == bi)
            return 1;
    return 0;
}

static void find_packs(Program *pr, int packs)
{
    const Graph *g = pr->g;
    pr->npacks = 0;
    pr->packed_bytes = 0;
    for (int i = 0; i < g->nnodes; i++)
        pr->nodes[i].packed_b = -1;
    if (pr->cuda || !packs)
        return;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if ((n->op != OP_MATMUL && n->op != OP_GEMM) || n->ninputs < 2 || !program_runs(pr, n) || pr->nodes[i].wide)
            continue;
        int tb = 0;
        if (n->op == OP_MATMUL && (pr->nodes[i].mm_view[0] >= 0 || pr->nodes[i].mm_view[1] >= 0))
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
                pr->nodes[i].packed_b = found;
            continue;
        }
        if (!pr->packs)
            pr->packs = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(*pr->packs));
        int in_file = !program_trains(pr);
        pr->packs[pr->npacks] = (struct PackedWeight){bi, tb, k, cols, (char)in_file, 0, k_panels_bytes(k, cols)};
        pr->nodes[i].packed_b = pr->npacks++;
        if (!in_file)
            pr->packed_bytes += k_panels_bytes(k, cols);
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
    pr->nodes[i].gemm_bias = -1;
    if (n->op != OP_MATMUL || pr->nodes[i].packed_b < 0)
        return;
    const Tensor *t = n->outputs[0];
    const Node *u = t->nconsumers == 1 ? t->consumers[0] : NULL;
    if (!u || u->op != OP_ADD || u->ninputs != 2 || !program_runs(pr, u) || pr->nodes[u->id].wide || !u->outputs[0] ||
        (u->inputs[0] == t) == (u->inputs[1] == t))
        return;
    int slot = u->inputs[1] == t;
    const Tensor *o = u->outputs[0];
    if (t->is_output || o->is_output || resharded[t->id] || resharded[o->id] || p->nodes[u->id].in_reshard[0] >= 0 ||
        p->nodes[u->id].in_reshard[1] >= 0 || pr->nodes[u->id].fused_from >= 0 ||
        (u->id + 1 < g->nnodes && pr->nodes[u->id + 1].fused_from == u->id))
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
    pr->nodes[i].gemm_bias = bb;
    pr->bufs[ob].alias_of = tb;
    pr->nodes[u->id].alias = 1;
}

static void find_aliases(Program *pr)
{
    const Graph *g = pr->g;
    const Plan *p = pr->plan;
    for (int b = 0; b < pr->nbufs; b++) {
        pr->bufs[b].alias_of = -1;
        pr->bufs[b].alias_offset = 0;
    }
    for (int i = 0; i < g->nnodes; i++)
        pr->nodes[i].alias = 0;
    char *resharded = calloc((size_t)g->ntensors + 1, 1);
    if (!resharded)
        abort();
    for (int r = 0; r < p->nreshards; r++)
        resharded[p->reshards[r].tensor->id] = 1;
    for (int i = 0; i < g->nnodes; i++)
        fold_gemm_bias(pr, i, resharded);
    /* An optimizer update writes the weight and its state in place: each
     * output is a view of the input it replaces, when that input is read
     * as stored (emit_optimizer refuses the update otherwise). */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int k = 0; k < n->noutputs && program_runs(pr, n); k++) {
            int j = ir_output_in_place(n, k);
            if (j < 0 || !n->outputs[k])
                continue;
            int xb = program_operand_buf(pr, n, j), yb = pr->tensor_buf[n->outputs[k]->id];
            if (xb >= 0 && yb >= 0 && pr->bufs[xb].kind == BUF_WEIGHT && pr->bufs[xb].bytes == pr->bufs[yb].bytes) {
                pr->bufs[yb].alias_of = xb;
                continue;
            }
            /* ZeRO: the update runs on this rank's block of its local
             * weight (plan_zero_shard's: the outermost dim the zero axis
             * divides, every dim before it of local extent 1, so the
             * block is contiguous): the block's place in the weight's own
             * storage. */
            int wb = pr->tensor_buf[n->inputs[j]->id], ax = p->zero_axis;
            if (yb < 0 || wb < 0 || ax < 0 || pr->bufs[wb].kind != BUF_WEIGHT)
                continue;
            Sharding z = pr->bufs[wb].layout;
            if (z.rank < 1 || (sharding_used_axes(&z) & (1u << ax)))
                continue;
            plan_zero_shard(p, n->inputs[j], &z);
            if (sharding_equal(&z, &pr->bufs[wb].layout) || !sharding_equal(&z, &pr->bufs[yb].layout))
                continue;
            pr->bufs[yb].alias_of = wb;
            pr->bufs[yb].alias_offset = mesh_coord(&p->mesh, pr->vrank, ax) * pr->bufs[yb].bytes;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (!is_shape_only(n->op) || !program_runs(pr, n) || n->noutputs != 1 || !n->outputs[0] || !n->inputs[0] ||
            pr->nodes[i].wide || pr->nodes[i].view_into >= 0)
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
        pr->bufs[yb].alias_of = pr->bufs[xb].alias_of >= 0 ? pr->bufs[xb].alias_of : xb;
        pr->nodes[i].alias = 1;
    }
    free(resharded);
}

void program_fold_views(Program *pr, int packs)
{
    find_fusions(pr);
    find_views(pr);
    find_packs(pr, packs);
}

void program_fold_aliases(Program *pr)
{
    find_aliases(pr);
    /* (after the aliases: a view of a weight reads it unpacked) */
    for (int q = 0; q < pr->npacks; q++)
        if (pr->packs[q].in_file && !pr->g->decode_slots)
            pr->bufs[pr->packs[q].buf].packed_only = !read_unpacked(pr, pr->packs[q].buf, q);
}
