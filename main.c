/* main.c: the onnx2spmd command line.
 *
 *   onnx2spmd inspect MODEL [--nodes] [--weights] [--json] [--dim NAME=VALUE]...
 *   onnx2spmd plan MODEL --mesh dp=2,tp=4 [--shard NAME=SPEC]... [--json]
 *   onnx2spmd compile MODEL --mesh ... [--shard ...] --target c -o DIR
 *
 * Reads as the list of stages: parse flags, load the model (frontend:
 * decode, check, normalise, infer shapes), then the subcommand's report.
 * Every diagnostic is printed here as one line "onnx2spmd: error: ...";
 * bad input or usage exits 2.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "codegen/codegen.h"
#include "partition/partition.h"
#include "driver/driver.h"

enum { EXIT_OK = 0, EXIT_BAD_INPUT = 2 };

static const char usage_text[] =
    "usage: onnx2spmd COMMAND [OPTIONS] MODEL\n"
    "\n"
    "Ahead-of-time compiler from ONNX models to per-rank SPMD C/CUDA programs.\n"
    "\n"
    "commands:\n"
    "  inspect MODEL     print the model's IR: opsets, inputs and outputs,\n"
    "                    node counts by op, parameters\n"
    "  plan MODEL        lay tensors out over a mesh and list the collectives\n"
    "  compile MODEL     plan, then write per-rank programs to -o DIR\n"
    "\n"
    "inspect options:\n"
    "  --nodes           also list every node with its output shapes\n"
    "  --weights         also list every initializer with its shape, dtype, bytes\n"
    "                    and the nodes that read it, as NODE:INPUT (for --shard)\n"
    "  --json            print JSON instead of text\n"
    "  --dim NAME=VALUE  bind the symbolic input dim NAME (repeatable)\n"
    "  --const NAME=FILE fix graph input NAME to the value in FILE (.npy or a\n"
    "                    TensorProto .pb): it becomes a constant (repeatable)\n"
    "\n"
    "plan options:\n"
    "  --mesh AXES       named mesh axes, row-major, e.g. dp=2,tp=4 (required)\n"
    "  --link A=CLASS    link class per axis: nvlink, pcie, ib, ethernet, shm\n"
    "                    (comma-separated; default nvlink, shm with --device cpu)\n"
    "  --device NAME     device preset for the cost model: H100, H200, A100, cpu\n"
    "  --shard N=SPEC    annotate tensor N, e.g. W1=[_,tp], x=[dp,_], y=[dp+tp,_]\n"
    "                    (repeatable); N may also be NODE:INPUT, the tensor read at\n"
    "                    that input by every node NODE matches (a glob, '*' crossing\n"
    "                    '/'), e.g. '*/q_proj/MatMul:1=[_,tp]'; an exact tensor name wins\n"
    "  --shardings FILE  annotations, one NAME=SPEC per line, # comments\n"
    "  --json            print the plan as JSON\n"
    "  --explain TENSOR  print the chain of decisions behind one tensor\n"
    "  --dot FILE        write a Graphviz drawing of the plan\n"
    "  --auto            choose every layout by an integer program over the cost\n"
    "                    model (annotations, if any, are hard constraints)\n"
    "  --auto-time-limit S  the solver's time limit in seconds (default 30)\n"
    "  --auto-mps FILE   also write --auto's integer program to FILE (MPS)\n"
    "  --auto-solver S   glpk or cbc (default: COIN-OR CBC when libCbcSolver loads, else GLPK)\n"
    "  --auto-tie MODE   identical layers solved once where that is proven exact: auto (from\n"
    "                    3 layers), always (from 2) or off (the whole program)\n"
    "  --pipeline-axis A the mesh axis whose coordinates are pipeline stages\n"
    "                    (default: an axis named pp, if any)\n"
    "  --microbatches M  split the batch into M microbatches, run through the\n"
    "                    stages one after another (GPipe's forward schedule)\n"
    "                    (with --train: M microbatches per step, each the model's batch,\n"
    "                    as --accum M; their gradients summed before one update)\n"
    "  --schedule S      --train's pipeline schedule: 1f1b (default: one forward, one\n"
    "                    backward; at most as many microbatches in flight as stages after\n"
    "                    it), gpipe (every forward, then every backward) or interleaved\n"
    "                    (Megatron-LM's: V model chunks per rank, M a multiple of the stages)\n"
    "  --virtual-stages V  interleaved: V model chunks per rank (default 2)\n"
    "  --stage-boundaries T1,T2,...  end stage k after the node producing Tk\n"
    "                    (default: a search for the fastest balanced split)\n"
    "  --mem-limit N     bytes per rank (suffix K, M, G): --auto keeps weights\n"
    "                    and live values under it; compile backs prefetch off\n"
    "  --dim NAME=VALUE  bind a symbolic input dim (repeatable)\n"
    "  --const NAME=FILE fix a graph input to a file's value (repeatable)\n"
    "\n"
    "decoding (plan and compile): a language model with a key-value cache generates tokens\n"
    "  --decode          the program runs the prompt (--in input_ids=FILE, int64 [batch, T])\n"
    "                    and then --generate tokens (greedy), one position per step, each\n"
    "                    cache kept in place; --out tokens=FILE and --out logits=FILE\n"
    "  --max-seq S       the cache's positions: T + N - 1 at most (required); the past,\n"
    "                    sequence and mask dims are bound from it by their inputs' roles\n"
    "  --generate N      tokens to generate after the prompt (default 16)\n"
    "  --kv-cache P=Q,...  the cache pairs (past input = present output); default: every\n"
    "                    graph output that is a Concat of a graph input and the new position\n"
    "  --sample T        draw each token from softmax(logits / T) instead of the argmax,\n"
    "                    from a splitmix64 stream seeded by --seed N (default 0)\n"
    "\n"
    "mixtures of experts (plan and compile): each block of stacked expert weights gathered\n"
    "by the router's top-k becomes dispatch, per-expert GEMMs and combine (docs/moe.md)\n"
    "  --shard experts=AXIS  split every block's experts over AXIS (tokens split over the\n"
    "                    same axis reach their experts by all-to-all)\n"
    "  --capacity-factor F  drop tokens (GShard): an expert takes ceil(F * k * tokens / E)\n"
    "                    of a group, the rest dropped (default: dropless, none dropped)\n"
    "  --moe-groups G    token groups, each with its own capacity (default: the ranks)\n"
    "\n"
    "compile options: the plan options, and\n"
    "  --target c        C + MPI + OpenBLAS (default)\n"
    "  --target cuda     CUDA + NCCL + cuBLAS, one GPU per rank\n"
    "  --tf32            CUDA: let cuBLAS use TF32 (faster, not bit-close to goldens)\n"
    "  --cuda-arch SM    CUDA: nvcc -arch for the Makefile (default sm_90)\n"
    "  -o DIR            output folder: rank<k>.c, weights.rank<k>.bin, Makefile,\n"
    "                    run.sh, plan.txt, plan.json (written whole or not at all)\n"
    "  --shard-weights AXIS  store weights the plan replicates over AXIS split\n"
    "                    over it (ZeRO-3/FSDP); gather each before use\n"
    "  --prefetch K      start each weight gather K weight-reading nodes ahead\n"
    "                    (default 1), up to 8K where their planned compute is\n"
    "                    under 4x the gather's time; backs off to fit --mem-limit\n"
    "  --fuse-bytes N    fuse all-reduces on one group that are ready together\n"
    "                    and smaller than N bytes into one call (default 65536; 0 off)\n"
    "\n"
    "\n"
    "training (plan and compile): the program runs training steps instead of a forward pass\n"
    "  --train           differentiate the loss with respect to the float initializers and\n"
    "                    update them: forward(), backward(), optimizer_step() per step;\n"
    "                    the rank program takes --steps N and --log-every K\n"
    "  --loss NAME       the scalar output to minimise (default: the only scalar output)\n"
    "  --frozen A,B      initializers that stay fixed    --trainable A,B  only these train\n"
    "  --optimizer O     sgd (default) or adamw, PyTorch's forms\n"
    "  --lr X            learning rate (default 0.001)  --momentum X (SGD, default 0)\n"
    "  --weight-decay X  SGD: added to the gradient; AdamW: decoupled (default 0)\n"
    "  --betas B1,B2     AdamW (default 0.9,0.999)      --eps X (AdamW, default 1e-8)\n"
    "  --clip-norm X     scale the gradients to global norm at most X (default: off)\n"
    "  --lr-schedule S   constant (default) or cosine, after --warmup-steps N of linear warm-up,\n"
    "                    reaching 0 at --total-steps M (Hugging Face's step counting)\n"
    "  --recompute M     none (default: keep what backward reads), selective (compute the\n"
    "                    elementwise ops, norms and softmax again in backward, keep GEMM\n"
    "                    outputs) or full (compute every forward value again from the inputs)\n"
    "  --precision P     fp32 (default), bf16 or fp16: forward and backward compute in the\n"
    "                    16-bit type as torch.autocast (GEMMs in it; softmax, norms,\n"
    "                    reductions and losses in float32); float32 master weights and\n"
    "                    optimizer state. fp16 scales the loss dynamically (GradScaler's\n"
    "                    rule: an overflow skips the step and halves the scale, 2000 clean\n"
    "                    steps double it), from --loss-scale X (default 65536)\n"
    "  --accum K         accumulate the gradients of K microbatches (each the model's\n"
    "                    batch) per optimizer step; the loss and gradients are their mean\n"
    "  --bucket-mb N     all-reduce data-parallel gradients in buckets of N MiB, each\n"
    "                    started when its last gradient is computed (default 25, as DDP)\n"
    "  --zero N          1: optimizer state split over the data-parallel axis (gradients\n"
    "                    reduce-scattered, each rank updates its block, blocks all-gathered);\n"
    "                    2: also the gradient's full copy freed as soon as it is reduced;\n"
    "                    3: also the weights stored split, gathered in forward and backward\n"
    "                    (with --auto and no --zero: the first stage whose programs fit\n"
    "                    --mem-limit; plan shows every stage's memory)\n"
    "  --zero-axis A     the data-parallel axis --zero splits over (default dp)\n"
    "\n"
    "  -h, --help        print this help and exit\n"
    "  -V, --version     print the version and exit\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "onnx2spmd: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see onnx2spmd --help)\n");
    return EXIT_BAD_INPUT;
}

