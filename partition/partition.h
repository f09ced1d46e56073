/* partition.h: laying a graph's tensors out over a device mesh.
 *
 * Input: an ir Graph with static shapes, a Mesh and a list of annotations.
 * Output: a Plan: every tensor's sharding with the origin of that decision,
 * every node's factor sharding, and every reshard (a short sequence of
 * collectives) that some consumer needs, with its cause and cost.
 *
 * Sections: mesh.c (mesh, link and device presets, rank groups),
 * sharding.c (specs, text form, local shapes), rules.c (per-op factor
 * rules), annotate.c (--shard, --shardings files, ONNX sharding specs),
 * cost.c (the roofline node cost model), propagate.c (fixed-point
 * propagation and requirement lowering), auto*.c (the --auto search),
 * reshard.c (layout-to-layout collective sequences), report.c (plan
 * tables, JSON, --explain, Graphviz), report_train.c (plan --train's
 * memory tables: the ZeRO stages and --recompute modes).
 */
#ifndef ONNX2SPMD_PARTITION_H
#define ONNX2SPMD_PARTITION_H

#include <stdio.h>

#include "../ir/ir.h"

#define MESH_MAX_AXES 8

/* ---- mesh.c ------------------------------------------------------------- */

typedef struct LinkClass {
    const char *name;
    double latency_s;      /* alpha */
    double bandwidth_Bps;  /* beta: bytes per second, per direction */
} LinkClass;

typedef struct DeviceClass {
    const char *name;
    double flops;          /* float32 FLOP/s */
    double mem_Bps;        /* memory bandwidth */
} DeviceClass;

typedef struct MeshAxis {
    char name[32];
    int size;
    const LinkClass *link;
    int loop;              /* microbatches (pipeline.c): iterations of one rank, not ranks */
} MeshAxis;

typedef struct Mesh {
    MeshAxis axes[MESH_MAX_AXES];
    int naxes;
    int nranks;
    const DeviceClass *device;
} Mesh;

const LinkClass *link_preset_find(const char *name);
const DeviceClass *device_preset_find(const char *name);
/* "dp=2,tp=4" (row-major, last axis fastest). Errors name the flag. */
int mesh_parse(const char *spec, Mesh *m, Diag *d);
/* "tp=nvlink,dp=ib"; axes not named keep their default link. */
int mesh_links_parse(Mesh *m, const char *spec, Diag *d);
int mesh_axis_find(const Mesh *m, const char *name);
/* Coordinate of rank r along axis a. */
int mesh_coord(const Mesh *m, int rank, int axis);
/* Which block of a dim split over axes[0..naxes) (major first) rank holds. */
int mesh_block_index(const Mesh *m, int rank, const unsigned char *axes, int naxes);
/* Slowest link over a set of axes (bitmask). */
const LinkClass *mesh_group_link(const Mesh *m, unsigned axes);
int mesh_group_size(const Mesh *m, unsigned axes);
void mesh_str(const Mesh *m, char *buf, size_t cap);

/* ---- sharding.c --------------------------------------------------------- */

/* Per tensor dim, an ordered list of mesh axes (major to minor) that split
 * it, plus the set of axes over which the value is partial (unreduced). */
typedef struct Sharding {
    int rank;
    unsigned char naxes[IR_MAX_RANK];
    unsigned char axes[IR_MAX_RANK][MESH_MAX_AXES];
    unsigned partial; /* bitmask over mesh axes */
} Sharding;

void sharding_replicated(Sharding *s, int rank);
int sharding_equal(const Sharding *a, const Sharding *b);
int sharding_is_replicated(const Sharding *s); /* no split, no partial */
unsigned sharding_used_axes(const Sharding *s); /* split axes, bitmask */
int64_t sharding_dim_shards(const Sharding *s, const Mesh *m, int dim);
/* Parses "[dp,_,tp]" or "[dp+tp,_]" with optional " partial(dp)". */
int sharding_parse(const char *text, const Mesh *m, Sharding *s, char *err, size_t errcap);
char *sharding_str(const Sharding *s, const Mesh *m, char *buf, size_t cap);
/* Checks the rank (any split is valid: sharding.c pads); the error names
 * the tensor. */
int sharding_check(const Sharding *s, const Mesh *m, const Tensor *t, Diag *d);
/* Local (block) dims: ceil(n / shards) per dim; see "Uneven splits" in
 * sharding.c. */
