/* rules_index.c: sharding rules of the index family (ir/ops_index.def).
 *
 * An index op reads elements at positions computed from values (indices)
 * or from global coordinates (tiling, padding, block rearrangement). A dim
 * split across ranks is safe only where each rank's output block needs
 * exactly its own input block; everywhere else the dim is one
 * need-replication factor, shared by every tensor that has it (their sizes
 * may differ; a factor that is never split does not care, as in rule_cut).
 * What passes through: the batch dims of GatherND, the dims GatherElements
 * and ScatterElements do not index when data and indices agree on them,
 * the trailing slice dims of GatherND and ScatterND, Tile's dims (a tiled
 * one as [repeats, dim], repeats major), Pad's unpadded dims, OneHot's
 * index dims, the batch, height and width of DepthToSpace and
 * SpaceToDepth (and CRD's channels), and every dim of Trilu (an
 * elementwise mask whose emitter adds the block's global row and column
 * offsets). Expand uses rule_elementwise: a broadcast size-1 input dim
 * holds no factor, the output dim gets its own.
 */
#include "partition.h"

#include <string.h>

/* A pass-through factor over dim di of tensor ti and dim dj of tensor tj
 * (-1: none), or nothing for a size-1 dim. */
static void pass2(FactorRule *r, int64_t size, int ti, int di, int tj, int dj)
{
    if (size <= 1)
        return;
    int f = rule_new_factor(r, size, FK_PASS, NULL);
    rule_map_dim(r, ti, di, f);
    if (tj >= 0)
        rule_map_dim(r, tj, dj, f);
}

/* One need-replication factor over the listed (tensor, dim) pairs whose
 * size is above 1. pairs ends with a tensor index of -1. */
static void repl(FactorRule *r, const char *why, const int *pairs)
{
    int f = -1;
    for (int k = 0; pairs[k] >= 0; k += 2) {
        const Tensor *t = r->tensors[pairs[k]];
        if (!t || t->dims[pairs[k + 1]] <= 1)
            continue;
        if (f < 0)
            f = rule_new_factor(r, t->dims[pairs[k + 1]], FK_NEED_REPL, why);
        rule_map_dim(r, pairs[k], pairs[k + 1], f);
    }
}

/* A new factor of a size and kind over dim di of tensor ti (appended to
 * that dim's factors, major first); -1 and nothing for size 1. */
static int factor_on(FactorRule *r, int64_t size, FactorKind kind, const char *why, int ti, int di)
{
    if (size <= 1)
        return -1;
    int f = rule_new_factor(r, size, kind, kind == FK_NEED_REPL ? why : NULL);
    rule_map_dim(r, ti, di, f);
    return f;
}

/* Tile: an untiled dim passes. A tiled output dim is [repeats, dim],
 * repeats major: a block of whole copies needs the whole input dim (the
 * repeats factor is the output's alone), and with the repeats fully split
 * the input's own split carries over to the minor part. A split of the
 * input alone cannot be represented on the output (make_representable
 * then gathers the input). */
int rule_tile(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    const Attr *rep = node_attr(n, "repeats");
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (rep->ints[i] == 1) {
            pass2(r, x->dims[i], 0, i, yo, i);
        } else if (rep->ints[i] > 1 && x->dims[i] > 0) {
            factor_on(r, rep->ints[i], FK_PASS, NULL, yo, i);
            int f = factor_on(r, x->dims[i], FK_PASS, NULL, 0, i);
            if (f >= 0)
                rule_map_dim(r, yo, i, f);
        }
    }
    return 0;
}

/* Trilu: elementwise; the emitter offsets the mask by the block's global
 * position, so every dim may be split. */
int rule_trilu(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    for (int i = 0; i < x->rank; i++)
        pass2(r, x->dims[i], 0, i, rule_out_idx(n, 0), i);
    return 0;
}

/* GatherElements(data 0, indices 1) -> y: the axis stays whole (any rank's
 * output may read any row); other dims pass when data and indices agree. */
int rule_gather_elements(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *idx = n->inputs[1];
    int axis = (int)node_attr_int(n, "axis", 0), yo = rule_out_idx(n, 0);
    if (axis < 0)
        axis += x->rank;
    for (int i = 0; i < x->rank; i++) {
        if (i != axis && x->dims[i] == idx->dims[i]) {
            if (x->dims[i] > 1) {
                int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
                rule_map_dim(r, 0, i, f);
                rule_map_dim(r, 1, i, f);
                rule_map_dim(r, yo, i, f);
            }
            continue;
        }
        repl(r, i == axis ? "GatherElements indexes this dim" : "GatherElements: indices cover part of this dim",
             (const int[]){0, i, 1, i, yo, i, -1});
    }
    return 0;
}

