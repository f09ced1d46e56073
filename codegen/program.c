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
 * input and output stay live until its wait), and buffers are placed by
 * first fit in decreasing size, so buffers whose lifetimes do not overlap
 * share memory. Weights and inputs are persistent, outside the arena.
 */
#include "codegen.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int buf_new(Program *pr, const char *base, const Tensor *t, BufKind kind, DType dt, int rank,
                   const int64_t *dims, const Sharding *layout)
{
    if (pr->nbufs == pr->bufs_cap) {
        pr->bufs_cap = pr->bufs_cap ? 2 * pr->bufs_cap : 64;
        Buffer *nb = arena_alloc(&pr->arena, (size_t)pr->bufs_cap * sizeof(Buffer));
        if (pr->nbufs)
            memcpy(nb, pr->bufs, (size_t)pr->nbufs * sizeof(Buffer));
        pr->bufs = nb;
    }
    Buffer *b = &pr->bufs[pr->nbufs];
    memset(b, 0, sizeof(*b));
    /* A valid, unique C identifier from the ONNX name. */
    char id[100];
    size_t k = 0;
    for (const char *s = base; *s && k < sizeof id - 1; s++)
        id[k++] = isalnum((unsigned char)*s) ? *s : '_';
    id[k] = 0;
    snprintf(b->name, sizeof b->name, "%s_%s", kind == BUF_WEIGHT ? "W" : kind == BUF_INPUT ? "I" : "B", id);
    for (int i = 0, n = 2; i < pr->nbufs; i++)
        if (strcmp(pr->bufs[i].name, b->name) == 0) {
            snprintf(b->name, sizeof b->name, "%s_%s_%d", kind == BUF_WEIGHT ? "W" : kind == BUF_INPUT ? "I" : "B",
                     id, n++);
            i = -1;
        }
    b->tensor = t;
    b->kind = kind;
    b->dtype = dt;
    b->rank = rank;
    memcpy(b->dims, dims, (size_t)rank * sizeof(int64_t));
    if (layout)
        b->layout = *layout;
    b->bytes = (int64_t)dtype_size(dt);
    for (int i = 0; i < rank; i++)
        b->bytes *= dims[i];
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
        Inst *ni = arena_alloc(&pr->arena, (size_t)pr->insts_cap * sizeof(Inst));
        if (pr->ninsts)
            memcpy(ni, pr->insts, (size_t)pr->ninsts * sizeof(Inst));
        pr->insts = ni;
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
        const Buffer *ib = &pr->bufs[in];
        if (s->kind == COLL_ALL_GATHER && outer_of(ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, t->rank, local, NULL);
        } else if (s->kind == COLL_ALL_TO_ALL) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib->rank, ib->dims, NULL);
            snprintf(base, sizeof base, "%s_r%d_s%d_recv", t->name, r, j);
            sb->unpack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib->rank, ib->dims, NULL);
        } else if (s->kind == COLL_REDUCE_SCATTER && outer_of(ib, s->dim) > 1) {
            snprintf(base, sizeof base, "%s_r%d_s%d_send", t->name, r, j);
            sb->pack = buf_new(pr, base, NULL, BUF_RESHARD, t->dtype, ib->rank, ib->dims, NULL);
        }
        in = out;
    }
    pr->reshard_buf[r] = in;
}

static void schedule(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    char *started = calloc((size_t)p->nreshards + 1, 1), *waited = calloc((size_t)p->nreshards + 1, 1);
    if (!started || !waited)
        abort();
    /* Reshards of weights and inputs start before the first node. */
    for (int r = 0; r < p->nreshards; r++)
        if (!p->reshards[r].tensor->producer) {
            pr->start_at[r] = pr->ninsts;
            inst_add(pr, INST_START, NULL, r);
            started[r] = 1;
        }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) {
            int r = p->nodes[i].in_reshard[k];
            if (r >= 0 && !waited[r]) {
                pr->wait_at[r] = pr->ninsts;
                inst_add(pr, INST_WAIT, n, r);
                waited[r] = 1;
            }
        }
        inst_add(pr, INST_COMPUTE, n, -1);
        for (int k = 0; k < n->noutputs; k++)
            for (int r = 0; n->outputs[k] && r < p->nreshards; r++)
                if (p->reshards[r].tensor == n->outputs[k] && !started[r]) {
                    pr->start_at[r] = pr->ninsts;
                    inst_add(pr, INST_START, n, r);
                    started[r] = 1;
                }
    }
    for (int r = 0; r < p->nreshards; r++)
        if (!waited[r]) {
            pr->wait_at[r] = pr->ninsts;
            inst_add(pr, INST_WAIT, NULL, r);
            waited[r] = 1;
        }
    free(started);
    free(waited);
}

static void liveness(Program *pr)
{
    const Plan *p = pr->plan;
    const Graph *g = pr->g;
    int end = pr->ninsts;
    for (int i = 0; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_COMPUTE) {
            const Node *n = in->node;
            for (int k = 0; k < n->ninputs; k++)
                if (n->inputs[k])
                    live(pr, program_operand_buf(pr, n, k), i);
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k])
                    live(pr, pr->tensor_buf[n->outputs[k]->id], i);
            live(pr, pr->node_scratch[n->id], i);
        } else {
            int r = in->reshard, s0 = pr->start_at[r], w = pr->wait_at[r];
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
    /* Graph outputs (or their gathered form) survive to the end. */
    for (int i = 0; i < g->noutputs; i++) {
        int r = p->out_reshard[i];
        live(pr, r >= 0 ? pr->reshard_buf[r] : pr->tensor_buf[g->outputs[i]->id], end);
    }
}

