/* auto_ilp.c: the --auto search's integer program and its solvers.
 *
 * Columns: one binary per option of every choice (one-hot rows), and per
 * edge whose ends both have several layout groups, a transport y[i][j]
 * between the producer's groups and the consumer's: continuous variables
 * whose row sums are the producer's group indicators and column sums the
 * consumer's, so y is the product of two one-hot vectors without the
 * quadratic term. Edges with one group at an end are linear in the other.
 * With --mem-limit, one row per program step (only the steps whose live
 * set is maximal): weights plus the values live there at the local size
 * their producer's option gives them, plus the reshard buffers read there.
 *
 * The program is solved exactly under a time limit: by COIN-OR CBC through
 * its C API when libCbcSolver loads (cbc.c), else by GLPK's dual simplex
 * and branch and cut. A second pass trades among near-fastest plans for the
 * fewest bytes sent. The type is Ilp (codegen's Program is the per-rank
 * program); its arrays live in the search's arena, the GLPK problem object
 * is released by ilp_free.
 */
#include "auto_internal.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* ---- the integer program ------------------------------------------------ */

/* GLPK's triplets, 1-based, grown in the search's arena. */
typedef struct Matrix {
    Search *s;
    int *ia, *ja;
    double *ar;
    int n, cap;
} Matrix;

static void mat_add(Matrix *mx, int row, int col, double v)
{
    if (mx->n + 1 >= mx->cap) {
        size_t used = mx->cap ? (size_t)mx->n + 1 : 0, cap = mx->cap ? 2 * (size_t)mx->cap : 4096;
        mx->ia = auto_grow(mx->s, mx->ia, used, cap, sizeof(int));
        mx->ja = auto_grow(mx->s, mx->ja, used, cap, sizeof(int));
        mx->ar = auto_grow(mx->s, mx->ar, used, cap, sizeof(double));
        mx->cap = (int)cap;
    }
    mx->n++;
    mx->ia[mx->n] = row;
    mx->ja[mx->n] = col;
    mx->ar[mx->n] = v;
}

/* What the branch-and-cut callback keeps and obeys: the relative gap
 * between the incumbent and the best bound (reported when a limit stops
 * the search), and the node limit (0: none). */
typedef struct TreeWatch {
    double gap;
    int max_nodes, nodes;
} TreeWatch;

static void on_tree(glp_tree *tree, void *info)
{
    TreeWatch *w = info;
    if (glp_ios_reason(tree) == GLP_IBINGO || glp_ios_reason(tree) == GLP_ISELECT)
        w->gap = glp_ios_mip_gap(tree);
    if (glp_ios_reason(tree) == GLP_ISELECT) {
        glp_ios_tree_size(tree, NULL, NULL, &w->nodes);
        if (w->max_nodes && w->nodes > w->max_nodes)
            glp_ios_terminate(tree);
    }
}

/* A reshard's buffers in the memory rows: bytes held at a program step
 * when column col is 1 (col 0: always). */
typedef struct MemTerm {
    int col, step;
    double bytes;
} MemTerm;

typedef struct MemTerms {
    Search *s;
    MemTerm *t;
    int n, cap;
} MemTerms;

static void term_add(MemTerms *m, int col, int step, int64_t bytes)
{
    if (bytes <= 0)
        return;
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 256;
        m->t = auto_grow(m->s, m->t, (size_t)m->n, (size_t)cap, sizeof(MemTerm));
        m->cap = cap;
    }
    m->t[m->n++] = (MemTerm){col, step, (double)bytes};
}

/* GLPK: dual simplex for the root relaxation, then branch and cut, for
 * at most time_limit_s and (when max_nodes > 0) max_nodes nodes. */
