/* auto_internal.h: what the files of the --auto search share.
 *
 * The search is four files: auto_strategy.c (strategies, choices and the
 * edges between them, with a cache of reshard costs), auto_ilp.c (the
 * integer program over them and its GLPK and CBC solvers), auto_tie.c
 * (repeated layers solved once where that is exact) and auto.c (the
 * driver: partition_auto, from the solution to a plan). A Search holds the
 * state of one run; every array it owns comes from its arena and goes
 * with it, so nothing here is freed one object at a time. Only the GLPK
 * problem object lives outside it (ilp_free releases it), and CBC's
 * malloc'd solution until solve_cbc has copied it in.
 */
#ifndef ONNX2SPMD_AUTO_INTERNAL_H
#define ONNX2SPMD_AUTO_INTERNAL_H

#include "partition.h"

#include <glpk.h>
#include <string.h>
#include <time.h>

#define AUTO_MAX_STRATS 512 /* per node, after pruning duplicates */

typedef struct Strat {
    unsigned char fn[RULE_MAX_FACTORS];
    unsigned char fa[RULE_MAX_FACTORS][MESH_MAX_AXES];
    double compute;   /* seconds, local shard */
    int64_t weights;  /* bytes of the single-use sources it stores */
} Strat;

/* A choice of the integer program: a node's strategies or a shared
 * source's layouts. col0 is the first GLPK column (1-based). */
typedef struct Choice {
    int leader;         /* the node whose strategies are the options, or -1 for a source */
    const Tensor *src;  /* the shared source, else NULL */
    int nopts;
    int col0;
    double *cost;       /* per option, seconds: compute + edges inside */
    int64_t *weights;   /* per option: weight bytes held */
    int64_t *sent;      /* per option: bytes sent per rank by the edges inside */
    Sharding *layouts;  /* source choice: its candidate layouts */
    int pick;           /* the solution */
} Choice;

/* A value crossing two choices: from its producer (a node, or a shared
 * source when pnode is -1) to a consumer node's operand (or, with to = -1,
 * to the graph outputs). pidx/cidx are tensor indices in the nodes' rules. */
typedef struct Edge {
    const Tensor *t;
    int from, pnode, pidx;
    int to, cnode, cidx;
} Edge;

/* A cache of reshard costs: many edges repeat the same shapes and layouts
 * (a model's layers), and the search is the expensive part of an edge. */
typedef struct CostKey {
    int64_t dims[IR_MAX_RANK];
    int rank, esize;
    Sharding src, dst;
} CostKey;

typedef struct CostCache {
    CostKey *keys;
    double *vals;       /* seconds, -1 for an empty slot */
    int64_t *bufs;      /* bytes of the buffers the reshard's steps write */
    int64_t *sent;      /* bytes sent per rank */
    int cap, n;
} CostCache;

typedef struct Search {
    Plan *p;
    const Mesh *m;
    const AnnotationList *ann;
    Strat **strats;     /* per node: its strategy under each option of its choice */
    int *nstrats;
    Choice *choices;
    int nchoices;
    int *node_choice;   /* node index -> choice */
    int *src_choice;    /* tensor id -> choice, or -1 (a single-use source) */
    Edge *edges;
    int nedges, edges_cap;
    Edge *inner;        /* values inside one choice (costs folded into its options) */
    int ninner, inner_cap;
    CostCache cache;
    AutoReport *rep;
    /* Scratch for the tie checks (auto_tie.c), AUTO_MAX_STRATS per end and
     * use: no choice has more options than that. */
    int *scratch_groups;     /* 6 * AUTO_MAX_STRATS */
    Sharding *scratch_reps;  /* 2 * AUTO_MAX_STRATS */
    double *scratch_min;     /* AUTO_MAX_STRATS */
    /* Everything above lives here and is released at once when the search
     * ends; the Plan it returns has its own arena. */
    Arena arena;
} Search;

#define US 1e6 /* the objective in microseconds keeps coefficients near 1 */

/* An array of n elements of size elem from the search's arena (zeroed).
 * Sizes come from the graph and the mesh; an overflow is a bug here, not
 * an input to report. */
