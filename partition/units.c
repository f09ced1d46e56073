/* units.c: the unit each tensor dim is cut in when split unevenly.
 *
 * An uneven split pads a dim to whole blocks (sharding.c). A dim that a
 * Reshape reads as heads x head_dim must be cut between heads, or the
 * Reshape could not keep it split: 12 heads of 64 over tp=8 are blocks of
 * 2 heads (128 elements), not of ceil(768/8) = 96. So every tensor dim
 * gets a unit, in elements, that its blocks are made of:
 *
 *  - dims that hold the same factor alone (a pass-through chain: a weight's
 *    column, the MatMul result, the bias added to it) are one class and
 *    share a unit, or their blocks would not line up;
 *  - a dim made of several factors (major first) is cut between its major
 *    factor's units: its class's unit is a multiple of the minor factors'
 *    product times the unit of the major factor's own class;
 *  - the unit of a class is the least common multiple of what it must be
 *    a multiple of, iterated to a fixed point (a few passes: units only
 *    grow, and one that would not divide its dims falls back to 1, which
 *    leaves the Reshape to refuse the padded split: rule_factor_can_pad).
 *
 * An even split is the same in any unit that divides its blocks, so units
 * change nothing where the shards divide the dims. The units depend on
 * the graph alone, so every plan of it sees the same ones.
 */
#include "partition.h"

#include <stdlib.h>

static int uf_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* Slot of (tensor, dim). */
#define SLOT(t, i) ((t)->id * IR_MAX_RANK + (i))

/* single[f]: the slot of a dim of rule r holding factor f alone, or -1;
 * with parent, those dims are joined into one class. */
static void single_dims(const FactorRule *r, int *single, int *parent)
{
    for (int f = 0; f < r->nfactors; f++)
        single[f] = -1;
    for (int t = 0; t < r->ntensors; t++) {
        const Tensor *tt = r->tensors[t];
        for (int i = 0; tt && i < tt->rank; i++) {
            const DimFactors *df = &r->dims[t][i];
            if (df->n != 1)
                continue;
            int f = df->f[0], s = SLOT(tt, i);
            if (parent && single[f] >= 0)
                parent[uf_find(parent, s)] = uf_find(parent, single[f]);
            single[f] = s;
        }
    }
}

/* rules[i]: node i's rule, or one with no factors if it has none. */
static void split_units(const Graph *g, const FactorRule *const *rules)
{
    int nslots = g->ntensors * IR_MAX_RANK;
    int *parent = malloc((size_t)(nslots ? nslots : 1) * sizeof(int));
    int64_t *unit = malloc((size_t)(nslots ? nslots : 1) * sizeof(int64_t));
    int *single = malloc(RULE_MAX_FACTORS * sizeof(int));
    if (!parent || !unit || !single)
        abort();
    for (int i = 0; i < nslots; i++) {
        parent[i] = i;
        unit[i] = 1;
    }
    /* Classes: the dims holding one factor alone. single[f]: one of them. */
    for (int ni = 0; ni < g->nnodes; ni++)
        single_dims(rules[ni], single, parent);
    /* Compound dims: a multiple of the minor factors times the major's unit. */
    for (int pass = 0, changed = 1; changed && pass < 8; pass++) {
        changed = 0;
        for (int ni = 0; ni < g->nnodes; ni++) {
            const FactorRule *r = rules[ni];
            single_dims(r, single, NULL);
            for (int t = 0; t < r->ntensors; t++) {
                const Tensor *tt = r->tensors[t];
                for (int i = 0; tt && i < tt->rank; i++) {
                    const DimFactors *df = &r->dims[t][i];
                    if (df->n < 2)
                        continue;
                    int64_t minor = 1;
                    for (int k = 1; k < df->n; k++)
                        minor *= r->size[df->f[k]];
                    int64_t want = minor * (single[df->f[0]] >= 0 ? unit[uf_find(parent, single[df->f[0]])] : 1);
                    int c = uf_find(parent, SLOT(tt, i));
                    int64_t l = unit[c] / rule_gcd(unit[c], want) * want;
                    if (l != unit[c] && l <= tt->dims[i] && tt->dims[i] % l == 0) {
                        unit[c] = l;
                        changed = 1;
                    }
                    /* And back: a block of the compound dim is whole blocks
                     * of its major factor, so that factor's own dims are cut
                     * in unit / minor (a Reshape [4, 2] -> [8] -> [2, 4]
                     * cuts the [8] in 4s, so the rows of [4, 2] go in 2s). */
                    int sm = single[df->f[0]];
                    int64_t size = r->size[df->f[0]];
                    if (sm >= 0 && unit[c] % minor == 0) {
                        int cm = uf_find(parent, sm);
                        int64_t back = unit[c] / minor, lm = unit[cm] / rule_gcd(unit[cm], back) * back;
                        if (lm != unit[cm] && lm <= size && size % lm == 0) {
                            unit[cm] = lm;
                            changed = 1;
                        }
                    }
                }
            }
        }
    }
    /* A unit must divide every dim of its class. */
    for (int ti = 0; ti < g->ntensors; ti++) {
        const Tensor *t = g->tensors[ti];
        for (int i = 0; i < t->rank; i++) {
            int c = uf_find(parent, SLOT(t, i));
            if (t->dims[i] <= 0 || t->dims[i] % unit[c])
                unit[c] = 1;
        }
    }
    for (int ti = 0; ti < g->ntensors; ti++) {
        Tensor *t = g->tensors[ti];
        for (int i = 0; i < IR_MAX_RANK; i++)
            t->split_unit[i] = i < t->rank && unit[uf_find(parent, SLOT(t, i))] > 1 ? unit[uf_find(parent, SLOT(t, i))] : 0;
    }
    free(parent);
    free(unit);
    free(single);
}

void partition_split_units(const Plan *p)
{
    const FactorRule **rules = malloc((size_t)(p->g->nnodes + 1) * sizeof(*rules));
    if (!rules)
        abort();
    for (int i = 0; i < p->g->nnodes; i++)
        rules[i] = &p->nodes[i].rule;
    split_units(p->g, rules);
    free(rules);
}
