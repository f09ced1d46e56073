/* rules.c: per-op sharding rules as factors (after OpenXLA Shardy).
 *
 * Each op maps every operand and result dim to a list of factors. A factor
 * is pass-through (every tensor holding it is split the same way),
 * reduction (contracted: when it is split, each rank holds a partial sum
 * of the result) or need-replication (it may not be split: the softmax or
 * norm axis, a concatenated or sliced dim, a convolution's window). A
 * Reshape dim may hold several factors (a dim of size H*D is the factors H
 * then D), so a split on the major part survives the reshape. Dims of size
 * 1 hold no factor and are never split.
 *
 * The rule builder for each op is named in this file's table, indexed by
 * the op enum from ir/ops.def; an op without one is an error naming it.
 */
#include "partition.h"

#include <string.h>

typedef int (*RuleFn)(const Node *n, FactorRule *r, Diag *d);

int rule_new_factor(FactorRule *r, int64_t size, FactorKind kind, const char *why)
{
    IR_ASSERT(r->nfactors < RULE_MAX_FACTORS);
    r->size[r->nfactors] = size;
    r->kind[r->nfactors] = (unsigned char)kind;
    r->why[r->nfactors] = why;
    return r->nfactors++;
}

void rule_map_dim(FactorRule *r, int t, int dim, int f)
{
    DimFactors *df = &r->dims[t][dim];
    IR_ASSERT(df->n < RULE_MAX_PER_DIM);
    df->f[df->n++] = (unsigned char)f;
}

/* Tensor index of output k. */
int rule_out_idx(const Node *n, int k)
{
    return n->ninputs + k;
}

/* Too many factors for the fixed-size rule: refuse rather than truncate. */
int rule_too_big(const Node *n, Diag *d)
{
    diag_add(d, "node \"%s\" (%s): too many dims to build a sharding rule", n->name,
             node_op_name(n));
    return -1;
}

/* Elementwise with numpy broadcasting: one pass-through factor per output
 * dim; an input dim joins it when it is not broadcast (same size). */
int rule_elementwise(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *y = n->outputs[0];
    int fy[IR_MAX_RANK];
    for (int i = 0; i < y->rank; i++) {
        fy[i] = -1;
        if (y->dims[i] > 1) {
            if (r->nfactors >= RULE_MAX_FACTORS)
                return rule_too_big(n, d);
            fy[i] = rule_new_factor(r, y->dims[i], FK_PASS, NULL);
            rule_map_dim(r, rule_out_idx(n, 0), i, fy[i]);
        }
    }
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!t)
            continue;
        for (int j = 0; j < t->rank; j++) {
            int o = y->rank - t->rank + j;
            if (o >= 0 && fy[o] >= 0 && t->dims[j] == y->dims[o])
                rule_map_dim(r, k, j, fy[o]);
        }
    }
    return 0;
}

/* Elementwise except one dim (the op's axis), which must be replicated. */
int rule_softmax(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0];
    int64_t axis = node_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += x->rank;
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], i == axis ? FK_NEED_REPL : FK_PASS,
                           i == axis ? "Softmax normalises along this dim" : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, rule_out_idx(n, 0), i, f);
    }
    (void)d;
    return 0;
}

int rule_layernorm(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0];
    int64_t axis = node_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += x->rank;
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        int norm = i >= axis;
        int f = rule_new_factor(r, x->dims[i], norm ? FK_NEED_REPL : FK_PASS,
                           norm ? "LayerNormalization normalises over this dim" : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, rule_out_idx(n, 0), i, f);
        if (!norm) {
            for (int k = 1; k < n->noutputs; k++)
                if (n->outputs[k])
                    rule_map_dim(r, rule_out_idx(n, k), i, f);
        }
        /* scale and bias align to the right of x. */
        for (int k = 1; k < n->ninputs; k++) {
            const Tensor *p = n->inputs[k];
            int j = i - (x->rank - (p ? p->rank : 0));
            if (p && norm && j >= 0 && p->dims[j] == x->dims[i])
                rule_map_dim(r, k, j, f);
        }
    }
    (void)d;
    return 0;
}