static void solve_glpk(Search *s, glp_prob *lp, double time_limit_s, int max_nodes, MipResult *res)
{
    glp_iocp parm;
    glp_init_iocp(&parm);
    /* O2S_AUTO_VERBOSE=1 shows GLPK's own progress log, for debugging a slow search. */
    parm.msg_lev = getenv("O2S_AUTO_VERBOSE") ? GLP_MSG_ALL : GLP_MSG_OFF;
    if (getenv("O2S_AUTO_VERBOSE"))
        glp_term_out(GLP_ON);
    /* Pseudo-cost branching: with a memory limit the program is a
     * knapsack over layouts, where GLPK's default branching stalls (tiny_gpt
     * on tp=2: optimal in 7 s, against no proof in 60 s); cuts and the
     * feasibility pump did not help there. */
    parm.br_tech = GLP_BR_PCH;
    TreeWatch watch = {0, max_nodes, 0};
    parm.cb_func = on_tree;
    parm.cb_info = &watch;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = parm.msg_lev;
    sp.meth = GLP_DUALP; /* faster than primal on the programs of bench/auto_bench.py */
    /* The textbook ratio test: 8.7 s against 10.4 s for the long-step one
     * (GLPK's default) and 10.0 s for Harris' on the 64-rank Llama program. */
    sp.r_test = GLP_RT_STD;
    sp.presolve = GLP_OFF;
    sp.tm_lim = (int)(time_limit_s * 1000);
    int ret = glp_simplex(lp, &sp);
    /* The relaxation bounds the search; infeasible there, nothing fits. */
    int lp_st = ret == 0 ? glp_get_status(lp) : GLP_UNDEF;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double spent = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    parm.presolve = GLP_OFF;
    parm.tm_lim = (int)((time_limit_s - spent) * 1000);
    if (parm.tm_lim < 1)
        parm.tm_lim = 1;
    if (lp_st == GLP_OPT)
        ret = glp_intopt(lp, &parm);
    if (getenv("O2S_AUTO_VERBOSE"))
        fprintf(stderr, "glpk: %d nodes\n", watch.nodes);
    int st = lp_st == GLP_OPT ? glp_mip_status(lp) : GLP_UNDEF;
    if (lp_st == GLP_NOFEAS || ret == GLP_ENOPFS || ret == GLP_ENODFS || st == GLP_NOFEAS) {
        res->status = MIP_INFEASIBLE;
    } else if (st != GLP_OPT && st != GLP_FEAS) {
        res->status = MIP_NONE;
    } else {
        res->status = st == GLP_OPT ? MIP_OPTIMAL : MIP_FEASIBLE;
        res->objective = glp_mip_obj_val(lp);
        res->bound = st == GLP_OPT ? res->objective : res->objective * (1 - watch.gap);
        int nc = glp_get_num_cols(lp);
        res->x = auto_alloc(s, (size_t)(nc ? nc : 1), sizeof(double));
        for (int j = 0; j < nc; j++)
            res->x[j] = glp_mip_col_val(lp, j + 1);
    }
}

/* Bounds of a GLPK row or column as a lower/upper pair (infinite: DBL_MAX). */
static void glpk_bounds(int type, double lb, double ub, double *lo, double *hi)
{
    *lo = type == GLP_FR || type == GLP_UP ? -DBL_MAX : lb;
    *hi = type == GLP_FR || type == GLP_LO ? DBL_MAX : ub;
}

/* CBC (cbc.c) on the same program, copied out of GLPK's problem object
 * into CBC's column-major arrays. CBC's malloc'd solution is copied into
 * the arena, so that every solution here is the search's. */
