/* auto.c: --auto, layouts chosen by an integer program over the cost model;
 * the driver of the search (partition_auto).
 *
 * The intra-operator half of Alpa (OSDI'22), on the factor rules:
 *
 * 1. Strategies. For every node, each mesh axis goes to one of the node's
 *    shardable factors (or to none) when the product of the axes a factor
 *    gets divides it; strategies some tensor could not hold (rules.c's
 *    representability) are dropped, and so are duplicates. A strategy fixes
 *    the layout of every operand and result, and its compute time: the
 *    roofline max(FLOPs / peak, bytes / memory bandwidth) of the device
 *    preset on the local shard.
 * 2. Choices. Each node is one choice among its strategies. A weight or
 *    input read by one operand only takes the layout that operand needs
 *    (stored that way, no reshard); one read by several operands is a
 *    choice of its own among its layouts. User annotations are hard: an
 *    annotated source has one layout, an annotated result keeps only the
 *    strategies that produce it exactly.
 * 3. Edges. Every value crossing two choices costs the reshard (reshard.c,
 *    under the link model) from the layout its producer's strategy gives it
 *    to the layout its consumer's strategy needs; a graph output costs the
 *    reduction of a partial sum (--out gathers it outside the step). Strategies are grouped by the layout they give or need, and
 *    an edge is a transport between the two groups: continuous variables
 *    y[i][j] whose row sums are the producer's group indicators and column
 *    sums the consumer's, so y is the product of two one-hot vectors
 *    without the quadratic term.
 * 4. Memory. With --mem-limit, one row per program step: weights (every
 *    weight's local bytes) plus the values live at that step, at the local
 *    size their producer's strategy gives them, stay under the limit.
 * 5. The program is solved exactly under a time limit: by COIN-OR CBC
 *    through its C API when libCbcSolver loads (cbc.c; 3x faster than
 *    GLPK on the 64-rank Llama program), else by GLPK's dual simplex and
 *    branch and cut (linked in); --auto-solver picks one. The chosen
 *    factor shardings go to propagate.c's lowering, which records the
 *    reshards as for an annotated plan.
 *
 * Every decision is kept for --explain: a node's chosen strategy, its
 * cost, and the best alternatives with what switching that node alone
 * would add to the plan's cost.
 *
 * The files: auto_strategy.c (1-3), auto_ilp.c (4-5), auto_tie.c
 * (repeated layers), this one (solving, the plan, --explain). One arena
 * holds the search's arrays for its whole life (auto_internal.h).
 */
#include "auto_internal.h"

#include <math.h>
#include <string.h>

/* ---- solving ------------------------------------------------------------- */

