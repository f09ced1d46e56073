/* propagate.c: from a few annotations to a complete, explained layout.
 *
 * Two phases, in the manner of GSPMD/Shardy:
 *
 * 1. Propagation. Annotated tensors are fixed; unannotated graph inputs are
 *    fixed replicated; everything else starts replicated. A FIFO worklist
 *    visits nodes: the node's rule projects each tensor's sharding onto
 *    the op's factors, the best candidate per factor wins (annotation over
 *    propagated, then the closer annotation, then the cheaper reshard), and
 *    the result is projected back onto every unfixed tensor. A tensor only
 *    ever gains axes (its layout is refined, never replaced), so the
 *    worklist reaches a fixed point. Every update records its origin.
 *
 * 2. Lowering, in topological order. Each node's factor sharding fixes the
 *    layout each operand must have; where the producer's layout differs, a
 *    reshard is recorded with its cause. A split reduction factor makes the
 *    result partial; a partial value may flow on only into consumers that
 *    are linear in it (a replicated bias added to a partial sum would be
 *    added once per rank), otherwise it is reduced first. Where the
 *    tensors' layouts disagree (two annotations on different factors of
 *    one contraction, a pinned layout against a split operand), or the
 *    merge leaves a result partial by splitting a free weight, the cost
 *    model settles the node by bytes moved, then time: see lower_choose.
 *    An annotation always holds, or lowering fails naming it. A graph output keeps its layout (a
 *    partial one is reduced): --out gathers it to rank 0 once, after the
 *    run, so it costs the step nothing.
 */
#include "partition.h"

#include <stdlib.h>
#include <string.h>

typedef struct Candidate {
    unsigned char n;
    unsigned char axes[MESH_MAX_AXES];
    int prio;        /* 3 fixed annotation, 2 propagated, 0 default */
    int depth;
    int tensor;      /* rule tensor index it came from */
} Candidate;

static int tensor_prio(const TensorPlan *tp)
{
    if (tp->origin == ORIGIN_USER || tp->origin == ORIGIN_MODEL)
        return 3;
    if (tp->origin == ORIGIN_PROPAGATED || tp->origin == ORIGIN_COST)
        return 2;
    return 0;
}

/* Splits the axes of dim `dim` of sharding s among the dim's factors
 * (major first). A factor takes axes while they divide it (or while it
 * may be padded: rule_factor_fits); a later factor gets axes only once the
 * earlier ones are fully split. */
static void dim_to_factors(const Mesh *m, const FactorRule *r, const DimFactors *df,
                           const Sharding *s, int dim, Candidate *out /* per factor */)
{
    int k = 0;
    for (int fi = 0; fi < df->n && k < s->naxes[dim]; fi++) {
        int f = df->f[fi];
        int64_t prod = 1;
        Candidate *c = &out[f];
        while (k < s->naxes[dim] && prod != r->size[f]) { /* a fully split factor leaves the rest to the next */
            int sz = m->axes[s->axes[dim][k]].size;
            c->axes[c->n] = s->axes[dim][k];
            if (!rule_factor_fits(r, f, m, c->axes, c->n + 1))
                break;
            c->n++;
            k++;
            prod *= sz;
        }
        if (prod != r->size[f])
            break; /* this factor is not fully split (or padded): no axes for later ones */
    }
}

static int cand_equal(const Candidate *a, const Candidate *b)
{
    return a->n == b->n && memcmp(a->axes, b->axes, a->n) == 0;
}

/* Chooses every factor's sharding for node n from its tensors' current
 * layouts. Writes the winning candidate per factor into win (for origins). */
static void merge_factors(const Plan *p, const FactorRule *r, NodePlan *np, Candidate *win)
{
    const Mesh *m = &p->mesh;
    memset(np->fnaxes, 0, sizeof(np->fnaxes));
    memset(win, 0, sizeof(Candidate) * RULE_MAX_FACTORS);
    /* Candidates per (tensor, factor). */
    Candidate cands[RULE_MAX_FACTORS][8];
    int ncands[RULE_MAX_FACTORS] = {0};
    for (int t = 0; t < r->ntensors; t++) {
        const Tensor *tt = r->tensors[t];
        if (!tt)
            continue;
        const TensorPlan *tp = &p->tensors[tt->id];
        Candidate per[RULE_MAX_FACTORS];
        memset(per, 0, sizeof per);
        for (int i = 0; i < tt->rank; i++)
            dim_to_factors(m, r, &r->dims[t][i], &tp->sharding, i, per);
        for (int f = 0; f < r->nfactors; f++) {
            if (per[f].n == 0 || r->kind[f] == FK_NEED_REPL)
                continue;
            per[f].prio = tensor_prio(tp);
            per[f].depth = tp->depth;
            per[f].tensor = t;
            if (ncands[f] < 8)
                cands[f][ncands[f]++] = per[f];
        }
    }
    /* Best candidate per factor: priority, then closeness, then the
     * cheapest reshard of the factor's other tensors, then model order. */
    for (int f = 0; f < r->nfactors; f++) {
        int best = -1;
        double best_cost = 0;
        for (int c = 0; c < ncands[f]; c++) {
            const Candidate *cd = &cands[f][c];
            double cost = 0;
            for (int o = 0; o < ncands[f]; o++)
                if (!cand_equal(cd, &cands[f][o]))
                    cost += (double)sharding_local_bytes(
                        &p->tensors[r->tensors[cands[f][o].tensor]->id].sharding, m,
                        r->tensors[cands[f][o].tensor]);
            if (best < 0) {
                best = c;
                best_cost = cost;
                continue;
            }
            const Candidate *bd = &cands[f][best];
            if (cd->prio != bd->prio ? cd->prio > bd->prio
                : cd->depth != bd->depth ? cd->depth < bd->depth
                : cost < best_cost) {
                best = c;
                best_cost = cost;
            }
        }
        if (best >= 0)
            win[f] = cands[f][best];
    }
    /* An axis may split only one factor: higher-priority factors claim
     * their axes first; a later factor's list stops at a taken axis. */
    int order[RULE_MAX_FACTORS];
    for (int f = 0; f < r->nfactors; f++)
        order[f] = f;
    for (int i = 1; i < r->nfactors; i++)
        for (int j = i; j > 0; j--) {
            const Candidate *a = &win[order[j]], *b = &win[order[j - 1]];
            if (a->prio > b->prio || (a->prio == b->prio && a->n && b->n && a->depth < b->depth)) {
                int tmp = order[j];
                order[j] = order[j - 1];
                order[j - 1] = tmp;
            }
        }
    unsigned taken = 0;
    for (int i = 0; i < r->nfactors; i++) {
        int f = order[i];
        Candidate *c = &win[f];
        int k = 0;
        while (k < c->n && !(taken & (1u << c->axes[k])) && rule_factor_fits(r, f, m, c->axes, k + 1)) {
            np->faxes[f][k] = c->axes[k];
            taken |= 1u << c->axes[k];
            k++;
        }
        np->fnaxes[f] = (unsigned char)k;
        c->n = (unsigned char)k;
    }
}