/* GatherND(data 0, indices 1) -> y: batch dims pass through all three,
 * the indices' leading dims pass to y, the indexed data dims and the
 * index tuple stay whole, the data's trailing slice dims pass to y's tail. */
int rule_gather_nd(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *idx = n->inputs[1];
    int b = (int)node_attr_int(n, "batch_dims", 0), q = idx->rank, yo = rule_out_idx(n, 0);
    int m = (int)idx->dims[q - 1];
    for (int i = 0; i < b; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, 1, i, f);
        rule_map_dim(r, yo, i, f);
    }
    for (int i = b; i < q - 1; i++)
        pass2(r, idx->dims[i], 1, i, yo, i);
    repl(r, "GatherND: an index tuple is read whole", (const int[]){1, q - 1, -1});
    for (int j = b; j < b + m; j++)
        repl(r, "GatherND indexes this dim", (const int[]){0, j, -1});
    for (int j = b + m; j < x->rank; j++)
        pass2(r, x->dims[j], 0, j, yo, q - 1 + j - b - m);
    return 0;
}

/* Is t all zeros: a float initializer of zero bytes, or one expanded? */
static int zero_fill(const Tensor *t)
{
    if (t && t->producer && t->producer->op == OP_EXPAND)
        t = t->producer->inputs[0];
    if (!t || !t->data || !dtype_is_float(t->dtype) || t->nbytes <= 0)
        return 0;
    const unsigned char *b = t->data;
    for (int64_t i = 0; i < t->nbytes; i++)
        if (b[i])
            return 0;
    return 1;
}

int rule_scatter_adds_into_zeros(const Node *n)
{
    return n->op == OP_SCATTER_ND && !strcmp(node_attr_str(n, "reduction", "none"), "add") &&
           zero_fill(n->inputs[0]);
}

/* ScatterND(data 0, indices 1, updates 2) -> y: any update may land
 * anywhere in the indexed dims, so those and the index tuples stay whole;
 * the trailing slice dims pass through. The updates' leading dims (one
 * factor with the indices') stay whole too, except for a sum into zeros:
 * there each rank scatters its own updates and the sum over ranks is the
 * result (a reduction factor: the result is partial, reduced where it is
 * needed whole). That is an embedding's gradient under data parallelism:
 * scattered on each rank and all-reduced with the other weights'
 * gradients, in their buckets, instead of gathering every rank's
 * activation gradient and indices before backward can go on. */
int rule_scatter_nd(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *idx = n->inputs[1];
    int q = idx->rank, m = (int)idx->dims[q - 1], yo = rule_out_idx(n, 0), sum = rule_scatter_adds_into_zeros(n);
    for (int j = 0; j < m; j++)
        repl(r, "ScatterND indexes this dim", (const int[]){0, j, yo, j, -1});
    for (int i = 0; i < q - 1; i++) {
        if (!sum) {
            repl(r, "ScatterND: every update must be seen by every rank", (const int[]){1, i, 2, i, -1});
            continue;
        }
        if (idx->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, idx->dims[i], FK_REDUCTION, NULL);
        r->nopad[f] = 1; /* a padded index tuple would still add its update somewhere */
        rule_map_dim(r, 1, i, f);
        rule_map_dim(r, 2, i, f);
    }
    repl(r, "ScatterND: an index tuple is read whole", (const int[]){1, q - 1, -1});
    for (int j = m; j < x->rank; j++) {
        if (x->dims[j] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[j], FK_PASS, NULL);
        rule_map_dim(r, 0, j, f);
        rule_map_dim(r, 2, q - 1 + j - m, f);
        rule_map_dim(r, yo, j, f);
    }
    return 0;
}

/* ScatterElements(data 0, indices 1, updates 2) -> y: the axis stays
 * whole; other dims pass when data and indices agree on them. */
int rule_scatter_elements(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *idx = n->inputs[1];
    int axis = (int)node_attr_int(n, "axis", 0), yo = rule_out_idx(n, 0);
    if (axis < 0)
        axis += x->rank;
    for (int i = 0; i < x->rank; i++) {
        if (i != axis && x->dims[i] == idx->dims[i]) {
            if (x->dims[i] > 1) {
                int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
                for (int t = 0; t < 3; t++)
                    rule_map_dim(r, t, i, f);
                rule_map_dim(r, yo, i, f);
            }
            continue;
        }
        repl(r, i == axis ? "ScatterElements indexes this dim" : "ScatterElements: indices cover part of this dim",
             (const int[]){0, i, 1, i, 2, i, yo, i, -1});
    }
    return 0;
}