static void print_diags(const Diag *d)
{
    for (int i = 0; i < d->n; i++)
        fprintf(stderr, "onnx2spmd: error: %s\n", d->msgs[i]);
}

/* ---- inspect ------------------------------------------------------------ */

typedef struct Summary {
    int op_count[OP_COUNT];
    int64_t params, param_bytes;
    int ninit;
} Summary;

static void summarize(const Graph *g, Summary *s)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < g->nnodes; i++)
        s->op_count[g->nodes[i]->op]++;
    /* Parameters: initializers some node still reads (constants folded
     * into attributes by normalisation, such as Reshape shapes, are not). */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->is_initializer && t->nconsumers) {
            s->params += tensor_numel(t);
            s->param_bytes += t->nbytes;
            s->ninit++;
        }
    }
}

static void inspect_text(const Graph *g, int nodes)
{
    Summary s;
    char buf[256];
    summarize(g, &s);
    char path[4096];
    esc_term(g->path, path, sizeof path);
    printf("model      %s\n", path);
    printf("ir_version %lld\n", (long long)g->ir_version);
    printf("opsets    ");
    for (int i = 0; i < g->nopsets; i++)
        printf(" %s:%lld", *g->opsets[i].domain ? g->opsets[i].domain : "ai.onnx",
               (long long)g->opsets[i].version);
    char prod[256];
    esc_term(g->producer, prod, sizeof prod);
    printf("\nproducer   %s\n", *prod ? prod : "-");
    printf("\ninputs\n");
    for (int i = 0; i < g->ninputs; i++)
        printf("  %-24s %-8s %s\n", g->inputs[i]->label, dtype_name(g->inputs[i]->dtype),
               shape_str(g->inputs[i]->dims, g->inputs[i]->rank, buf, sizeof buf));
    printf("outputs\n");
    for (int i = 0; i < g->noutputs; i++)
        printf("  %-24s %-8s %s\n", g->outputs[i]->label, dtype_name(g->outputs[i]->dtype),
               shape_str(g->outputs[i]->dims, g->outputs[i]->rank, buf, sizeof buf));
    printf("\nnodes      %d", g->nnodes);
    if (g->nfolded)
        printf(" (and %d folded at import: shape arithmetic on constants)", g->nfolded);
    if (g->nfused)
        printf(" (and %d fused into Gelu nodes: an exporter's arithmetic around Erf or Tanh)", g->nfused);
    printf("\n");
    for (int op = 0; op < OP_COUNT; op++)
        if (s.op_count[op] && op != OP_UNSUPPORTED)
            printf("  %-24s %d\n", op_table[op].name, s.op_count[op]);
    if (g->nunsupported) {
        /* Each unsupported op type once, with its count, in order of use. */
        const Node **un = malloc((size_t)g->nunsupported * sizeof(Node *));
        int nu = 0;
        for (int i = 0; i < g->nnodes && un; i++)
            if (g->nodes[i]->op == OP_UNSUPPORTED)
                un[nu++] = g->nodes[i];
        for (int i = 0; i < nu; i++) {
            const Node *n = un[i];
            int seen = 0, count = 0;
            for (int j = 0; j < nu; j++)
                if (strcmp(node_op_name(un[j]), node_op_name(n)) == 0) {
                    seen |= j < i;
                    count++;
                }
            if (!seen) {
                char op[160];
                esc_term(node_op_name(n), op, sizeof op);
                printf("  %-24s %d  (not supported)\n", op, count);
            }
        }
        free(un);
        printf("unsupported: %d node(s); plan and compile refuse this model, and shapes after these nodes are "
               "unknown (?)\n", g->nunsupported);
    }
    printf("\nparameters %lld in %d initializers, %lld bytes (%.2f MiB)\n",
           (long long)s.params, s.ninit, (long long)s.param_bytes,
           (double)s.param_bytes / (1024.0 * 1024.0));
    if (!nodes)
        return;
    printf("\n%-5s %-32s %-20s %s\n", "#", "node", "op", "inputs -> outputs");
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        char op[160];
        esc_term(node_op_name(n), op, sizeof op);
        if (n->op == OP_UNSUPPORTED)
            strncat(op, " (!)", sizeof op - strlen(op) - 1);
        printf("%-5d %-32s %-20s", i, n->label, op);
        /* Inputs by name, so exporter weight names (onnx::MatMul_425) can be
         * found for --shard. */
        for (int k = 0; k < n->ninputs; k++)
            printf("%s%s", k ? ", " : " ", n->inputs[k] ? n->inputs[k]->label : "(none)");
        printf(" ->");
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k])
                printf(" %s%s %s", k ? ", " : "", n->outputs[k]->label,
                       shape_str(n->outputs[k]->dims, n->outputs[k]->rank, buf, sizeof buf));
        printf("\n");
    }
}