/* Is `a` a refinement of `b` (b's axes are a prefix of a's, per dim)? */
static int refines(const Sharding *a, const Sharding *b)
{
    int more = 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->naxes[i] < b->naxes[i] || memcmp(a->axes[i], b->axes[i], b->naxes[i]) != 0)
            return 0;
        more |= a->naxes[i] > b->naxes[i];
    }
    return more;
}

Plan *plan_new(const Graph *g, const Mesh *m)
{
    Plan *p = calloc(1, sizeof(Plan));
    if (!p)
        abort();
    p->g = g;
    p->mesh = *m;
    p->zero_axis = -1;
    p->tensors = arena_alloc(&p->arena, (size_t)(g->ntensors + 1) * sizeof(TensorPlan));
    p->nodes = arena_alloc(&p->arena, (size_t)(g->nnodes + 1) * sizeof(NodePlan));
    for (int i = 0; i < g->ntensors; i++)
        sharding_replicated(&p->tensors[i].sharding, g->tensors[i]->rank < 0 ? 0 : g->tensors[i]->rank);
    return p;
}

int plan_build_rules(Plan *p, Diag *d)
{
    for (int i = 0; i < p->g->nnodes; i++)
        if (rule_build(&p->arena, p->g->nodes[i], &p->nodes[i].rule, d))
            return -1;
    partition_split_units(p);
    return 0;
}

void plan_free(Plan *p)
{
    if (!p)
        return;
    free(p->reshards);
    arena_free(&p->arena);
    free(p);
}

static void apply_annotations(Plan *p, const AnnotationList *ann)
{
    const Graph *g = p->g;
    for (int i = 0; i < g->ninputs; i++)
        p->tensors[g->inputs[i]->id].fixed = 1; /* replicated unless annotated */
    for (int i = 0; ann && i < ann->n; i++) {
        const Annotation *a = &ann->items[i];
        const Tensor *t = graph_tensor_find(g, a->tensor);
        IR_ASSERT(t); /* annotate.c checked the name */
        TensorPlan *tp = &p->tensors[t->id];
        tp->sharding = a->sharding;
        tp->origin = a->origin;
        tp->source = a->spec;
        tp->fixed = 1;
    }
}

/* ---- phase 1: propagation ----------------------------------------------- */

