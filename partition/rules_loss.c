/* rules_loss.c: factor rules of the loss family (ir/ops_loss.def).
 *
 * The losses index the class dim by the target, so it stays whole (as the
 * weight [C] does). Their batch dims (N, d1..dk) depend on the reduction:
 * with "none" every element's loss is its own, so they pass through to the
 * loss (and to log_prob); with "sum" a rank may sum its block of the batch
 * and leave the scalar partial, as ReduceSum does; "mean" divides by the
 * count or total weight of the whole batch, which a block does not know,
 * so the batch is gathered first. SoftmaxCrossEntropyLoss with a log_prob
 * output and "sum" gathers too: one factor cannot both pass to log_prob
 * and be summed away from the loss.
 *
 * Dropout (the identity here) is elementwise over data, output and mask.
 * Hardmax and LpNormalization keep their axis whole; ReduceLogSum (the log
 * of a sum is no sum of per-rank logs) and MeanVarianceNormalization keep
 * their axes whole, all other dims passing through. EyeLike writes its
 * diagonal by global position and keeps both dims whole (it folds to a
 * constant at compile time unless it is large).
 */
#include "partition.h"

#include <string.h>

int rule_loss(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    const char *red = node_attr_str(n, "reduction", "mean");
    int has_lp = n->noutputs > 1 && n->outputs[1];
    FactorKind batch = FK_PASS;
    const char *why = NULL;
    if (strcmp(red, "sum") == 0 && !has_lp) {
        batch = FK_REDUCTION;
    } else if (strcmp(red, "none") != 0) {
        batch = FK_NEED_REPL;
        why = has_lp && strcmp(red, "sum") == 0 ? "the summed loss and the per-element log_prob share this dim"
                                                 : "the mean divides by the whole batch's count or weight";
    }
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int cls = i == 1;
        int f = rule_new_factor(r, x->dims[i], cls ? FK_NEED_REPL : batch,
                                cls ? "the target picks its class from the whole class dim" : why);
        r->nopad[f] = batch == FK_REDUCTION; /* a zeroed padding row still has a loss */
        rule_map_dim(r, 0, i, f);
        if (has_lp)
            rule_map_dim(r, rule_out_idx(n, 1), i, f);
        if (cls) {
            if (n->ninputs > 2 && n->inputs[2])
                rule_map_dim(r, 2, 0, f);
            continue;
        }
        int t = i == 0 ? 0 : i - 1;
        rule_map_dim(r, 1, t, f);
        if (batch == FK_PASS)
            rule_map_dim(r, yo, t, f);
    }
    return 0;
}

int rule_dropout(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
        rule_map_dim(r, 0, i, f);
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k])
                rule_map_dim(r, rule_out_idx(n, k), i, f);
    }
    return 0;
}

int rule_loss_axis(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int64_t axis = node_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += x->rank;
    const char *why = n->op == OP_HARDMAX ? "Hardmax picks the largest element along this dim"
                                          : "LpNormalization takes the norm along this dim";
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], i == axis ? FK_NEED_REPL : FK_PASS, i == axis ? why : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, rule_out_idx(n, 0), i, f);
    }
    return 0;
}

/* ReduceLogSum and MeanVarianceNormalization: the dims of the axes
 * attribute need replication (the shape function has checked it and
 * turned ReduceLogSum's axes input into it). */
int rule_loss_masked(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    const Attr *axes = node_attr(n, "axes");
    unsigned mask = 0;
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << (axes->ints[i] < 0 ? axes->ints[i] + x->rank : axes->ints[i]);
    int keep = 1;
    const char *why = "MeanVarianceNormalization takes its mean and variance over this dim";
    if (n->op == OP_MVN) {
        if (!axes)
            mask = 1u | 4u | 8u; /* N, H, W */
    } else {
        keep = node_attr_int(n, "keepdims", 1) != 0;
        why = "the log of a sum is not a sum of per-rank results";
        if (!axes || axes->n == 0)
            mask = node_attr_int(n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    }
    for (int i = 0, o = 0; i < x->rank; i++) {
        int reduced = (mask >> i) & 1;
        if (x->dims[i] > 1) {
            int f = rule_new_factor(r, x->dims[i], reduced ? FK_NEED_REPL : FK_PASS, reduced ? why : NULL);
            rule_map_dim(r, 0, i, f);
            if (!reduced || n->op == OP_MVN)
                rule_map_dim(r, rule_out_idx(n, 0), o, f);
        }
        if (!reduced || keep)
            o++;
    }
    return 0;
}

int rule_eyelike(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], FK_NEED_REPL, "EyeLike places its diagonal by global position");
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, rule_out_idx(n, 0), i, f);
    }
    return 0;
}