/* First fit in decreasing size over lifetime-overlapping placed buffers. */
static void place(Program *pr)
{
    int n = pr->nbufs, *order = malloc(sizeof(int) * (size_t)(n + 1)), *placed = malloc(sizeof(int) * (size_t)(n + 1));
    int nplaced = 0;
    if (!order || !placed)
        abort();
    int m = 0;
    for (int i = 0; i < n; i++)
        if (pr->bufs[i].kind >= BUF_VALUE && pr->bufs[i].last >= 0)
            order[m++] = i;
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && pr->bufs[order[j]].bytes > pr->bufs[order[j - 1]].bytes; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    pr->arena_bytes = 0;
    for (int i = 0; i < m; i++) {
        Buffer *b = &pr->bufs[order[i]];
        int64_t size = (b->bytes + 63) & ~(int64_t)63, off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int k = 0; k < nplaced; k++) {
                const Buffer *o = &pr->bufs[placed[k]];
                int64_t osz = (o->bytes + 63) & ~(int64_t)63;
                int overlap_t = !(o->last < b->first || b->last < o->first);
                if (overlap_t && off < o->offset + osz && o->offset < off + size) {
                    off = o->offset + osz;
                    moved = 1;
                }
            }
        }
        b->offset = off;
        placed[nplaced++] = order[i];
        if (off + size > pr->arena_bytes)
            pr->arena_bytes = off + size;
    }
    free(order);
    free(placed);
}

static int conv_scratch(Program *pr, const Node *n)
{
    if (n->op != OP_CONV)
        return -1;
    const Buffer *x = &pr->bufs[program_operand_buf(pr, n, 0)];
    const Buffer *y = &pr->bufs[pr->tensor_buf[n->outputs[0]->id]];
    int64_t group = node_attr_int(n, "group", 1), k = x->dims[1] / group;
    for (int i = 2; i < x->rank; i++)
        k *= pr->bufs[program_operand_buf(pr, n, 1)].dims[i];
    for (int i = 2; i < y->rank; i++)
        k *= y->dims[i];
    char base[160];
    snprintf(base, sizeof base, "%s_im2col", n->name);
    return buf_new(pr, base, NULL, BUF_SCRATCH, DT_F32, 1, &k, NULL);
}

Program *program_build(const Plan *p, int rank, Diag *d)
{
    (void)d;
    const Graph *g = p->g;
    Program *pr = calloc(1, sizeof(Program));
    if (!pr)
        abort();
    pr->plan = p;
    pr->g = g;
    pr->rank = rank;
    for (int a = 0; a < p->mesh.naxes; a++)
        pr->coords[a] = mesh_coord(&p->mesh, rank, a);
    pr->tensor_buf = arena_alloc(&pr->arena, (size_t)(g->ntensors + 1) * sizeof(int));
    pr->reshard_buf = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->steps = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(*pr->steps));
    pr->node_scratch = arena_alloc(&pr->arena, (size_t)(g->nnodes + 1) * sizeof(int));
    pr->start_at = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    pr->wait_at = arena_alloc(&pr->arena, (size_t)(p->nreshards + 1) * sizeof(int));
    for (int i = 0; i < g->ntensors; i++)
        pr->tensor_buf[i] = -1;
    /* Weights first (initializers in model order, then Constant values),
     * then inputs, then node outputs in graph order. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->is_initializer && t->nconsumers)
            pr->tensor_buf[i] = tensor_buf(pr, t, BUF_WEIGHT);
    }
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_CONSTANT)
            pr->tensor_buf[g->nodes[i]->outputs[0]->id] = tensor_buf(pr, g->nodes[i]->outputs[0], BUF_WEIGHT);
    for (int i = 0; i < g->ninputs; i++)
        pr->tensor_buf[g->inputs[i]->id] = tensor_buf(pr, g->inputs[i], BUF_INPUT);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k] && pr->tensor_buf[n->outputs[k]->id] < 0)
                pr->tensor_buf[n->outputs[k]->id] = tensor_buf(pr, n->outputs[k], BUF_VALUE);
    }
    for (int r = 0; r < p->nreshards; r++)
        build_reshard_bufs(pr, r);
    for (int i = 0; i < g->nnodes; i++)
        pr->node_scratch[i] = conv_scratch(pr, g->nodes[i]);
    schedule(pr);
    liveness(pr);
    place(pr);
    int64_t woff = 0;
    for (int i = 0; i < pr->nbufs; i++) {
        Buffer *b = &pr->bufs[i];
        if (b->kind == BUF_WEIGHT) {
            b->offset = woff;
            woff += (b->bytes + 63) & ~(int64_t)63;
        } else if (b->kind == BUF_INPUT) {
            pr->input_bytes += b->bytes;
        }
    }
    pr->weight_bytes = woff;
    return pr;
}

void program_free(Program *pr)
{
    if (!pr)
        return;
    arena_free(&pr->arena);
    free(pr);
}
