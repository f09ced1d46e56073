/* codegen.h: from a Plan to per-rank programs and the files that run them.
 *
 * Sections: program.c (one Program per rank: buffers with local shapes,
 * the overlap schedule, the liveness-based arena plan), emit_c.c and
 * emit_ops.c (the C/MPI emitter), weights.c (per-rank weight shards),
 * output.c (the output folder: sources, Makefile, run.sh, plan files,
 * written completely or not at all).
 */
#ifndef ONNX2SPMD_CODEGEN_H
#define ONNX2SPMD_CODEGEN_H

#include <stdio.h>

#include "../partition/partition.h"

/* Model strings reach generated source only through ir/escape.c: CMT for
 * comments (bounded: a name to ESC_NAME_CAP, a sentence or command line to
 * ESC_TEXT_CAP), esc_c_string for literals. */
#define ESC_NAME_CAP 160
#define ESC_TEXT_CAP 1024
#define CMT(s, buf) esc_c_comment((s), (buf), sizeof(buf))

/* ---- program.c ---------------------------------------------------------- */

typedef enum BufKind {
    BUF_WEIGHT,   /* initializer or Constant value: this rank's shard, loaded once */
    BUF_INPUT,    /* graph input: this rank's slice, persistent */
    BUF_VALUE,    /* a node's output, in the arena */
    BUF_RESHARD,  /* a step of a reshard (result or packing scratch), in the arena */
    BUF_SCRATCH,  /* a node's scratch (im2col), in the arena */
    BUF_RECV,     /* pipeline: a value another stage sends, in receive slots */
} BufKind;

typedef struct Buffer {
    char name[128];         /* C identifier */
    const Tensor *tensor;   /* NULL for scratch */
    BufKind kind;
    DType dtype;
    int rank;
    int64_t dims[IR_MAX_RANK]; /* local */
    Sharding layout;
    int64_t bytes;
    int64_t offset;         /* in the arena (values) or weight blob (weights) */
    int first, last;        /* instruction range it must live over */
} Buffer;

typedef enum InstKind {
    INST_COMPUTE,  /* run node */
    INST_START,    /* start reshard (its first collective), or a fused call */
    INST_WAIT,     /* wait for reshard, finish its remaining steps */
} InstKind;

typedef struct ProgramOptions {
    int prefetch;          /* weight gathers start this many weight-reading nodes ahead */
    int64_t mem_limit;     /* bytes per rank (arena + weights + inputs); 0: none */
    int64_t fuse_bytes;    /* fuse ready-together all-reduces smaller than this; 0: off */
    int cuda;              /* CUDA kernels: float16/bfloat16 MatMuls run as such (cublasGemmEx) */
} ProgramOptions;

typedef struct Inst {
    InstKind kind;
    const Node *node;
    int reshard;
} Inst;

/* Per reshard step: buffers it reads and writes, packing scratch. */
typedef struct StepBufs {
    int in, out, pack, unpack; /* buffer indices, -1 if unused */
} StepBufs;

typedef struct Program {
    Arena arena;
    const Plan *plan;
    const Graph *g;
    int rank;               /* the MPI rank (with a pipeline, in the world mesh) */
    int stage;              /* pipeline stage, or -1 without a pipeline */
    int coords[MESH_MAX_AXES]; /* in the plan's mesh (a pipeline's: microbatch 0) */
    char *here;             /* reshard -> held by this program (its stage's) */
    Buffer *bufs;
    int nbufs, bufs_cap;
    int *name_set;          /* hash set of buffer names (index + 1), for uniqueness */
    int name_cap;
    int *tensor_buf;        /* Tensor id -> buffer of its produced layout */
    int *reshard_buf;       /* reshard -> buffer of its result */
    StepBufs (*steps)[RESHARD_MAX_STEPS];
    int *node_scratch;      /* node index -> scratch buffer or -1 */
    /* node index -> NULL, or per operand then per output: the buffer in
     * the compute type (float32/int64) the kernel reads or writes instead
     * of a float16/bfloat16/int32... one, or -1 (program.c widen_to). */
    int **wide;
    int cuda;               /* ProgramOptions.cuda */
    int *fused_from;        /* node index -> bias Add fused into this activation, or -1 */
    int *fused_bias;        /* node index -> the operand of that Add that is the bias (0 or 1) */
    /* MatMul node index * 2 + operand -> the Transpose whose input it reads
     * as a strided matrix view (CblasTrans or a leading dimension), so the
     * transposed copy is never made, or -1; view_into: Transpose -> that
     * MatMul, or -1 (program.c find_views). */
    int *mm_view, *view_into;
    /* node index -> the packed weight its GEMM reads B from, or -1: on
     * the C target a float32 weight matrix a MatMul or Gemm multiplies by
     * is packed once at start-up into the GEMM kernel's column panels
     * (k_pack_b_f32, templates/kernels.c), as (k x n, stored transposed or
     * not); packed_bytes: their size at the widest panels (program.c
     * find_packs). */
    int *packed_b;
    /* node index -> the bias row its packed GEMM starts its accumulators
     * from, or -1: a bias Add that is the MatMul result's only reader is
     * folded in, its output a view of the MatMul's (program.c
     * find_aliases). */
    int *gemm_bias;
    struct PackedWeight {
        int buf, trans;
        int64_t k, n;
    } *packs;
    int npacks;
    int64_t packed_bytes;
    /* buffer -> the buffer whose storage it shares (a Reshape, Squeeze,
     * Unsqueeze, Flatten or Identity result: same bytes, new shape), or -1
     * (program.c find_aliases); alias_node: node index -> 1 when its
     * output is such a view and the node copies nothing. */
    int *alias_of;
    char *alias_node;
    Inst *insts;
    int ninsts, insts_cap;
    int *start_at, *wait_at; /* reshard -> instruction index */
    int *fused_leader;      /* reshard -> first member of its fused call, or -1 */
    int *fused_send, *fused_recv; /* leader -> packed buffers */
    /* reshard -> 1 when the C target calls its all-reduce blocking: one
     * step, not fused, and waited for before any compute runs (a Megatron
     * partial sum read by the next node). Nothing could overlap it, and
     * MPI's blocking collectives (coll/tuned) beat the non-blocking
     * schedule of the same one (libnbc; 1 MiB over two ranks: 155-190
     * against 180-220 us). Decided once, after fusion (program.c). */
    char *blocking;
    int prefetch_used;      /* prefetch depth that fit the memory limit */
    int64_t arena_bytes, weight_bytes, input_bytes;
} Program;