void sharding_local_dims(const Sharding *s, const Mesh *m, const Tensor *t, int64_t *out);
/* Block length of a dim of n elements, in units of u, split over the
 * given mesh axes (major first): n / shards where the axes split the
 * units evenly, or the units whole and then the unit evenly (a Reshape's
 * heads over dp, head_dim over tp); else ceil(units / shards) whole units,
 * the last blocks padded. */
int64_t sharding_block_of(int64_t n, int64_t u, const Mesh *m, const unsigned char *axes, int naxes);
/* The valid (unpadded) part of block b of a dim of n cut into blocks of
 * len. */
static inline int64_t sharding_block_valid(int64_t n, int64_t len, int64_t b)
{
    int64_t v = n - b * len;
    return v < 0 ? 0 : v > len ? len : v;
}

/* Does the split of dim `dim` (of every dim) leave padding? */
int sharding_dim_uneven(const Sharding *s, const Mesh *m, const Tensor *t, int dim);
int sharding_is_uneven(const Sharding *s, const Mesh *m, const Tensor *t);
int64_t sharding_local_bytes(const Sharding *s, const Mesh *m, const Tensor *t);

/* ---- rules.c ------------------------------------------------------------ */

typedef enum FactorKind {
    FK_PASS = 0,     /* pass-through: every tensor holding it is split alike */
    FK_REDUCTION,    /* contracted: sharding it leaves the result partial */
    FK_NEED_REPL,    /* must be replicated (softmax axis, norm axis, ...) */
} FactorKind;

#define RULE_MAX_FACTORS 24
#define RULE_MAX_PER_DIM IR_MAX_RANK /* a Reshape may merge every dim into one */

/* Shardy-style op sharding rule: every operand and result dim is a list of
 * factors (major to minor; a Reshape dim may hold several). Tensors are
 * numbered inputs first, then outputs; omitted optional ones are NULL. */
typedef struct DimFactors {
    unsigned char n;
    unsigned char f[RULE_MAX_PER_DIM];
} DimFactors;

typedef struct FactorRule {
    int nfactors;
    int64_t size[RULE_MAX_FACTORS];
    unsigned char kind[RULE_MAX_FACTORS];
    const char *why[RULE_MAX_FACTORS]; /* for need-replication: the reason */
    unsigned char nopad[RULE_MAX_FACTORS]; /* may not be padded (a reduction padding would change,
                                              indices into global planes) */
    int ntensors;
    Tensor **tensors;
    DimFactors (*dims)[IR_MAX_RANK];   /* [ntensors][rank] */
} FactorRule;

/* Builds the rule for a node; an op without a rule is an error naming it. */
int rule_build(Arena *a, const Node *n, FactorRule *r, Diag *d);
/* Building blocks for rule functions: a new factor of a size and kind
 * (returns its index), tensor t's dim mapped to factor f, the tensor index
 * of output k, and the error for a rule that would not fit. */
int rule_new_factor(FactorRule *r, int64_t size, FactorKind kind, const char *why);
void rule_map_dim(FactorRule *r, int t, int dim, int f);
int rule_out_idx(const Node *n, int k);
static inline int64_t rule_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
int rule_too_big(const Node *n, Diag *d);
/* A ScatterND with reduction "add" into a tensor of zeros (Gather's and
 * GatherND's gradient, ir/vjp_index.c): linear in its updates, so a split
 * or partial batch of updates makes a partial result (rules_index.c). */
int rule_scatter_adds_into_zeros(const Node *n);
/* Rule functions, named in the rule column of ir/ops.def (rules.c and the
 * rules_<family>.c files); rule_none for an op that cannot be sharded. */
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) int rule(const Node *n, FactorRule *r, Diag *d);
#include "../ir/ops.def"
#undef OP
int op_has_rule(OpKind op);
/* The unit (in the factor's own elements) an uneven split of factor f
 * is cut in: that of the dims holding it (units.c). */
int64_t rule_factor_unit(const FactorRule *r, int f);
/* May factor f be split over shards that do not divide it (padded, see
 * sharding.c)? Only if each dim holding it is cut where the factor is:
 * it holds the factor alone, or first with the rest in the dim's unit
 * (heads x head_dim by heads), and its reduction, if any, is a sum that
 * zeroed padding leaves alone. */
