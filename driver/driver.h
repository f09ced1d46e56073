/* driver.h: the stages from a model file to a plan or a compiled folder.
 *
 * main.c parses flags into DriverOptions and calls, in order:
 *
 *   driver_check_output   compile only: -o is new or an earlier output,
 *                         checked before any work;
 *   driver_plan           mesh and links, pipeline axis, load, annotate,
 *                         propagate or --auto (refitted under --mem-limit),
 *                         --shard-weights, pipeline stages;
 *   driver_measure        plan only: the most memory any rank's program
 *                         holds, from the programs' own memory plan (with
 *                         --train, also under each --recompute mode);
 *   driver_emit           compile only: every rank's program, written.
 *
 * Policy lives here, not in main.c: CPU ranks default to shared-memory
 * links, an axis named pp is the pipeline axis unless one is named, and
 * --auto is solved again with a lower bound while a rank's real program
 * (reshard buffers, scratch, alignment) overshoots --mem-limit, and
 * --auto --train without --zero takes the first ZeRO stage that fits.
 */
#ifndef ONNX2SPMD_DRIVER_H
#define ONNX2SPMD_DRIVER_H

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "partition/partition.h"

typedef struct DriverOptions {
    const char *model;             /* the .onnx file */
    FrontendOptions frontend;      /* --dim, --const */
    const char *mesh;              /* --mesh dp=2,tp=4 (required) */
    const char *links;             /* --link, or NULL */
    const char *device;            /* --device preset, or NULL */
    const char *const *shards;     /* --shard flags, in order */
    int nshards;
    const char *shardings;         /* --shardings FILE, or NULL */
    const char *shard_weights;     /* --shard-weights AXIS, or NULL */
    int use_auto;                  /* --auto */
    AutoOptions autoopt;           /* its mem_limit is prog.mem_limit */
    ProgramOptions prog;           /* --prefetch, --mem-limit, --fuse-bytes */
    const char *pipeline_axis;     /* --pipeline-axis, or NULL (pp if there is one) */
    const char *stage_boundaries;  /* --stage-boundaries, or NULL */
    int microbatches;              /* --microbatches (1: none) */
    PipeSchedule schedule;         /* --schedule (training pipelines; default 1f1b) */
    int schedule_set;              /* --schedule given */
    int virtual_stages;            /* --virtual-stages (0: not given) */
    int train;                     /* --train */
    int zero;                      /* --zero 0..3 */
    int zero_set;                  /* --zero given (or implied by --shard-weights): --auto does not choose it */
    int report_trials;             /* plan --train: every ZeRO stage and --recompute mode, for the report */
    const char *zero_axis;         /* --zero-axis, or NULL: dp */
    TrainOptions trainopt;         /* --loss, --optimizer, --lr, ... */
    int decode;                    /* --decode */
    DecodeOptions decodeopt;       /* --max-seq, --generate, --kv-cache */
    MoeOptions moeopt;             /* --capacity-factor, --moe-groups (0: the mesh's ranks) */
    const char *moe_flag;          /* the first of them given, or NULL */
    /* compile only */
    const char *target;            /* "c" or "cuda" */
    const char *cuda_arch;
    int tf32;
    const char *out_dir;           /* -o */
    const char *command_line;      /* as typed, for the generated front matter */
} DriverOptions;

/* What the stages produce. driver_free releases all of it. */
typedef struct Driven {
    Graph *graph;
    Plan *plan;
    const char *out_dir;           /* -o without trailing slashes */
    int nranks;                    /* every rank of the world mesh */
    int64_t program_bytes;         /* driver_measure: most any rank's program holds */
    MemorySplit split;             /* driver_measure: that rank's memory, by what it holds */
    int zero;                      /* the ZeRO stage planned (--zero, or --auto's choice) */
    ZeroTrial zero_trials[4];      /* --auto --train without --zero: the stages tried */
    int nzero_trials, zero_chosen;
    RecomputeTrial recompute[3];   /* plan --train: each --recompute mode */
    int nrecompute, recompute_chosen;
    int64_t *arena_bytes;          /* driver_emit: per rank */
    int64_t *weight_bytes;         /* driver_emit: per rank */
    int64_t *held_bytes;           /* driver_emit: per rank, inputs, pipeline slots and stashes */
    int64_t *rank_bytes;           /* driver_emit: per rank, all a C rank holds at its peak */
    Arena arena;                   /* annotations and small strings */
    AnnotationList ann;
} Driven;

int driver_check_output(const DriverOptions *o, Driven *r, Diag *d);
int driver_plan(const DriverOptions *o, Driven *r, Diag *d);
int driver_measure(const DriverOptions *o, Driven *r, Diag *d);
int driver_emit(const DriverOptions *o, Driven *r, Diag *d);
void driver_free(Driven *r);

#endif