static int propagate(Plan *p, Diag *d)
{
    const Graph *g = p->g;
    int nn = g->nnodes;
    int *queue = malloc(sizeof(int) * (size_t)(nn + 1));
    char *queued = calloc((size_t)nn + 1, 1);
    if (!queue || !queued)
        abort();
    int head = 0, count = 0;
    for (int i = 0; i < nn; i++) {
        queue[i] = i;
        queued[i] = 1;
    }
    count = nn;
    int budget = 64 * (nn + 8);
    while (count > 0) {
        if (--budget < 0)
            break; /* cannot happen with refinement-only updates; be safe */
        int ni = queue[head];
        head = (head + 1) % (nn ? nn : 1);
        count--;
        queued[ni] = 0;
        p->iterations++;
        const Node *n = g->nodes[ni];
        NodePlan *np = &p->nodes[ni];
        Candidate win[RULE_MAX_FACTORS];
        merge_factors(p, &np->rule, np, win);
        for (int t = 0; t < np->rule.ntensors; t++) {
            const Tensor *tt = np->rule.tensors[t];
            if (!tt)
                continue;
            TensorPlan *tp = &p->tensors[tt->id];
            if (tp->fixed)
                continue;
            Sharding proj;
            rule_project(&np->rule, t, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes,
                              &p->mesh, &proj);
            if (!refines(&proj, &tp->sharding))
                continue;
            /* Origin: the winning candidate of the first factor that
             * gave this tensor new axes. */
            const Candidate *src = NULL;
            for (int i = 0; i < tt->rank && !src; i++)
                for (int fi = 0; fi < np->rule.dims[t][i].n && !src; fi++) {
                    int f = np->rule.dims[t][i].f[fi];
                    if (win[f].n && win[f].tensor != t)
                        src = &win[f];
                }
            if (sharding_check(&proj, &p->mesh, tt, d)) {
                free(queue);
                free(queued);
                return -1;
            }
            tp->sharding = proj;
            tp->origin = ORIGIN_PROPAGATED;
            tp->via = n;
            tp->from = src ? np->rule.tensors[src->tensor] : NULL;
            tp->depth = (src ? p->tensors[tp->from->id].depth : 0) + 1;
            /* Revisit every node touching this tensor. */
            const Node *touch[1];
            int ntouch = 0;
            if (tt->producer)
                touch[ntouch++] = tt->producer;
            for (int k = -ntouch; k < tt->nconsumers; k++) {
                const Node *u = k < 0 ? touch[0] : tt->consumers[k];
                if (u == n || queued[u->id])
                    continue;
                queue[(head + count) % nn] = u->id;
                queued[u->id] = 1;
                count++;
            }
        }
    }
    free(queue);
    free(queued);
    return 0;
}

/* ---- phase 2: lowering requirements to reshards ------------------------- */

/* May operand k of n stay partial (the op is linear in it)? */
static int linear_in(const Node *n, int k, const Plan *p)
{
    unsigned pk = p->tensors[n->inputs[k]->id].sharding.partial;
    switch (n->op) {
    case OP_IDENTITY: case OP_RESHAPE: case OP_TRANSPOSE: case OP_SQUEEZE:
    case OP_UNSQUEEZE: case OP_FLATTEN: case OP_SLICE: case OP_SPLIT:
    case OP_REDUCE_SUM: case OP_REDUCE_MEAN:
        return 1;
    case OP_GATHER:
        return k == 0;
    case OP_ADD: case OP_SUB: case OP_CONCAT:
        /* A sum of partial sums is a partial sum only if every term is. */
        for (int j = 0; j < n->ninputs; j++)
            if (n->inputs[j] && p->tensors[n->inputs[j]->id].sharding.partial != pk)
                return 0;
        return 1;
    case OP_MUL: case OP_MATMUL:
        /* Linear in one operand when the other is a plain value. */
        return p->tensors[n->inputs[1 - k]->id].sharding.partial == 0;
    case OP_DIV:
        return k == 0 && p->tensors[n->inputs[1]->id].sharding.partial == 0;
    case OP_SCATTER_ND:
        return k == 2 && rule_scatter_adds_into_zeros(n);
    default:
        return 0;
    }
}

int plan_add_reshard(Plan *p, const Tensor *t, const Node *consumer, int operand,
                     const char *reason, const Sharding *src, const Sharding *dst)
{
    /* One reshard serves every consumer needing that layout: look among
     * this tensor's own reshards only (a list per tensor keeps this linear
     * in the graph) and take the lowest-indexed match, as a scan of all
     * would. */
    if (!p->tensor_reshard) {
        p->tensor_reshard = arena_alloc(&p->arena, (size_t)(p->g->ntensors + 1) * sizeof(int));
        for (int i = 0; i < p->g->ntensors; i++)
            p->tensor_reshard[i] = -1;
    }
    int found = -1;
    for (int i = p->tensor_reshard[t->id]; i >= 0; i = p->reshards[i].next_of_tensor)
        if (sharding_equal(&p->reshards[i].src, src) && sharding_equal(&p->reshards[i].dst, dst))
            found = i;
    if (found >= 0)
        return found;
    if (p->nreshards == p->reshards_cap) {
        p->reshards_cap = p->reshards_cap ? 2 * p->reshards_cap : 16;
        p->reshards = realloc(p->reshards, (size_t)p->reshards_cap * sizeof(PlanReshard));
        if (!p->reshards)
            abort();
    }
    PlanReshard *r = &p->reshards[p->nreshards++];
    memset(r, 0, sizeof(*r));
    r->tensor = t;
    r->consumer = consumer;
    r->operand = operand;
    r->reason = reason;
    r->src = *src;
    r->dst = *dst;
    r->next_of_tensor = p->tensor_reshard[t->id];
    p->tensor_reshard[t->id] = p->nreshards - 1;
    reshard_lower(&p->mesh, t, src, dst, &r->r);
    return p->nreshards - 1;
}

/* The factor sharding that tensor t's layout s implies (only the factors
 * t holds get axes). */
void rule_factors_of(const Mesh *m, const FactorRule *r, int t, const Sharding *s, unsigned char *fn,
                     unsigned char (*fa)[MESH_MAX_AXES])
{
    Candidate per[RULE_MAX_FACTORS];
    memset(per, 0, sizeof per);
    for (int i = 0; i < r->tensors[t]->rank; i++)
        dim_to_factors(m, r, &r->dims[t][i], s, i, per);
    for (int f = 0; f < r->nfactors; f++) {
        fn[f] = per[f].n;
        memcpy(fa[f], per[f].axes, MESH_MAX_AXES);
    }
}