int rule_factor_can_pad(const FactorRule *r, int f);
/* May factor f be split over these mesh axes (evenly, or padded)? */
int rule_factor_fits(const FactorRule *r, int f, const Mesh *m, const unsigned char *axes, int naxes);
/* Tensor t's layout (partial not set) under factor shardings fn/fa. */
void rule_project(const FactorRule *r, int t, const unsigned char *fn,
                  const unsigned char (*fa)[MESH_MAX_AXES], const Mesh *m, Sharding *out);

/* ---- plan --------------------------------------------------------------- */

typedef enum Origin {
    ORIGIN_DEFAULT = 0,   /* replicated: nothing reached it */
    ORIGIN_USER,          /* --shard / --shardings */
    ORIGIN_MODEL,         /* the model's own ONNX sharding spec */
    ORIGIN_PROPAGATED,    /* from a neighbour through a node's rule */
    ORIGIN_OUTPUT,        /* graph output: replicated by contract */
    ORIGIN_AUTO,          /* chosen by the --auto search */
    ORIGIN_COST,          /* settled when lowering node `via`: by its cost model
                             choice, or as its operands arrive (see propagate.c) */
} Origin;

typedef struct TensorPlan {
    Sharding sharding;    /* layout the value is produced/stored in */
    Origin origin;
    const char *source;   /* annotation text (user/model) */
    const Node *via;      /* propagated: the node whose rule carried it */
    const Tensor *from;   /* propagated: the neighbour it came from */
    int depth;            /* propagation steps from the annotation */
    int fixed;            /* annotated: propagation may not change it */
} TensorPlan;

typedef enum CollKind {
    COLL_SLICE = 0,       /* local: keep this rank's part (free) */
    COLL_ALL_TO_ALL,
    COLL_REDUCE_SCATTER,
    COLL_ALL_REDUCE,
    COLL_ALL_GATHER,
    COLL_PARTIALIZE,      /* local: keep the value on one coordinate, zero elsewhere */
    COLL_COUNT
} CollKind;

const char *coll_name(CollKind k);

/* One step of a reshard. */
typedef struct ReshardStep {
    CollKind kind;
    unsigned axes;        /* mesh axes of the group (bitmask) */
    int dim;              /* gathered / scattered / sliced dim, -1 if none */
    int dim_to;           /* all-to-all: destination dim */
    int64_t bytes;        /* bytes sent per rank */
    double seconds;       /* cost model time */
    Sharding after;       /* layout after this step */
} ReshardStep;

#define RESHARD_MAX_STEPS 24

typedef struct Reshard {
    int nsteps;
    ReshardStep steps[RESHARD_MAX_STEPS];
    int64_t bytes;
    double seconds;
    int full_gather;      /* fell back to gather-everything-then-slice */
} Reshard;

/* ---- reshard.c ---------------------------------------------------------- */

/* Cheapest-first lowering of src -> dst for tensor t. */
void reshard_lower(const Mesh *m, const Tensor *t, const Sharding *src,
                   const Sharding *dst, Reshard *out);
double coll_seconds(const Mesh *m, CollKind k, unsigned axes, int64_t local_bytes);

/* A reshard inserted in front of a consumer. */
typedef struct PlanReshard {
    const Tensor *tensor;
    const Node *consumer;  /* NULL: graph output */
    int operand;
    const char *reason;
    int weight_gather;     /* gathers a weight stored sharded (--shard-weights) */
    Sharding src, dst;
    Reshard r;
    int next_of_tensor;    /* next (lower-index) reshard of the same tensor, or -1 */
} PlanReshard;

/* Lowering without --auto: the factor shardings a node's layouts
 * disagreed on, with what each would cost (propagate.c). */
#define COST_MAX_CANDS 16
typedef struct CostChoice {
    int ncand, pick;
    double cost_s[COST_MAX_CANDS];       /* compute + operand reshards + reducing the result */
    int64_t bytes[COST_MAX_CANDS];       /* bytes per rank those reshards send: compared first */
    const char *anchor[COST_MAX_CANDS];  /* the tensor whose layout it starts from, or NULL */
    unsigned char fn[COST_MAX_CANDS][RULE_MAX_FACTORS];
    unsigned char fa[COST_MAX_CANDS][RULE_MAX_FACTORS][MESH_MAX_AXES];
} CostChoice;