static int solve_cbc(Search *s, glp_prob *lp, double time_limit_s, int max_nodes, MipResult *res)
{
    if (!cbc_available())
        return -1;
    int nr = glp_get_num_rows(lp), nc = glp_get_num_cols(lp), nz = glp_get_num_nz(lp);
    MipProblem mp = {.nrows = nr, .ncols = nc};
    int *start = auto_alloc(s, (size_t)nc + 1, sizeof(int)), *index = auto_alloc(s, (size_t)nz + 1, sizeof(int));
    int *ind = auto_alloc(s, (size_t)nr + 1, sizeof(int));
    double *value = auto_alloc(s, (size_t)nz + 1, sizeof(double));
    double *val = auto_alloc(s, (size_t)nr + 1, sizeof(double));
    double *collb = auto_alloc(s, (size_t)nc + 1, sizeof(double));
    double *colub = auto_alloc(s, (size_t)nc + 1, sizeof(double));
    double *obj = auto_alloc(s, (size_t)nc + 1, sizeof(double));
    double *rowlb = auto_alloc(s, (size_t)nr + 1, sizeof(double));
    double *rowub = auto_alloc(s, (size_t)nr + 1, sizeof(double));
    char *is_int = auto_alloc(s, (size_t)nc + 1, 1);
    int k = 0;
    for (int j = 0; j < nc; j++) {
        start[j] = k;
        int len = glp_get_mat_col(lp, j + 1, ind, val);
        for (int i = 1; i <= len; i++) {
            index[k] = ind[i] - 1;
            value[k++] = val[i];
        }
        glpk_bounds(glp_get_col_type(lp, j + 1), glp_get_col_lb(lp, j + 1), glp_get_col_ub(lp, j + 1), &collb[j],
                    &colub[j]);
        obj[j] = glp_get_obj_coef(lp, j + 1);
        is_int[j] = glp_get_col_kind(lp, j + 1) != GLP_CV;
    }
    start[nc] = k;
    for (int i = 0; i < nr; i++)
        glpk_bounds(glp_get_row_type(lp, i + 1), glp_get_row_lb(lp, i + 1), glp_get_row_ub(lp, i + 1), &rowlb[i],
                    &rowub[i]);
    mp.start = start;
    mp.index = index;
    mp.value = value;
    mp.collb = collb;
    mp.colub = colub;
    mp.obj = obj;
    mp.rowlb = rowlb;
    mp.rowub = rowub;
    mp.is_int = is_int;
    int rc = cbc_solve(&mp, time_limit_s, max_nodes, res);
    if (rc == 0 && res->status != MIP_NONE && res->status != MIP_INFEASIBLE) {
        res->objective += glp_get_obj_coef(lp, 0);
        res->bound += glp_get_obj_coef(lp, 0);
    }
    if (res->x) {
        double *x = auto_alloc(s, (size_t)(nc ? nc : 1), sizeof(double));
        memcpy(x, res->x, sizeof(double) * (size_t)nc);
        free(res->x);
        res->x = x;
    }
    return rc;
}

/* The second pass: among the plans within AUTO_TIME_SLACK of the fastest
 * (the first pass's optimum), the one that sends the fewest bytes. The
 * cost model cannot tell plans that close apart (its latencies and
 * bandwidths are presets, its overlap is not in the sum), and fewer bytes
 * leave less to the link model's errors: on GPT-2 medium over tp=2 this
 * turns a plan 0.2% faster on paper that all-gathers the residual stream
 * (92 MB per rank) into Megatron's all-reduces (84 MB). It runs after an
 * optimal first pass only, on programs of at most AUTO_BYTES_PASS_MAX_COLS
 * columns, for at most AUTO_BYTES_PASS_MAX_NODES branch-and-bound nodes
 * (a count, not seconds, so that the same model and flags give the same
 * plan and report on a loaded machine too; --auto-time-limit only caps
 * it, whatever the first pass took), and its plan is taken only if proven optimal: otherwise
 * the first pass's stands and the report says so. Knapsack-like programs
 * under a tight --mem-limit are where it runs out of nodes. */
#define AUTO_TIME_SLACK 0.01