/* Can every tensor of the rule hold the factor sharding (fn, fa) exactly?
 * A minor factor of a dim is split only once the dim's major factors are
 * fully split; projecting onto each tensor and reading the factors back
 * must give the same axes. */
int rule_representable(const Mesh *m, const FactorRule *r, const unsigned char *fn,
                       const unsigned char (*fa)[MESH_MAX_AXES])
{
    for (int t = 0; t < r->ntensors; t++) {
        const Tensor *tt = r->tensors[t];
        if (!tt)
            continue;
        Sharding proj;
        rule_project(r, t, fn, fa, m, &proj);
        Candidate back[RULE_MAX_FACTORS];
        memset(back, 0, sizeof back);
        for (int i = 0; i < tt->rank; i++)
            dim_to_factors(m, r, &r->dims[t][i], &proj, i, back);
        for (int i = 0; i < tt->rank; i++)
            for (int fi = 0; fi < r->dims[t][i].n; fi++) {
                int f = r->dims[t][i].f[fi];
                if (fn[f] && (back[f].n != fn[f] || memcmp(back[f].axes, fa[f], fn[f]) != 0))
                    return 0;
            }
    }
    return 1;
}

unsigned rule_reduced_axes(const FactorRule *r, const unsigned char *fn, const unsigned char (*fa)[MESH_MAX_AXES])
{
    unsigned axes = 0;
    for (int f = 0; f < r->nfactors; f++)
        if (r->kind[f] == FK_REDUCTION)
            for (int k = 0; k < fn[f]; k++)
                axes |= 1u << fa[f][k];
    return axes;
}

/* Drops the split of any factor that some tensor of the rule cannot
 * represent (a minor factor of a dim whose major factor is not fully
 * split), so every tensor's local block is exactly what the node computes
 * on; the operands are then resharded instead. */
static void make_representable(const Mesh *m, const FactorRule *r, unsigned char *fn,
                               const unsigned char (*fa)[MESH_MAX_AXES])
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int t = 0; t < r->ntensors && !changed; t++) {
            const Tensor *tt = r->tensors[t];
            if (!tt)
                continue;
            Sharding proj;
            rule_project(r, t, fn, fa, m, &proj);
            Candidate back[RULE_MAX_FACTORS];
            memset(back, 0, sizeof back);
            for (int i = 0; i < tt->rank; i++)
                dim_to_factors(m, r, &r->dims[t][i], &proj, i, back);
            for (int i = 0; i < tt->rank && !changed; i++)
                for (int fi = 0; fi < r->dims[t][i].n && !changed; fi++) {
                    int f = r->dims[t][i].f[fi];
                    if (fn[f] && back[f].n != fn[f]) {
                        fn[f] = 0;
                        changed = 1;
                    }
                }
        }
    }
}

/* Why operand t of node n must change from `have` to `need`. */
static const char *reshard_reason(Plan *p, const Node *n, const FactorRule *r, int t,
                                  const Sharding *have, const Sharding *need)
{
    char buf[320];
    const Mesh *m = &p->mesh;
    if (have->partial & ~need->partial) {
        if (linear_in(n, t, p))
            snprintf(buf, sizeof buf, "partial sum feeds %s \"%s\", which splits over an axis it is partial in; "
                     "reduce first", node_op_name(n), n->label);
        else
            snprintf(buf, sizeof buf, "partial sum feeds %s \"%s\", which is not linear in it; reduce first",
                     node_op_name(n), n->label);
        return arena_strdup(&p->arena, buf);
    }
    for (int i = 0; i < have->rank; i++) {
        if (have->naxes[i] == need->naxes[i] &&
            memcmp(have->axes[i], need->axes[i], have->naxes[i]) == 0)
            continue;
        const DimFactors *df = &r->dims[t][i];
        for (int fi = 0; fi < df->n; fi++)
            if (r->kind[df->f[fi]] == FK_NEED_REPL && have->naxes[i]) {
                snprintf(buf, sizeof buf, "%s \"%s\": %s (dim %d must be whole)", node_op_name(n),
                         n->label, r->why[df->f[fi]], i);
                return arena_strdup(&p->arena, buf);
            }
        char hs[96], ns[96];
        snprintf(buf, sizeof buf, "%s \"%s\" computes with operand %d as %s (from its other tensors), not %s",
                 node_op_name(n), n->label, t, sharding_str(need, m, ns, sizeof ns),
                 sharding_str(have, m, hs, sizeof hs));
        return arena_strdup(&p->arena, buf);
    }
    return "layout differs";
}

/* A weight nothing has read yet and nothing pins: it is sliced at compile
 * time, so its first reader may take it in whatever layout it computes on. */
static int free_weight(const Plan *p, const Tensor *t, const char *taken)
{
    return t->is_initializer && !t->producer && !t->is_output && !p->tensors[t->id].fixed && !taken[t->id];
}

static int annotated(const TensorPlan *tp)
{
    return tp->fixed && (tp->origin == ORIGIN_USER || tp->origin == ORIGIN_MODEL);
}

/* Computing node n under factor sharding (fn, fa): what it costs (compute,
 * its operands' reshards, and reducing a partial result) and, with apply,
 * the reshards and result layouts it records. Returns 1 if it cannot give an annotated result its layout
 * (*bad names it), 0 otherwise, -1 on error. */