/* inspect --weights: every initializer with what --shard needs to name
 * it by structure rather than by an exporter's name (onnx::MatMul_5091):
 * the nodes and inputs that read it. */
static void inspect_weights_text(const Graph *g)
{
    char buf[256];
    printf("\n%-32s %-8s %-16s %12s  %s\n", "weight", "dtype", "shape", "bytes", "read by (NODE:INPUT)");
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (!t->is_initializer || t->folded) /* folded: computed here from shapes, not the model's */
            continue;
        printf("%-32s %-8s %-16s %12lld ", t->label, dtype_name(t->dtype),
               shape_str(t->dims, t->rank, buf, sizeof buf), (long long)t->nbytes);
        /* Each (node, input) that reads t, in node order (consumers
         * lists a node once); a node reading it twice (x * x) shows both. */
        int first = 1;
        for (int j = 0; j < t->nconsumers; j++)
            for (int k = 0; k < t->consumers[j]->ninputs; k++)
                if (t->consumers[j]->inputs[k] == t) {
                    printf("%s%s:%d", first ? " " : ", ", t->consumers[j]->label, k);
                    first = 0;
                }
        if (first)
            printf(" -");
        printf("\n");
    }
}

static void json_values(FILE *f, const char *key, Tensor *const *ts, int n)
{
    fprintf(f, "  \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_write_str(f, ts[i]->name);
        fprintf(f, ", \"dtype\": \"%s\", \"shape\": ", dtype_name(ts[i]->dtype));
        json_write_dims(f, ts[i]->dims, ts[i]->rank);
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n");
}

static void inspect_json(const Graph *g, int nodes, int weights)
{
    Summary s;
    summarize(g, &s);
    printf("{\n  \"model\": ");
    json_write_str(stdout, g->path);
    printf(",\n  \"ir_version\": %lld,\n  \"opset\": %lld,\n  \"opset_imports\": [",
           (long long)g->ir_version, (long long)g->opset);
    for (int i = 0; i < g->nopsets; i++) {
        printf("%s{\"domain\": ", i ? ", " : "");
        json_write_str(stdout, g->opsets[i].domain);
        printf(", \"version\": %lld}", (long long)g->opsets[i].version);
    }
    printf("],\n  \"producer\": ");
    json_write_str(stdout, g->producer);
    printf(",\n");
    json_values(stdout, "inputs", g->inputs, g->ninputs);
    json_values(stdout, "outputs", g->outputs, g->noutputs);
    printf("  \"node_count\": %d,\n  \"folded_node_count\": %d,\n  \"fused_node_count\": %d,\n"
           "  \"unsupported_node_count\": %d,\n  \"ops\": {", g->nnodes, g->nfolded, g->nfused, g->nunsupported);
    for (int op = 0, first = 1; op < OP_COUNT; op++)
        if (s.op_count[op] && op != OP_UNSUPPORTED) {
            printf("%s\"%s\": %d", first ? "" : ", ", op_table[op].name, s.op_count[op]);
            first = 0;
        }
    printf("},\n  \"parameters\": %lld,\n  \"parameter_bytes\": %lld,\n  \"initializers\": %d",
           (long long)s.params, (long long)s.param_bytes, s.ninit);
    if (nodes) {
        printf(",\n  \"nodes\": [");
        for (int i = 0; i < g->nnodes; i++) {
            const Node *n = g->nodes[i];
            printf("%s\n    {\"name\": ", i ? "," : "");
            json_write_str(stdout, n->name);
            printf(", \"op\": ");
            json_write_str(stdout, node_op_name(n));
            printf(", \"supported\": %s, \"inputs\": [", n->op == OP_UNSUPPORTED ? "false" : "true");
            for (int k = 0; k < n->ninputs; k++) {
                printf("%s", k ? ", " : "");
                if (n->inputs[k])
                    json_write_str(stdout, n->inputs[k]->name);
                else
                    printf("null");
            }
            printf("], \"outputs\": [");
            for (int k = 0, first = 1; k < n->noutputs; k++) {
                if (!n->outputs[k])
                    continue;
                printf("%s{\"name\": ", first ? "" : ", ");
                json_write_str(stdout, n->outputs[k]->name);
                printf(", \"dtype\": \"%s\", \"shape\": ", dtype_name(n->outputs[k]->dtype));
                json_write_dims(stdout, n->outputs[k]->dims, n->outputs[k]->rank);
                printf("}");
                first = 0;
            }
            printf("]}");
        }
        printf("\n  ]");
    }
    if (weights) {
        printf(",\n  \"weights\": [");
        for (int i = 0, nw = 0; i < g->ntensors; i++) {
            const Tensor *t = g->tensors[i];
            if (!t->is_initializer || t->folded)
                continue;
            printf("%s\n    {\"name\": ", nw++ ? "," : "");
            json_write_str(stdout, t->name);
            printf(", \"dtype\": \"%s\", \"shape\": ", dtype_name(t->dtype));
            json_write_dims(stdout, t->dims, t->rank);
            printf(", \"bytes\": %lld, \"readers\": [", (long long)t->nbytes);
            for (int j = 0, first = 1; j < t->nconsumers; j++)
                for (int k = 0; k < t->consumers[j]->ninputs; k++)
                    if (t->consumers[j]->inputs[k] == t) {
                        printf("%s{\"node\": ", first ? "" : ", ");
                        json_write_str(stdout, t->consumers[j]->name);
                        printf(", \"input\": %d}", k);
                        first = 0;
                    }
            printf("]}");
        }
        printf("\n  ]");
    }
    printf("\n}\n");
}

/* ---- flags -------------------------------------------------------------- */

enum { OPT_NODES = 256, OPT_WEIGHTS, OPT_JSON, OPT_DIM, OPT_CONST, OPT_MESH, OPT_LINK, OPT_DEVICE, OPT_SHARD,
       OPT_SHARDINGS, OPT_EXPLAIN, OPT_DOT, OPT_TARGET, OPT_SHARD_WEIGHTS, OPT_PREFETCH, OPT_MEM_LIMIT,
       OPT_FUSE_BYTES, OPT_TF32, OPT_CUDA_ARCH, OPT_AUTO, OPT_AUTO_TIME, OPT_AUTO_MPS,
       OPT_AUTO_SOLVER, OPT_AUTO_TIE, OPT_PIPELINE_AXIS, OPT_MICROBATCHES, OPT_STAGE_BOUNDARIES, OPT_SCHEDULE, OPT_VIRTUAL_STAGES,
       OPT_TRAIN, OPT_LOSS, OPT_FROZEN, OPT_TRAINABLE, OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_WEIGHT_DECAY,
       OPT_BETAS, OPT_EPS, OPT_CLIP_NORM, OPT_BUCKET_MB, OPT_ZERO, OPT_ZERO_AXIS, OPT_LR_SCHEDULE,
       OPT_WARMUP, OPT_TOTAL_STEPS, OPT_ACCUM, OPT_RECOMPUTE, OPT_PRECISION, OPT_LOSS_SCALE,
       OPT_DECODE, OPT_MAX_SEQ, OPT_GENERATE, OPT_KV_CACHE, OPT_SAMPLE, OPT_SEED, OPT_CAPACITY_FACTOR,
       OPT_MOE_GROUPS };

/* "123", "64K", "2G": bytes; -1 when malformed. */
static int64_t parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    int64_t mul = *end == 'K' || *end == 'k' ? 1 << 10 : *end == 'M' || *end == 'm' ? 1 << 20
                : *end == 'G' || *end == 'g' ? 1 << 30 : 1;
    if (mul != 1)
        end++;
    if (*end || v > INT64_MAX / mul)
        return -1;
    return v * mul;
}