static inline void *auto_alloc(Search *s, size_t n, size_t elem)
{
    size_t bytes;
    IR_ASSERT(ck_mul_size(n, elem, &bytes) == 0);
    return arena_alloc(&s->arena, bytes);
}

/* A copy of old (old_n elements) grown to new_n elements, in the arena;
 * the old array stays there until the search ends (grown by doubling, the
 * copies sum to twice the last). */
static inline void *auto_grow(Search *s, void *old, size_t old_n, size_t new_n, size_t elem)
{
    IR_ASSERT(new_n >= old_n);
    void *p = auto_alloc(s, new_n, elem);
    if (old_n)
        memcpy(p, old, old_n * elem);
    return p;
}

/* ---- auto_strategy.c ---------------------------------------------------- */

/* Every node's strategies, the choices, their option costs and the edges. */
int auto_build_choices(Search *s, Diag *d);
int auto_is_source(const Tensor *t);
const Annotation *auto_annotation_of(const Search *s, const Tensor *t);
/* Layout of tensor index t of node ni under option o of its choice. */
void auto_node_layout(const Search *s, int ni, int o, int t, Sharding *out);
/* Edge e's reshard under producer option a and consumer option b: seconds,
 * bytes of the buffers it writes, bytes sent per rank. */
double auto_edge_cost(Search *s, const Edge *e, int a, int b);
int64_t auto_edge_buf(Search *s, const Edge *e, int a, int b);
int64_t auto_edge_sent(Search *s, const Edge *e, int a, int b);
/* Groups one end's options of edge e by the layout they give (consumer 0)
 * or need (1); returns the group count. */
int auto_group_options(const Search *s, const Edge *e, int consumer, int *group, Sharding *rep);

/* ---- auto_ilp.c --------------------------------------------------------- */

/* The integer program (Ilp; codegen's Program is the per-rank program)
 * built from the choices and edges, with what the second pass needs of it. */
typedef struct Ilp {
    glp_prob *lp;
    double *obj, *sent; /* per column (1-based): microseconds, MB */
    int ncols, nrows, nnz;
} Ilp;

/* How a program shares columns (repeated layers, below). A NULL Tie is the
 * whole program: every choice and edge its own. */
typedef struct Tie {
    int *rep;        /* choice -> the choice whose columns it takes */
    int *edge_rep;   /* edge -> the edge whose transport it shares */
    char *cut;       /* the bound only: edge -> relaxed, else NULL */
    double **cutmin; /* cut edge -> per consumer option, its cheapest reshard over the producer's options */
} Tie;

/* The program over s's choices and edges, shared as tie says (NULL: the
 * whole program), with memory rows under mem_limit (0: none). */
void ilp_build(Search *s, const Tie *tie, int64_t mem_limit, Ilp *pr);
int ilp_solve(Search *s, Ilp *pr, const char *solver, double time_limit_s, MipResult *res);
void ilp_free(Ilp *pr);
/* The second pass: the fewest bytes within AUTO_TIME_SLACK of res's time,
 * for at most AUTO_BYTES_PASS_MAX_NODES nodes (an effort limit, so the
 * result does not depend on the machine's load). Larger programs than
 * AUTO_BYTES_PASS_MAX_COLS skip it: on the 64-rank Llama one (134,706
 * columns) it did not finish in twice the first pass's 4 s. */
#define AUTO_BYTES_PASS_MAX_NODES 2000 /* the test models need at most ~300 (GLPK) */
#define AUTO_BYTES_PASS_MAX_COLS 20000
void ilp_bytes_pass(Search *s, glp_prob *lp, const char *solver, const double *obj, const double *sent,
                    int ncols, double time_limit_s, MipResult *res);
double auto_seconds_since(const struct timespec *t0);

/* ---- auto_tie.c --------------------------------------------------------- */

/* Solves the tied program and its bound: 1 when they meet (pr and res hold
 * the tied program and its solution), else 0 with the reason in the report. */
int auto_solve_tied(Search *s, const AutoOptions *opt, const char *solver, Ilp *pr, MipResult *res);

#endif