typedef struct NodePlan {
    FactorRule rule;
    CostChoice *choice;    /* propagation: the candidates compared, or NULL if none were */
    int *in_reshard;       /* per input: index into Plan.reshards, or -1 */
    /* Factor shardings chosen for the node: axes per factor. */
    unsigned char fnaxes[RULE_MAX_FACTORS];
    unsigned char faxes[RULE_MAX_FACTORS][MESH_MAX_AXES];
} NodePlan;

typedef struct Annotation {
    const char *tensor;
    const char *spec;      /* text, for reports */
    /* where it was written ("--shard NAME", "FILE:LINE: PATTERN:SLOT"), so
     * that a conflicting annotation can name both sources */
    const char *from;
    Sharding sharding;
    Origin origin;
} Annotation;

/* What --auto decided and why (auto.c), for reports and --explain. */
#define AUTO_ALTS 3
typedef struct AutoNodeInfo {
    int nstrategies, pick;          /* of the node's choice */
    int leader;                     /* the node whose choice this node follows (itself if none) */
    double cost_s;                  /* the choice's option cost: compute + reshards inside it */
    int nalt;                       /* the cheapest alternatives, best first */
    double alt_delta_s[AUTO_ALTS];  /* what switching this node alone adds */
    unsigned char alt_fn[AUTO_ALTS][RULE_MAX_FACTORS];
    unsigned char alt_fa[AUTO_ALTS][RULE_MAX_FACTORS][MESH_MAX_AXES];
} AutoNodeInfo;

/* Repeated layers in --auto (auto_tie.c): solved once when the tied
 * program's optimum meets its relaxation's bound. */
typedef enum TiedStatus {
    TIED_NOT_TRIED = 0, /* no layers, too few, or --auto-tie off */
    TIED_EXACT,         /* solved once: the optimum of the whole program */
    TIED_INEXACT,       /* the bound stayed below: the whole program was solved */
    TIED_UNSOLVED,      /* a tied program was not solved to optimality in its time */
    TIED_DIFFER,        /* the layers' pieces of the bound are not one piece repeated */
} TiedStatus;

typedef struct AutoReport {
    int nchoices, noptions, nedges;
    int rows, cols, nonzeros;       /* the integer program's size */
    int optimal;                    /* proven optimal (else: best found in the time limit) */
    double gap;                     /* then: relative gap to the best bound */
    double objective_s;             /* estimated seconds: compute + reshards, no overlap */
    double best_s;                  /* the fastest plan's (the first pass) */
    int bytes_pass;                 /* the fewest-bytes pass (auto_ilp.c): 0 not run, 1 took its plan,
                                       2 found none better, -1 ran out of nodes */
    int layers, layer_choices;      /* identical layers found (0: none) and the choices in each */
    int tied;                       /* TiedStatus: were they solved once? */
    double tied_s, bound_s;         /* then: the tied program's optimum and its relaxation's bound */
    double tie_s;                   /* seconds spent on both */
    double time_limit_s, solve_s;
    const char *solver;             /* "GLPK" or "CBC" */
    AutoNodeInfo *nodes;            /* by node index */
} AutoReport;

typedef struct Plan {
    Arena arena;
    const Graph *g;
    Mesh mesh;
    TensorPlan *tensors;   /* by Tensor id */
    NodePlan *nodes;       /* by node index */
    PlanReshard *reshards;
    int nreshards, reshards_cap;
    int *tensor_reshard;   /* by Tensor id: its latest reshard, or -1 (a list through
                              next_of_tensor); NULL until the first reshard */
    int *out_reshard;      /* per graph output: index into reshards, or -1 */
    int iterations;        /* propagation node visits */
    AutoReport *auto_report; /* --auto: the search's decisions, else NULL */
    struct Pipeline *pipe;   /* pipeline stages (pipeline.c), else NULL */
    /* --zero 1 or 2: optimizer updates run on this mesh axis's shard of each
     * weight (state stored split, gradient reduce-scattered, the updated
     * block all-gathered back); -1: off. */
    int zero_axis;
    int zero;                /* the ZeRO stage (0 off) */
} Plan;

/* ---- annotate.c --------------------------------------------------------- */

typedef struct AnnotationList {
    Annotation *items;
    int n, cap;
    int *by_tensor;        /* tensor id -> item index + 1 (in the caller's arena) */
    int by_n;
    /* --zero: the stage (0 off) and its mesh axis, for the optimizer
     * updates' layouts (Plan.zero_axis) */
    int zero;
    const char *zero_axis;
} AnnotationList;