static int parse_dim(const char *arg, DimBinding *b)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (errno || *end || end == eq + 1 || v < 0)
        return -1;
    b->name = strndup(arg, (size_t)(eq - arg));
    b->value = v;
    return 0;
}

/* --const NAME=FILE into the frontend options (consts holds 64). */
static int add_const(FrontendOptions *opt, ConstBinding *consts, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (opt->nconsts == 64)
        return usage_error("too many --const flags (at most %s)", "64");
    if (!eq || eq == arg || !eq[1])
        return usage_error("--const %s: expected NAME=FILE", arg);
    consts[opt->nconsts].name = strndup(arg, (size_t)(eq - arg));
    consts[opt->nconsts].path = eq + 1;
    opt->nconsts++;
    return 0;
}

/* --dim NAME=VALUE into the frontend options (dims holds 64). */
static int add_dim(FrontendOptions *opt, DimBinding *dims, const char *arg)
{
    if (opt->ndims == 64)
        return usage_error("too many --dim flags (at most %s)", "64");
    if (parse_dim(arg, &dims[opt->ndims]))
        return usage_error("--dim %s: expected NAME=VALUE with a non-negative integer", arg);
    opt->ndims++;
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"nodes", no_argument, 0, OPT_NODES},
        {"weights", no_argument, 0, OPT_WEIGHTS},
        {"json", no_argument, 0, OPT_JSON},
        {"dim", required_argument, 0, OPT_DIM},
        {"const", required_argument, 0, OPT_CONST},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int nodes = 0, weights = 0, json = 0, rc = EXIT_BAD_INPUT, c;
    DimBinding dims[64];
    ConstBinding consts[64];
    FrontendOptions opt = {.dims = dims, .ndims = 0, .consts = consts, .nconsts = 0};
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_NODES: nodes = 1; break;
        case OPT_WEIGHTS: weights = 1; break;
        case OPT_JSON: json = 1; break;
        case OPT_DIM:
            if (add_dim(&opt, dims, optarg))
                return EXIT_BAD_INPUT;
            break;
        case OPT_CONST:
            if (add_const(&opt, consts, optarg))
                return EXIT_BAD_INPUT;
            break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        default: return usage_error("inspect: bad option%s", "");
        }
    }
    if (optind != argc - 1)
        return usage_error("inspect: expected exactly one MODEL%s", "");
    const char *path = argv[optind];
    Diag d;
    Graph *g = NULL;
    diag_init(&d, path);
    opt.allow_unsupported = 1; /* show the summary, unsupported ops marked */
    if (frontend_load_file(path, &opt, &g, &d) == 0) {
        if (json)
            inspect_json(g, nodes, weights);
        else {
            inspect_text(g, nodes);
            if (weights)
                inspect_weights_text(g);
        }
        rc = EXIT_OK;
    }
    print_diags(&d);
    diag_free(&d);
    graph_free(g);
    for (int i = 0; i < opt.ndims; i++)
        free((char *)dims[i].name);
    for (int i = 0; i < opt.nconsts; i++)
        free((char *)consts[i].name);
    return rc;
}

