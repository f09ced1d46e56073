/* precision.c: mixed precision for training (--precision bf16|fp16).
 *
 * The forward graph is rewritten with Cast nodes the way torch.autocast
 * runs a model, before the backward pass is built from it, so backward
 * follows: the gradient of a Cast is the Cast back (vjp_cast), and every
 * vjp rule computes in its forward node's type.
 *
 *   - GEMM-like ops (MatMul, Gemm, Conv, ConvTranspose, Einsum, Attention)
 *     read their float inputs in the low type and write it;
 *   - ops whose range or accumulation needs float32 (the losses, Softmax,
 *     LogSoftmax, the norms, the reductions, Exp, Log, Pow, CumSum) read
 *     float32 and write it;
 *   - every other op computes in the widest type among the values it reads
 *     (a low-type MatMul's output plus a float32 residual is float32), with
 *     its weights and constants brought to that type, as PyTorch lets a
 *     parameter follow the activation it meets.
 *
 * The weights stay float32 in memory: they are the master copies the
 * optimizer updates. A trainable weight read in the low type goes through
 * one Cast node per step (so its gradient comes back float32 through the
 * Cast); a frozen constant is converted once, here, into a new
 * initializer. Graph outputs keep the type the model declares (a Cast
 * back where they changed), so the loss is float32. The storage of a low
 * type value is 2 bytes: activations kept for backward, gradients of
 * activations and their collectives are half the size.
 *
 * Ops whose float inputs are not all float32 or the low type (float64,
 * float16 in a bfloat16 run), and ops that read floats of fixed meaning
 * (Cast, Shape, OneHot's depth, Resize's scales, the quantizers), are left
 * as they are, and read their inputs in the types the model gave them.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef enum Policy { KEEP, LOW, FP32, WIDEST } Policy;

static Policy policy(OpKind op)
{
    switch (op) {
    case OP_MATMUL: case OP_GEMM: case OP_CONV: case OP_CONV_TRANSPOSE: case OP_EINSUM: case OP_ATTENTION:
        return LOW;
    case OP_SCE_LOSS: case OP_NLL_LOSS: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_LAYERNORM:
    case OP_RMSNORM: case OP_GROUPNORM: case OP_INSTANCENORM: case OP_BATCHNORM: case OP_MVN: case OP_LP_NORM:
    case OP_REDUCE_MEAN: case OP_REDUCE_SUM: case OP_REDUCE_SUM_SQUARE: case OP_REDUCE_L1: case OP_REDUCE_L2:
    case OP_REDUCE_LOG_SUM: case OP_REDUCE_LOG_SUM_EXP: case OP_REDUCE_PROD: case OP_CUMSUM: case OP_CUMPROD:
    case OP_EXP: case OP_LOG: case OP_POW: case OP_SOFTPLUS:
        return FP32;
    case OP_CAST: case OP_CONSTANT: case OP_BITCAST: case OP_SHAPE: case OP_SIZE: case OP_CONSTANT_OF_SHAPE:
    case OP_ONEHOT: case OP_QUANTIZE: case OP_DEQUANTIZE: case OP_EYELIKE: case OP_RANGE: case OP_NONZERO:
    case OP_UNSUPPORTED: case OP_SGD: case OP_ADAMW:
        return KEEP;
    default:
        return WIDEST;
    }
}

/* Inputs past these hold no data of the node's type (Resize's roi and
 * scales, Dropout's ratio): they keep their own. */
static int data_inputs(const Node *n)
{
    return n->op == OP_RESIZE || n->op == OP_DROPOUT ? 1 : n->ninputs;
}

typedef struct Autocast {
    Graph *g;
    DType low;
    const unsigned char *trainable; /* by tensor id, for the model's tensors */
    int nt;                         /* the model's tensors: ids below this */
    DType *orig;                    /* the model's type of each tensor */
    Tensor **to_low, **to_f32;      /* cached conversions, by tensor id */
    Diag *d;
} Autocast;

static int is_const(const Tensor *t)
{
    return t->is_initializer || (t->producer && t->producer->op == OP_CONSTANT);
}

/* A Cast node from `in` to `out`'s new type `to`, named after `name`. */
static int add_cast(Autocast *ac, const char *name, Tensor *in, Tensor *out, DType to)
{
    Graph *g = ac->g;
    char base[200];
    snprintf(base, sizeof base, "%.170s/to_%s", name, to == DT_F32 ? "fp32" : dtype_name(to));
    Node *n = graph_node_add(g, OP_CAST, base);
    n->inputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->inputs[0] = in;
    n->outputs[0] = out;
    n->ninputs = n->noutputs = 1;
    out->producer = n;
    node_attr_set_int(g, n, "to", to);
    return ir_infer_node(g, n, ac->d);
}

static Tensor *cast_node(Autocast *ac, Tensor *t, DType to)
{
    char base[200];
    snprintf(base, sizeof base, "%.170s.%s", t->name, to == DT_F32 ? "fp32" : dtype_name(to));
    Tensor *out = graph_tensor_fresh(ac->g, base);
    return add_cast(ac, t->name, t, out, to) ? NULL : out;
}

/* A frozen constant in another float type: a new initializer, converted
 * once at compile time. */