static int solve(Search *s, const AutoOptions *opt, Diag *d)
{
    const char *solver = opt->solver ? opt->solver : cbc_available() ? "cbc" : "glpk";
    s->rep->solver = strcmp(solver, "cbc") == 0 ? "CBC" : "GLPK";
    if (strcmp(solver, "cbc") == 0 && !cbc_available()) {
        diag_add(d, "--auto-solver cbc: COIN-OR CBC cannot be loaded (libCbcSolver.so.3; Debian package "
                 "coinor-libcbc3)");
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Ilp pr;
    MipResult res = {MIP_NONE, 0, 0, NULL};
    int tied = opt->tie != AUTO_TIE_OFF && auto_solve_tied(s, opt, solver, &pr, &res);
    if (!tied) {
        ilp_build(s, NULL, opt->mem_limit, &pr);
        double left = opt->time_limit_s - auto_seconds_since(&t0);
        ilp_solve(s, &pr, solver, left > opt->time_limit_s / 2 ? left : opt->time_limit_s / 2, &res);
    }
    s->rep->rows = pr.nrows;
    s->rep->cols = pr.ncols;
    s->rep->nonzeros = pr.nnz;
    /* The program as a free MPS file, to try another solver on it. */
    if (opt->mps_path && glp_write_mps(pr.lp, GLP_MPS_FILE, NULL, opt->mps_path)) {
        diag_add(d, "--auto-mps %s: cannot write the file", opt->mps_path);
        ilp_free(&pr);
        glp_free_env();
        return -1;
    }
    s->rep->best_s = res.objective / US;
    s->rep->bytes_pass = 0;
    if (res.status == MIP_OPTIMAL && pr.ncols <= AUTO_BYTES_PASS_MAX_COLS) {
        /* Whether it runs, and how far, must not depend on how long the
         * first pass took (a loaded machine): the node limit binds, and
         * --auto-time-limit is only a cap. */
        ilp_bytes_pass(s, pr.lp, solver, pr.obj, pr.sent, pr.ncols, opt->time_limit_s, &res);
    }
    s->rep->solve_s = auto_seconds_since(&t0);
    int rc = 0;
    if (res.status == MIP_INFEASIBLE) {
        diag_add(d, "--auto: no plan fits --mem-limit %lld bytes per rank", (long long)opt->mem_limit);
        rc = -1;
    } else if (res.status == MIP_NONE) {
        diag_add(d, "--auto: the integer program found no solution within %g s (%s)", opt->time_limit_s,
                 s->rep->solver);
        rc = -1;
    } else {
        s->rep->optimal = res.status == MIP_OPTIMAL;
        double gap = res.objective != 0 ? (res.objective - res.bound) / fabs(res.objective) : 0;
        s->rep->gap = s->rep->optimal || gap < 0 ? 0 : gap;
        s->rep->objective_s = res.objective / US;
        for (int ci = 0; ci < s->nchoices; ci++) {
            Choice *c = &s->choices[ci];
            c->pick = 0;
            for (int o = 0; o < c->nopts; o++)
                if (res.x[c->col0 + o - 1] > 0.5)
                    c->pick = o;
        }
    }
    ilp_free(&pr);
    glp_free_env();
    return rc;
}

/* ---- from the solution to a plan ---------------------------------------- */

/* What switching choice ci alone to option o would add to the plan;
 * adj lists the edges touching ci. */
static double switch_delta(Search *s, int ci, int o, const int *adj, int nadj)
{
    const Choice *c = &s->choices[ci];
    double delta = c->cost[o] - c->cost[c->pick];
    for (int i = 0; i < nadj; i++) {
        const Edge *e = &s->edges[adj[i]];
        int a = s->choices[e->from].pick, b = e->to >= 0 ? s->choices[e->to].pick : 0;
        double now = auto_edge_cost(s, e, a, b);
        double then = auto_edge_cost(s, e, e->from == ci ? o : a, e->to == ci ? o : b);
        delta += then - now;
    }
    return delta;
}

/* For --explain: each node's choice, and for a choice's leader the
 * AUTO_ALTS cheapest other options by what switching to them would add. */
static void record_explanations(Search *s)
{
    const Graph *g = s->p->g;
    AutoReport *rep = s->rep;
    rep->nodes = arena_alloc(&s->p->arena, sizeof(AutoNodeInfo) * (size_t)(g->nnodes + 1));
    int *adj = auto_alloc(s, (size_t)s->nedges + 1, sizeof(int));
    for (int ni = 0; ni < g->nnodes; ni++) {
        int ci = s->node_choice[ni];
        const Choice *c = &s->choices[ci];
        AutoNodeInfo *info = &rep->nodes[ni];
        info->nstrategies = c->nopts;
        info->pick = c->pick;
        info->leader = c->leader;
        info->cost_s = c->cost[c->pick];
        info->nalt = 0;
        if (c->leader != ni)
            continue;
        int nadj = 0;
        for (int ei = 0; ei < s->nedges; ei++)
            if (s->edges[ei].from == ci || s->edges[ei].to == ci)
                adj[nadj++] = ei;
        for (int o = 0; o < c->nopts; o++) {
            if (o == c->pick)
                continue;
            double dl = switch_delta(s, ci, o, adj, nadj);
            int at = info->nalt;
            while (at > 0 && dl < info->alt_delta_s[at - 1])
                at--;
            if (at >= AUTO_ALTS)
                continue;
            int end = info->nalt < AUTO_ALTS ? info->nalt : AUTO_ALTS - 1;
            for (int j = end; j > at; j--) {
                info->alt_delta_s[j] = info->alt_delta_s[j - 1];
                memcpy(info->alt_fn[j], info->alt_fn[j - 1], sizeof info->alt_fn[j]);
                memcpy(info->alt_fa[j], info->alt_fa[j - 1], sizeof info->alt_fa[j]);
            }
            info->alt_delta_s[at] = dl;
            memcpy(info->alt_fn[at], s->strats[ni][o].fn, sizeof info->alt_fn[at]);
            memcpy(info->alt_fa[at], s->strats[ni][o].fa, sizeof info->alt_fa[at]);
            if (info->nalt < AUTO_ALTS)
                info->nalt++;
        }
    }
}

/* An optimizer update runs where its weight is stored, as propagate.c's
 * lower_choose anchors it: the search lets it follow its gradient's
 * producer (an elementwise node), which could want the weight resharded
 * to it, an update codegen cannot write in place. Its factors come from
 * the weight's chosen layout instead; the gradient and state come to the
 * weight (a reshard the search did not price). Under --zero the update
 * runs on the rank's block of the weight, as propagate.c lays it out. */
static void anchor_updates(Search *s)
{
    const Graph *g = s->p->g;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Node *n = g->nodes[ni];
        int sc = ir_output_in_place(n, 0) >= 0 && n->inputs[0] ? s->src_choice[n->inputs[0]->id] : -1;
        if (sc < 0)
            continue; /* not an update, or a weight only it reads: stored as it needs */
        const FactorRule *r = &s->p->nodes[ni].rule;
        Sharding wl = s->choices[sc].layouts[s->choices[sc].pick];
        plan_zero_shard(s->p, n->inputs[0], &wl); /* --zero: this rank's block of it */
        Strat *st = &s->strats[ni][s->choices[s->node_choice[ni]].pick];
        unsigned char fn[RULE_MAX_FACTORS], fa[RULE_MAX_FACTORS][MESH_MAX_AXES];
        memset(fa, 0, sizeof fa);
        rule_factors_of(s->m, r, 0, &wl, fn, fa);
        if (!rule_representable(s->m, r, fn, (const unsigned char (*)[MESH_MAX_AXES])fa))
            continue;
        memcpy(st->fn, fn, sizeof st->fn);
        memcpy(st->fa, fa, sizeof st->fa);
    }
}