/* ---- plan --------------------------------------------------------------- */

/* Writes through a temporary name and renames, so a failed run leaves no
 * half-written file behind. The rename replaces whatever has the name, so
 * only a regular file (or a link, itself replaced) may be there: never a
 * FIFO, a device or a folder. */
static int write_dot(const Plan *p, const char *path, Diag *d)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        diag_add(d, "--dot %s: not a regular file (%s)", path,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : S_ISCHR(st.st_mode) ? "a character device" : "not a plain file");
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        diag_add(d, "--dot %s: %s", path, strerror(errno));
        return -1;
    }
    plan_print_dot(p, f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        diag_add(d, "--dot %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- plan and compile: one option parser ------------------------------- */

/* Storage the parsed options point into, freed by options_free. */
typedef struct OptionStore {
    const char *shards[256];
    DimBinding dims[64];
    ConstBinding consts[64];
    char command_line[4096];
} OptionStore;

static void options_free(DriverOptions *o)
{
    for (int i = 0; i < o->frontend.ndims; i++)
        free((char *)o->frontend.dims[i].name);
    for (int i = 0; i < o->frontend.nconsts; i++)
        free((char *)o->frontend.consts[i].name);
}

/* Parses plan's or compile's command line into *o; returns -1 to go on,
 * else the exit code (usage errors, --help). */
static int parse_plan_options(int argc, char **argv, int compile, DriverOptions *o, OptionStore *st,
                              int *json, const char **explain, const char **dot)
{
    static const struct option longopts[] = {
        {"mesh", required_argument, 0, OPT_MESH},
        {"link", required_argument, 0, OPT_LINK},
        {"device", required_argument, 0, OPT_DEVICE},
        {"shard", required_argument, 0, OPT_SHARD},
        {"shardings", required_argument, 0, OPT_SHARDINGS},
        {"json", no_argument, 0, OPT_JSON},
        {"explain", required_argument, 0, OPT_EXPLAIN},
        {"dot", required_argument, 0, OPT_DOT},
        {"dim", required_argument, 0, OPT_DIM},
        {"const", required_argument, 0, OPT_CONST},
        {"target", required_argument, 0, OPT_TARGET},
        {"shard-weights", required_argument, 0, OPT_SHARD_WEIGHTS},
        {"prefetch", required_argument, 0, OPT_PREFETCH},
        {"mem-limit", required_argument, 0, OPT_MEM_LIMIT},
        {"auto", no_argument, 0, OPT_AUTO},
        {"auto-time-limit", required_argument, 0, OPT_AUTO_TIME},
        {"auto-mps", required_argument, 0, OPT_AUTO_MPS},
        {"auto-solver", required_argument, 0, OPT_AUTO_SOLVER},
        {"auto-tie", required_argument, 0, OPT_AUTO_TIE},
        {"pipeline-axis", required_argument, 0, OPT_PIPELINE_AXIS},
        {"microbatches", required_argument, 0, OPT_MICROBATCHES},
        {"stage-boundaries", required_argument, 0, OPT_STAGE_BOUNDARIES},
        {"schedule", required_argument, 0, OPT_SCHEDULE},
        {"virtual-stages", required_argument, 0, OPT_VIRTUAL_STAGES},
        {"fuse-bytes", required_argument, 0, OPT_FUSE_BYTES},
        {"bucket-mb", required_argument, 0, OPT_BUCKET_MB},
        {"zero", required_argument, 0, OPT_ZERO},
        {"zero-axis", required_argument, 0, OPT_ZERO_AXIS},
        {"lr-schedule", required_argument, 0, OPT_LR_SCHEDULE},
        {"warmup-steps", required_argument, 0, OPT_WARMUP},
        {"total-steps", required_argument, 0, OPT_TOTAL_STEPS},
        {"accum", required_argument, 0, OPT_ACCUM},
        {"precision", required_argument, 0, OPT_PRECISION},
        {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
        {"recompute", required_argument, 0, OPT_RECOMPUTE},
        {"tf32", no_argument, 0, OPT_TF32},
        {"cuda-arch", required_argument, 0, OPT_CUDA_ARCH},
        {"train", no_argument, 0, OPT_TRAIN},
        {"loss", required_argument, 0, OPT_LOSS},
        {"frozen", required_argument, 0, OPT_FROZEN},
        {"trainable", required_argument, 0, OPT_TRAINABLE},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER},
        {"lr", required_argument, 0, OPT_LR},
        {"momentum", required_argument, 0, OPT_MOMENTUM},
        {"weight-decay", required_argument, 0, OPT_WEIGHT_DECAY},
        {"betas", required_argument, 0, OPT_BETAS},
        {"eps", required_argument, 0, OPT_EPS},
        {"clip-norm", required_argument, 0, OPT_CLIP_NORM},
        {"decode", no_argument, 0, OPT_DECODE},
        {"max-seq", required_argument, 0, OPT_MAX_SEQ},
        {"generate", required_argument, 0, OPT_GENERATE},
        {"kv-cache", required_argument, 0, OPT_KV_CACHE},
        {"sample", required_argument, 0, OPT_SAMPLE},
        {"seed", required_argument, 0, OPT_SEED},
        {"capacity-factor", required_argument, 0, OPT_CAPACITY_FACTOR},
        {"moe-groups", required_argument, 0, OPT_MOE_GROUPS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *o = (DriverOptions){
        .frontend = {.dims = st->dims, .consts = st->consts},
        .shards = st->shards,
        .autoopt = {.mem_limit = 0, .time_limit_s = 30},
        .prog = {.prefetch = 1, .mem_limit = 0, .fuse_bytes = 65536, .bucket_bytes = 25 << 20},
        .microbatches = 1,
        .moeopt = {.capacity_factor = 0}, /* dropless */
        .target = "c",
        .cuda_arch = "sm_90",
    };
    train_options_default(&o->trainopt);
    int c, loss_scale_given = 0, seed_given = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, compile ? "ho:" : "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_TARGET: o->target = optarg; break;
        case OPT_TF32: o->tf32 = 1; break;
        case OPT_CUDA_ARCH:
            if (strncmp(optarg, "sm_", 3) != 0 || !optarg[3] || strspn(optarg + 3, "0123456789a") != strlen(optarg + 3))
                return usage_error("--cuda-arch %s: expected sm_NN, e.g. sm_90", optarg);
            o->cuda_arch = optarg;
            break;
        case OPT_SHARD_WEIGHTS: o->shard_weights = optarg; break;
        case OPT_PREFETCH: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 1000)
                return usage_error("--prefetch %s: expected a count from 0 to 1000", optarg);
            o->prog.prefetch = (int)v;
            break;
        }
        case OPT_MEM_LIMIT:
            if ((o->prog.mem_limit = parse_bytes(optarg)) < 0)
                return usage_error("--mem-limit %s: expected bytes, e.g. 512M", optarg);
            break;
        case OPT_FUSE_BYTES:
            if ((o->prog.fuse_bytes = parse_bytes(optarg)) < 0)
                return usage_error("--fuse-bytes %s: expected bytes, e.g. 64K", optarg);
            break;
        case OPT_AUTO: o->use_auto = 1; break;
        case OPT_AUTO_MPS: o->autoopt.mps_path = optarg; break;
        case OPT_AUTO_SOLVER:
            if (strcmp(optarg, "glpk") != 0 && strcmp(optarg, "cbc") != 0)
                return usage_error("--auto-solver %s: expected glpk or cbc", optarg);
            o->autoopt.solver = optarg;
            break;
        case OPT_PIPELINE_AXIS: o->pipeline_axis = optarg; break;
        case OPT_STAGE_BOUNDARIES: o->stage_boundaries = optarg; break;
        case OPT_SCHEDULE:
            if (strcmp(optarg, "1f1b") == 0)
                o->schedule = PIPE_1F1B;
            else if (strcmp(optarg, "gpipe") == 0)
                o->schedule = PIPE_GPIPE;
            else if (strcmp(optarg, "interleaved") == 0)
                o->schedule = PIPE_INTERLEAVED;
            else
                return usage_error("--schedule %s: expected 1f1b, gpipe or interleaved", optarg);
            o->schedule_set = 1;
            break;
        case OPT_VIRTUAL_STAGES: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > 16)
                return usage_error("--virtual-stages %s: expected model chunks per rank, from 1 to 16", optarg);
            o->virtual_stages = (int)v;
            break;
        }
        case OPT_MICROBATCHES: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > 4096)
                return usage_error("--microbatches %s: expected a count from 1 to 4096", optarg);
            o->microbatches = (int)v;
            break;
        }
        case OPT_AUTO_TIE:
            if (strcmp(optarg, "auto") == 0)
                o->autoopt.tie = AUTO_TIE_AUTO;
            else if (strcmp(optarg, "off") == 0)
                o->autoopt.tie = AUTO_TIE_OFF;
            else if (strcmp(optarg, "always") == 0)
                o->autoopt.tie = AUTO_TIE_ALWAYS;
            else
                return usage_error("--auto-tie %s: expected auto, off or always", optarg);
            break;
        case OPT_AUTO_TIME: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v > 0 && v <= 86400))
                return usage_error("--auto-time-limit %s: expected seconds, from 0 to 86400", optarg);
            o->autoopt.time_limit_s = v;
            break;
        }
        case OPT_TRAIN: o->train = 1; break;
        case OPT_ZERO:
            if (strcmp(optarg, "0") && strcmp(optarg, "1") && strcmp(optarg, "2") && strcmp(optarg, "3"))
                return usage_error("--zero %s: expected 0, 1, 2 or 3", optarg);
            o->zero = optarg[0] - '0';
            o->zero_set = 1;
            break;
        case OPT_ZERO_AXIS: o->zero_axis = optarg; break;
        case OPT_LR_SCHEDULE:
            if (strcmp(optarg, "constant") && strcmp(optarg, "cosine"))
                return usage_error("--lr-schedule %s: expected constant or cosine", optarg);
            o->trainopt.cosine = strcmp(optarg, "cosine") == 0;
            break;
        case OPT_RECOMPUTE:
            if (!strcmp(optarg, "none"))
                o->trainopt.recompute = RECOMPUTE_NONE;
            else if (!strcmp(optarg, "selective"))
                o->trainopt.recompute = RECOMPUTE_SELECTIVE;
            else if (!strcmp(optarg, "full"))
                o->trainopt.recompute = RECOMPUTE_FULL;
            else
                return usage_error("--recompute %s: expected none, selective or full", optarg);
            break;
        case OPT_PRECISION:
            if (!strcmp(optarg, "fp32"))
                o->trainopt.precision = DT_F32;
            else if (!strcmp(optarg, "bf16"))
                o->trainopt.precision = DT_BF16;
            else if (!strcmp(optarg, "fp16"))
                o->trainopt.precision = DT_F16;
            else
                return usage_error("--precision %s: expected fp32, bf16 or fp16", optarg);
            break;
        case OPT_LOSS_SCALE: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v >= 1 && v <= 1e30))
                return usage_error("--loss-scale %s: expected a number from 1 to 1e30", optarg);
            o->trainopt.loss_scale = (float)v;
            loss_scale_given = 1;
            break;
        }
        case OPT_ACCUM: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > 65536)
                return usage_error("--accum %s: expected microbatches per step, from 1 to 65536", optarg);
            o->trainopt.accum = (int)v;
            break;
        }
        case OPT_CAPACITY_FACTOR: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v > 0 && v <= 1e6))
                return usage_error("--capacity-factor %s: expected a number above 0, at most 1e6", optarg);
            o->moeopt.capacity_factor = v;
            o->moe_flag = o->moe_flag ? o->moe_flag : "--capacity-factor";
            break;
        }
        case OPT_MOE_GROUPS: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > (1 << 20))
                return usage_error("--moe-groups %s: expected a count from 1 to 1048576", optarg);
            o->moeopt.groups = (int)v;
            o->moe_flag = o->moe_flag ? o->moe_flag : "--moe-groups";
            break;
        }
        case OPT_DECODE: o->decode = 1; break;
        case OPT_KV_CACHE: o->decodeopt.kv = optarg; break;
        case OPT_SAMPLE: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v > 0 && v <= 100))
                return usage_error("--sample %s: expected a temperature above 0, at most 100", optarg);
            o->decodeopt.temperature = v;
            break;
        }
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno || optarg[0] == '-')
                return usage_error("--seed %s: expected a non-negative integer below 2^64", optarg);
            o->decodeopt.seed = (uint64_t)v;
            seed_given = 1;
            break;
        }
        case OPT_MAX_SEQ:
        case OPT_GENERATE: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > (1 << 20))
                return usage_error("%s: expected a count from 1 to 1048576", argv[optind - 1]);
            if (c == OPT_MAX_SEQ)
                o->decodeopt.max_seq = v;
            else
                o->decodeopt.generate = (int)v;
            break;
        }
        case OPT_WARMUP:
        case OPT_TOTAL_STEPS: {
            char *end;
            long long v = strtoll(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 1000000000)
                return usage_error("%s: expected a step count from 0 to 1e9", argv[optind - 1]);
            *(c == OPT_WARMUP ? &o->trainopt.warmup_steps : &o->trainopt.total_steps) = v;
            break;
        }
        case OPT_BUCKET_MB: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v >= 0 && v <= 65536))
                return usage_error("--bucket-mb %s: expected MiB from 0 to 65536 (0: one all-reduce per gradient)",
                                   optarg);
            o->prog.bucket_bytes = (int64_t)(v * (1 << 20));
            break;
        }
        case OPT_LOSS: o->trainopt.loss = optarg; break;
        case OPT_FROZEN: o->trainopt.frozen = optarg; break;
        case OPT_TRAINABLE: o->trainopt.trainable = optarg; break;
        case OPT_OPTIMIZER:
            if (strcmp(optarg, "sgd") && strcmp(optarg, "adamw"))
                return usage_error("--optimizer %s: expected sgd or adamw", optarg);
            o->trainopt.optimizer = strcmp(optarg, "sgd") ? OPT_ADAMW : OPT_SGD;
            break;
        case OPT_LR:
        case OPT_MOMENTUM:
        case OPT_WEIGHT_DECAY:
        case OPT_EPS:
        case OPT_CLIP_NORM: {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || end == optarg || !(v >= 0 && v <= 1e6) || (c == OPT_MOMENTUM && v >= 1))
                return usage_error("%s: expected a number from 0 to 1e6 (momentum below 1)", argv[optind - 1]);
            float *dst = c == OPT_LR ? &o->trainopt.lr : c == OPT_MOMENTUM ? &o->trainopt.momentum
                       : c == OPT_WEIGHT_DECAY ? &o->trainopt.weight_decay : c == OPT_EPS ? &o->trainopt.eps
                       : &o->trainopt.clip_norm;
            *dst = (float)v;
            break;
        }
        case OPT_BETAS: {
            char *end, *end2;
            double b1 = strtod(optarg, &end), b2 = *end == ',' ? strtod(end + 1, &end2) : -1;
            if (*end != ',' || *end2 || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
                return usage_error("--betas %s: expected B1,B2 in [0, 1), e.g. 0.9,0.999", optarg);
            o->trainopt.beta1 = (float)b1;
            o->trainopt.beta2 = (float)b2;
            break;
        }
        case 'o': o->out_dir = optarg; break;
        case OPT_MESH: o->mesh = optarg; break;
        case OPT_LINK: o->links = optarg; break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_SHARDINGS: o->shardings = optarg; break;
        case OPT_JSON: *json = 1; break;
        case OPT_EXPLAIN: *explain = optarg; break;
        case OPT_DOT: *dot = optarg; break;
        case OPT_SHARD:
            if (o->nshards == 256)
                return usage_error("too many --shard flags (at most %s)", "256");
            st->shards[o->nshards++] = optarg;
            break;
        case OPT_DIM:
            if (add_dim(&o->frontend, st->dims, optarg))
                return EXIT_BAD_INPUT;
            break;
        case OPT_CONST:
            if (add_const(&o->frontend, st->consts, optarg))
                return EXIT_BAD_INPUT;
            break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        default: return usage_error("plan: bad option%s", "");
        }
    }
    if (optind != argc - 1)
        return usage_error("plan: expected exactly one MODEL%s", "");
    if (!o->mesh)
        return usage_error("%s: --mesh is required (e.g. --mesh dp=2,tp=4)", compile ? "compile" : "plan");
    if (!o->decode && (o->decodeopt.max_seq || o->decodeopt.generate || o->decodeopt.kv || o->decodeopt.temperature))
        return usage_error("%s: only with --decode", o->decodeopt.max_seq ? "--max-seq"
                                                     : o->decodeopt.generate ? "--generate"
                                                     : o->decodeopt.kv ? "--kv-cache" : "--sample");
    if (seed_given && !o->decodeopt.temperature)
        return usage_error("--seed: only with --sample (greedy decoding draws nothing)%s", "");
    if (o->decode && !o->decodeopt.max_seq)
        return usage_error("--decode: --max-seq S is required (the cache's positions: prompt and generated tokens)%s",
                           "");
    if (o->decode && o->train)
        return usage_error("--decode: a decoding program does not train; drop --train%s", "");
    if (o->decode && !o->decodeopt.generate)
        o->decodeopt.generate = 16;
    if (o->decode && o->decodeopt.max_seq < 2)
        return usage_error("--max-seq: a decoding cache needs at least 2 positions%s", "");
    o->frontend.decode_max_seq = o->decode ? o->decodeopt.max_seq : 0;
    if (o->trainopt.cosine && o->trainopt.total_steps <= o->trainopt.warmup_steps)
        return usage_error("--lr-schedule cosine: --total-steps must be above --warmup-steps%s", "");
    if (loss_scale_given && o->trainopt.precision != DT_F16)
        return usage_error("--loss-scale: only with --precision fp16 (bf16 and fp32 need no loss scaling)%s", "");
    if (o->trainopt.precision != DT_F32 && !o->train)
        return usage_error("--precision %s: only with --train", o->trainopt.precision == DT_BF16 ? "bf16" : "fp16");
    if (o->zero && !o->train)
        return usage_error("--zero %s: only with --train", o->zero == 1 ? "1" : o->zero == 2 ? "2" : "3");
    if (o->train && o->shard_weights && !o->zero) { /* training with weights stored split is ZeRO-3 */
        o->zero = 3;
        o->zero_set = 1;
        o->zero_axis = o->shard_weights;
        o->shard_weights = NULL;
    }
    if (o->zero == 3 && o->shard_weights)
        return usage_error("--zero 3 stores the weights split over --zero-axis; drop --shard-weights %s",
                           o->shard_weights);
    if (o->zero == 3)
        o->shard_weights = o->zero_axis ? o->zero_axis : "dp";
    if (compile && !o->out_dir)
        return usage_error("compile: -o DIR is required%s", "");
    if (compile && strcmp(o->target, "c") != 0 && strcmp(o->target, "cuda") != 0)
        return usage_error("--target %s: unknown target (c, cuda)", o->target);
    o->model = argv[optind];
    /* The command line as typed, for the generated files' front matter. */
    snprintf(st->command_line, sizeof st->command_line, "onnx2spmd compile");
    for (int i = 1; i < argc; i++)
        snprintf(st->command_line + strlen(st->command_line), sizeof st->command_line - strlen(st->command_line),
                 " %s", argv[i]);
    o->command_line = st->command_line;
    return -1;
}