int rule_matmul(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *a = n->inputs[0], *b = n->inputs[1], *y = n->outputs[0];
    int ra = a->rank, rb = b->rank, ry = y->rank, yo = rule_out_idx(n, 0);
    int has_m = ra > 1, has_n = rb > 1;
    int nbatch = ry - has_m - has_n;
    for (int i = 0; i < nbatch; i++) {
        if (y->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, y->dims[i], FK_PASS, NULL);
        rule_map_dim(r, yo, i, f);
        int ja = i - (nbatch - (ra - 2)), jb = i - (nbatch - (rb - 2));
        if (ra > 2 && ja >= 0 && a->dims[ja] == y->dims[i])
            rule_map_dim(r, 0, ja, f);
        if (rb > 2 && jb >= 0 && b->dims[jb] == y->dims[i])
            rule_map_dim(r, 1, jb, f);
    }
    if (has_m && a->dims[ra - 2] > 1) {
        int f = rule_new_factor(r, a->dims[ra - 2], FK_PASS, NULL);
        rule_map_dim(r, 0, ra - 2, f);
        rule_map_dim(r, yo, nbatch, f);
    }
    if (has_n && b->dims[rb - 1] > 1) {
        int f = rule_new_factor(r, b->dims[rb - 1], FK_PASS, NULL);
        rule_map_dim(r, 1, rb - 1, f);
        rule_map_dim(r, yo, ry - 1, f);
    }
    if (a->dims[ra - 1] > 1) {
        int f = rule_new_factor(r, a->dims[ra - 1], FK_REDUCTION, NULL);
        rule_map_dim(r, 0, ra - 1, f);
        rule_map_dim(r, 1, rb > 1 ? rb - 2 : 0, f);
    }
    (void)d;
    return 0;
}

int rule_gemm(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *a = n->inputs[0], *y = n->outputs[0];
    const Tensor *c = n->ninputs > 2 ? n->inputs[2] : NULL;
    int ta = node_attr_int(n, "transA", 0) != 0, tb = node_attr_int(n, "transB", 0) != 0;
    int yo = rule_out_idx(n, 0);
    int fm = -1, fn = -1;
    if (y->dims[0] > 1) {
        fm = rule_new_factor(r, y->dims[0], FK_PASS, NULL);
        rule_map_dim(r, 0, ta ? 1 : 0, fm);
        rule_map_dim(r, yo, 0, fm);
    }
    if (y->dims[1] > 1) {
        fn = rule_new_factor(r, y->dims[1], FK_PASS, NULL);
        rule_map_dim(r, 1, tb ? 0 : 1, fn);
        rule_map_dim(r, yo, 1, fn);
    }
    if (a->dims[ta ? 0 : 1] > 1) {
        int fk = rule_new_factor(r, a->dims[ta ? 0 : 1], FK_REDUCTION, NULL);
        rule_map_dim(r, 0, ta ? 0 : 1, fk);
        rule_map_dim(r, 1, tb ? 1 : 0, fk);
    }
    if (c) {
        int fy[2] = {fm, fn};
        for (int j = 0; j < c->rank; j++) {
            int o = 2 - c->rank + j;
            if (fy[o] >= 0 && c->dims[j] == y->dims[o])
                rule_map_dim(r, 2, j, fy[o]);
        }
    }
    (void)d;
    return 0;
}

int rule_transpose(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0];
    const Attr *perm = node_attr(n, "perm");
    int fx[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        fx[i] = -1;
        if (x->dims[i] > 1) {
            fx[i] = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
            rule_map_dim(r, 0, i, fx[i]);
        }
    }
    for (int i = 0; i < x->rank; i++) {
        int p = perm ? (int)perm->ints[i] : x->rank - 1 - i;
        if (fx[p] >= 0)
            rule_map_dim(r, rule_out_idx(n, 0), i, fx[p]);
    }
    (void)d;
    return 0;
}