void ilp_bytes_pass(Search *s, glp_prob *lp, const char *solver, const double *obj, const double *sent,
                       int ncols, double time_limit_s, MipResult *res)
{
    double first_sent = 0;
    for (int j = 1; j <= ncols; j++)
        first_sent += sent[j] * res->x[j - 1];
    if (first_sent <= 0)
        return; /* nothing is sent: nothing to trade */
    int row = glp_add_rows(lp, 1), *ind = auto_alloc(s, (size_t)ncols + 1, sizeof(int));
    double *val = auto_alloc(s, (size_t)ncols + 1, sizeof(double));
    int n = 0;
    for (int j = 1; j <= ncols; j++)
        if (obj[j] != 0) {
            ind[++n] = j;
            val[n] = obj[j];
        }
    glp_set_mat_row(lp, row, n, ind, val);
    double c0 = glp_get_obj_coef(lp, 0);
    glp_set_row_bnds(lp, row, GLP_UP, 0.0, (res->objective - c0) * (1 + AUTO_TIME_SLACK) + 1e-9);
    for (int j = 1; j <= ncols; j++)
        glp_set_obj_coef(lp, j, sent[j]);
    glp_set_obj_coef(lp, 0, 0.0);
    MipResult two = {MIP_NONE, 0, 0, NULL};
    if (strcmp(solver, "cbc") == 0)
        solve_cbc(s, lp, time_limit_s, AUTO_BYTES_PASS_MAX_NODES, &two);
    else
        solve_glpk(s, lp, time_limit_s, AUTO_BYTES_PASS_MAX_NODES, &two);
    s->rep->bytes_pass = two.status == MIP_OPTIMAL ? 2 : -1; /* 2: ran, nothing better; -1: out of effort */
    if (two.status == MIP_OPTIMAL && two.objective < first_sent * (1 - 1e-9)) {
        double t = c0;
        for (int j = 1; j <= ncols; j++)
            t += obj[j] * two.x[j - 1];
        res->x = two.x;
        res->objective = res->bound = t;
        s->rep->bytes_pass = 1;
    }
}


/* ---- building the program ----------------------------------------------- */

/* Releases the GLPK problem object; the arrays stay in the arena. */
void ilp_free(Ilp *pr)
{
    if (pr->lp)
        glp_delete_prob(pr->lp);
    memset(pr, 0, sizeof *pr);
}

/* The program over s's choices and edges. Under a tie, a choice takes its
 * representative's columns and an edge between the same columns its
 * representative's transport: every cost still lands (summed), so the
 * program's objective at a tied solution is the whole program's there. A
 * cut edge costs its consumer the cheapest reshard from any option of its
 * producer. With mem_limit, one row per program step bounds weights plus
 * live values. */
