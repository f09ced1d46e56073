/* emit_train.c: the optimizer updates of --train (ir/ops_train.def).
 *
 * Each update runs in optimizer_step() on this rank's shard of the weight,
 * in place: its outputs are views of the weight's and the state's own
 * storage (views.c find_aliases), so a trained weight is where the next
 * step's forward reads it and where a checkpoint finds it. The gradient
 * arrives in the weight's layout: when it was partial over a data-parallel
 * axis, the reshard lowering all-reduced it first, and this node is where
 * that all-reduce is waited for.
 */
#include "codegen.h"

#include <string.h>

int emit_optimizer(const EmitCtx *c, Diag *d)
{
    const Node *n = c->n;
    const Buffer *w = emit_in(c, 0), *g = emit_in(c, 1), *y = emit_out(c, 0);
    if (w->dtype != DT_F32 || g->dtype != DT_F32) {
        diag_add(d, "--train: weight \"%s\" is %s: only float32 weights train yet", n->inputs[0]->label,
                 dtype_name(w->dtype));
        return -1;
    }
    if (w->kind != BUF_WEIGHT || y->alias_of < 0 || &c->pr->bufs[y->alias_of] != w) {
        diag_add(d, "--train: weight \"%s\": its update is not planned in the weight's own layout (%s)",
                 n->inputs[0]->label, w->kind != BUF_WEIGHT ? "the weight is resharded first" : "no in-place view");
        return -1;
    }
    int64_t count = w->bytes / 4;
    char lr[40], wd[40], a[40], b[40], e[40];
    emit_cf(node_attr_float(n, "lr", 0), lr);
    emit_cf(node_attr_float(n, "weight_decay", 0), wd);
    if (n->op == OP_SGD) {
        const Buffer *m = n->ninputs > 2 ? emit_in(c, 2) : NULL;
        emit_cf(node_attr_float(n, "momentum", 0), a);
        fprintf(c->f, "    k_sgd_f32(%s, %s, %s, %lld, %s, %s, %s); /* w, grad, momentum, n, lr, momentum, weight decay */\n",
                w->name, g->name, m ? m->name : "NULL", (long long)count, lr, a, wd);
        return 0;
    }
    const Buffer *m = emit_in(c, 2), *v = emit_in(c, 3);
    emit_cf(node_attr_float(n, "beta1", 0.9f), a);
    emit_cf(node_attr_float(n, "beta2", 0.999f), b);
    emit_cf(node_attr_float(n, "eps", 1e-8f), e);
    fprintf(c->f,
            "    k_adamw_f32(%s, %s, %s, %s, %lld, %s, %s, %s, %s, %s, g_step); /* w, grad, m, v, n, lr, beta1, beta2, "
            "eps, weight decay, step */\n",
            w->name, g->name, m->name, v->name, (long long)count, lr, a, b, e, wd);
    return 0;
}