static void apply_solution(Search *s)
{
    Plan *p = s->p;
    const Graph *g = p->g;
    anchor_updates(s);
    for (int ni = 0; ni < g->nnodes; ni++) {
        const Strat *st = &s->strats[ni][s->choices[s->node_choice[ni]].pick];
        memcpy(p->nodes[ni].fnaxes, st->fn, sizeof st->fn);
        memcpy(p->nodes[ni].faxes, st->fa, sizeof st->fa);
    }
    /* Sources: a shared one as chosen, a single-use one as its reader needs. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (!auto_is_source(t) || !t->nconsumers)
            continue;
        TensorPlan *tp = &p->tensors[t->id];
        const Annotation *a = auto_annotation_of(s, t);
        int sc = s->src_choice[t->id];
        if (sc >= 0) {
            tp->sharding = s->choices[sc].layouts[s->choices[sc].pick];
        } else {
            const Node *u = t->consumers[0];
            int k = 0;
            while (u->inputs[k] != t)
                k++;
            auto_node_layout(s, u->id, s->choices[s->node_choice[u->id]].pick, k, &tp->sharding);
        }
        tp->fixed = 1;
        tp->origin = a ? a->origin : ORIGIN_AUTO;
        tp->source = a ? a->spec : NULL;
    }
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i]->producer)
            p->tensors[i].origin = ORIGIN_AUTO;
}

Plan *partition_auto(const Graph *g, const Mesh *m, const AnnotationList *ann, const AutoOptions *opt, Diag *d)
{
    Search s;
    memset(&s, 0, sizeof s);
    s.p = plan_new(g, m);
    s.m = &s.p->mesh;
    s.ann = ann;
    Plan *p = s.p;
    p->auto_report = arena_alloc(&p->arena, sizeof(AutoReport));
    s.rep = p->auto_report;
    s.strats = auto_alloc(&s, (size_t)g->nnodes + 1, sizeof(Strat *));
    s.nstrats = auto_alloc(&s, (size_t)g->nnodes + 1, sizeof(int));
    s.node_choice = auto_alloc(&s, (size_t)g->nnodes + 1, sizeof(int));
    s.src_choice = auto_alloc(&s, (size_t)g->ntensors + 1, sizeof(int));
    s.scratch_groups = auto_alloc(&s, 6 * AUTO_MAX_STRATS, sizeof(int));
    s.scratch_reps = auto_alloc(&s, 2 * AUTO_MAX_STRATS, sizeof(Sharding));
    s.scratch_min = auto_alloc(&s, AUTO_MAX_STRATS, sizeof(double));
    int rc = -1;
    if (plan_build_rules(p, d) || plan_set_zero(p, ann, d) || auto_build_choices(&s, d))
        goto cleanup;
    s.rep->nchoices = s.nchoices;
    for (int ci = 0; ci < s.nchoices; ci++)
        s.rep->noptions += s.choices[ci].nopts;
    s.rep->nedges = s.nedges;
    s.rep->time_limit_s = opt->time_limit_s;
    if (solve(&s, opt, d))
        goto cleanup;
    record_explanations(&s);
    apply_solution(&s);
    if (plan_lower(p, 1, d))
        goto cleanup;
    rc = 0;
cleanup:
    arena_free(&s.arena);
    if (rc) {
        plan_free(p);
        return NULL;
    }
    return p;
}

