/* emit_moe.c: what a program with mixture-of-experts layers (ir/moe.c)
 * adds around forward(): the counters its dispatches set and the --stats
 * report of them, and which of its reshards are the layers' all-to-alls
 * that move only filled columns (the target writes those: emit_target_mpi.c).
 * The kernels are emit_index.c's. */
#include "codegen.h"

#include <limits.h>

/* Does the program keep the bytes its all-to-alls moved? Not a CUDA
 * decoding program: its all-to-alls are fixed-size and it has no --stats
 * to read them (nvcc warns of a variable set and never read). */
static int moe_moved_counters(const Program *pr)
{
    return !(pr->cuda && pr->g->decode_slots);
}

/* The counters and what --stats says of each layer. */
void emit_moe_state(Emitter *e, FILE *f)
{
    const Graph *g = e->pr->g;
    int layers = moe_layers(g);
    if (!layers)
        return;
    fprintf(f, "\n/* ---- mixture of experts: what --stats reports ---- */\n\n"
               "#define MOE_LAYERS %d\n"
               "/* Per layer, the (token, expert) pairs this rank's experts had no room for in\n"
               " * the last forward(), counted by one rank of those holding the same block. */\n"
               "static int64_t *g_moe_dropped;\n"
               "%s"
               "static const RtMoeInfo rt_moe[MOE_LAYERS] = { /* dispatch, pairs, capacity, groups */\n",
            layers,
            moe_moved_counters(e->pr)
                ? "/* Per layer, the bytes its counts-based all-to-alls carried in the last forward(),\n"
                  " * to the experts and back, then the same to other ranks only (only filled columns\n"
                  " * move; runtime.c rt_moe_pack). */\n"
                  "static int64_t *g_moe_moved;\n"
                : "");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->folded || n->op != OP_MOE_DISPATCH)
            continue;
        const Tensor *ids = n->inputs[1];
        fprintf(f, "    {");
        esc_c_string(f, n->label); /* printed to a terminal */
        fprintf(f, ", %lld, %lld, %lld},\n", (long long)(ids->dims[0] * ids->dims[1] * ids->dims[2]),
                (long long)node_attr_int(n, "capacity", 0), (long long)ids->dims[0]);
    }
    fprintf(f, "};\n");
}

/* In main: the counters before the first forward(). */
void emit_moe_init(Emitter *e)
{
    if (moe_layers(e->pr->g))
        fprintf(e->f, "    g_moe_dropped = rt_counters(MOE_LAYERS);\n%s",
                moe_moved_counters(e->pr) ? "    g_moe_moved = rt_counters(4 * MOE_LAYERS);\n" : "");
}

/* In main, after the passes: --stats. */
void emit_moe_stats(Emitter *e)
{
    if (moe_layers(e->pr->g))
        fprintf(e->f, "    if (args.stats) /* every MoE layer's dropped pairs in the last forward() */\n"
                      "        rt_moe_stats(rt_moe, g_moe_dropped, g_moe_moved, MOE_LAYERS);\n");
}

/* Is reshard r one step of all-to-all over whole blocks of a float32
 * tensor, moving dim `from` to dim `to`? */
static int plain_all_to_all(const Program *pr, int r, int from, int to)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[0];
    const Mesh *m = &pr->plan->mesh;
    return pr->reshards[r].here && rr->r.nsteps == 1 && s->kind == COLL_ALL_TO_ALL && s->dim == from &&
           s->dim_to == to && rr->tensor->dtype == DT_F32 && rr->tensor->rank == 4 &&
           !sharding_dim_uneven(&rr->src, m, rr->tensor, from) && !sharding_dim_uneven(&s->after, m, rr->tensor, from) &&
           !sharding_dim_uneven(&rr->src, m, rr->tensor, to) && !sharding_dim_uneven(&s->after, m, rr->tensor, to);
}

/* The dispatch's side of emit_moe_move: buf [G, E, D, C] from its groups
 * split to its experts split, every expert on the sending side, the slots
 * split as its groups. */
static int dispatch_move(const Program *pr, int r, const Node *disp, MoeMove *m)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    if (rr->tensor != disp->outputs[0] || !plain_all_to_all(pr, r, 0, 1))
        return 0;
    const Buffer *in = &pr->bufs[pr->reshards[r].steps[0].in];
    const Buffer *slots = &pr->bufs[pr->tensor_buf[disp->outputs[1]->id]];
    int p = mesh_group_size(&pr->plan->mesh, rr->r.steps[0].axes);
    if (in->dims[1] != rr->tensor->dims[1] || slots->dims[0] != in->dims[0] || p > 256 || in->dims[1] % p ||
        in->bytes / 4 > INT_MAX)
        return 0;
    *m = (MoeMove){1, moe_layer_index(pr->g, disp), r, p, in->dims[0], in->dims[1] / p, in->dims[2], in->dims[3],
                   slots->dims[1] * slots->dims[2], slots->name};
    return 1;
}