/* The search's solve time on stderr: it varies from run to run, the plan
 * does not. */
static void report_auto(const Plan *p)
{
    const AutoReport *ar = p->auto_report;
    fprintf(stderr, "onnx2spmd: --auto: %d x %d integer program solved by %s in %.3f s (%s)\n", ar->rows,
            ar->cols, ar->solver, ar->solve_s, ar->optimal ? "optimal" : "time limit: best found");
    if (ar->tied != TIED_NOT_TRIED)
        fprintf(stderr, "onnx2spmd: --auto: %d identical layers: the tied program and its bound took %.3f s "
                "(tying %s)\n", ar->layers, ar->tie_s, ar->tied == TIED_EXACT ? "exact" : "not taken");
    if (!ar->optimal)
        fprintf(stderr, "onnx2spmd: --auto: the plan is within %.1f%% of the optimum (raise --auto-time-limit "
                "to close the gap)\n", 100 * ar->gap);
}

/* --train on a model whose layers read one initializer: one line, since
 * training ties them (ir/autodiff.c note_shared_weights). */
static void report_shared_weights(const Graph *g)
{
    fprintf(stderr, "onnx2spmd: warning: --train: %d trainable initializer%s each feed%s several nodes of one op "
            "(first: %s, read by %d %s nodes as input %d), so training ties their readers into one weight; "
            "exporters merge equal initializers (TorchScript on a freshly initialised model): export distinct "
            "weights unless they are shared on purpose\n", g->shared_weights, g->shared_weights == 1 ? "" : "s",
            g->shared_weights == 1 ? "s" : "", g->shared_example->label, g->shared_readers,
            node_op_name(g->shared_reader), g->shared_input);
}

