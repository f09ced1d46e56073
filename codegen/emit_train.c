/* emit_train.c: the optimizer updates of --train (ir/ops_train.def), and
 * the fused Gelu backward its vjp rule writes (GeluGrad, at the end).
 *
 * Each update runs in optimizer_step() on this rank's shard of the weight,
 * in place: its outputs are views of the weight's and the state's own
 * storage (views.c find_aliases), so a trained weight is where the next
 * step's forward reads it and where a checkpoint finds it. The gradient
 * arrives in the weight's layout: when it was partial over a data-parallel
 * axis, the reshard lowering all-reduced it first, and this node is where
 * that all-reduce is waited for. Under --zero 1/2 the update runs on this
 * rank's block of the weight (the gradient reduce-scattered to it, the
 * optimizer state stored split) and an in-place all-gather follows.
 */
#include "codegen.h"

#include <string.h>

/* ZeRO: each rank updated its block of the weight in the weight's own
 * storage; one in-place all-gather over the zero axis makes the whole
 * updated weight every rank's again, for the next forward. */
static int write_back(const EmitCtx *c, const Buffer *home, const Buffer *block, Diag *d)
{
    (void)d;
    const Program *pr = c->pr;
    unsigned char ax = (unsigned char)pr->plan->zero_axis;
    char comm[96], nm[ESC_NAME_CAP];
    emit_comm_name(pr, &ax, 1, comm, sizeof comm);
    fprintf(c->f, "    /* ZeRO: every rank updated its block of %s; gather the blocks over %s, in place */\n",
            CMT(c->n->inputs[0]->name, nm), comm + 5);
    fprintf(c->f, "    rt_allgather_inplace(%s, %lld, %s, \"all-gather of the updated weight (ZeRO)\");\n", home->name,
            (long long)block->bytes, comm);
    return 0;
}

/* A weight the GEMM kernel reads packed (views.c find_packs): packed again
 * once updated, so the next forward multiplies by the new values. */
static void repack(const EmitCtx *c, const Buffer *home)
{
    const Program *pr = c->pr;
    for (int q = 0; q < pr->npacks; q++) {
        const struct PackedWeight *pw = &pr->packs[q];
        if (&pr->bufs[pw->buf] != home)
            continue;
        fprintf(c->f, "    k_repack_b_f32(P%s, %s, %lld, %lld, %d); /* its GEMM panels, packed again */\n",
                home->name + 1, home->name, (long long)pw->k, (long long)pw->n, pw->trans);
    }
}

int emit_optimizer(const EmitCtx *c, Diag *d)
{
    const Node *n = c->n;
    const Buffer *w = emit_in(c, 0), *g = emit_in(c, 1), *y = emit_out(c, 0);
    if (w->dtype != DT_F32 || g->dtype != DT_F32) {
        diag_add(d, "--train: weight \"%s\" is %s: only float32 weights train yet", n->inputs[0]->label,
                 dtype_name(w->dtype));
        return -1;
    }
    const Buffer *home = y->alias_of >= 0 ? &c->pr->bufs[y->alias_of] : NULL;
    int zero = home && home != w && home->tensor == n->inputs[0];
    if (!home || home->kind != BUF_WEIGHT || (!zero && home != w)) {
        diag_add(d, "--train: weight \"%s\": its update is not planned in the weight's own layout (%s)",
                 n->inputs[0]->label, w->kind != BUF_WEIGHT ? "the weight is resharded first" : "no in-place view");
        return -1;
    }
    if (zero) /* the update reads and writes the block in place */
        w = y;
    int64_t count = y->bytes / 4;
    char lr[160], base[40], wd[40], a[40], b[40], e[40];
    emit_cf(node_attr_float(n, "lr", 0), base);
    int64_t warm = node_attr_int(n, "warmup_steps", 0), total = node_attr_int(n, "total_steps", 0);
    if (warm || node_attr_int(n, "cosine", 0))
        snprintf(lr, sizeof lr, "%s * rt_lr_factor(g_step, %lld, %lld, %d)", base, (long long)warm, (long long)total,
                 (int)node_attr_int(n, "cosine", 0));
    else
        snprintf(lr, sizeof lr, "%s", base);
    emit_cf(node_attr_float(n, "weight_decay", 0), wd);
    /* fp16: an overflowed step's updates are skipped (g_apply), and AdamW
     * counts the steps it took */
    const char *guard = c->pr->g->loss_scale ? "    if (g_apply)\n    " : "";
    const char *step = c->pr->g->loss_scale ? "g_step - g_skipped" : "g_step";
    if (n->op == OP_SGD) {
        const Buffer *m = n->ninputs > 2 ? emit_in(c, 2) : NULL;
        emit_cf(node_attr_float(n, "momentum", 0), a);
        fprintf(c->f, "%s    k_sgd_f32(", guard);
        fprintf(c->f, "%s, %s, %s, %lld, %s, %s, %s); /* w, grad, momentum, n, lr, momentum, weight decay */\n",
                w->name, g->name, m ? m->name : "NULL", (long long)count, lr, a, wd);
        int rc = zero ? write_back(c, home, y, d) : 0;
        repack(c, home);
        return rc;
    }
    const Buffer *m = emit_in(c, 2), *v = emit_in(c, 3);
    emit_cf(node_attr_float(n, "beta1", 0.9f), a);
    emit_cf(node_attr_float(n, "beta2", 0.999f), b);
    emit_cf(node_attr_float(n, "eps", 1e-8f), e);
    fprintf(c->f,
            "%s    k_adamw_f32(%s, %s, %s, %s, %lld, %s, %s, %s, %s, %s, %s); /* w, grad, m, v, n, lr, beta1, beta2, "
            "eps, weight decay, step */\n",
            guard, w->name, g->name, m->name, v->name, (long long)count, lr, a, b, e, wd, step);
    int rc = zero ? write_back(c, home, y, d) : 0;
    repack(c, home);
    return rc;
}

/* GeluGrad: dX = dY * Gelu'(X), one pass (k_gelu_grad_f32). The factor
 * rule is elementwise, so the three local blocks are one shape. */
int emit_gelu_grad(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *dy = emit_in(c, 0), *x = emit_in(c, 1), *y = emit_out(c, 0);
    int tanh_form = !strcmp(node_attr_str(c->n, "approximate", "none"), "tanh");
    fprintf(c->f, "    k_gelu_grad_f32(%s, %s, %s, %lld, %d); /* dX, dY, X, n, tanh form */\n", y->name, dy->name,
            x->name, (long long)(y->bytes / 4), tanh_form);
    return 0;
}