/* "NAME=SPEC" from --shard. NAME is a tensor's exact name, or, when no
 * tensor has that name, NODE:SLOT: the tensor read at input SLOT by every
 * model node whose name matches the fnmatch(3) pattern NODE ('*' crosses
 * '/'), e.g. "*q_proj/MatMul:1" for every layer's Q weight. */
int annotate_add_flag(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m,
                      const char *arg, const char *what, Diag *d);
/* A --shardings file: one NAME=SPEC per line (NAME as for --shard), #
 * comments. */
int annotate_add_file(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m,
                      const char *path, Diag *d);
/* The model's own ONNX sharding specs (NodeProto.device_configurations). */
int annotate_add_model(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m, Diag *d);

/* ---- cost.c: the node cost model ----------------------------------------- */

/* Roofline seconds of node n on its local shard under factor sharding fn/fa. */
double plan_node_seconds(const Plan *p, const Node *n, const FactorRule *r, const unsigned char *fn,
                         const unsigned char (*fa)[MESH_MAX_AXES]);
/* Node n's compute time under the strategy its plan chose (plan_node_seconds
 * with the node's own rule and factor axes). */
double plan_node_planned_seconds(const Plan *p, const Node *n);

/* ---- propagate.c -------------------------------------------------------- */

/* Runs propagation to a fixed point and lowers every requirement to
 * reshards. Returns NULL with a diagnostic on failure. */
Plan *partition_propagate(const Graph *g, const Mesh *m, const AnnotationList *ann, Diag *d);
/* The pieces partition_auto shares: an empty plan (every tensor
 * replicated), every node's rule, and phase 2 (lowering). With
 * keep_factors, each NodePlan's factor axes are taken as given (a search
 * chose them) instead of merged from the tensors' layouts. */
Plan *plan_new(const Graph *g, const Mesh *m);
int plan_build_rules(Plan *p, Diag *d);
int plan_lower(Plan *p, int keep_factors, Diag *d);
/* --zero: the stage and axis the annotations name, into the plan (both
 * searches lay the updates out by them). */
int plan_set_zero(Plan *p, const AnnotationList *ann, Diag *d);
/* ZeRO-1/2: s, the layout of weight w, with dim 0 split over the zero axis
 * as well (minor), where it divides evenly; else left as it is. */
void plan_zero_shard(const Plan *p, const Tensor *w, Sharding *s);
int rule_representable(const Mesh *m, const FactorRule *r, const unsigned char *fn,
                       const unsigned char (*fa)[MESH_MAX_AXES]);
/* The mesh axes the split reduction factors use: the node's results are
 * partial over them. */
unsigned rule_reduced_axes(const FactorRule *r, const unsigned char *fn, const unsigned char (*fa)[MESH_MAX_AXES]);
/* The factor sharding implied by tensor t of the rule having layout s. */
void rule_factors_of(const Mesh *m, const FactorRule *r, int t, const Sharding *s, unsigned char *fn,
                     unsigned char (*fa)[MESH_MAX_AXES]);
/* Records (or reuses) the reshard of t from src to dst for a consumer. */
int plan_add_reshard(Plan *p, const Tensor *t, const Node *consumer, int operand, const char *reason,
                     const Sharding *src, const Sharding *dst);
void plan_free(Plan *p);
/* Sets every tensor dim's split_unit from the plan's rules (units.c). */
void partition_split_units(const Plan *p);

/* ---- auto.c (auto_strategy.c, auto_ilp.c, auto_tie.c) -------------------- */

typedef enum AutoTie {
    AUTO_TIE_AUTO = 0,  /* from AUTO_TIE_MIN_LAYERS layers up */
    AUTO_TIE_OFF,       /* the whole program, always */
    AUTO_TIE_ALWAYS,    /* from two layers up (tests) */
} AutoTie;

typedef struct AutoOptions {
    const char *solver;    /* "glpk" or "cbc"; NULL: CBC when it loads, else GLPK */
    int64_t mem_limit;     /* bytes per rank, 0 for none */
    double time_limit_s;   /* for the MILP solver */
    const char *mps_path;  /* also write the integer program there (MPS), or NULL */
    int tie;               /* AutoTie: repeated layers solved once where exact */
} AutoOptions;

/* --auto: every layout chosen by an integer program over the cost model;
 * annotations in ann are hard constraints. NULL with a diagnostic when
 * nothing fits or an annotation cannot hold. */