/* Reshape, Squeeze, Unsqueeze, Flatten: walk input and output dims
 * together (size-1 dims hold no factor). Where one side's dim is a
 * multiple of the other's, the smaller one becomes a factor of the larger
 * (major part first); where neither divides the other, the gcd becomes a
 * shared factor and the rest cannot be split through this reshape. */
int rule_reshape(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0), i = 0, j = 0;
    int64_t ri = 0, rj = 0; /* remaining size of the current dims */
    for (;;) {
        while (i < x->rank && (ri == 0 ? x->dims[i] : ri) == 1)
            i++, ri = 0;
        while (j < y->rank && (rj == 0 ? y->dims[j] : rj) == 1)
            j++, rj = 0;
        if (i >= x->rank || j >= y->rank)
            break;
        if (ri == 0)
            ri = x->dims[i];
        if (rj == 0)
            rj = y->dims[j];
        if (r->nfactors >= RULE_MAX_FACTORS || r->dims[0][i].n >= RULE_MAX_PER_DIM ||
            r->dims[yo][j].n >= RULE_MAX_PER_DIM)
            return rule_too_big(n, d);
        int64_t fs = ri % rj == 0 ? rj : rj % ri == 0 ? ri : rule_gcd(ri, rj);
        FactorKind kind = (ri % rj == 0 || rj % ri == 0) ? FK_PASS : FK_NEED_REPL;
        int f = rule_new_factor(r, fs, kind, kind == FK_NEED_REPL ? "Reshape regroups this dim unevenly" : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, yo, j, f);
        if (kind == FK_NEED_REPL) {
            /* Give up on factoring the rest of both dims. */
            ri = rj = 1;
            continue;
        }
        ri /= fs;
        rj /= fs;
        if (ri == 1)
            ri = 0, i++;
        if (rj == 1)
            rj = 0, j++;
    }
    return 0;
}

/* Concat, Split, Slice: the dim they cut or join must be whole on every
 * rank; all other dims pass through. */
int rule_cut(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0];
    unsigned cut = 0;
    const char *why = "";
    if (n->op == OP_SLICE) {
        const Attr *ax = node_attr(n, "axes"), *st = node_attr(n, "starts");
        for (int k = 0; st && k < st->n; k++) {
            int64_t a = ax ? ax->ints[k] : k;
            cut |= 1u << (a < 0 ? a + x->rank : a);
        }
        why = "Slice cuts this dim";
    } else {
        int64_t a = node_attr_int(n, "axis", 0);
        cut = 1u << (a < 0 ? a + x->rank : a);
        why = n->op == OP_CONCAT ? "Concat joins along this dim" : "Split cuts this dim";
    }
    int ntensors = r->ntensors;
    for (int i = 0; i < x->rank; i++) {
        if ((cut >> i) & 1) {
            /* One never-split factor stands for the cut dim of every
             * tensor (their sizes differ, which a factor that is never
             * split does not care about). */
            int f = rule_new_factor(r, x->dims[i], FK_NEED_REPL, why);
            for (int t = 0; t < ntensors; t++)
                if (r->tensors[t] && r->tensors[t]->dims[i] > 1)
                    rule_map_dim(r, t, i, f);
            continue;
        }
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
        for (int t = 0; t < ntensors; t++)
            if (r->tensors[t])
                rule_map_dim(r, t, i, f);
    }
    (void)d;
    return 0;
}

/* Gather as an embedding lookup: index dims and the table's other dims
 * pass through; a table split along the gathered axis is a masked lookup
 * (each rank fills the rows it owns, zeros elsewhere), so that factor is a
 * reduction and leaves the result partial, as in Megatron's
 * VocabParallelEmbedding. */
int rule_gather(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0], *idx = n->inputs[1];
    int64_t axis = node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += x->rank;
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        if (i == axis) {
            rule_map_dim(r, 0, i, rule_new_factor(r, x->dims[i], FK_REDUCTION, NULL));
            continue;
        }
        int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, yo, i < axis ? i : i - 1 + idx->rank, f);
    }
    for (int i = 0; i < idx->rank; i++) {
        if (idx->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, idx->dims[i], FK_PASS, NULL);
        rule_map_dim(r, 1, i, f);
        rule_map_dim(r, yo, (int)axis + i, f);
    }
    (void)d;
    return 0;
}