/* plan and compile: the driver's stages in order, then the report. */
static int cmd_plan(int argc, char **argv, int compile)
{
    DriverOptions o;
    OptionStore st;
    int json = 0;
    const char *explain = NULL, *dot = NULL;
    int rc = parse_plan_options(argc, argv, compile, &o, &st, &json, &explain, &dot);
    if (rc >= 0) {
        options_free(&o);
        return rc;
    }
    rc = EXIT_BAD_INPUT;
    o.report_trials = !compile && o.train && !explain;
    Driven r = {0};
    Diag d;
    diag_init(&d, NULL);
    if (compile && driver_check_output(&o, &r, &d))
        goto cleanup;
    if (driver_plan(&o, &r, &d))
        goto cleanup;
    if (o.use_auto)
        report_auto(r.plan);
    if (dot && write_dot(r.plan, dot, &d))
        goto cleanup;
    if (compile) {
        if (driver_emit(&o, &r, &d))
            goto cleanup;
        printf("compiled %s for %s (%d ranks) into %s\n", o.model, o.mesh, r.nranks, r.out_dir);
        if (r.nzero_trials) /* --auto --train chose it */
            printf("  ZeRO stage %d: %s\n", r.zero,
                   o.prog.mem_limit ? "the first whose programs fit --mem-limit" : "no --mem-limit, the fastest");
        for (int k = 0; k < r.nranks; k++) {
            if (r.plan->pipe && r.plan->pipe->train) /* the stashes and slots the schedule holds matter here */
                printf("  rank %d: peak arena %lld bytes, weights %lld bytes, stashes, slots and inputs %lld bytes",
                       k, (long long)r.arena_bytes[k], (long long)r.weight_bytes[k], (long long)r.held_bytes[k]);
            else
                printf("  rank %d: peak arena %lld bytes, weights %lld bytes", k, (long long)r.arena_bytes[k],
                       (long long)r.weight_bytes[k]);
            if (strcmp(o.target, "c") == 0) /* what its VmHWM should read (the program prints both) */
                printf("; %.1f MiB at its peak, with the inputs and the runtime", r.rank_bytes[k] / 1048576.0);
            printf("\n");
        }
    } else {
        if (driver_measure(&o, &r, &d))
            goto cleanup;
        PlanFacts facts = {.program_bytes = r.program_bytes,
                           .runtime_bytes = strcmp(o.target, "c") == 0
                                                ? program_runtime_bytes(plan_world_ranks(r.plan))
                                                : 0,
                           .mem_limit = o.prog.mem_limit,
                           .zero_trials = r.zero_trials, .nzero_trials = r.nzero_trials,
                           .zero_chosen = r.zero_chosen, .recompute = r.recompute,
                           .nrecompute = r.nrecompute, .recompute_chosen = r.recompute_chosen};
        if (explain) {
            if (plan_print_explain(r.plan, explain, stdout, &d))
                goto cleanup;
        } else if (json) {
            plan_print_json(r.plan, &facts, stdout);
        } else {
            plan_print_text(r.plan, &facts, stdout);
        }
    }
    if (r.graph->shared_weights) /* a plan that stands: errors keep their one line */
        report_shared_weights(r.graph);
    rc = EXIT_OK;
cleanup:
    print_diags(&d);
    diag_free(&d);
    driver_free(&r);
    options_free(&o);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("no command given%s", "");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("onnx2spmd %s\n", ONNX2SPMD_VERSION);
        return EXIT_OK;
    }
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 1, argv + 1, 0);
    if (strcmp(cmd, "compile") == 0)
        return cmd_plan(argc - 1, argv + 1, 1);
    return usage_error("unknown command \"%s\"", cmd);
}