typedef struct LowerCost {
    double total_s;     /* compute + operand reshards + reducing a partial result */
    double operands_s;  /* the operand reshards alone */
    int64_t bytes;      /* bytes per rank those reshards and that reduction send */
    int pinned;         /* an annotated operand needs another layout */
    int partial;        /* an unannotated result is left partial: a reduction to pay */
    int free_split;     /* a free weight is split for this node (propagation's proposal, not a pin) */
} LowerCost;

static int lower_node(Plan *p, const Node *n, const FactorRule *r, const unsigned char *fn,
                      const unsigned char (*fa)[MESH_MAX_AXES], char *taken, int apply, LowerCost *cost,
                      const Tensor **bad, Diag *d)
{
    double ops = 0;
    int64_t bytes = 0;
    int pinned = 0, partial = 0, free_split = 0;
    const Mesh *m = &p->mesh;
    NodePlan *np = &p->nodes[n->id];
    double c = plan_node_seconds(p, n, r, fn, fa);
    /* Axes this node splits any factor over. A value cannot be both split
     * and partial over one axis (each rank would hold a different slice of
     * a different partial sum), so a partial operand is carried through a
     * linear op only over axes the op does not split over; over the others
     * it is reduced first (a reduce-scatter when the op wants it split
     * there). An annotated result limits the carry to its own partial axes. */
    unsigned split_axes = 0, reduced = rule_reduced_axes(r, fn, fa), keep = ~0u;
    for (int f = 0; f < r->nfactors; f++)
        for (int k = 0; k < fn[f]; k++)
            split_axes |= 1u << fa[f][k];
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] && annotated(&p->tensors[n->outputs[k]->id]))
            keep &= p->tensors[n->outputs[k]->id].sharding.partial;
    unsigned carried = 0;
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (apply)
            np->in_reshard[k] = -1;
        if (!t)
            continue;
        TensorPlan *tp = &p->tensors[t->id];
        Sharding need, have = tp->sharding;
        rule_project(r, k, fn, fa, m, &need);
        if (free_weight(p, t, taken)) {
            free_split |= sharding_used_axes(&need) != 0;
            if (apply) {
                if (!sharding_equal(&have, &need)) {
                    tp->sharding = need;
                    tp->origin = ORIGIN_COST;
                    tp->via = n;
                    tp->from = NULL;
                }
                taken[t->id] = 1;
            }
            continue;
        }
        if (have.partial && linear_in(n, k, p)) {
            need.partial = have.partial & ~split_axes & keep;
            carried |= need.partial;
        }
        if (apply)
            taken[t->id] = 1;
        if (sharding_equal(&have, &need))
            continue;
        pinned |= annotated(tp);
        if (apply) {
            np->in_reshard[k] = plan_add_reshard(p, t, n, k, reshard_reason(p, n, r, k, &have, &need), &have, &need);
        } else {
            Reshard rs;
            reshard_lower(m, t, &have, &need, &rs);
            ops += rs.seconds;
            bytes += rs.bytes;
        }
    }
    for (int k = 0; k < n->noutputs; k++) {
        const Tensor *t = n->outputs[k];
        if (!t)
            continue;
        TensorPlan *tp = &p->tensors[t->id];
        Sharding out;
        rule_project(r, n->ninputs + k, fn, fa, m, &out);
        out.partial = reduced | carried;
        IR_ASSERT(!(sharding_used_axes(&out) & out.partial));
        if (annotated(tp)) {
            if (!sharding_equal(&out, &tp->sharding)) {
                *bad = t;
                return 1;
            }
        } else if (!apply && out.partial) {
            Sharding plain = out;
            plain.partial = 0;
            Reshard rs;
            reshard_lower(m, t, &out, &plain, &rs);
            c += rs.seconds;
            bytes += rs.bytes;
            partial = 1;
        }
        if (!apply)
            continue;
        if (sharding_check(&out, m, t, d))
            return -1;
        Sharding was = tp->sharding, now = out;
        now.partial = 0;
        if (!annotated(tp) && tp->origin != ORIGIN_AUTO && !sharding_equal(&was, &now)) {
            /* Propagation proposed another layout; say who settled this one. */
            tp->origin = ORIGIN_COST;
            tp->via = n;
            tp->from = NULL;
        }
        tp->sharding = out;
    }
    if (cost) {
        cost->total_s = c + ops;
        cost->operands_s = ops;
        cost->bytes = bytes;
        cost->pinned = pinned;
        cost->partial = partial;
        cost->free_split = free_split;
    }
    return 0;
}

/* The factor sharding anchored on tensor t's layout: t's factors first,
 * then (with fill) the merged choice's factors on axes t leaves free. */
static void anchored(const Mesh *m, const FactorRule *r, int t, const Sharding *s, const NodePlan *merged,
                     int fill, unsigned char *fn, unsigned char (*fa)[MESH_MAX_AXES])
{
    rule_factors_of(m, r, t, s, fn, fa);
    unsigned used = 0;
    for (int f = 0; f < r->nfactors; f++) {
        if (r->kind[f] == FK_NEED_REPL)
            fn[f] = 0;
        for (int k = 0; k < fn[f]; k++)
            used |= 1u << fa[f][k];
    }
    for (int f = 0; fill && f < r->nfactors; f++) {
        unsigned want = 0;
        for (int k = 0; k < merged->fnaxes[f]; k++)
            want |= 1u << merged->faxes[f][k];
        if (fn[f] || !want || (want & used))
            continue;
        fn[f] = merged->fnaxes[f];
        memcpy(fa[f], merged->faxes[f], MESH_MAX_AXES);
        used |= want;
    }
    make_representable(m, r, fn, (const unsigned char (*)[MESH_MAX_AXES])fa);
}

