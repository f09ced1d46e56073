/* emit_loss.c: kernel calls for the loss family (ir/ops_loss.def).
 *
 * Each emitter works on this rank's blocks with local dims. The factor
 * rules (partition/rules_loss.c) keep every dim these ops work along whole
 * on each rank: the class dim of the losses, the axis of Hardmax and
 * LpNormalization, the axes of ReduceLogSum and MeanVarianceNormalization,
 * both dims of EyeLike. The one split that changes a result is the batch
 * of a loss with reduction "sum": the kernel sums this rank's block and
 * the plan adds the ranks' partial sums, which the call's comment says.
 * The kernels are the k_* of templates/kernels_loss.c and cuda_loss.cu.
 */
#include "codegen.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* An int64 from the model as a C literal (INT64_MIN has no literal). */
static const char *i64_lit(int64_t v, char *buf, size_t cap)
{
    if (v == INT64_MIN)
        snprintf(buf, cap, "INT64_MIN");
    else
        snprintf(buf, cap, "%lldLL", (long long)v);
    return buf;
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: one kernel; for
 * the latter it takes the log-softmax over the class dim first. */
int emit_loss(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Node *n = c->n;
    const Buffer *x = emit_in(c, 0), *t = emit_in(c, 1), *w = emit_in(c, 2);
    const Buffer *y = emit_out(c, 0), *lp = emit_out(c, 1);
    const char *red = node_attr_str(n, "reduction", "mean");
    const char *code = strcmp(red, "none") == 0  ? "K_LOSS_NONE"
                     : strcmp(red, "sum") == 0 ? "K_LOSS_SUM"
                                               : "K_LOSS_MEAN";
    const Attr *ii = node_attr(n, "ignore_index");
    int has_ii = ii && ii->type == ATTR_INT;
    char lit[32];
    fprintf(c->f, "    k_nll_f32(%d, %s, %s, %s, %s, %s, %lld, %lld, %lld, %d, %s, %s);"
                  " /* softmax first, n, classes, inner, has ignore_index, ignore_index, reduction */%s\n",
            n->op == OP_SCE_LOSS, y->name, lp ? lp->name : "NULL", x->name, t->name, w ? w->name : "NULL",
            (long long)x->dims[0], (long long)x->dims[1], (long long)emit_prod(x->dims, 2, x->rank), has_ii,
            i64_lit(has_ii ? ii->i : 0, lit, sizeof lit), code,
            y->layout.partial ? "\n    /* a local sum: the plan adds the ranks' results */" : "");
    return 0;
}

/* Inference Dropout: the data unchanged, the mask all true. */
int emit_dropout(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0), *m = emit_out(c, 1);
    fprintf(c->f, "    k_copy(%s, %s, %lld); /* inference: Dropout is the identity */\n", y->name, x->name,
            (long long)y->bytes);
    if (m)
        fprintf(c->f, "    k_dropout_mask(%s, %lld); /* every element kept */\n", m->name, (long long)m->bytes);
    return 0;
}

/* Hardmax and LpNormalization over [outer, axis, inner]. */
int emit_loss_axis(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank);
    long long o = (long long)emit_prod(x->dims, 0, ax), len = (long long)x->dims[ax],
              in = (long long)emit_prod(x->dims, ax + 1, x->rank);
    if (c->n->op == OP_HARDMAX)
        fprintf(c->f, "    k_hardmax_f32(%s, %s, %lld, %lld, %lld); /* outer, axis, inner */\n", y->name, x->name, o,
                len, in);
    else
        fprintf(c->f, "    k_lp_norm_f32(%s, %s, %lld, %lld, %lld, %d); /* outer, axis, inner, p */\n", y->name,
                x->name, o, len, in, (int)node_attr_int(c->n, "p", 2));
    return 0;
}

/* ReduceLogSum and MeanVarianceNormalization: x's dims and the mask of
 * the dims they work over (the output of ReduceLogSum is x's kept dims in
 * order, whether or not keepdims leaves 1s among them). */
int emit_loss_masked(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *axes = node_attr(c->n, "axes");
    unsigned mask = 0;
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << emit_norm_axis(axes->ints[i], x->rank);
    if (c->n->op == OP_MVN) {
        if (!axes)
            mask = 1u | 4u | 8u; /* N, H, W */
    } else if (!axes || axes->n == 0) {
        mask = node_attr_int(c->n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    }
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", x->dims, x->rank);
    fprintf(c->f, "        %s(%s, %s, %d, dims, 0x%xu); /* rank, mask of the %s dims */\n    }\n",
            c->n->op == OP_MVN ? "k_mvn_f32" : "k_reduce_log_sum_f32", y->name, x->name, x->rank, mask,
            c->n->op == OP_MVN ? "normalised" : "reduced");
    return 0;
}

/* EyeLike too large to fold (ir/ops_loss.c): a kernel in the compute type. */
int emit_eyelike(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *y = emit_out(c, 0);
    const char *sfx = y->dtype == DT_F32 ? "f32" : y->dtype == DT_I64 ? "i64" : "bool";
    char lit[32];
    fprintf(c->f, "    k_eyelike_%s(%s, %lld, %lld, %s); /* rows, cols, k */\n", sfx, y->name, (long long)y->dims[0],
            (long long)y->dims[1], i64_lit(node_attr_int(c->n, "k", 0), lit, sizeof lit));
    return 0;
}