Plan *partition_auto(const Graph *g, const Mesh *m, const AnnotationList *ann, const AutoOptions *opt, Diag *d);

/* ---- cbc.c: COIN-OR CBC's C API, loaded at run time ---------------------- */

/* A mixed integer program in column-major form (0-based, DBL_MAX for
 * infinite bounds), minimised. */
typedef struct MipProblem {
    int nrows, ncols;
    const int *start, *index;   /* column j's entries: start[j] .. start[j+1]-1 */
    const double *value;
    const double *collb, *colub, *obj, *rowlb, *rowub;
    const char *is_int;
} MipProblem;

typedef enum MipStatus { MIP_OPTIMAL, MIP_FEASIBLE, MIP_INFEASIBLE, MIP_NONE } MipStatus;

typedef struct MipResult {
    int status;                 /* MipStatus */
    double objective, bound;    /* the best solution's value and the best bound */
    double *x;                  /* malloc'd, per column; NULL without a solution */
} MipResult;

int cbc_available(void);
/* -1 if CBC cannot be loaded; else 0 with *res filled. */
/* CBC on mp for at most time_limit_s and (max_nodes > 0) max_nodes
 * branch-and-bound nodes. */
int cbc_solve(const MipProblem *mp, double time_limit_s, int max_nodes, MipResult *res);

/* ---- pipeline.c --------------------------------------------------------- */

#define PIPE_MAX_STAGES 32

typedef struct PipelineStage {
    int first, last;           /* its (forward) nodes, by index: the first and the last */
    double compute_s;          /* per microbatch: its nodes and their reshards (training: forward) */
    double backward_s;         /* --train, per microbatch: its backward nodes and their reshards */
    double update_s;           /* --train, per step: its optimizer updates */
    double send_s;             /* per microbatch: sending what leaves it (training: both ways) */
    int64_t weight_bytes;      /* per rank (training: with gradients and optimizer state) */
    int64_t activation_bytes;  /* per rank: peak live values of a microbatch's forward */
    int64_t stash_bytes;       /* --train, per rank: what a microbatch keeps from forward to backward */
    int inflight;              /* --train: microbatches whose stash it holds at once (the schedule's) */
    int64_t boundary_bytes;    /* per rank: send and receive slots */
} PipelineStage;

/* --train's pipeline schedules: the order each stage runs its
 * microbatches' forward (F) and backward (B) passes in. */
typedef enum PipeSchedule {
    PIPE_1F1B = 0,     /* p - s - 1 forwards, then one forward and one backward in turn (PipeDream-flush) */
    PIPE_GPIPE,        /* every forward, then every backward */
    PIPE_INTERLEAVED,  /* 1F1B over V model chunks per rank (Megatron's interleaved schedule) */
} PipeSchedule;

const char *pipe_schedule_name(PipeSchedule s);

/* One slot of a stage's schedule, with the cost model's times. */
typedef struct PipeOp {
    char backward;             /* 0: F, 1: B */
    int chunk;                 /* interleaved: the model chunk (virtual stage chunk * p + s), else 0 */
    int mb;                    /* the microbatch, 0-based */
    double start_s, end_s;
} PipeOp;

typedef struct Pipeline {
    Mesh world;                /* the --mesh as given, with the pipeline axis */
    int axis;                  /* the pipeline axis, in world */
    int nstages, microbatches;
    int nsub;                  /* ranks per stage */
    int mb_axis;               /* the microbatch axis in the plan's mesh, or -1 (one microbatch) */
    int automatic;             /* boundaries chosen by the search (else --stage-boundaries) */
    /* With --schedule interleaved each rank runs `chunks` model chunks:
     * virtual stage v = chunk * nstages + s runs on the ranks of stage s.
     * stage_of, tensor_stage, readers and stages[] are by virtual stage
     * (nvstages of them); otherwise chunks is 1 and they are the stages. */
    int chunks, nvstages;
    int *stage_of;             /* node index -> (virtual) stage */
    int *tensor_stage;         /* tensor id -> the stage producing it (graph inputs: 0), -1 weights */
    unsigned *readers;         /* tensor id -> the other stages reading it (inference's graph outputs: the last) */
    PipelineStage stages[PIPE_MAX_STAGES];
    /* --train: every stage runs forward and backward of each microbatch
     * (microbatches = the graph's --accum), in this schedule's order. */
    int train;
    PipeSchedule schedule;
    PipeOp *ops[PIPE_MAX_STAGES];
    int nops[PIPE_MAX_STAGES];
    double step_s;             /* the schedule's time per step, updates included (cost model) */
    /* --train: weights read on more than one stage (tied embeddings): the
     * stage that updates one (where every reader's gradient is summed)
     * sends it to the others after each step. */
    const Tensor **shared;
    int *shared_owner;
    unsigned *shared_readers;
    int nshared;
} Pipeline;