static int choice_find(const CostChoice *c, int nf, const unsigned char *fn,
                       const unsigned char (*fa)[MESH_MAX_AXES])
{
    for (int i = 0; i < c->ncand; i++) {
        int same = 1;
        for (int f = 0; f < nf && same; f++)
            same = c->fn[i][f] == fn[f] && memcmp(c->fa[i][f], fa[f], fn[f]) == 0;
        if (same)
            return i;
    }
    return -1;
}

static void choice_add(CostChoice *c, int nf, const unsigned char *fn, const unsigned char (*fa)[MESH_MAX_AXES],
                       const char *anchor)
{
    if (c->ncand == COST_MAX_CANDS || choice_find(c, nf, fn, fa) >= 0)
        return;
    memset(c->fa[c->ncand], 0, sizeof c->fa[0]);
    memcpy(c->fn[c->ncand], fn, (size_t)nf);
    for (int f = 0; f < nf; f++)
        memcpy(c->fa[c->ncand][f], fa[f], fn[f]);
    c->anchor[c->ncand++] = anchor;
}

/* The error for an annotation no factor sharding of its producer gives. */
static void annotation_conflict(const Plan *p, const Node *n, const FactorRule *r, const Tensor *t, Diag *d)
{
    const Mesh *m = &p->mesh;
    const TensorPlan *tp = &p->tensors[t->id];
    char why[256] = "", others[512] = "";
    int ti = rule_out_idx(n, 0);
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] == t)
            ti = n->ninputs + k;
    for (int i = 0; i < t->rank && !why[0]; i++)
        for (int fi = 0; fi < r->dims[ti][i].n && tp->sharding.naxes[i]; fi++)
            if (r->kind[r->dims[ti][i].f[fi]] == FK_NEED_REPL) {
                snprintf(why, sizeof why, ": %s (dim %d must be whole)", r->why[r->dims[ti][i].f[fi]], i);
                break;
            }
    if (!why[0] && tp->sharding.partial)
        snprintf(why, sizeof why, ": no split of what it contracts leaves the result partial like that");
    size_t off = 0;
    for (int k = 0; k < r->ntensors && off < sizeof others; k++) {
        const Tensor *u = r->tensors[k];
        if (!u || u == t || !annotated(&p->tensors[u->id]))
            continue;
        char sb[96];
        off += (size_t)snprintf(others + off, sizeof others - off, "%s%s=%s", off ? ", " : "; it conflicts with ",
                                u->label, p->tensors[u->id].source ? p->tensors[u->id].source
                                : sharding_str(&p->tensors[u->id].sharding, m, sb, sizeof sb));
    }
    diag_add(d, "annotation %s=%s cannot hold: node \"%s\" (%s) cannot produce that layout%s%s", t->label,
             tp->source ? tp->source : "?", n->label, node_op_name(n), why, others);
}

/* Settles node n's factor sharding. The merge of its tensors' layouts
 * (propagation's answer) is kept when it satisfies the annotations,
 * needs no communication for the operands and leaves no result partial
 * through a free weight's split.
 * Otherwise the cost model picks among the merge, the sharding anchored
 * on each tensor's layout (with and without the merge's other factors),
 * and computing replicated: that is, among resharding one operand,
 * another, or reducing the result. A partial result counts too: a merge
 * that splits a free weight's contracted dim moves nothing here but pays
 * a reduction of its result, which may exceed gathering the split operand
 * (a Conv after a channel split). Propagation only proposed that split;
 * --shard-weights' gathers of the weight, added later (fsdp.c), are not
 * seen here.
 *
 * The candidates are ranked by the bytes per rank their reshards send,
 * then by time (compute and the collectives' latency); at equal bytes
 * the merge stands. Bytes first, as XLA's partitioner: at the sizes where
 * the choice matters the collectives are bandwidth-bound, while the time
 * model's fixed latency per call would have one gather beat an
 * all-reduce of half the bytes. A pinned replicated operand costs
 * nothing to read in slices (lower_node's reshard to the split layout is
 * a local slice), so slicing a pinned weight and reducing a small result
 * competes fairly with gathering a large activation. */
/* ZeRO: an optimizer update runs on the zero axis's block of its weight:
 * the outermost dim that axis divides evenly split over it as well, minor
 * to any axis that splits it already, when the weight is not split over
 * that axis already. ZeRO-1/2 take it only where the block stays
 * contiguous in the rank's local copy of the weight (every dim before it
 * of local extent 1: dim 0, or the 16 of a [1, 16, 64] position table),
 * so the updated blocks all-gather back in place. ZeRO-3 takes the dim
 * fsdp.c stores the weight split on (the same outermost dim), so the
 * update runs on the stored block whatever the dims before it. */