int emit_moe_move(const Program *pr, int r, MoeMove *m)
{
    const Tensor *t = pr->plan->reshards[r].tensor;
    if (pr->cuda) /* NCCL has no all-to-all of variable sizes: the CUDA target keeps the fixed-size one */
        return 0;
    if (t->producer && t->producer->op == OP_MOE_DISPATCH && !t->producer->folded)
        return dispatch_move(pr, r, t->producer, m);
    /* y [G, E, D, C] of a combine: back from its experts split to its
     * groups split, the same blocks the layer's dispatch reshard sent
     * (whose counts say which columns are filled). */
    const Node *comb = NULL;
    for (int c = 0; c < t->nconsumers; c++)
        if (!t->consumers[c]->folded && t->consumers[c]->op == OP_MOE_COMBINE && t->consumers[c]->inputs[0] == t)
            comb = t->consumers[c];
    const Node *disp = comb ? comb->inputs[1]->producer : NULL;
    if (!disp || disp->op != OP_MOE_DISPATCH || !plain_all_to_all(pr, r, 1, 0))
        return 0;
    const Buffer *out = &pr->bufs[pr->reshards[r].steps[0].out];
    for (int rd = 0; rd < pr->plan->nreshards; rd++) {
        MoeMove d;
        if (pr->plan->reshards[rd].tensor != disp->outputs[0] || !dispatch_move(pr, rd, disp, &d))
            continue;
        if (d.p != mesh_group_size(&pr->plan->mesh, pr->plan->reshards[r].r.steps[0].axes) ||
            pr->plan->reshards[rd].r.steps[0].axes != pr->plan->reshards[r].r.steps[0].axes ||
            out->dims[0] != d.gl || out->dims[1] != d.el * d.p || out->dims[2] != d.d || out->dims[3] != d.cap ||
            pr->reshards[rd].start_at > pr->reshards[r].start_at)
            continue;
        *m = d;
        m->to_experts = 0;
        return 1;
    }
    return 0;
}

/* The layer's dispatch reshard (to the experts) of dispatch node disp, or -1. */
static int dispatch_reshard(const Program *pr, const Node *disp, MoeMove *m)
{
    for (int rd = 0; rd < pr->plan->nreshards; rd++)
        if (pr->plan->reshards[rd].tensor == disp->outputs[0] && dispatch_move(pr, rd, disp, m))
            return rd;
    return -1;
}

int emit_moe_gemm(const Program *pr, const Node *n, MoeMove *m)
{
    if (pr->cuda || n->op != OP_MATMUL || n->outputs[0]->dtype != DT_F32)
        return -1;
    /* Which layer: the first GEMM reads the dispatch buffer; the second's
     * result is read by the combine. */
    const Node *disp = NULL;
    const Tensor *b = n->inputs[1], *y = n->outputs[0];
    int rd = -1, ri = pr->plan->nodes[n->id].in_reshard[1];
    if (b->producer && b->producer->op == OP_MOE_DISPATCH && b == b->producer->outputs[0]) {
        disp = b->producer;
        rd = dispatch_reshard(pr, disp, m);
        if (rd < 0 || ri != rd) /* it must read the buffer that all-to-all filled */
            return -1;
    } else {
        for (int c = 0; c < y->nconsumers && !disp; c++)
            if (!y->consumers[c]->folded && y->consumers[c]->op == OP_MOE_COMBINE && y->consumers[c]->inputs[0] == y)
                disp = y->consumers[c]->inputs[1]->producer;
        if (!disp || disp->op != OP_MOE_DISPATCH || (rd = dispatch_reshard(pr, disp, m)) < 0)
            return -1;
    }
    /* Its batches must be the expert side's (group, expert) blocks in
     * order: A [el, M, K] per expert, B [p * gl, el, K, N], y likewise. */
    const Buffer *ba = &pr->bufs[pr->tensor_buf[n->inputs[0]->id]];
    const Buffer *by = &pr->bufs[pr->tensor_buf[y->id]];
    const Buffer *bb = ri >= 0 ? &pr->bufs[pr->reshards[ri].buf] : &pr->bufs[pr->tensor_buf[b->id]];
    if (pr->plan->nodes[n->id].in_reshard[0] >= 0 || ba->rank != 3 || bb->rank != 4 || by->rank != 4 ||
        ba->dims[0] != m->el || bb->dims[0] != m->p * m->gl || bb->dims[1] != m->el || bb->dims[3] != m->cap ||
        by->dims[0] != bb->dims[0] || by->dims[1] != m->el || by->dims[3] != m->cap || ba->dims[2] != bb->dims[2] ||
        by->dims[2] != ba->dims[1])
        return -1;
    for (int i = 0; i < pr->ninsts; i++) /* the counts are this forward()'s: the dispatch moved before it */
        if (pr->insts[i].node == n && pr->insts[i].kind == INST_COMPUTE)
            return pr->reshards[rd].start_at < i ? rd : -1;
    return -1;
}