/* The rule column of ir/ops.def. */
static const RuleFn rule_fns[OP_COUNT] = {
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) [e] = rule,
#include "../ir/ops.def"
#undef OP
};

int rule_none(const Node *n, FactorRule *r, Diag *d)
{
    (void)r;
    diag_add(d, "node \"%s\" (%s): no sharding rule for op %s", n->name, node_op_name(n), node_op_name(n));
    return -1;
}

int op_has_rule(OpKind op)
{
    return rule_fns[op] != rule_none;
}

static int64_t dim_unit(const Tensor *t, int i)
{
    return t->split_unit[i] > 1 ? t->split_unit[i] : 1;
}

/* Product of the factors after position k of a dim. */
static int64_t minor_of(const FactorRule *r, const DimFactors *df, int k)
{
    int64_t m = 1;
    for (int j = k + 1; j < df->n; j++)
        m *= r->size[df->f[j]];
    return m;
}

int64_t rule_factor_unit(const FactorRule *r, int f)
{
    for (int t = 0; t < r->ntensors; t++)
        for (int i = 0; r->tensors[t] && i < r->tensors[t]->rank; i++) {
            const DimFactors *df = &r->dims[t][i];
            for (int k = 0; k < df->n; k++)
                if (df->f[k] == f && k == 0 && dim_unit(r->tensors[t], i) % minor_of(r, df, 0) == 0)
                    return dim_unit(r->tensors[t], i) / minor_of(r, df, 0);
        }
    return 1;
}

int rule_factor_can_pad(const FactorRule *r, int f)
{
    if (r->nopad[f] || r->kind[f] == FK_NEED_REPL)
        return 0;
    int64_t u = rule_factor_unit(r, f);
    for (int t = 0; t < r->ntensors; t++) {
        if (!r->tensors[t])
            continue;
        for (int i = 0; i < r->tensors[t]->rank; i++) {
            const DimFactors *df = &r->dims[t][i];
            for (int k = 0; k < df->n; k++)
                if (df->f[k] == f && (k != 0 || dim_unit(r->tensors[t], i) != u * minor_of(r, df, 0)))
                    return 0;
        }
    }
    return 1;
}

int rule_factor_fits(const FactorRule *r, int f, const Mesh *m, const unsigned char *axes, int naxes)
{
    int64_t k = 1;
    for (int j = 0; j < naxes; j++)
        k *= m->axes[axes[j]].size;
    if (sharding_block_of(r->size[f], rule_factor_unit(r, f), m, axes, naxes) * k == r->size[f])
        return 1;
    return rule_factor_can_pad(r, f); /* blocks past the end are all padding, as 12 heads over 8 leave 2 */
}

int rule_build(Arena *a, const Node *n, FactorRule *r, Diag *d)
{
    memset(r, 0, sizeof(*r));
    if (rule_fns[n->op] == rule_none)
        return rule_none(n, r, d);
    r->ntensors = n->ninputs + n->noutputs;
    r->tensors = arena_alloc(a, (size_t)r->ntensors * sizeof(Tensor *));
    r->dims = arena_alloc(a, (size_t)r->ntensors * sizeof(*r->dims));
    for (int k = 0; k < n->ninputs; k++)
        r->tensors[k] = n->inputs[k];
    for (int k = 0; k < n->noutputs; k++)
        r->tensors[n->ninputs + k] = n->outputs[k];
    return rule_fns[n->op](n, r, d);
}

/* Einsum: one factor per subscript letter. A letter in the output passes
 * through (every operand holding it split alike); a summed-over letter is
 * a contraction (split, it leaves the result partial, as MatMul's K does);
 * a letter repeated within one operand (a diagonal) needs replication,
 * since one tensor cannot be split twice over the same axes. An operand
 * dim broadcast from size 1 is not mapped. */
