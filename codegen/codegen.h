/* codegen.h: from a Plan to per-rank programs and the files that run them.
 *
 * Sections: the per-rank Program, lowered by lower.c through program.c
 * (records and buffers with local shapes), views.c (fusions and views),
 * schedule.c (the overlap schedule) and memplan.c (the liveness-based
 * arena plan); the rank-file emitter (emit_c.c drives it section by
 * section; emit_reshard.c writes the collectives, emit_pipe.c a pipeline
 * stage, emit_main.c what both main()s share, emit_trace.c the trace
 * tables; what differs by target is a table of functions,
 * emit_target_mpi.c and emit_target_cuda.c), emit_ops.c and
 * emit_<family>.c (the kernel call per node, one for both targets),
 * weights.c (per-rank weight shards), output.c (the output folder:
 * sources, Makefile, run.sh, plan files, written completely or not at
 * all).
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

/* ---- program.c, lower.c, views.c, schedule.c, memplan.c ------------------ */

typedef enum BufKind {
    BUF_WEIGHT,   /* initializer or Constant value: this rank's shard, loaded once */
    BUF_INPUT,    /* graph input: this rank's slice, persistent */
    BUF_VALUE,    /* a node's output, in the arena */
    BUF_RESHARD,  /* a step of a reshard (result or packing scratch), in the arena */
    BUF_SCRATCH,  /* a node's scratch (im2col), in the arena */
    BUF_RECV,     /* pipeline: a value another stage sends, in receive slots */
    BUF_ACCUM,    /* --accum: a gradient's (or the loss's) sum over microbatches, live throughout */
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
    /* The buffer whose storage it shares (a Reshape, Squeeze, Unsqueeze,
     * Flatten or Identity result: same bytes, new shape), or -1 (views.c
     * find_aliases). */
    int alias_of;
    /* Bytes into alias_of's storage where this view starts: a ZeRO update's
     * block of its weight (views.c), else 0. */
    int64_t alias_offset;
    /* A training pipeline's stash: a value (or view root) live from one of
     * a microbatch's passes into another, placed in a stash region with a
     * copy per microbatch in flight (memplan.c): 1 + c for model chunk c's
     * (its forward into its backward), 1 + chunks for one crossing chunks;
     * 0 none. A value that is not: in the arena region of its chunk
     * (region), which other chunks' passes do not touch. */
    char stash;
    char region;
    /* A weight an inference program reads only through its GEMM panels
     * (views.c find_packs): the weight file holds the panels alone, and
     * this buffer has no bytes there. */
    char packed_only;
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
    int64_t bucket_bytes;  /* --train: gradient all-reduces in buckets of this size (--bucket-mb) */
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

/* What this rank's program decided for one node (Program.nodes[i], by
 * node index). */
typedef struct ProgramNode {
    int scratch;            /* scratch buffer (Conv's im2col columns), or -1 */
    /* NULL, or per operand then per output: the buffer in the compute type
     * (float32/int64) the kernel reads or writes instead of a
     * float16/bfloat16/int32... one, or -1 (program.c widen_to). */
    int *wide;
    int fused_from;         /* the bias Add fused into this activation, or -1 */
    int fused_bias;         /* that Add's operand that is the bias (0 or 1) */
    /* A MatMul's operand k -> the Transpose whose input it reads as a
     * strided matrix view (CblasTrans or a leading dimension), so the
     * transposed copy is never made, or -1; view_into: a Transpose -> that
     * MatMul, or -1 (views.c find_views). */
    int mm_view[2];
    int view_into;
    /* The packed weight its GEMM reads B from, or -1: on the C target a
     * float32 weight matrix a MatMul or Gemm multiplies by is packed once
     * at start-up into the GEMM kernel's column panels (k_pack_b_f32,
     * templates/kernels.c) (views.c find_packs). */
    int packed_b;
    /* The bias row its packed GEMM starts its accumulators from, or -1: a
     * bias Add that is the MatMul result's only reader is folded in, its
     * output a view of the MatMul's (views.c find_aliases). */
    int gemm_bias;
    char alias;             /* 1: its output is a view of its input's storage; it copies nothing */
    /* --accum: the accumulator of its output 0 (a weight's gradient or the
     * loss), added to over the microbatches, or -1 (schedule.c). */
    int accum_buf;
} ProgramNode;

/* What this rank's program decided for one reshard of the plan
 * (Program.reshards[r], by the plan's reshard index). */
typedef struct ProgramReshard {
    char here;              /* held by this program (its stage's) */
    int buf;                /* buffer of its result */
    StepBufs steps[RESHARD_MAX_STEPS];
    int start_at, wait_at;  /* instruction indices */
    int fused_leader;       /* first member of its fused call, or -1 */
    char bucket;            /* a leader: its call is a bucket of weight gradients (--bucket-mb) */
    int fused_send, fused_recv; /* for a leader: its packed buffers */
    /* 1 when the C target calls its all-reduce blocking: one step, not
     * fused, and waited for before any compute runs (a Megatron partial
     * sum read by the next node). Nothing could overlap it, and MPI's
     * blocking collectives (coll/tuned) beat the non-blocking schedule of
     * the same one (libnbc; 1 MiB over two ranks: 155-190 against 180-220
     * us). Decided once, after fusion (schedule.c). */
    char blocking;
    /* --accum: started (and waited for) in the last microbatch only: it
     * moves an accumulated value, or is waited for in optimizer_step(). */
    char last_micro;
} ProgramReshard;

typedef struct Program {
    Arena arena;
    const Plan *plan;
    const Graph *g;
    int rank;               /* the MPI rank (with a pipeline, in the world mesh) */
    int stage;              /* pipeline stage, or -1 without a pipeline */
    int vrank;              /* its place in the plan's mesh (a pipeline's: microbatch 0) */
    int coords[MESH_MAX_AXES]; /* of vrank in the plan's mesh */
    int cuda;               /* ProgramOptions.cuda */
    Buffer *bufs;
    int nbufs, bufs_cap;
    int *name_set;          /* hash set of buffer names (index + 1), for uniqueness */
    int name_cap;
    int *tensor_buf;        /* Tensor id -> buffer of its produced layout */
    ProgramNode *nodes;     /* by node index */
    ProgramReshard *reshards; /* by the plan's reshard index */
    /* Weights packed for the GEMM kernel, as (k x n, stored transposed or
     * not), in bodies.h's K_PANEL panels. An inference program's are in
     * its weight file (in_file, at offset, placed by memplan.c after the
     * weight they pack), a training program's made at start-up and after
     * each update. */
    struct PackedWeight {
        int buf, trans;
        int64_t k, n;
        char in_file;
        int64_t offset, bytes;
    } *packs;
    int npacks;
    int64_t packed_bytes;   /* the start-up packs' size (a training program's; in-file packs count as weights) */
    Inst *insts;
    int ninsts, insts_cap;
    int prefetch_used;      /* prefetch depth that fit the memory limit */
    int first_update;       /* --train: the first optimizer update's instruction (ninsts: none) */
    int64_t arena_bytes, weight_bytes, input_bytes; /* weight_bytes: the weight file's payload, packs included */
    /* A training pipeline's stash regions (Buffer.stash - 1): one copy's
     * bytes and the copies (microbatches in flight); input_bytes counts
     * every copy. nstash: chunks, plus one if values cross chunks. */
    int64_t stash_bytes[PIPE_MAX_STAGES + 1];
    int stash_slots[PIPE_MAX_STAGES + 1];
    int nstash;
} Program;

/* lower.c: this rank's program (the passes below, in order), or NULL with
 * a diagnostic (over --mem-limit, sizes past 64 bits). */
Program *program_build(const Plan *p, int rank, const ProgramOptions *opt, Diag *d);
void program_free(Program *prog);

/* program.c: a new Program for `rank` with its buffers. */
Program *program_new(const Plan *p, int rank, const ProgramOptions *opt);
/* A new buffer (name made unique from base), its index. */
int program_buf_new(Program *pr, const char *base, const Tensor *t, BufKind kind, DType dt, int rank,
                    const int64_t *dims, const Sharding *layout);
void program_inst_add(Program *pr, InstKind k, const Node *n, int reshard);
/* A training pipeline's passes, in the order a program's instructions
 * run them: chunk c's forward is c, its backward chunks + (chunks - 1 -
 * c), the optimizer step 2 chunks (chunks is 1 but for the interleaved
 * schedule). program_pass: node n's; program_inst_pass: instruction i's
 * (a start or wait: its node's; one of no node: the program's start or
 * end). 0 without a training pipeline. */
int program_pass(const Program *pr, const Node *n);
int program_inst_pass(const Program *pr, int i);
/* Does this rank's program hold graph output t (without a pipeline,
 * every rank; inferring, the last stage; training, the stage making it)? */
int program_holds_output(const Program *pr, const Tensor *t);
/* Does this rank's program run node n (its pipeline stage's)? */
int program_runs(const Program *pr, const Node *n);
/* Buffer a node reads for operand k (the reshard result when it has one). */
int program_operand_buf(const Program *prog, const Node *n, int k);
/* Buffer holding graph output i, gathered (the reshard result when it has one). */
int program_output_buf(const Program *prog, int i);
/* Does the program train (has it optimizer updates, from --train)? */
int program_trains(const Program *pr);
/* The graph output that is the loss (Graph.loss), or -1. */
int program_loss_output(const Program *pr);
/* Identifies the group (the coordinates outside it), for MPI_Comm_split. */
int program_group_color(const Program *prog, unsigned axes);

/* views.c: bias fusions, transposes read as views and packed GEMM weights
 * (before the schedule; packs 0: none); folded GEMM biases and
 * shape-only aliases (after it). */
void program_fold_views(Program *pr, int packs);
void program_fold_aliases(Program *pr);

/* schedule.c: the instruction list, fused all-reduces (fuse_bytes 0: none),
 * gradient buckets and the C target's blocking all-reduces. */
void program_schedule(Program *pr, int prefetch, int64_t fuse_bytes, int64_t bucket_bytes);
/* The cost model over this program's schedule (its starts and waits, as
 * the generated code runs them), per pass. */
typedef struct ProgramEstimate {
    double compute_s, comm_s, exposed_s, step_s;
} ProgramEstimate;
void program_estimate(const Program *pr, ProgramEstimate *e);

/* memplan.c: buffer lifetimes, weight offsets and the arena layout; -1
 * with a diagnostic when a size overflows. */
int program_plan_memory(Program *pr, Diag *d);
/* What this program's memory holds (after program_plan_memory), split as
 * partition.h's MemorySplit says. */
void program_memory_split(const Program *pr, MemorySplit *m);
/* What a C rank holds at its peak, as its VmHWM reads it: the weight file
 * (mapped; packs included), the arena, the inputs (and a pipeline's slots
 * and stashes), GEMM panels packed at start-up, and the runtime itself
 * (program_runtime_bytes: the binary, OpenMPI, OpenBLAS, the GEMM
 * kernel's block buffer and the stack; measured on a rank of a 150 KB
 * model, OpenMPI 4.1 over shared memory: 12.6 MiB alone, 13.0 with 2
 * ranks, 15.9-16.2 with 4 and with 8, where its shared-memory transport
 * maps more). --out adds the gathered outputs on rank 0 after the run. */
int64_t program_runtime_bytes(int world);
int64_t program_rank_bytes(const Program *pr);

/* ---- emit_c.c: the rank-file driver ------------------------------------- */

/* A target's table (emit_target_mpi.c, emit_target_cuda.c), below. */
typedef struct EmitTarget EmitTarget;
typedef struct MoeMove MoeMove; /* emit_moe.c */
extern const EmitTarget emit_target_mpi;   /* rank<k>.c: C kernels, MPI */
extern const EmitTarget emit_target_cuda;  /* rank<k>.cu: CUDA kernels, NCCL, cuBLAS */

typedef struct EmitOptions {
    const char *command_line;
    const char *model;
    const EmitTarget *target;
    int tf32;                  /* CUDA: let cuBLAS use TF32 */
    /* This rank's weights.rank<k>.bin, packed once by output.c: main()
     * checks the file against both at load. */
    int64_t weight_bytes;
    uint64_t weight_checksum;
} EmitOptions;

/* Writes rank<k>.c (or .cu) for one program, section by section: front
 * matter, templates, buffers, communicators, the trace tables, forward(),
 * main(). Returns -1 (with diagnostics) when an instruction cannot be
 * written for this target. */
int emit_rank(const Program *prog, const EmitOptions *opt, FILE *f, Diag *d);

/* ---- emit_trace.c ------------------------------------------------------- */

/* The rt_nodes[] and rt_comms[] tables, filled while forward() is emitted
 * (each call returns the entry's index) and written before it. */
typedef struct TraceTables {
    FILE *nodes, *comms;       /* memstreams over the texts below */
    char *nodes_text, *comms_text;
    size_t nodes_len, comms_len;
    int nnodes, ncomms;
} TraceTables;

void trace_tables_begin(TraceTables *tt);
int trace_node(TraceTables *tt, const Node *n, const int64_t *dims, int rank);
int trace_comm(TraceTables *tt, const char *what, const char *kind, const char *tensor, const char *axes,
               const char *overlaps, long long bytes);
/* The nodes the schedule runs between start instruction `from` and its wait. */
void trace_overlaps(const Program *pr, int from, char *buf, size_t cap);
/* Writes both tables and frees them. */
void trace_tables_write(TraceTables *tt, FILE *f);

/* ---- the emitter's state, shared by the emit_*.c files below ----------- */

/* One rank file being written: what emit_rank() and the files it calls
 * share, passed along instead of kept in file-level variables. */
typedef struct Emitter {
    const Program *pr;
    const EmitTarget *t;
    const EmitOptions *opt;
    FILE *f;                /* the section being written (forward() goes to memory first) */
    Diag *d;
    int rc;                 /* -1 once an instruction could not be written */
    int *comm_of;           /* reshard -> rt_comms[] entry of its start (or fused call), -1 before it */
    int *fused_next;        /* reshard -> next member of its fused call, -1 after the last */
    TraceTables trace;
} Emitter;

/* One collective call (a reshard step, or a fused all-reduce), as the
 * target writes it. */
typedef struct CollCall {
    CollKind kind;          /* all-reduce, all-gather, reduce-scatter or all-to-all */
    int r;                  /* the reshard (a fused call's leader): names its request or events */
    int comm_id;            /* its rt_comms[] entry */
    const char *comm;       /* its communicator, comm_<axes> */
    const char *send, *recv;
    int64_t count;          /* elements: all-reduce all, all-gather sent per rank,
                             * reduce-scatter received, all-to-all per peer */
    DType dtype;
    int peers;              /* all-to-all: the group's size */
    int blocking;           /* all-reduce called blocking (Program.blocking) */
} CollCall;

/* A communicator for one ordered group of mesh axes, as init_comms()
 * splits it: this rank's color (the coordinates outside the group) and key
 * (its place inside). */
typedef struct CommGroup {
    char name[256];         /* comm_<axes> */
    int color, key;
} CommGroup;

/* A value that crosses pipeline stages (emit_pipe.c). */
typedef struct PipeLink {
    const Tensor *t;
    int buf;                      /* this program's buffer of the value */
    int tag;
    int npeer;
    int peer[PIPE_MAX_STAGES];    /* world ranks: the receivers (a send) or the sender (a receive) */
    int peer_stage[PIPE_MAX_STAGES];
    int comm;                     /* its rt_comms[] entry (emit_pipe_forward) */
} PipeLink;

/* What differs between the targets, one table each. Every hook writes to
 * e->f; the driver and emit_reshard.c / emit_pipe.c write what the two
 * share around the calls. */
struct EmitTarget {
    const char *ext;              /* rank<k>.<ext> */
    int kernels;                  /* which file of each template pair it pastes: 0 C, 1 CUDA */
    const char *comm_type;        /* a communicator's C type */
    int traces_copies;            /* local steps and (un)packing show in traces (rt_copy) */
    /* front matter: #defines after RANK and WORLD */
    void (*defines)(Emitter *e);
    /* communicators: reshard r's request or events; init_comms()'s body */
    void (*reshard_decl)(Emitter *e, int r);
    void (*init_comms)(Emitter *e, const CommGroup *groups, int n);
    /* collectives: NULL, or refuses a reshard the target cannot run (-1
     * and a diagnostic); the call with its start ritual; the wait */
    int (*reshard_check)(Emitter *e, int r);
    void (*collective)(Emitter *e, const CollCall *c);
    void (*wait)(Emitter *e, int r, int comm_id, int blocking);
    /* NULL (the fixed-size all-to-all), or an MoE layer's counts-based
     * all-to-all (emit_moe_move) of step 0 of reshard r: its start (counts,
     * pack, call) and its finish (wait, unpack) */
    void (*moe_move)(Emitter *e, int r, const MoeMove *m, int comm_id, int finish);
    /* pipeline: a link's slot declarations and pipe_init() part, an
     * output's buffer; a microbatch's receives; waiting for one; a send
     * (after its comment); a slot read; the last sends; keeping an output */
    void (*pipe_decl)(Emitter *e, const PipeLink *k, int sending);
    void (*pipe_init)(Emitter *e, const PipeLink *k, int sending);
    void (*pipe_init_output)(Emitter *e, int i, const Buffer *b);
    void (*pipe_recvs)(Emitter *e, const PipeLink *rcv, int nr, const char *mb, const char *slot,
                       const char *indent);
    void (*pipe_wait_recv)(Emitter *e, const PipeLink *k);
    void (*pipe_send)(Emitter *e, const PipeLink *k);
    void (*pipe_read_done)(Emitter *e, const PipeLink *k);
    void (*pipe_wait_sends)(Emitter *e, const PipeLink *k);
    void (*pipe_keep_output)(Emitter *e, int i, const Buffer *b);
    /* main(): where an input block goes once read; main() itself, after
     * WEIGHT_BYTES, WEIGHT_CHECKSUM and the model's names */
    void (*input_block)(Emitter *e, const char *indent, const char *dst, const Buffer *b);
    /* a training step's batch (or a decoding step's inputs): `block`
     * (host) into input buffer b */
    void (*input_refresh)(Emitter *e, const Buffer *b);
    /* code leaving `void *whole`: output i on the host of rank 0 (NULL
     * elsewhere), every rank running it after forward(); returns 1 when
     * whole is a copy the code after it frees (compile --decode's logits) */
    int (*output_whole)(Emitter *e, int i, const char *indent);
    void (*main)(Emitter *e);
};

/* ---- emit_reshard.c ----------------------------------------------------- */

/* Allocates (and frees) the emitter's per-reshard tables. */
void emit_reshards_begin(Emitter *e);
void emit_reshards_end(Emitter *e);
/* One instruction of forward(): a node, or a reshard's start or wait. */
void emit_inst(Emitter *e, int i);
/* Step j of reshard r: the ordered mesh axes it works over (the group's
 * order is the blocks' order), and the communicator of those axes. */
int emit_step_axes(const Program *pr, int r, int j, unsigned char *out);
void emit_comm_name(const Program *pr, const unsigned char *axes, int n, char *buf, size_t cap);
/* Does this rank call a collective of its own for reshard r (a step that
 * is not local, and not a member of another reshard's fused call)? */
int emit_reshard_calls(const Program *pr, int r);

/* ---- emit_pipe.c -------------------------------------------------------- */

/* A pipeline stage's send and receive slots, per-microbatch inputs and
 * outputs, and pipe_init() that allocates them. */
void emit_pipe_decls(Emitter *e);
/* forward(): the stage once per microbatch, with its sends and receives. */
int emit_pipe_forward(Emitter *e);
/* The comment before each receive (the targets' pipe_recvs). */
void emit_pipe_recv_comment(Emitter *e, const PipeLink *k, const char *mb, const char *indent);
/* main()'s --out: the last stage assembles the outputs on its first rank. */
void emit_pipe_outputs(Emitter *e);
/* One --out branch's body: output i gathered from the ranks of `stage`
 * (nmb microbatch blocks each, from the C expression data) to its first
 * rank, which writes it. */
void emit_pipe_gather_output(Emitter *e, int i, int stage, int nmb, const char *data);
/* The values this rank sends (produced here, read by another stage) or
 * receives, each with its tag (the same on both sides); *n gets the count. */
PipeLink *emit_pipe_links(const Program *pr, int sending, int *n);
/* Checks each link's tag (at most max_tag) and message size (2 GiB), and
 * gives it its rt_comms[] entry (dir, if not NULL, names its direction;
 * overlaps[0] what a send overlaps, [1] a receive); -1 with a diagnostic. */
int emit_pipe_links_register(Emitter *e, PipeLink *snd, int ns, PipeLink *rcv, int nr, int max_tag,
                             const char *(*dir)(const PipeLink *), const char *const overlaps[2]);

/* ---- emit_pipe_train.c --------------------------------------------------- */

/* The name of stash region `stash` (Buffer.stash) in a rank file. */
void emit_stash_name(const Program *pr, int stash, char *buf, size_t cap);
/* A training stage's slots, stash and pipe_init(). */
void emit_pipe_train_decls(Emitter *e);
/* use_slot(), post_receives(), forward(mb), backward(mb), optimizer_step()
 * and train_step() (the schedule). */
int emit_pipe_train(Emitter *e);
/* main()'s --out: each output from the stage holding it. */
void emit_pipe_train_outputs(Emitter *e);

/* ---- emit_main.c -------------------------------------------------------- */

/* model_inputs[] and model_outputs[]: the exact names rt_parse_args checks. */
void emit_model_names(Emitter *e);
/* main()'s writing of graph output i for --out from `data` (its whole
 * value on a replicated layout; else this rank's block, which
 * rt_gather_output assembles on rank 0). */
void emit_output_write(Emitter *e, int i, const char *data);
int emit_output_whole(Emitter *e, int i, const char *data, const char *indent);
/* emit_decode.c: compile --decode's state and loop (C target) */
void emit_decode_state(Emitter *e, FILE *f);
/* emit_moe.c: mixture-of-experts counters and --stats. */
void emit_moe_state(Emitter *e, FILE *f);
/* An MoE layer's all-to-all that moves only filled columns (runtime.c's
 * rt_moe_*): the dispatch buffer to the experts, or their outputs back. */
struct MoeMove {
    int to_experts;         /* 1: dispatch buffer to the experts; 0: expert outputs back */
    int layer;              /* its index in g_moe_moved (two entries a layer) */
    int counts_r;           /* the layer's dispatch reshard: moe_counts_r<counts_r> */
    int p;                  /* the group's size */
    int64_t gl, el, d, cap; /* groups per token-side rank, experts per rank, rows, columns */
    int64_t pairs;          /* (token, expert) pairs per group */
    const char *slots;      /* the dispatch's slots buffer */
};
/* 1 (filling *m) when reshard r is one, on a target that runs them
 * (the C one: EmitTarget.moe_move); else 0 and the fixed-size all-to-all. */
int emit_moe_move(const Program *pr, int r, MoeMove *m);
/* An MoE layer's expert GEMM (n: MatMul) that may run over the filled
 * columns only (moe_counts_r<the result>[1]): the layer's dispatch
 * reshard, *m its move; else -1. */
int emit_moe_gemm(const Program *pr, const Node *n, MoeMove *m);
void emit_moe_init(Emitter *e);
void emit_moe_stats(Emitter *e);
void emit_decode_helpers(Emitter *e);
void emit_decode_main(Emitter *e);
/* main()'s training loop (--steps, --log-every, --save, --save-every),
 * printing the loss on rank 0 from `loss` (an expression of its value as
 * a double); a checkpoint writes `blob` (the weight blob in host memory)
 * and waits for the other ranks with the statement `barrier`; `sync`
 * waits for the device before the timing (steps 2 to N, printed). */
void emit_train_loop(Emitter *e, const char *loss, const char *blob, const char *barrier, const char *sync);
/* Training programs: g_data[], g_batches[] and load_batch(step), which
 * puts batch (step-1) mod k of every --in file of k batches into its input
 * buffer (before main; nothing for other programs). */
void emit_batch_loader(Emitter *e);
/* rt_trace_init(args.trace, ...) in main(), before the warm-up. */
void emit_trace_init(Emitter *e);
/* main()'s reading of this rank's input blocks (in a pipeline, stage 0's
 * block of every microbatch), each stored by the target's input_block. */
void emit_inputs(Emitter *e);

/* ---- emit_ops.c (and the emit_<family>.c files) ------------------------ */

/* Emits the kernel call(s) for one node: its comment block and trace
 * entry, then the emitter named in the emit column of ir/ops.def. */
int emit_node(const Program *prog, const Node *n, TraceTables *trace, FILE *f, Diag *d);
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
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) int emit(const EmitCtx *c, Diag *d);
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

/* Writes dir/weights.rank<r>.bin for each of the nranks programs, tensor
 * by tensor (each weight read once, its file-mapped pages dropped after
 * it); sums[r] is the hash of rank r's payload (the runtime's rt_hash64). */
int weights_write(const Graph *g, Program *const *prs, int nranks, const char *dir, uint64_t *sums, Diag *d);

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
    int64_t *held_bytes;     /* out, per rank (may be NULL): inputs, pipeline slots and stashes */
    int64_t *rank_bytes;     /* out, per rank (may be NULL): program_rank_bytes, the C rank's whole peak */
} CompileOptions;

/* Whether -o DIR may be written: a new path, or an earlier onnx2spmd
 * output (its marker present, nothing but its own files in it, not a
 * symlink, not the model's folder). compile checks again itself; main
 * calls this first so a bad -o fails before any work. */
int codegen_check_out_dir(const char *out_dir, const char *model, Diag *d);
int codegen_compile(const Plan *p, const CompileOptions *opt, Diag *d);

#endif