/* Pad: a padded dim stays whole (its edge values and offsets are global);
 * the others pass. pads/constant_value/axes inputs hold no factor. */
int rule_pad(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    const Attr *p = node_attr(n, "pads");
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (p->ints[i] == 0 && p->ints[x->rank + i] == 0)
            pass2(r, x->dims[i], 0, i, yo, i);
        else
            repl(r, "Pad pads this dim", (const int[]){0, i, yo, i, -1});
    }
    return 0;
}

/* OneHot(indices 0, depth 1, values 2) -> y: index dims pass; the new
 * depth dim stays whole. */
int rule_onehot(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *idx = n->inputs[0];
    int yo = rule_out_idx(n, 0), axis = (int)node_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += idx->rank + 1;
    for (int i = 0; i < idx->rank; i++)
        pass2(r, idx->dims[i], 0, i, yo, i < axis ? i : i + 1);
    repl(r, "OneHot writes this dim", (const int[]){yo, axis, -1});
    return 0;
}

/* DepthToSpace, SpaceToDepth. The batch passes. Height and width pass as
 * the major factor of the larger side: DepthToSpace's output row h*b + i
 * comes from input row h, so a block of input rows makes exactly the
 * matching block of output rows ([H, b], b staying whole); SpaceToDepth is
 * the same the other way round. Channels: CRD's output channel c is the
 * major factor of input channel (c*b + i)*b + j, so it passes; in DCR and
 * SpaceToDepth the block offset is the major part, so channels stay whole. */
int rule_depth_space(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int yo = rule_out_idx(n, 0), s2d = n->op == OP_SPACE_TO_DEPTH;
    int64_t b = node_attr_int(n, "blocksize", 1);
    const char *why = "DepthToSpace/SpaceToDepth regroups this dim";
    int big = s2d ? 0 : yo, small = s2d ? yo : 0; /* the side whose H, W hold [dim, b] */
    pass2(r, x->dims[0], 0, 0, yo, 0);
    if (!s2d && !strcmp(node_attr_str(n, "mode", "DCR"), "CRD")) {
        int f = factor_on(r, x->dims[1] / (b * b), FK_PASS, NULL, 0, 1);
        if (f >= 0)
            rule_map_dim(r, yo, 1, f);
        factor_on(r, b * b, FK_NEED_REPL, why, 0, 1);
    } else {
        repl(r, why, (const int[]){0, 1, yo, 1, -1});
    }
    for (int i = 2; i < 4; i++) {
        const Tensor *t = r->tensors[small];
        int f = factor_on(r, t->dims[i], FK_PASS, NULL, small, i);
        if (f >= 0)
            rule_map_dim(r, big, i, f);
        factor_on(r, b, FK_NEED_REPL, why, big, i);
    }
    return 0;
}

/* KvCacheWrite(new) -> cache (compile --decode): every dim but the
 * positions passes (heads split under tp split the cache alike); the
 * positions stay whole, as a rank writes the one it is at. */
int rule_kv_cache_write(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int axis = (int)node_attr_int(n, "axis", 0), o = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++)
        if (i != axis)
            pass2(r, x->dims[i], 0, i, o, i);
    factor_on(r, n->outputs[0]->dims[axis], FK_NEED_REPL, "a cache's positions stay whole", o, axis);
    return 0;
}

/* MoeDispatch(x [G, Ng, D], ids [G, Ng, k]) -> buf [G, E, D, C], slots
 * [G, Ng, k]. Groups and D pass. A group's tokens and choices stay whole
 * (positions are handed out in order over all of them), as do the
 * capacity slots. The experts are the buffer's alone: a rank holding a
 * block of them fills just those (emit_moe_dispatch offsets the ids), so
 * tokens split by group and a buffer split by expert differ by the
 * all-to-all that sends each group's tokens to their experts. */