void plan_zero_shard(const Plan *p, const Tensor *w, Sharding *s)
{
    const Mesh *m = &p->mesh;
    int ax = p->zero_axis;
    if (ax < 0 || w->rank < 1 || (sharding_used_axes(s) & (1u << ax)) || s->partial)
        return;
    int64_t local[IR_MAX_RANK];
    sharding_local_dims(s, m, w, local);
    for (int k = 0; k < w->rank; k++) {
        Sharding z = *s;
        z.axes[k][z.naxes[k]++] = (unsigned char)ax;
        if (w->dims[k] % sharding_dim_shards(&z, m, k) == 0 && !sharding_dim_uneven(&z, m, w, k) &&
            !sharding_dim_uneven(s, m, w, k)) {
            *s = z;
            return;
        }
        if (p->zero < 3 && local[k] != 1)
            return; /* a split further in would not be one contiguous block */
    }
}

static int lower_choose(Plan *p, const Node *n, char *taken, Diag *d)
{
    NodePlan *np = &p->nodes[n->id];
    const FactorRule *r = &np->rule;
    const Mesh *m = &p->mesh;
    const int nf = r->nfactors;
    Candidate win[RULE_MAX_FACTORS];
    const Tensor *bad = NULL;
    if (ir_output_in_place(n, 0) >= 0 && !free_weight(p, n->inputs[0], taken)) {
        /* An optimizer update runs where its weight is stored: the weight's
         * layout decides, and the gradient and state come to it (a partial
         * gradient all-reduced, or reduce-scattered onto a split weight). */
        Sharding at = p->tensors[n->inputs[0]->id].sharding;
        plan_zero_shard(p, n->inputs[0], &at);
        anchored(m, r, 0, &at, np, 0, np->fnaxes, np->faxes);
        int rc = lower_node(p, n, r, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, taken, 1, NULL,
                            &bad, d);
        if (rc == 1)
            annotation_conflict(p, n, r, bad, d);
        return rc ? -1 : 0;
    }
    merge_factors(p, r, np, win);
    make_representable(m, r, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes);
    LowerCost c0;
    int rc = lower_node(p, n, r, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, taken, 0, &c0,
                        &bad, d);
    if (rc < 0)
        return -1;
    /* A partial result reached by splitting a free weight: keeping that
     * weight whole and gathering the split operand is as valid a reading
     * of the annotations, so it is costed too. A split the annotations
     * themselves give (Megatron's row-parallel Wo=[tp,_]) stands, as
     * GSPMD keeps compatible operand shardings. */
    int questioned = c0.partial && c0.free_split;
    CostChoice cc;
    cc.ncand = 0;
    cc.pick = 0;
    choice_add(&cc, nf, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, NULL);
    /* Each tensor's layout with the merge's other factors filled in; then,
     * if they disagree, each tensor's layout alone and computing
     * replicated. */
    for (int fill = 1; fill >= 0; fill--) {
        for (int t = 0; t < r->ntensors; t++) {
            const Tensor *tt = r->tensors[t];
            if (!tt || !sharding_used_axes(&p->tensors[tt->id].sharding))
                continue;
            if (t < n->ninputs && free_weight(p, tt, taken))
                continue; /* it can be stored any way: no constraint */
            unsigned char fn[RULE_MAX_FACTORS];
            unsigned char fa[RULE_MAX_FACTORS][MESH_MAX_AXES];
            memset(fa, 0, sizeof fa);
            anchored(m, r, t, &p->tensors[tt->id].sharding, np, fill, fn, fa);
            choice_add(&cc, nf, fn, (const unsigned char (*)[MESH_MAX_AXES])fa, tt->label);
        }
        /* A conflict: the tensors propose different shardings, the merge
         * breaks an annotation, reshards a pinned operand, or moves one. */
        if (cc.ncand == 1 && rc != 1 && !c0.pinned && c0.operands_s <= 0 && !questioned)
            break;
    }
    if (cc.ncand > 1 || rc == 1 || c0.pinned || c0.operands_s > 0 || questioned) {
        unsigned char fn[RULE_MAX_FACTORS] = {0};
        unsigned char fa[RULE_MAX_FACTORS][MESH_MAX_AXES];
        memset(fa, 0, sizeof fa);
        choice_add(&cc, nf, fn, (const unsigned char (*)[MESH_MAX_AXES])fa, NULL);
    }
    if (cc.ncand > 1) {
        int best = -1;
        const Tensor *first_bad = bad;
        for (int i = 0; i < cc.ncand; i++) {
            const Tensor *b = NULL;
            LowerCost c = c0;
            rc = i == 0 ? (bad ? 1 : 0)
                        : lower_node(p, n, r, cc.fn[i], (const unsigned char (*)[MESH_MAX_AXES])cc.fa[i], taken, 0,
                                     &c, &b, d);
            if (rc < 0)
                return -1;
            cc.cost_s[i] = rc ? -1 : c.total_s;
            cc.bytes[i] = rc ? -1 : c.bytes;
            if (rc && !first_bad)
                first_bad = b;
            /* Fewest bytes first; at equal bytes the merge stands, and
             * among the others the faster one wins. */
            if (!rc && (best < 0 || c.bytes < cc.bytes[best] ||
                        (c.bytes == cc.bytes[best] && best != 0 && c.total_s < cc.cost_s[best] * (1 - 1e-9))))
                best = i;
        }
        if (best < 0) {
            annotation_conflict(p, n, r, first_bad, d);
            return -1;
        }
        cc.pick = best;
        np->choice = arena_alloc(&p->arena, sizeof cc);
        *np->choice = cc;
        memcpy(np->fnaxes, cc.fn[best], (size_t)nf);
        for (int f = 0; f < nf; f++)
            memcpy(np->faxes[f], cc.fa[best][f], MESH_MAX_AXES);
    } else if (bad) {
        annotation_conflict(p, n, r, bad, d);
        return -1;
    }
    rc = lower_node(p, n, r, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, taken, 1, NULL, &bad, d);
    if (rc == 1) {
        annotation_conflict(p, n, r, bad, d);
        return -1;
    }
    return rc;
}