static Tensor *converted(Autocast *ac, const Tensor *t, DType to)
{
    char base[200];
    snprintf(base, sizeof base, "%.170s.%s", t->name, to == DT_F32 ? "fp32" : dtype_name(to));
    Tensor *c = graph_tensor_fresh(ac->g, base);
    int64_t n = tensor_numel(t);
    void *p = arena_alloc(&ac->g->arena, (size_t)(n ? n : 1) * dtype_size(to));
    for (int64_t i = 0; i < n; i++)
        dtype_store(to, p, i, dtype_load(t->dtype, t->data, i));
    c->data = p;
    c->nbytes = n * (int64_t)dtype_size(to);
    c->dtype = to;
    c->rank = t->rank;
    memcpy(c->dims, t->dims, sizeof c->dims);
    c->is_initializer = 1;
    return c;
}

/* t in type `to`: itself, or its (shared) conversion. */
static Tensor *as_type(Autocast *ac, Tensor *t, DType to)
{
    if (t->dtype == to)
        return t;
    Tensor **cache = t->id < ac->nt ? (to == DT_F32 ? ac->to_f32 : ac->to_low) + t->id : NULL;
    if (cache && *cache)
        return *cache;
    int frozen = t->is_initializer && t->data && !t->producer && !(t->id < ac->nt && ac->trainable[t->id]);
    Tensor *c = frozen ? converted(ac, t, to) : cast_node(ac, t, to);
    if (cache)
        *cache = c;
    return c;
}

/* The type a node computes in, or DT_UNDEFINED to leave it as it is. */
static DType compute_type(const Autocast *ac, const Node *n)
{
    Policy pol = policy(n->op);
    if (pol == KEEP)
        return DT_UNDEFINED;
    int nd = data_inputs(n), any = 0, low = 0, f32 = 0;
    for (int j = 0; j < nd; j++) {
        const Tensor *t = n->inputs[j];
        if (!t || !dtype_is_float(t->dtype))
            continue;
        if (t->dtype != DT_F32 && t->dtype != ac->low)
            return DT_UNDEFINED; /* float64, or the other 16-bit type */
        any = 1;
        if (!is_const(t)) {
            low |= t->dtype == ac->low;
            f32 |= t->dtype == DT_F32;
        }
    }
    if (!any)
        return DT_UNDEFINED;
    if (pol == LOW)
        return ac->low;
    if (pol == FP32)
        return DT_F32;
    if (!low && !f32)
        return DT_UNDEFINED; /* weights and constants only: as the model has them */
    return f32 ? DT_F32 : ac->low;
}

/* A graph output whose type changed: its producer writes a new value in
 * the new type, and a Cast back writes the output under its own name. */
static int keep_output_type(Autocast *ac, Node *n, int k)
{
    Tensor *t = n->outputs[k];
    DType want = ac->orig[t->id];
    char base[200];
    snprintf(base, sizeof base, "%.170s.%s", t->name, dtype_name(t->dtype));
    Tensor *low = graph_tensor_fresh(ac->g, base);
    low->dtype = t->dtype;
    low->rank = t->rank;
    memcpy(low->dims, t->dims, sizeof low->dims);
    low->producer = n;
    n->outputs[k] = low;
    return add_cast(ac, t->name, low, t, want);
}

int ir_autocast(Graph *g, DType low, const unsigned char *trainable, Diag *d)
{
    int nt = g->ntensors, nn = g->nnodes, rc = -1;
    Autocast ac = {.g = g, .low = low, .trainable = trainable, .nt = nt, .d = d,
                   .orig = malloc((size_t)(nt ? nt : 1) * sizeof(DType)),
                   .to_low = calloc((size_t)nt + 1, sizeof(Tensor *)),
                   .to_f32 = calloc((size_t)nt + 1, sizeof(Tensor *))};
    if (!ac.orig || !ac.to_low || !ac.to_f32)
        abort();
    for (int i = 0; i < nt; i++)
        ac.orig[i] = g->tensors[i]->dtype;
    for (int i = 0; i < nn; i++) {
        Node *n = g->nodes[i];
        DType ct = compute_type(&ac, n);
        int changed = 0;
        for (int j = 0; j < n->ninputs; j++) {
            Tensor *t = n->inputs[j];
            if (!t || !dtype_is_float(t->dtype))
                continue;
            /* computing in ct; or, left as it is, reading what the model gave it */
            DType want = ct != DT_UNDEFINED && j < data_inputs(n) ? ct : t->id < nt ? ac.orig[t->id] : t->dtype;
            if (t->dtype != want && !(t = n->inputs[j] = as_type(&ac, t, want)))
                goto out;
            changed |= t->id >= nt || t->dtype != ac.orig[t->id]; /* (its outputs' types may follow) */
        }
        if (!changed)
            continue;
        if (ir_infer_node(g, n, d))
            goto out;
        for (int k = 0; k < n->noutputs; k++) {
            Tensor *t = n->outputs[k];
            if (t && t->id < nt && t->is_output && t->dtype != ac.orig[t->id] && keep_output_type(&ac, n, k))
                goto out;
        }
    }
    rc = graph_toposort(g, d);
out:
    free(ac.orig);
    free(ac.to_low);
    free(ac.to_f32);
    return rc;
}