typedef struct PipelineOptions {
    int microbatches;          /* (training: the graph's accum) */
    const char *boundaries;    /* --stage-boundaries, or NULL for the search */
    int64_t mem_limit;         /* per rank, 0: none */
    int train;
    PipeSchedule schedule;
    int chunks;                /* interleaved: model chunks per rank (--virtual-stages) */
} PipelineOptions;

/* The stage (ranks) a virtual stage runs on, and its model chunk. */
static inline int pipeline_rank_stage(const struct Pipeline *pp, int v)
{
    return v % pp->nstages;
}

/* The mesh a pipeline's stages are planned on: the world's axes but the
 * pipeline axis, after a loop axis "mb" of the microbatches when there
 * are several. */
int pipeline_mesh(const Mesh *world, const char *axis, int microbatches, Mesh *spmd, int *pp_axis, Diag *d);
/* Puts the microbatch axis outermost on the batch dim of every graph
 * input that has the batch (the first input's first dim). */
int pipeline_annotate(AnnotationList *l, Arena *a, const Graph *g, const Mesh *spmd, Diag *d);
/* Cuts the planned graph into stages (boundaries: tensor names, or NULL
 * for the search) and sets p->pipe. */
int pipeline_build(Plan *p, const Mesh *world, int pp_axis, const PipelineOptions *o, Diag *d);
/* The search: n items in order into nstages consecutive non-empty stages,
 * minimising the slowest stage, a stage costing its items' cost plus
 * cut[i] for the cut before its end item i (cut[n] unused); mem[] per item
 * summed, act[] per item maxed, the sum under limit (0: none). first[s]
 * gets stage s's first item. A split ending only at the cheapest cuts
 * (within 1% of the least: a transformer's layer boundaries) is taken when
 * it is within 10% of the best. Returns the slowest stage's time, or -1. */
double pipeline_split(int n, const double *cost, const double *cut, const int64_t *mem, const int64_t *act,
                      int64_t limit, int nstages, int *first);
/* The same with --train's stash: item i keeps stash[i] bytes per
 * microbatch for backward (NULL: none), and stage k holds inflight[k]
 * microbatches' stash at once. */
double pipeline_split_train(int n, const double *cost, const double *cut, const int64_t *mem, const int64_t *act,
                            const int64_t *stash, const int *inflight, int64_t limit, int nstages, int *first);
/* --train: the microbatches stage s keeps in flight under a schedule
 * (from the first forward pass of one to its last backward pass). */
int pipeline_inflight(PipeSchedule s, int nstages, int chunks, int microbatches, int stage);
/* The same from a built pipeline's order on one stage, for one model
 * chunk (its forward to its backward; chunk -1: the microbatch's first
 * pass to its last, those of chunk 0). */
int pipeline_chunk_inflight(const struct Pipeline *pp, int stage, int chunk);
int pipeline_stage_of_rank(const Pipeline *pp, int world_rank);
int pipeline_sub_rank(const Pipeline *pp, int world_rank);
int pipeline_world_rank(const Pipeline *pp, int stage, int sub);
/* Per microbatch, compute and send; and the batch under GPipe's schedule,
 * (M + p - 1) times the slowest stage. */
double pipeline_stage_seconds(const Pipeline *pp, int s);
double pipeline_batch_seconds(const Pipeline *pp);
/* The processes a plan runs on: the world's ranks with a pipeline, else
 * the mesh's. */
static inline int plan_world_ranks(const Plan *p)
{
    return p->pipe ? p->pipe->world.nranks : p->mesh.nranks;
}

/* ---- fsdp.c ------------------------------------------------------------- */

/* --shard-weights AXIS: every weight the plan keeps replicated over AXIS is
 * stored split over it (ZeRO-3 / FSDP) and gathered before use. */
int partition_shard_weights(Plan *p, const char *axis, Diag *d);

/* ---- report.c ----------------------------------------------------------- */