int rule_einsum(const Node *n, FactorRule *r, Diag *d)
{
    int ranks[EINSUM_MAX_INPUTS];
    int64_t dims[EINSUM_MAX_INPUTS][IR_MAX_RANK];
    for (int i = 0; i < n->ninputs; i++) {
        ranks[i] = n->inputs[i]->rank;
        memcpy(dims[i], n->inputs[i]->dims, sizeof dims[i]);
    }
    EinsumSpec s;
    char err[160];
    if (einsum_parse(node_attr_str(n, "equation", ""), n->ninputs, ranks, (const int64_t(*)[IR_MAX_RANK])dims, &s,
                     err, sizeof err)) {
        diag_add(d, "node \"%s\" (Einsum): equation: %s", n->label, err);
        return -1;
    }
    int yo = rule_out_idx(n, 0);
    for (int l = 0; l < s.nletters; l++) {
        if (s.size[l] <= 1)
            continue;
        int in_out = -1, repeated = 0;
        for (int q = 0; q < s.out_rank; q++)
            if (s.out[q] == l)
                in_out = q;
        for (int i = 0; i < s.nin; i++) {
            int seen = 0;
            for (int j = 0; j < s.rank[i]; j++)
                seen += s.letter[i][j] == l;
            repeated |= seen > 1;
        }
        FactorKind kind = repeated ? FK_NEED_REPL : in_out >= 0 ? FK_PASS : FK_REDUCTION;
        if (r->nfactors == RULE_MAX_FACTORS)
            return rule_too_big(n, d);
        int f = rule_new_factor(r, s.size[l], kind, repeated ? "Einsum takes a diagonal along it" : NULL);
        for (int i = 0; i < s.nin; i++)
            for (int j = 0; j < s.rank[i]; j++)
                if (s.letter[i][j] == l && n->inputs[i]->dims[j] == s.size[l])
                    rule_map_dim(r, i, j, f);
        if (in_out >= 0)
            rule_map_dim(r, yo, in_out, f);
    }
    return 0;
}

/* QuantizeLinear / DequantizeLinear: elementwise over x; a per-axis scale
 * (and zero point) follows x's axis factor; a blocked one follows every
 * dim but the blocked axis, which stays whole (a block may straddle a
 * split). */
int rule_quant(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0], *scale = n->inputs[1];
    int axis = 0, yo = rule_out_idx(n, 0);
    int64_t block;
    Diag quiet;
    diag_init(&quiet, "");
    int layout = quant_layout(n, x, scale, &axis, &block, &quiet);
    diag_free(&quiet);
    if (layout < 0)
        return rule_too_big(n, d);
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] <= 1)
            continue;
        if (r->nfactors == RULE_MAX_FACTORS)
            return rule_too_big(n, d);
        int whole = layout == 2 && i == axis;
        int f = rule_new_factor(r, x->dims[i], whole ? FK_NEED_REPL : FK_PASS,
                                whole ? "quantisation blocks run along this dim" : NULL);
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, yo, i, f);
        for (int k = 1; k < n->ninputs; k++)
            if (n->inputs[k] && ((layout == 1 && i == axis) || (layout == 2 && !whole)))
                rule_map_dim(r, k, layout == 1 ? 0 : i, f);
    }
    return 0;
}

/* Projects factor shardings onto tensor t of the rule. */
void rule_project(const FactorRule *r, int t, const unsigned char *fn, const unsigned char (*fa)[MESH_MAX_AXES],
                  const Mesh *m, Sharding *out)
{
    const Tensor *tt = r->tensors[t];
    sharding_replicated(out, tt->rank);
    for (int i = 0; i < tt->rank; i++) {
        const DimFactors *df = &r->dims[t][i];
        for (int fi = 0; fi < df->n; fi++) {
            int f = df->f[fi];
            int64_t prod = 1;
            for (int k = 0; k < fn[f]; k++) {
                out->axes[i][out->naxes[i]++] = fa[f][k];
                prod *= m->axes[fa[f][k]].size;
            }
            if (prod != r->size[f])
                break;
        }
    }
}