int rule_moe_dispatch(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int b = rule_out_idx(n, 0), s = rule_out_idx(n, 1);
    int f = factor_on(r, x->dims[0], FK_PASS, NULL, 0, 0);
    if (f >= 0) {
        rule_map_dim(r, 1, 0, f);
        rule_map_dim(r, b, 0, f);
        rule_map_dim(r, s, 0, f);
    }
    repl(r, "a group's tokens are dispatched together", (const int[]){0, 1, 1, 1, s, 1, -1});
    repl(r, "a token's expert choices are dispatched together", (const int[]){1, 2, s, 2, -1});
    pass2(r, x->dims[2], 0, 2, b, 2);
    factor_on(r, n->outputs[0]->dims[1], FK_PASS, NULL, b, 1);
    factor_on(r, n->outputs[0]->dims[3], FK_NEED_REPL, "an expert's capacity slots are filled in order", b, 3);
    return 0;
}

/* MoeCombine(y [G, E, D, C], slots [G, Ng, k], weights [G, Ng, k]) ->
 * [G, Ng, D]. Groups and D pass; tokens pass (each reads its own slots).
 * The experts are contracted: a rank holding a block of them adds its
 * experts' outputs, leaving the sum partial. */
int rule_moe_combine(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *y = n->inputs[0], *slots = n->inputs[1];
    int o = rule_out_idx(n, 0);
    int f = factor_on(r, y->dims[0], FK_PASS, NULL, 0, 0);
    if (f >= 0) {
        rule_map_dim(r, 1, 0, f);
        rule_map_dim(r, 2, 0, f);
        rule_map_dim(r, o, 0, f);
    }
    f = factor_on(r, slots->dims[1], FK_PASS, NULL, 1, 1);
    if (f >= 0) {
        rule_map_dim(r, 2, 1, f);
        rule_map_dim(r, o, 1, f);
    }
    repl(r, "a token's expert choices are combined together", (const int[]){1, 2, 2, 2, -1});
    pass2(r, y->dims[2], 0, 2, o, 2);
    factor_on(r, y->dims[1], FK_REDUCTION, NULL, 0, 1);
    factor_on(r, y->dims[3], FK_NEED_REPL, "an expert's capacity slots are read by slot number", 0, 3);
    return 0;
}

/* The groups of tensors ti..., one pass factor (dim 0 of each). */
static void groups_pass(FactorRule *r, int64_t size, const int *ts)
{
    int f = factor_on(r, size, FK_PASS, NULL, ts[0], 0);
    for (int k = 1; f >= 0 && ts[k] >= 0; k++)
        rule_map_dim(r, ts[k], 0, f);
}

/* MoeScatter(x [G, Ng, D], slots, w [G, Ng, k]) -> [G, E, D, C]: groups
 * and D pass; the experts are the output's alone (a rank fills its block,
 * as MoeDispatch); tokens are contracted (a rank holding some of them
 * scatters just those, the rest of the buffer zeros: a partial sum). */
int rule_moe_scatter(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int o = rule_out_idx(n, 0);
    groups_pass(r, x->dims[0], (const int[]){0, 1, 2, o, -1});
    int f = factor_on(r, x->dims[1], FK_REDUCTION, NULL, 0, 1);
    if (f >= 0) {
        rule_map_dim(r, 1, 1, f);
        rule_map_dim(r, 2, 1, f);
    }
    repl(r, "a token's expert choices are scattered together", (const int[]){1, 2, 2, 2, -1});
    pass2(r, x->dims[2], 0, 2, o, 2);
    factor_on(r, n->outputs[0]->dims[1], FK_PASS, NULL, o, 1);
    factor_on(r, n->outputs[0]->dims[3], FK_NEED_REPL, "an expert's capacity slots are written by slot number", o, 3);
    return 0;
}

/* MoePairDot(a [G, Ng, D], y [G, E, D, C], slots) -> [G, Ng, k]: groups
 * and tokens pass; D and the experts are contracted (partial sums). */
int rule_moe_pair_dot(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *a = n->inputs[0], *y = n->inputs[1];
    int o = rule_out_idx(n, 0);
    groups_pass(r, a->dims[0], (const int[]){0, 1, 2, o, -1});
    int f = factor_on(r, a->dims[1], FK_PASS, NULL, 0, 1);
    if (f >= 0) {
        rule_map_dim(r, 2, 1, f);
        rule_map_dim(r, o, 1, f);
    }
    repl(r, "a token's expert choices are read together", (const int[]){2, 2, o, 2, -1});
    f = factor_on(r, a->dims[2], FK_REDUCTION, NULL, 0, 2);
    if (f >= 0)
        rule_map_dim(r, 1, 2, f);
    factor_on(r, y->dims[1], FK_REDUCTION, NULL, 1, 1);
    factor_on(r, y->dims[3], FK_NEED_REPL, "an expert's capacity slots are read by slot number", 1, 3);
    return 0;
}