typedef struct PlanTotals {
    int64_t comm_bytes, weight_bytes, activation_bytes;
    /* --out: what rank 0 receives to assemble the split graph outputs, once
     * after the run (not part of the step, so not in comm_bytes) */
    int64_t output_gather_bytes;
    int noutputs_split;
    int ncollectives;
    int count[COLL_COUNT];
} PlanTotals;

void plan_totals(const Plan *p, PlanTotals *t);

/* ---- estimate.c --------------------------------------------------------- */

/* The cost model's view of a plan, per rank (see estimate.c). */
typedef struct PlanEstimate {
    double compute_s, comm_s, exposed_s, overlapped_s, step_s;
    int64_t weight_bytes, peak_activation_bytes, memory_bytes;
} PlanEstimate;

void plan_estimate(const Plan *p, PlanEstimate *e);
/* Where each reshard starts and is waited on (from the program schedule):
 * node names, NULL meaning the start of forward() or the outputs. */
typedef struct PlanSchedule {
    const char **start_after;  /* per reshard */
    const char **wait_before;  /* per reshard */
    int *fused_with;           /* per reshard: first member of its fused call, or -1 */
    /* The cost model over rank 0's program as scheduled (codegen's
     * program_estimate): seconds per pass. */
    double compute_s, comm_s, exposed_s, step_s;
} PlanSchedule;

/* A rank's memory by what it holds, from its program's memory plan
 * (codegen's program_memory_split): weights and optimizer state (the
 * weight blob), the gradients live at the arena's peak, and the rest of
 * the arena (forward values kept for backward, reshard buffers, scratch,
 * the placement's gaps) with the inputs. The four add up to total. */
typedef struct MemorySplit {
    int64_t weights, grads, state, activations, total, arena;
    /* The most arena bytes forward values (every value not a gradient:
     * activations kept for backward, recomputed copies, reshard buffers,
     * scratch) hold at any instruction: what --recompute lowers, wherever
     * the arena's own peak is (often at the updates, every gradient live). */
    int64_t forward_peak;
} MemorySplit;

/* --auto --train without --zero: one ZeRO stage the driver tried. */
typedef struct ZeroTrial {
    int stage;
    int fits;              /* under --mem-limit (always, without one) */
    MemorySplit mem;       /* the plan taken, or the search's plan without the limit when none fit it */
} ZeroTrial;

/* plan --train: one --recompute mode, planned with the same flags. */
typedef struct RecomputeTrial {
    int mode;              /* RECOMPUTE_NONE, _SELECTIVE, _FULL */
    int planned;           /* 0: no plan (the search failed under --mem-limit) */
    MemorySplit mem;
} RecomputeTrial;

/* What later stages learn of a plan, for its report: rank 0's program as
 * scheduled (codegen) and the most memory any rank's program holds (the
 * driver's measure). Either may be absent (NULL, 0); so may the whole. */
typedef struct PlanFacts {
    const PlanSchedule *sched;
    int64_t program_bytes;            /* the most a rank's program holds: arena, weights, inputs, start-up packs */
    int64_t runtime_bytes;            /* what the C runtime adds to it (a rank's VmHWM), or 0: another target */
    int64_t mem_limit;                /* --mem-limit, or 0 */
    const ZeroTrial *zero_trials;     /* the stages tried, in order, or NULL */
    int nzero_trials, zero_chosen;    /* zero_chosen: index into zero_trials */
    const RecomputeTrial *recompute;  /* none, selective, full, or NULL */
    int nrecompute, recompute_chosen; /* recompute_chosen: index into recompute */
} PlanFacts;

void plan_print_text(const Plan *p, const PlanFacts *x, FILE *f);
/* report_train.c: the ZeRO stages and --recompute modes tried, as tables
 * (plan_print_text calls it; nothing without trials). */
void plan_print_train_memory(const PlanFacts *x, FILE *f);
/* --precision: the weights the autocast casts, the 16-bit values, the
 * loss scale (nothing for float32 training). */
void plan_print_precision(const Plan *p, FILE *f);
/* The same as plan_print_json's "zero_stages" and "recompute" members. */
void plan_print_train_memory_json(const PlanFacts *x, FILE *f);
void plan_print_json(const Plan *p, const PlanFacts *x, FILE *f);
int plan_print_explain(const Plan *p, const char *tensor, FILE *f, Diag *d);
void plan_print_dot(const Plan *p, FILE *f);

#endif