Program *program_build(const Plan *p, int rank, const ProgramOptions *opt, Diag *d);
void program_free(Program *prog);

/* The cost model over this program's schedule (its starts and waits, as
 * the generated code runs them), per pass. */
typedef struct ProgramEstimate {
    double compute_s, comm_s, exposed_s, step_s;
} ProgramEstimate;
void program_estimate(const Program *pr, ProgramEstimate *e);
/* Does this rank's program run node n (its pipeline stage's)? */
int program_runs(const Program *pr, const Node *n);
/* Buffer a node reads for operand k (the reshard result when it has one). */
int program_operand_buf(const Program *prog, const Node *n, int k);
/* Buffer holding graph output i, gathered (the reshard result when it has one). */
int program_output_buf(const Program *prog, int i);
/* Coordinate of this rank within a group of axes ordered as listed. */
int program_group_key(const Program *prog, const unsigned char *axes, int naxes);
/* Identifies the group (the coordinates outside it), for MPI_Comm_split. */
int program_group_color(const Program *prog, unsigned axes);

/* ---- emit_c.c ----------------------------------------------------------- */

typedef struct EmitOptions {
    const char *command_line;
    const char *model;
    int cuda;              /* 1: rank<k>.cu for CUDA + NCCL + cuBLAS */
    int tf32;              /* CUDA: let cuBLAS use TF32 */
} EmitOptions;

/* model_inputs[] and model_outputs[]: the exact names rt_parse_args checks. */
void emit_model_names(const Program *pr, FILE *f);
/* main()'s writing of graph output i for --out from `data` (its whole
 * value on a replicated layout; else this rank's block, which
 * rt_gather_output assembles on rank 0). */
void emit_output_write(const Program *pr, int i, const char *data, FILE *f);
/* rt_trace_init(args.trace, ...) in main(), before the warm-up. */
void emit_trace_init(const Program *pr, FILE *f);
/* `rt_node = "...";`: the node the runtime names in its errors. */
void emit_rt_node(FILE *f, const char *label);
/* main()'s reading (and, for CUDA, uploading) of this rank's input blocks
 * (in a pipeline, stage 0's block of every microbatch). */
void emit_inputs(const Program *pr, FILE *f, int cuda);
/* Writes rank<k>.c (or .cu) for one program. */
int emit_c(const Program *prog, const EmitOptions *opt, FILE *f, Diag *d);

/* One instruction of forward() (emit_c.c), for emit_pipe.c's loop. */
void emit_c_inst(const Program *pr, int i, FILE *f, Diag *d, int *rc);

/* ---- emit_trace.c ------------------------------------------------------- */

/* The rt_nodes[] and rt_comms[] tables, filled while forward() is emitted
 * (each call returns the entry's index) and written before it. */
void trace_tables_begin(void);
int trace_node(const Node *n, const int64_t *dims, int rank);
int trace_comm(const char *what, const char *kind, const char *tensor, const char *axes, const char *overlaps,
               long long bytes);
/* The nodes the schedule runs between start instruction `from` and its wait. */
void trace_overlaps(const Program *pr, int from, char *buf, size_t cap);
void trace_tables_write(FILE *f);

/* ---- emit_pipe.c -------------------------------------------------------- */

/* A pipeline stage's send and receive slots, per-microbatch inputs and
 * outputs, and pipe_init() that allocates them. */