void ilp_build(Search *s, const Tie *tie, int64_t mem_limit, Ilp *pr)
{
    const Graph *g = s->p->g;
    MemTerms terms = {.s = s};
    int last_step = g->nnodes > 0 ? g->nnodes - 1 : 0;
    memset(pr, 0, sizeof *pr);
    glp_term_out(GLP_OFF);
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    Matrix mx = {.s = s};
    int ncols = 0, nrows = 0;
    /* One-hot rows per choice. */
    int nown = 0;
    for (int ci = 0; ci < s->nchoices; ci++)
        nown += !tie || tie->rep[ci] == ci;
    glp_add_rows(lp, nown);
    for (int ci = 0; ci < s->nchoices; ci++) {
        Choice *c = &s->choices[ci];
        if (tie && tie->rep[ci] != ci)
            continue;
        c->col0 = ncols + 1;
        glp_add_cols(lp, c->nopts);
        nrows++;
        for (int o = 0; o < c->nopts; o++) {
            glp_set_col_kind(lp, c->col0 + o, GLP_BV);
            mat_add(&mx, nrows, c->col0 + o, 1.0);
        }
        ncols += c->nopts;
        glp_set_row_bnds(lp, nrows, GLP_FX, 1.0, 1.0);
    }
    for (int ci = 0; tie && ci < s->nchoices; ci++)
        s->choices[ci].col0 = s->choices[tie->rep[ci]].col0;
    /* Objective: option costs, then edges. */
    double *obj = auto_alloc(s, (size_t)ncols + 1, sizeof(double));
    double *sent = auto_alloc(s, (size_t)ncols + 1, sizeof(double)); /* the second pass's objective, in MB */
    for (int ci = 0; ci < s->nchoices; ci++)
        for (int o = 0; o < s->choices[ci].nopts; o++) {
            obj[s->choices[ci].col0 + o] += s->choices[ci].cost[o] * US;
            sent[s->choices[ci].col0 + o] += (double)s->choices[ci].sent[o] / 1e6;
        }
    int *ga = auto_alloc(s, AUTO_MAX_STRATS * 2, sizeof(int)), *gb = ga + AUTO_MAX_STRATS;
    Sharding *ra = auto_alloc(s, AUTO_MAX_STRATS * 2, sizeof(Sharding)), *rb = ra + AUTO_MAX_STRATS;
    int *ia = auto_alloc(s, AUTO_MAX_STRATS, sizeof(int)), *ib = auto_alloc(s, AUTO_MAX_STRATS, sizeof(int));
    /* A transport's first column and its groups (na, nb, then each end's
     * group per option), for the tied edges that share it. */
    int *y0 = auto_alloc(s, (size_t)s->nedges + 1, sizeof(int));
    int **groups = auto_alloc(s, (size_t)s->nedges + 1, sizeof(int *));
    for (int ei = 0; ei < s->nedges; ei++) {
        const Edge *e = &s->edges[ei];
        const Choice *cf = &s->choices[e->from];
        const Choice *ct = e->to >= 0 ? &s->choices[e->to] : NULL;
        if (tie && tie->cut && tie->cut[ei]) {
            for (int o = 0; o < ct->nopts; o++)
                obj[ct->col0 + o] += tie->cutmin[ei][o] * US;
            continue;
        }
        int na = auto_group_options(s, e, 0, ga, ra);
        int nb = 1;
        gb[0] = 0;
        if (ct)
            nb = auto_group_options(s, e, 1, gb, rb);
        /* A representative option per group, for the costs. */
        for (int o = cf->nopts - 1; o >= 0; o--)
            ia[ga[o]] = o;
        for (int o = ct ? ct->nopts - 1 : 0; o >= 0; o--)
            ib[gb[o]] = o;
        int step = ct ? e->cnode : last_step; /* where the reshard's result is read */
        int mem = mem_limit > 0;
        if (na == 1 || nb == 1) {
            /* Linear in the other end's options. */
            if (na == 1) {
                /* (With no consumer choice the cost is a constant.) */
                for (int o = 0; ct && o < ct->nopts; o++) {
                    obj[ct->col0 + o] += auto_edge_cost(s, e, ia[0], o) * US;
                    sent[ct->col0 + o] += (double)auto_edge_sent(s, e, ia[0], o) / 1e6;
                    if (mem)
                        term_add(&terms, ct->col0 + o, step, auto_edge_buf(s, e, ia[0], o));
                }
                if (mem && !ct)
                    term_add(&terms, 0, step, auto_edge_buf(s, e, ia[0], 0));
            } else {
                for (int o = 0; o < cf->nopts; o++) {
                    obj[cf->col0 + o] += auto_edge_cost(s, e, o, ct ? ib[0] : 0) * US;
                    sent[cf->col0 + o] += (double)auto_edge_sent(s, e, o, ct ? ib[0] : 0) / 1e6;
                    if (mem)
                        term_add(&terms, cf->col0 + o, step, auto_edge_buf(s, e, o, ct ? ib[0] : 0));
                }
            }
            continue;
        }
        /* Transport: y[i][j] >= 0, row sums = producer groups, column
         * sums = consumer groups. A tied edge with the same groups as its
         * representative adds its costs to that transport. */
        int er = tie ? tie->edge_rep[ei] : ei;
        const int *gr = groups[er];
        int shared = er != ei && gr && gr[0] == na && gr[1] == nb &&
                     !memcmp(gr + 2, ga, sizeof(int) * (size_t)cf->nopts) &&
                     !memcmp(gr + 2 + cf->nopts, gb, sizeof(int) * (size_t)ct->nopts);
        int base = y0[er];
        if (!shared) {
            int rows0 = nrows;
            glp_add_rows(lp, na + nb);
            for (int i = 0; i < na + nb; i++)
                glp_set_row_bnds(lp, rows0 + 1 + i, GLP_FX, 0.0, 0.0);
            nrows += na + nb;
            for (int o = 0; o < cf->nopts; o++)
                mat_add(&mx, rows0 + 1 + ga[o], cf->col0 + o, -1.0);
            for (int o = 0; o < ct->nopts; o++)
                mat_add(&mx, rows0 + 1 + na + gb[o], ct->col0 + o, -1.0);
            base = ncols + 1;
            glp_add_cols(lp, na * nb);
            obj = auto_grow(s, obj, (size_t)ncols + 1, (size_t)(ncols + na * nb) + 1, sizeof(double));
            sent = auto_grow(s, sent, (size_t)ncols + 1, (size_t)(ncols + na * nb) + 1, sizeof(double));
            ncols += na * nb;
            for (int i = 0; i < na; i++)
                for (int j = 0; j < nb; j++) {
                    int col = base + i * nb + j;
                    glp_set_col_bnds(lp, col, GLP_DB, 0.0, 1.0);
                    obj[col] = sent[col] = 0;
                    mat_add(&mx, rows0 + 1 + i, col, 1.0);
                    mat_add(&mx, rows0 + 1 + na + j, col, 1.0);
                }
            if (!groups[ei]) {
                int *gc = auto_alloc(s, (size_t)(2 + cf->nopts + ct->nopts), sizeof(int));
                gc[0] = na;
                gc[1] = nb;
                memcpy(gc + 2, ga, sizeof(int) * (size_t)cf->nopts);
                memcpy(gc + 2 + cf->nopts, gb, sizeof(int) * (size_t)ct->nopts);
                groups[ei] = gc;
                y0[ei] = base;
            }
        }
        for (int i = 0; i < na; i++)
            for (int j = 0; j < nb; j++) {
                int col = base + i * nb + j;
                obj[col] += auto_edge_cost(s, e, ia[i], ib[j]) * US;
                sent[col] += (double)auto_edge_sent(s, e, ia[i], ib[j]) / 1e6;
                if (mem)
                    term_add(&terms, col, step, auto_edge_buf(s, e, ia[i], ib[j]));
            }
    }
    /* Memory rows: weights + live values at each step, in MB. Several
     * nodes of one choice (or of tied choices) add to the same column:
     * summed per row first. */
    if (mem_limit > 0) {
        int nn = g->nnodes;
        int *last = auto_alloc(s, (size_t)g->ntensors + 1, sizeof(int));
        double *acc = auto_alloc(s, (size_t)ncols + 2, sizeof(double)); /* and the weights' column, below */
        graph_last_readers(g, last);
        /* Weights are live at every step, so a step whose live values are
         * a subset of another's adds nothing: only the steps whose live set
         * is maximal get a row. With intervals [producer, last reader], the
         * set at step i is contained in step j's when every value live at
         * i is live at j; a sweep keeps step i unless its set grows by step
         * i+1 (then i+1 dominates) or shrank since i-1 without a birth. */
        int *born_at = auto_alloc(s, (size_t)nn + 1, sizeof(int));
        int *dies_after = auto_alloc(s, (size_t)nn + 2, sizeof(int));
        char *keep = auto_alloc(s, (size_t)nn + 1, 1);
        for (int ni = 0; ni < nn; ni++)
            for (int k = 0; k < g->nodes[ni]->noutputs; k++) {
                const Tensor *t = g->nodes[ni]->outputs[k];
                if (t && t->rank >= 0 && last[t->id] >= ni && !ir_in_place(t)) {
                    born_at[ni]++;
                    dies_after[last[t->id] < nn ? last[t->id] : nn]++;
                }
            }
        /* Step i is dominated by i+1 when nothing dies after i (so i+1 holds
         * all of i's values). */
        for (int i = 0; i < s->ninner; i++) {
            const Edge *e = &s->inner[i];
            const Choice *c = &s->choices[e->to];
            for (int o = 0; o < c->nopts; o++)
                term_add(&terms, c->col0 + o, e->cnode, auto_edge_buf(s, e, o, o));
        }
        for (int i = 0; i < terms.n; i++)
            keep[terms.t[i].step] = 1;
        int nkeep = 0;
        for (int step = 0; step < nn; step++) {
            keep[step] |= step == nn - 1 || dies_after[step] > 0;
            nkeep += keep[step];
        }
        /* The weights, live at every step, are summed once into a column
         * of their own (MB): every step's row then reads that column
         * instead of every option's weight, which kept the matrix dense. */
        int wcol = ++ncols;
        glp_add_cols(lp, 1);
        glp_set_col_bnds(lp, wcol, GLP_LO, 0.0, 0.0);
        obj = auto_grow(s, obj, (size_t)ncols, (size_t)ncols + 1, sizeof(double));
        sent = auto_grow(s, sent, (size_t)ncols, (size_t)ncols + 1, sizeof(double));
        obj[wcol] = sent[wcol] = acc[wcol] = 0;
        glp_add_rows(lp, 1);
        int wrow = ++nrows;
        glp_set_row_bnds(lp, wrow, GLP_FX, 0.0, 0.0);
        mat_add(&mx, wrow, wcol, -1.0);
        for (int ci = 0; ci < s->nchoices; ci++)
            for (int o = 0; o < s->choices[ci].nopts; o++)
                acc[s->choices[ci].col0 + o] += (double)s->choices[ci].weights[o];
        for (int col = 1; col <= ncols; col++) {
            if (acc[col] > 0)
                mat_add(&mx, wrow, col, acc[col] / 1e6);
            acc[col] = 0;
        }
        int r0 = nrows;
        glp_add_rows(lp, nkeep);
        nrows += nkeep;
        for (int step = 0, row = r0; step < nn; step++) {
            if (!keep[step])
                continue;
            row++;
            mat_add(&mx, row, wcol, 1.0);
            for (int ni = 0; ni <= step; ni++) {
                const Node *n = g->nodes[ni];
                const Choice *c = &s->choices[s->node_choice[ni]];
                for (int k = 0; k < n->noutputs; k++) {
                    const Tensor *t = n->outputs[k];
                    if (!t || t->rank < 0 || last[t->id] < step || ir_in_place(t))
                        continue; /* an update's result is its weight's storage, counted with the weights */
                    for (int o = 0; o < c->nopts; o++) {
                        Sharding l;
                        auto_node_layout(s, ni, o, n->ninputs + k, &l);
                        acc[c->col0 + o] += (double)sharding_local_bytes(&l, s->m, t);
                    }
                }
            }
            /* Reshard results read at this step (a constant one lowers the bound). */
            double fixed = 0;
            for (int i = 0; i < terms.n; i++)
                if (terms.t[i].step == step) {
                    if (terms.t[i].col)
                        acc[terms.t[i].col] += terms.t[i].bytes;
                    else
                        fixed += terms.t[i].bytes;
                }
            glp_set_row_bnds(lp, row, GLP_UP, 0.0, ((double)mem_limit - fixed) / 1e6);
            for (int col = 1; col <= ncols; col++) {
                if (acc[col] > 0)
                    mat_add(&mx, row, col, acc[col] / 1e6);
                acc[col] = 0;
            }
        }
    }
    for (int col = 1; col <= ncols; col++)
        glp_set_obj_coef(lp, col, obj[col]);
    glp_load_matrix(lp, mx.n, mx.ia, mx.ja, mx.ar);
    pr->lp = lp;
    pr->obj = obj;
    pr->sent = sent;
    pr->ncols = ncols;
    pr->nrows = nrows;
    pr->nnz = mx.n;
}

int ilp_solve(Search *s, Ilp *pr, const char *solver, double time_limit_s, MipResult *res)
{
    if (strcmp(solver, "cbc") == 0)
        return solve_cbc(s, pr->lp, time_limit_s, 0, res);
    solve_glpk(s, pr->lp, time_limit_s, 0, res);
    return 0;
}

double auto_seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}
