/* ir.h: the intermediate representation every stage works on.
 *
 * A Graph owns everything it points to through one Arena; graph_free()
 * releases the arena, the decoded protobuf message and any mapped external
 * data files at once. Tensors carry static shapes after ir_infer_shapes();
 * initializer data points into the decoded model or a mapped file and is
 * never copied. Library code never prints: fallible functions return -1 and
 * append a one-line diagnostic to a Diag.
 *
 * Sections: arena.c, diag.c, graph.c (tensors, nodes, order), escape.c
 * (one writer per place an untrusted string lands), shape.c and ops_<family>.c
 * (shape inference), the op table (ops.def).
 */
#ifndef ONNX2SPMD_IR_H
#define ONNX2SPMD_IR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define ONNX2SPMD_VERSION "0.1.0"
#define IR_MAX_RANK 8

/* Internal invariants only; never for anything user input can trigger. */
#define IR_ASSERT(cond)                                                        \
    ((cond) ? (void)0 : ir_assert_fail(#cond, __FILE__, __LINE__))
void ir_assert_fail(const char *expr, const char *file, int line);

/* ---- arena.c ------------------------------------------------------------ */

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
} Arena;

void *arena_alloc(Arena *a, size_t size); /* zeroed; aborts on OOM */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
void arena_free(Arena *a);

/* Checked arithmetic for every size derived from input: 0 on success, -1
 * when the result overflows (or, for int64, would be negative). */
int ck_mul_i64(int64_t a, int64_t b, int64_t *out);
int ck_add_i64(int64_t a, int64_t b, int64_t *out);
int ck_mul_size(size_t a, size_t b, size_t *out);

/* ---- diag.c ------------------------------------------------------------- */

/* A list of one-line diagnostics. `context` (usually the model path) is
 * prefixed to each message, so a line names the file and the culprit. */
typedef struct Diag {
    char **msgs;
    int n, cap;
    const char *context;
} Diag;

void diag_init(Diag *d, const char *context);
void diag_add(Diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void diag_vadd(Diag *d, const char *fmt, va_list ap);
const char *diag_first(const Diag *d); /* "" when empty */
void diag_free(Diag *d);

/* ---- dtypes ------------------------------------------------------------- */

/* Values match TensorProto.DataType so import is a range check. */
typedef enum DType {
    DT_UNDEFINED = 0,
    DT_F32 = 1,
    DT_U8 = 2,
    DT_I8 = 3,
    DT_U16 = 4,
    DT_I16 = 5,
    DT_I32 = 6,
    DT_I64 = 7,
    DT_BOOL = 9,
    DT_F16 = 10,
    DT_F64 = 11,
    DT_U32 = 12,
    DT_BF16 = 16,
} DType;

/* Storage and compute types. A tensor is stored in its model dtype; the
 * kernels compute in one of three compute types (dtype_compute): float32
 * for every float type, int64 for every integer type, bool. A node whose
 * operands are stored in another type reads them widened into compute-type
 * scratch and narrows its results back (codegen/program.c), except for
 * the ops that only move elements, which work on any element size. */
const char *dtype_name(DType t);           /* "float32", "int64", "bool" */
size_t dtype_size(DType t);                /* 0 for unsupported */
int dtype_supported(int onnx_type);        /* 1 for the DType values above */
const char *dtype_onnx_name(int onnx_type); /* name of any ONNX dtype */
int dtype_is_float(DType t);               /* f16, bf16, f32, f64 */
int dtype_is_int(DType t);                 /* u8, i8, u16, i16, u32, i32, i64 */
DType dtype_compute(DType t);              /* DT_F32, DT_I64 or DT_BOOL */
/* Element i of an array of dtype t (which may be unaligned), as a double,
 * and back (floats rounded to nearest even, integers saturated, NaN to 0). */
double dtype_load(DType t, const void *p, int64_t i);
void dtype_store(DType t, void *p, int64_t i, double v);
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
#define DTYPE_SUPPORTED_LIST "float32, float16, bfloat16, float64, int64, int32, int16, int8, uint32, uint16, uint8, bool"

/* ---- op table ----------------------------------------------------------- */

typedef enum OpKind {
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) e,
#include "ops.def"
#undef OP
    OP_COUNT
} OpKind;

typedef struct Node Node;
typedef struct Graph Graph;
typedef int (*ShapeFn)(Graph *g, Node *n, Diag *d);
/* Evaluates a node whose inputs all hold data (ir/fold.c): fills its
 * outputs' data and returns 1, 0 when it does not fold, -1 on error. */
typedef int (*FoldFn)(Graph *g, Node *n, Diag *d);
/* Appends the nodes of a node's vector-Jacobian product (ir/autodiff.h). */
typedef struct Vjp Vjp;
typedef int (*VjpFn)(Vjp *v);

typedef struct OpInfo {
    const char *name;
    int min_inputs, max_inputs, min_outputs, max_outputs;
    int since_opset;
    ShapeFn infer;
    FoldFn fold;
    VjpFn vjp;
} OpInfo;

extern const OpInfo op_table[OP_COUNT];
int op_from_name(const char *onnx_name); /* -1 when unknown */

/* ---- graph.c ------------------------------------------------------------ */

typedef struct Tensor {
    const char *name;      /* exact, as in the model: for lookups only */
    const char *label;     /* the name made safe for terminals and reports */
    int id;
    DType dtype;
    int rank;              /* -1 until inferred */
    int64_t dims[IR_MAX_RANK];
    Node *producer;        /* NULL for graph inputs and initializers */
    Node **consumers;
    int nconsumers;
    const void *data;      /* initializer / Constant value, else NULL */
    int64_t nbytes;
    unsigned is_input : 1, is_output : 1, is_initializer : 1;
    unsigned folded : 1;   /* computed at compile time from shapes (ir/fold.c) */
    /* Per dim, the unit (in elements) an uneven split cuts it in: head_dim
     * for a dim of heads x head_dim, 0 or 1 for single elements. Set by
     * the partitioner from the graph (partition/units.c). */
    int64_t split_unit[IR_MAX_RANK];
    /* Shape declared in the model (graph output or value_info), checked
     * against inference; decl_rank -1 when none was declared. */
    int decl_rank;
    int64_t decl_dims[IR_MAX_RANK]; /* -1 for a symbolic/unknown dim */
} Tensor;

typedef enum AttrType {
    ATTR_UNDEFINED = 0,
    ATTR_FLOAT = 1,
    ATTR_INT = 2,
    ATTR_STRING = 3,
    ATTR_TENSOR = 4,
    ATTR_GRAPH = 5,
    ATTR_FLOATS = 6,
    ATTR_INTS = 7,
    ATTR_STRINGS = 8,
    ATTR_OTHER = 100,
} AttrType;

typedef struct Attr {
    const char *name;
    AttrType type;
    int64_t i;
    float f;
    const char *s;
    int64_t *ints;
    float *floats;
    int n;         /* element count of ints / floats */
    Tensor *t;     /* ATTR_TENSOR: a detached tensor with data */
} Attr;

struct Node {
    const char *name; /* ONNX name, or "<Op>_<index>" when the model has none */
    const char *label; /* the name made safe for terminals and reports */
    const char *op_type; /* OP_UNSUPPORTED: the model's op_type (and domain) */
    int id;
    unsigned folded : 1; /* evaluated at compile time; dropped by ir_fold_sweep */
    unsigned grad : 1;   /* part of the backward pass --train built (ir/autodiff.c) */
    unsigned recomputed : 1; /* a forward node run again in backward (--recompute, ir/recompute.c) */
    unsigned per_step : 1; /* runs once per step, after every microbatch: gradient clipping (ir/autodiff.c) */
    unsigned no_grad : 1;  /* a constant to autodiff: the stabilising max of a cross-entropy (ir/loss_vocab.c) */
    /* --train: the forward node whose gradient rule (or recomputation)
     * made it, or NULL (the seed, the updates, Sums of a weight's
     * contributions): a pipeline runs it on that node's stage. */
    const struct Node *fwd;
    OpKind op;
    Tensor **inputs;  /* NULL entries are omitted optional inputs */
    int ninputs;
    Tensor **outputs; /* NULL entries are omitted optional outputs */
    int noutputs;
    Attr *attrs;
    int nattrs;
};

typedef struct OpsetImport {
    const char *domain;
    int64_t version;
} OpsetImport;

/* A sharding spec carried by the model itself (ONNX 1.18+:
 * NodeProto.device_configurations[].sharding_spec[]), kept as ONNX states
 * it; partition/annotate.c maps it onto the user's mesh. */
typedef struct ModelShardSpec {
    const char *tensor;
    const char *node;          /* node that carries it, for diagnostics */
    int64_t *devices;          /* shard k lives on devices[k] (mesh rank) */
    int ndevices;
    int nsharded;
    int64_t axis[IR_MAX_RANK];
    int64_t num_shards[IR_MAX_RANK];
} ModelShardSpec;

typedef struct Graph {
    Arena arena;
    const char *path;      /* model file, for diagnostics */
    const char *name;
    int64_t ir_version;
    int64_t opset;         /* default-domain opset */
    OpsetImport *opsets;
    int nopsets;
    const char *producer;
    Tensor **tensors;
    int ntensors, tensors_cap;
    Node **nodes;
    int nnodes, nodes_cap;
    int nfolded;           /* nodes evaluated at import (shape arithmetic) */
    int nfused;            /* nodes folded into an activation (ir/fuse.c) */
    int nunsupported;      /* OP_UNSUPPORTED nodes (inspect only) */
    Tensor **inputs;       /* graph inputs that are not initializers */
    int ninputs;
    Tensor **outputs;
    int noutputs;
    ModelShardSpec *shard_specs;
    int nshard_specs;
    const Tensor *loss;    /* --train: the output it minimises, else NULL */
    int accum;             /* --train --accum K: microbatches per step (0: none) */
    /* --precision fp16: the dynamic loss scale's state ({scale, clean
     * steps, skipped steps}: float32 [3], kept with the weights) and the
     * factor the gradients were multiplied by before the updates (1/scale,
     * NaN when one overflowed: the step is skipped). NULL without. */
    Tensor *loss_scale;
    const Tensor *grad_factor;
    /* compile --decode (ir/decode.c): the inputs the program fills at each
     * position (positions and mask NULL when the model has none), the
     * logits it chooses the next token from, and the cache's slots (0:
     * not decoding). */
    const Tensor *decode_ids, *decode_positions, *decode_mask, *decode_logits;
    int64_t decode_slots;
    int decode_generate;   /* --generate: tokens after the prompt */
    double decode_temperature; /* --sample T: draw from softmax(logits / T); 0: greedy */
    uint64_t decode_seed;  /* --seed: the sampler's stream */
    /* ir/moe.c: each MoE block's stacked expert weights ([E, ...]), two per
     * block, for --shard experts=AXIS. */
    Tensor **moe_weights;
    int nmoe_weights;
    /* --train (ir/autodiff.c): trainable initializers that each feed
     * several nodes of one op at one input (layers an exporter tied by
     * merging equal initializers, or shared on purpose): how many, and the
     * first with its readers, for plan's one warning line. */
    int shared_weights;
    const Tensor *shared_example;
    const Node *shared_reader; /* one of the example's readers */
    int shared_readers, shared_input;
    /* name -> tensor hash (open addressing, power-of-two size) */
    Tensor **index;
    int index_cap;
    /* resources released by graph_free */
    void *proto;           /* decoded ModelProto, owned by the frontend */
    void (*proto_free)(void *proto);
    struct Mapping *maps;
} Graph;

typedef struct Mapping {
    const char *path; /* resolved path, for reuse across tensors */
    void *addr;
    size_t len;
    struct Mapping *next;
} Mapping;

Graph *graph_new(const char *path);
void graph_free(Graph *g);
/* bytes of zeros that live as long as g: an anonymous mapping (in
 * g->maps, with no path) for a large block, whose pages never join the
 * compiler's memory unless written, or the arena for a small one.
 * Optimizer state starts as this: the weight writer reads it (the kernel's
 * shared zero page) and stores zeros. */
void *graph_zeros(Graph *g, size_t bytes);
Tensor *graph_tensor_find(const Graph *g, const char *name);
/* last[t]: the index of the last node reading tensor t, g->nnodes for a
 * graph output (live to the end), -1 for a tensor nothing reads. */
void graph_last_readers(const Graph *g, int *last);
Tensor *graph_tensor_get(Graph *g, const char *name); /* find or create */
/* A new tensor named base, else base.1, base.2, ...: the first name not
 * yet in the graph (the compiler's own values, beside the model's names). */
Tensor *graph_tensor_fresh(Graph *g, const char *base);
Node *graph_node_add(Graph *g, OpKind op, const char *name);
/* A new node reading in[0..nin) with one fresh output named after it. */
Node *graph_node_make(Graph *g, OpKind op, const char *name, Tensor *const *in, int nin);
int64_t tensor_numel(const Tensor *t); /* after shape inference */
/* Sorts nodes topologically (stable for already-sorted graphs); a cycle is
 * an error naming a node on it. Also rebuilds producer/consumer links. */
int graph_toposort(Graph *g, Diag *d);
void graph_link_consumers(Graph *g);
const char *node_op_name(const Node *n);

const Attr *node_attr(const Node *n, const char *name);
int64_t node_attr_int(const Node *n, const char *name, int64_t dflt);
float node_attr_float(const Node *n, const char *name, float dflt);
const char *node_attr_str(const Node *n, const char *name, const char *dflt);
/* Adds or replaces an INTS attribute (copies vals into the arena). */
void node_attr_set_ints(Graph *g, Node *n, const char *name,
                        const int64_t *vals, int count);
/* The same for a FLOATS attribute. */
void node_attr_set_floats(Graph *g, Node *n, const char *name, const float *vals, int count);
/* And an INT, a FLOAT, a STRING attribute (copied into the arena). */
void node_attr_set_int(Graph *g, Node *n, const char *name, int64_t val);
void node_attr_set_float(Graph *g, Node *n, const char *name, float val);
void node_attr_set_str(Graph *g, Node *n, const char *name, const char *val);

/* Formats dims as "[2, 16, 64]" into buf; returns buf. */
char *shape_str(const int64_t *dims, int rank, char *buf, size_t cap);

/* ---- escape.c ----------------------------------------------------------- */
/* One writer per place an untrusted string (a name from the model, a path)
 * can land; see escape.c for what each one guarantees. */

#include <stdio.h>
/* Terminal / text-report form, snprintf-style: writes at most cap bytes
 * (NUL included) and returns the full length. */
size_t esc_term(const char *s, char *out, size_t cap);
/* The terminal form in the arena (s itself when nothing needs escaping). */
const char *esc_label(Arena *a, const char *s);
/* Text for inside a C comment, cut to fit cap with "..."; returns buf. */
const char *esc_c_comment(const char *s, char *buf, size_t cap);
void esc_c_string(FILE *f, const char *s);           /* "..." C literal, exact bytes */
void json_write_str(FILE *f, const char *s);          /* quoted, escaped, valid UTF-8 */
void dot_write_str(FILE *f, const char *s);           /* inside a quoted Graphviz label */
void json_write_dims(FILE *f, const int64_t *dims, int rank); /* [2, 16, 64] */

/* ---- shape.c / ops_<family>.c ------------------------------------------- */

/* Infers every tensor's dtype and shape in topological order and checks
 * them against shapes declared in the model. */
int ir_infer_shapes(Graph *g, Diag *d);
/* The same for one node (its inputs already inferred). */
int ir_infer_node(Graph *g, Node *n, Diag *d);

/* ---- fold.c ------------------------------------------------------------- */

/* Evaluates n if it is shape arithmetic on constants (see fold.c): 1 when
 * folded (its outputs now hold data), 0 when not, -1 on error. */
int ir_fold_node(Graph *g, Node *n, Diag *d);
/* Drops folded nodes (their outputs stay, as constants). */
void ir_fold_sweep(Graph *g);
/* Folds away the nodes nothing live reads (graph outputs are live). */
void ir_drop_dead(Graph *g);

/* ---- fuse.c ------------------------------------------------------------- */

/* Rewrites exported GELU subgraphs (Erf or Tanh with their arithmetic)
 * into one Gelu node each; returns the number of nodes dropped. */
int ir_fuse_activations(Graph *g);
/* For evaluators: inputs all constant; the node is shape arithmetic;
 * element access as double (exact for shape values); output allocation;
 * the input offset of output element i under broadcasting. */
int fold_inputs_const(const Node *n);
int fold_is_shape_math(const Node *n);
double fold_get(const Tensor *t, int64_t i);
int64_t fold_get_i64(const Tensor *t, int64_t i);
void fold_set(Tensor *t, int64_t i, double v);
void *fold_alloc(Graph *g, Tensor *t);
int64_t fold_bcast_index(const Tensor *out, const Tensor *in, int64_t i);

/* ---- autodiff.c -------------------------------------------------------- */

typedef enum Optimizer { OPT_SGD, OPT_ADAMW } Optimizer;
typedef enum Recomputation { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recomputation;

/* What --train asks for (main.c fills it; the defaults are PyTorch's). */
typedef struct TrainOptions {
    const char *loss;        /* --loss NAME, or NULL: the only scalar output */
    const char *frozen;      /* --frozen A,B: initializers kept fixed, or NULL */
    const char *trainable;   /* --trainable A,B: only these, or NULL: every float initializer */
    Optimizer optimizer;     /* --optimizer sgd|adamw */
    float lr;                /* --lr */
    float momentum;          /* --momentum (SGD) */
    float weight_decay;      /* --weight-decay (SGD: added to the gradient; AdamW: decoupled) */
    float beta1, beta2, eps; /* --betas B1,B2 --eps (AdamW) */
    float clip_norm;         /* --clip-norm: global gradient norm cap, 0: none */
    int cosine;              /* --lr-schedule cosine (else constant) */
    int64_t warmup_steps;    /* --warmup-steps: linear warm-up from 0 */
    int64_t total_steps;     /* --total-steps: where the cosine reaches 0 */
    int accum;               /* --accum K: microbatches per optimizer step (0 or 1: none) */
    Recomputation recompute; /* --recompute none|selective|full */
    DType precision;         /* --precision: DT_F32 (default), DT_BF16 or DT_F16 */
    float loss_scale;        /* fp16: the initial dynamic loss scale (--loss-scale) */
} TrainOptions;

void train_options_default(TrainOptions *o);
/* Appends to g the backward pass of the loss with respect to the trainable
 * initializers (each op's vjp_fn) and one optimizer node per trainable
 * weight, whose outputs (the updated weight and optimizer state) become
 * graph outputs. -1 with a diagnostic naming the flag, tensor or node. */
int ir_build_training(Graph *g, const TrainOptions *o, Diag *d);
/* precision.c: the forward graph computed in `low` (bfloat16 or float16)
 * as torch.autocast does: GEMMs in it, norms, softmax, reductions and
 * losses in float32, other ops in the widest type they read. Weights stay
 * float32; trainable[id] ones are read through Cast nodes. */
int ir_autocast(Graph *g, DType low, const unsigned char *trainable, Diag *d);
/* recompute.c: backward reads copies of the forward values it needs, made
 * again right before their first reader (selective: cheap ops only; full:
 * every forward value from the inputs and weights on). */
int ir_recompute(Graph *g, int mode, Diag *d);
/* ops_train.c: for a node that updates weights in place (an optimizer node): the input
 * whose storage output k takes over, or -1. */
int ir_output_in_place(const Node *n, int k);
/* Whether a node belongs to the optimizer step: an update, or a node that
 * runs once per step on the finished gradients (--clip-norm's). Under
 * --accum these run after the last microbatch, on the accumulated values. */
int ir_in_optimizer_step(const Node *n);
/* Is t an optimizer update's result (stored where the input it replaces is)? */
int ir_in_place(const Tensor *t);
/* The name a graph output goes by for --out: a trained weight's (or
 * state's) own name for its update, else the tensor's. */
const char *ir_output_name(const Tensor *t);

/* ---- decode.c ----------------------------------------------------------- */

/* compile --decode: each key-value pair's Concat(past, new) becomes a
 * KvCacheWrite of the new positions into a cache the program keeps (the
 * past input and present output leave the graph), and the token ids,
 * positions and attention mask are found by name. kv names IN=OUT pairs
 * (--kv-cache), or NULL: every graph input that a Concat extends into a
 * graph output. */
typedef struct DecodeOptions {
    int64_t max_seq;          /* --max-seq: the cache's positions */
    int generate;             /* --generate: tokens after the prompt */
    const char *kv;           /* --kv-cache IN=OUT,... or NULL */
    double temperature;       /* --sample T (0: greedy) */
    uint64_t seed;            /* --seed */
} DecodeOptions;
int ir_build_decode(Graph *g, const DecodeOptions *o, Diag *d);

/* ---- loss_split.c ------------------------------------------------------- */

/* Rewrites each SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss with
 * reduction "mean" (no class weights) into its "sum" over the count of
 * labels it averages, so that a split batch leaves two partial scalars
 * instead of gathering the scores (see loss_split.c). */
int ir_split_mean_losses(Graph *g, Diag *d);

/* ---- loss_vocab.c ------------------------------------------------------- */

/* Rewrites each SoftmaxCrossEntropyLoss with reduction "sum" or "none"
 * (no class weights) into ops that keep its class dim split: a max taken
 * over `groups` blocks of classes, a sum of exponentials and the target's
 * logit as per-token partial sums (Megatron's vocab-parallel
 * cross-entropy; see loss_vocab.c). groups <= 1 leaves the graph alone. */
int ir_split_vocab_losses(Graph *g, int64_t groups, Diag *d);

/* ---- moe.c -------------------------------------------------------------- */

typedef struct MoeOptions {
    double capacity_factor; /* --capacity-factor; 0 (the default): dropless, each expert's capacity a group's tokens */
    int groups;             /* --moe-groups: token groups (reduced to a divisor of the tokens) */
} MoeOptions;
/* Rewrites each mixture-of-experts block of the exporters' batched form
 * into MoeDispatch, expert GEMMs and MoeCombine (see moe.c); a graph with
 * none is left as it is. */
int ir_build_moe(Graph *g, const MoeOptions *o, Diag *d);
/* Which MoE layer a MoeDispatch is (graph order), and how many there are. */
int moe_layer_index(const Graph *g, const Node *n);
int moe_layers(const Graph *g);
/* The element-wise ops a block's middle may hold (between the GEMMs). */
int moe_elementwise(OpKind op);

/* ---- quant.c ------------------------------------------------------------ */

/* The scale's layout against x for (De)QuantizeLinear: 0 per tensor, 1 per
 * axis, 2 blocked (block size in *block); -1 with a diagnostic. */
int quant_layout(const Node *n, const Tensor *x, const Tensor *scale, int *axis, int64_t *block, Diag *d);

/* ---- einsum.c ----------------------------------------------------------- */

#define EINSUM_MAX_INPUTS 8
#define EINSUM_MAX_LETTERS (52 + IR_MAX_RANK)
/* An Einsum equation over given operand shapes: each operand dim's letter
 * (a-z 0..25, A-Z 26..51, ellipsis dims 52..), each letter's size, the
 * output's letters. */
typedef struct EinsumSpec {
    int nin, nletters, out_rank;
    int rank[EINSUM_MAX_INPUTS];
    int letter[EINSUM_MAX_INPUTS][IR_MAX_RANK];
    int64_t size[EINSUM_MAX_LETTERS];
    int out[IR_MAX_RANK];
} EinsumSpec;
int einsum_parse(const char *eq, int nin, const int *ranks, const int64_t (*dims)[IR_MAX_RANK], EinsumSpec *s,
                 char *err, size_t cap);

/* The end of a "must be a constant" error: how to fix t when it is a
 * graph input (--const NAME=FILE), else "". */
const char *shape_const_hint(const Tensor *t);

/* Shape and fold functions, referenced from ops.def. */
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp)              \
    int fn(Graph *g, Node *n, Diag *d); int fold(Graph *g, Node *n, Diag *d); int vjp(Vjp *v);
#include "ops.def"
#undef OP

/* Helpers shared by the shape files. */
int shape_fail(Diag *d, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int shape_norm_axis(Diag *d, const Node *n, int64_t axis, int rank,
                    const char *what, int *out);
/* A normalised INTS attribute of axes as a bit mask over rank dims
 * (range and repeats checked). */
int shape_axes_mask(Diag *d, const Node *n, const Attr *a, int rank, unsigned *mask);
int shape_set(Diag *d, const Node *n, Tensor *t, DType dt, int rank,
              const int64_t *dims);

#endif