void emit_pipe_decls(const Program *pr, FILE *f, int cuda);
/* forward(): the stage once per microbatch, with its sends and receives. */
int emit_pipe_forward(const Program *pr, FILE *f, int cuda, Diag *d, int *rc);
/* main()'s --out: the last stage assembles the outputs on its first rank. */
void emit_pipe_outputs(const Program *pr, FILE *f);

/* ---- emit_cuda.c -------------------------------------------------------- */

/* main() of a CUDA rank program: device, streams, cuBLAS, NCCL, weights and
 * inputs uploaded, timed runs with CUDA events, outputs downloaded. */
void emit_cuda_main(const Program *pr, int64_t weight_bytes, uint64_t checksum, FILE *f);

/* ---- emit_ops.c (and the emit_<family>.c files) ------------------------ */

/* Emits the kernel call(s) for one node: its comment block, then the
 * emitter named in the emit column of ir/ops.def. */
int emit_c_node(const Program *prog, const Node *n, FILE *f, Diag *d);
const char *emit_ctype(DType t);
void emit_dims(FILE *f, const int64_t *dims, int rank);

/* What an emitter sees: this rank's program, the node, the output file.
 * An emitter writes calls to k_* functions, which templates/kernels*.c
 * (C) and templates/cuda*.cu (CUDA) both define with the same arguments,
 * so one emitter serves both targets. */
typedef struct EmitCtx {
    const Program *pr;
    const Node *n;
    FILE *f;
} EmitCtx;

/* Emitters, named in the emit column of ir/ops.def; emit_none for an op
 * with no kernel yet. */
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold) int emit(const EmitCtx *c, Diag *d);
#include "../ir/ops.def"
#undef OP
int emit_bias_residual(const EmitCtx *c, Diag *d);
/* k_einsum_*: the most summed-over letters (templates/kernels.c has the same). */
#define K_EINSUM_MAX_SUMMED 16
int emit_bias_act(const EmitCtx *c, Diag *d);

/* Helpers for emitters. */
const Buffer *emit_in(const EmitCtx *c, int k);   /* operand k's buffer (after its reshard), or NULL */
const Buffer *emit_out(const EmitCtx *c, int k);  /* output k's buffer, or NULL */
const char *emit_cf(float v, char *buf);          /* a float as a C literal, buf of 40 */
void emit_strides(const int64_t *dims, int rank, int64_t *st); /* contiguous strides */
int64_t emit_prod(const int64_t *dims, int from, int to);
/* Strides of operand b broadcast (right-aligned) over output y's dims. */
void emit_bcast_strides(const Buffer *b, const Buffer *y, int64_t *out);
/* `static const int64_t NAME[] = {...};` inside the node's block. */
void emit_arr(const EmitCtx *c, const char *name, const int64_t *v, int n);
/* Is the output partial over an axis where this rank is not coordinate 0?
 * Then a bias inside the node must be skipped (it would be summed n times). */
int emit_skip_bias(const EmitCtx *c);
int emit_norm_axis(int64_t axis, int rank);

/* ---- weights.c ---------------------------------------------------------- */

/* Lays out this rank's weight shards (offsets, 64-byte aligned) and
 * returns the blob; *checksum is FNV-1a 64 over it. */
unsigned char *weights_pack(const Program *prog, int64_t *bytes, uint64_t *checksum, Diag *d);
uint64_t weights_fnv1a(const unsigned char *p, size_t n);

/* ---- headers.c ---------------------------------------------------------- */

/* The output folder's shared headers, which every rank file includes. */
#define HEADER_RUNTIME "o2s_runtime.h"
#define HEADER_KERNELS_C "o2s_kernels.h"
#define HEADER_KERNELS_CUDA "o2s_kernels.cuh"

/* The kernel families (bit 1 math ... bit 7 linalg; bit 0 core) whose ops
 * this rank runs; the union over ranks goes to headers_write. */
unsigned headers_families(const Program *prog);
/* Writes o2s_runtime.h and the target's kernels header into dir. */
int headers_write(const char *dir, int cuda, unsigned families, Diag *d);

/* ---- output.c ----------------------------------------------------------- */

typedef struct CompileOptions {
    ProgramOptions prog;
    const char *out_dir;
    const char *target;      /* "c" or "cuda" */
    int tf32;
    const char *cuda_arch;   /* default sm_90 */
    const char *command_line;
    const char *model;
    int64_t *arena_bytes;    /* out, per rank (may be NULL) */
    int64_t *weight_bytes;   /* out, per rank (may be NULL) */
} CompileOptions;

/* Whether -o DIR may be written: a new path, or an earlier onnx2spmd
 * output (its marker present, nothing but its own files in it, not a
 * symlink, not the model's folder). compile checks again itself; main
 * calls this first so a bad -o fails before any work. */
int codegen_check_out_dir(const char *out_dir, const char *model, Diag *d);
int codegen_compile(const Plan *p, const CompileOptions *opt, Diag *d);

#endif
