/* rules_reduce.c: factor rules of the reduce family (ir/ops_reduce.def).
 *
 * Only a sum may leave its reduced dim split: each rank sums its block and
 * the plan all-reduces the partial results later. That holds for
 * ReduceSumSquare and ReduceL1 (the square / absolute value is taken on
 * each element before the sum), which therefore use ReduceSum's rule_reduce.
 * Every other reduction, arg-reduction, scan, TopK and normalization is not
 * a sum of per-block results (a max of maxima would do for ReduceMax, but
 * the plan has no partial-max state, and ReduceL2, LogSumExp, ArgMax, a
 * prefix sum or a top-k list cannot be combined by summing), so the dims
 * they work along are need-replication factors: the plan gathers them
 * before the node, and every other dim passes through, split alike in
 * input and output.
 */
#include "partition.h"

/* Axis of CumSum (a folded input: a one-entry INTS), TopK and LogSoftmax. */
static int64_t op_axis(const Node *n, int rank)
{
    const Attr *a = node_attr(n, "axis");
    int64_t axis = a && a->type == ATTR_INTS && a->n == 1 ? a->ints[0] : node_attr_int(n, "axis", -1);
    return axis < 0 ? axis + rank : axis;
}

/* x's dims in mask need replication (why), the others pass through to the
 * output (which drops the masked dims unless keep). */
static int rule_masked(const Node *n, FactorRule *r, unsigned mask, int keep, const char *why)
{
    const Tensor *x = n->inputs[0];
    for (int i = 0, o = 0; i < x->rank; i++) {
        int reduced = (mask >> i) & 1;
        if (x->dims[i] > 1) {
            int f = rule_new_factor(r, x->dims[i], reduced ? FK_NEED_REPL : FK_PASS, reduced ? why : NULL);
            rule_map_dim(r, 0, i, f);
            if (!reduced)
                rule_map_dim(r, rule_out_idx(n, 0), o, f);
        }
        if (!reduced || keep)
            o++;
    }
    return 0;
}

/* ReduceMax/Min/Prod/L2/LogSumExp and ArgMax/ArgMin: the reduced dims
 * whole on every rank. */
int rule_reduce_whole(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int keep = node_attr_int(n, "keepdims", 1) != 0;
    unsigned mask = 0;
    if (n->op == OP_ARGMAX || n->op == OP_ARGMIN) {
        int64_t axis = node_attr_int(n, "axis", 0);
        mask = 1u << (axis < 0 ? axis + x->rank : axis);
        return rule_masked(n, r, mask, keep, "an arg-reduction needs the whole dim it searches");
    }
    const Attr *axes = node_attr(n, "axes");
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << (axes->ints[i] < 0 ? axes->ints[i] + x->rank : axes->ints[i]);
    if (!axes || axes->n == 0)
        mask = node_attr_int(n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    return rule_masked(n, r, mask, keep, "this reduction is not a sum of per-rank results");
}

/* CumSum, LogSoftmax, TopK: elementwise except along the axis, which is
 * whole (TopK's outputs have k there: a second never-split factor). */
int rule_along_axis(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int64_t axis = op_axis(n, x->rank);
    const char *why = n->op == OP_CUMSUM || n->op == OP_CUMPROD ? "the scan runs along this dim"
                    : n->op == OP_TOPK ? "TopK selects along this dim" : "LogSoftmax normalises along this dim";
    for (int i = 0; i < x->rank; i++) {
        if (i == axis) {
            int f = -1;
            if (x->dims[i] > 1) {
                f = rule_new_factor(r, x->dims[i], FK_NEED_REPL, why);
                rule_map_dim(r, 0, i, f);
            }
            const Tensor *y = n->outputs[0];
            if (n->op == OP_TOPK)
                f = y->dims[i] > 1 ? rule_new_factor(r, y->dims[i], FK_NEED_REPL, why) : -1;
            for (int k = 0; f >= 0 && k < n->noutputs; k++)
                if (n->outputs[k])
                    rule_map_dim(r, rule_out_idx(n, k), i, f);
            continue;
        }
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

/* RMSNormalization: as LayerNormalization, the dims from axis on are
 * normalised together and stay whole; scale aligns to the right of x. */
int rule_rmsnorm(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *s = n->inputs[1];
    int64_t axis = op_axis(n, x->rank);
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int norm = i >= axis;
        int f = rule_new_factor(r, x->dims[i], norm ? FK_NEED_REPL : FK_PASS,
                                norm ? "RMSNormalization normalises over this dim" : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, rule_out_idx(n, 0), i, f);
        int j = i - (x->rank - s->rank);
        if (norm && j >= 0 && s->dims[j] == x->dims[i])
            rule_map_dim(r, 1, j, f);
    }
    return 0;
}

/* InstanceNormalization: batch and channels pass (scale and bias split
 * with the channels), the spatial dims are normalised together and stay
 * whole. GroupNormalization: the channel dim is two factors, groups (major,
 * pass-through: a rank may hold whole groups) and channels within a group
 * (need replication: a group's statistics span them), as Reshape splits a
 * dim of size H*D; scale and bias [C] hold both, the opset-18 [groups] form
 * the first only. */
int rule_chan_norm(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (i == 1 && n->op == OP_GROUPNORM) {
            int64_t groups = node_attr_int(n, "num_groups", 1), per = x->dims[1] / groups;
            int fg = groups > 1 ? rule_new_factor(r, groups, FK_PASS, NULL) : -1;
            int fc = per > 1 ? rule_new_factor(r, per, FK_NEED_REPL,
                                               "GroupNormalization normalises the channels of a group together")
                             : -1;
            for (int t = 0; t < 4; t++) {
                int ti = t < 3 ? t : yo, dim = t == 0 || t == 3 ? 1 : 0;
                if (t == 1 || t == 2) {
                    if (n->inputs[t]->dims[0] != x->dims[1]) { /* [groups] */
                        if (fg >= 0)
                            rule_map_dim(r, ti, dim, fg);
                        continue;
                    }
                }
                if (fg >= 0)
                    rule_map_dim(r, ti, dim, fg);
                if (fc >= 0)
                    rule_map_dim(r, ti, dim, fc);
            }
            continue;
        }
        if (x->dims[i] <= 1)
            continue;
        int pass = i <= 1;
        int f = rule_new_factor(r, x->dims[i], pass ? FK_PASS : FK_NEED_REPL,
                                pass ? NULL : "the normalization spans the spatial dims");
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, yo, i, f);
        if (i == 1)
            for (int k = 1; k < 3; k++)
                rule_map_dim(r, k, 0, f);
    }
    return 0;
}

int rule_reduce(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    const Attr *axes = node_attr(n, "axes");
    int keep = node_attr_int(n, "keepdims", 1) != 0;
    unsigned mask = 0;
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << (axes->ints[i] < 0 ? axes->ints[i] + x->rank : axes->ints[i]);
    if (!axes || axes->n == 0)
        mask = node_attr_int(n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    for (int i = 0, o = 0; i < x->rank; i++) {
        int reduced = (mask >> i) & 1;
        if (x->dims[i] > 1) {
            int f = rule_new_factor(r, x->dims[i], reduced ? FK_REDUCTION : FK_PASS, NULL);
            rule_map_dim(r, 0, i, f);
            if (!reduced)
                rule_map_dim(r, rule_out_idx(n, 0), o, f);
        }
        if (!reduced || keep)
            o++;
    }
    (void)y;
    (void)d;
    return 0;
}