/* A node settled a result differently from what propagation proposed:
 * what propagation inferred downstream of it is stale. Everything lowered
 * so far is frozen, everything after is cleared, and propagation runs
 * again from the settled layouts. Conflicts are rare, and the number of
 * reruns is bounded, so lowering stays linear in practice. */
#define MAX_REPROPAGATIONS 64

/* A tensor lowering has settled is frozen; any other unpinned one goes
 * back to replicated, for propagation to fill in again. */
static void freeze_or_clear(TensorPlan *tp, const Tensor *t, int settled)
{
    if (settled) {
        tp->fixed = 1;
    } else if (!tp->fixed) {
        sharding_replicated(&tp->sharding, t->rank < 0 ? 0 : t->rank);
        tp->origin = ORIGIN_DEFAULT;
        tp->via = NULL;
        tp->from = NULL;
        tp->depth = 0;
    }
}

static int repropagate(Plan *p, int upto, const char *taken, Diag *d)
{
    const Graph *g = p->g;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Node *n = g->nodes[ni];
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k])
                freeze_or_clear(&p->tensors[n->outputs[k]->id], n->outputs[k], ni <= upto);
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] && !n->inputs[k]->producer) /* sources: settled once a reader took them */
                freeze_or_clear(&p->tensors[n->inputs[k]->id], n->inputs[k], taken[n->inputs[k]->id]);
    }
    return propagate(p, d);
}

int plan_lower(Plan *p, int keep_factors, Diag *d)
{
    const Graph *g = p->g;
    int reprops = 0;
    char *taken = calloc((size_t)g->ntensors + 1, 1);
    if (!taken)
        abort();
    if (keep_factors)
        memset(taken, 1, (size_t)g->ntensors + 1); /* --auto laid the weights out */
    int maxout = 1;
    for (int ni = 0; ni < g->nnodes; ni++)
        maxout = g->nodes[ni]->noutputs > maxout ? g->nodes[ni]->noutputs : maxout;
    Sharding *before = malloc((size_t)maxout * sizeof(Sharding)); /* the outputs' layouts before lowering */
    if (!before)
        abort();
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Node *n = g->nodes[ni];
        NodePlan *np = &p->nodes[ni];
        np->in_reshard = arena_alloc(&p->arena, (size_t)(n->ninputs + 1) * sizeof(int));
        int rc;
        int nb = n->noutputs;
        for (int k = 0; k < nb; k++)
            if (n->outputs[k])
                before[k] = p->tensors[n->outputs[k]->id].sharding;
        if (keep_factors) {
            /* --auto chose the factors. */
            const Tensor *bad = NULL;
            rc = lower_node(p, n, &np->rule, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes, taken,
                            1, NULL, &bad, d);
            if (rc == 1)
                annotation_conflict(p, n, &np->rule, bad, d);
        } else {
            rc = lower_choose(p, n, taken, d);
        }
        if (rc) {
            free(taken);
            free(before);
            return -1;
        }
        int moved = 0;
        for (int k = 0; k < nb && !keep_factors; k++)
            if (n->outputs[k] && p->tensors[n->outputs[k]->id].origin == ORIGIN_COST) {
                Sharding now = p->tensors[n->outputs[k]->id].sharding;
                now.partial = 0;
                moved |= !sharding_equal(&now, &before[k]);
            }
        if (moved && reprops < MAX_REPROPAGATIONS) {
            reprops++;
            if (repropagate(p, ni, taken, d)) {
                free(taken);
                free(before);
                return -1;
            }
        }
    }
    free(taken);
    free(before);
    p->out_reshard = arena_alloc(&p->arena, (size_t)(g->noutputs + 1) * sizeof(int));
    for (int i = 0; i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        TensorPlan *tp = &p->tensors[t->id];
        p->out_reshard[i] = -1;
        if (tp->sharding.partial) {
            Sharding sum = tp->sharding;
            sum.partial = 0;
            p->out_reshard[i] = plan_add_reshard(p, t, NULL, i, "a graph output is a whole sum", &tp->sharding, &sum);
        }
    }
    return 0;
}

int plan_set_zero(Plan *p, const AnnotationList *ann, Diag *d)
{
    if (!ann->zero || !ann->zero_axis)
        return 0;
    p->zero = ann->zero;
    p->zero_axis = mesh_axis_find(&p->mesh, ann->zero_axis);
    if (p->zero_axis < 0) {
        diag_add(d, "--zero %d: the mesh has no axis \"%s\" (name it with --zero-axis)", ann->zero, ann->zero_axis);
        return -1;
    }
    return 0;
}

Plan *partition_propagate(const Graph *g, const Mesh *m, const AnnotationList *ann, Diag *d)
{
    Plan *p = plan_new(g, m);
    if (plan_build_rules(p, d))
        goto fail;
    if (plan_set_zero(p, ann, d))
        goto fail;
    apply_annotations(p, ann);
    if (propagate(p, d) || plan_lower(p, 0, d))
        goto fail;
    return p;
fail:
    plan_free(p);
    return NULL;
}
