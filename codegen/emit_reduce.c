/* emit_reduce.c: kernel calls for the reduce family (ir/ops_reduce.def).
 *
 * Each emitter works on this rank's blocks. The factor rules
 * (partition/rules_reduce.c) keep every dim these ops work along whole on
 * each rank, except the reduced dims of ReduceSumSquare and ReduceL1, which
 * may be split: those emit a local sum and the plan all-reduces the partial
 * results. So no emitter here needs the rank's position, and indices
 * (ArgMax, TopK) are global by construction. The kernels are the k_* of
 * templates/kernels_reduce.c and templates/cuda_reduce.cu; one generic
 * reduction kernel takes an op code.
 */
#include "codegen.h"

/* Op code of k_reduce_op_*: the K_RED_* names of the kernel templates. */
static const char *reduce_code(OpKind op)
{
    switch (op) {
    case OP_REDUCE_MAX: return "K_RED_MAX";
    case OP_REDUCE_MIN: return "K_RED_MIN";
    case OP_REDUCE_PROD: return "K_RED_PROD";
    case OP_REDUCE_SUM_SQUARE: return "K_RED_SUMSQ";
    case OP_REDUCE_L1: return "K_RED_L1";
    case OP_REDUCE_L2: return "K_RED_L2";
    case OP_REDUCE_LOG_SUM_EXP: return "K_RED_LSE";
    default: return "K_RED_SUM";
    }
}

/* An INT attribute or a folded input's one-entry INTS. */
static int64_t attr_one(const Node *n, const char *name, int64_t dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_INTS && a->n == 1 ? a->ints[0] : node_attr_int(n, name, dflt);
}

int emit_reduce_op(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *axes = node_attr(c->n, "axes");
    unsigned mask = 0;
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << emit_norm_axis(axes->ints[i], x->rank);
    if (!axes || axes->n == 0)
        mask = node_attr_int(c->n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    if ((!axes || axes->n == 0) && node_attr_int(c->n, "noop_with_empty_axes", 0)) {
        /* noop_with_empty_axes with no axes: the input unchanged, for every
         * op (the spec's "equivalent to input tensor", as ONNX Runtime). */
        fprintf(c->f, "    k_copy(%s, %s, %lld); /* no axes, noop_with_empty_axes: unchanged */\n", y->name, x->name,
                (long long)y->bytes);
        return 0;
    }
    /* Output strides per input dim: 0 marks a reduced dim. */
    int64_t ydims[IR_MAX_RANK], sy[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        ydims[i] = (mask >> i) & 1 ? 1 : x->dims[i];
    emit_strides(ydims, x->rank, sy);
    for (int i = 0; i < x->rank; i++)
        if ((mask >> i) & 1)
            sy[i] = 0;
    int f32 = y->dtype == DT_F32;
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", x->dims, x->rank);
    emit_arr(c, "sy", sy, x->rank);
    fprintf(c->f, "        k_reduce_op_%s(%s, %s, %lld, %s, %d, dims, sy);%s\n    }\n", f32 ? "f32" : "i64",
            reduce_code(c->n->op), y->name, (long long)(y->bytes / (f32 ? 4 : 8)), x->name, x->rank,
            y->layout.partial ? " /* a local sum: the plan adds the ranks' results */" : "");
    return 0;
}

/* Outer, axis and inner extents of x around axis. */
static void around(const Buffer *x, int ax, int64_t *o, int64_t *n, int64_t *in)
{
    *o = emit_prod(x->dims, 0, ax);
    *n = x->rank ? x->dims[ax] : 1;
    *in = emit_prod(x->dims, ax + 1, x->rank);
}

int emit_argreduce(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", 0), x->rank);
    int64_t o, n, in;
    around(x, ax, &o, &n, &in);
    fprintf(c->f, "    k_argreduce_%s(%s, %s, %lld, %lld, %lld, %d, %d); /* outer, axis, inner, is_min, select_last_index */\n", x->dtype == DT_F32 ? "f32" : "i64",
            y->name, x->name, (long long)o, (long long)n, (long long)in, c->n->op == OP_ARGMIN,
            node_attr_int(c->n, "select_last_index", 0) != 0);
    return 0;
}

int emit_cumsum(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int ax = emit_norm_axis(attr_one(c->n, "axis", 0), x->rank);
    int64_t o, n, in;
    around(x, ax, &o, &n, &in);
    fprintf(c->f, "    k_%s_%s(%s, %s, %lld, %lld, %lld, %d, %d); /* outer, axis, inner, exclusive, reverse */\n",
            c->n->op == OP_CUMPROD ? "cumprod" : "cumsum", x->dtype == DT_F32 ? "f32" : "i64", y->name,
            x->name, (long long)o, (long long)n, (long long)in, node_attr_int(c->n, "exclusive", 0) != 0,
            node_attr_int(c->n, "reverse", 0) != 0);
    return 0;
}

int emit_log_softmax(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int64_t o, n, in;
    around(x, emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank), &o, &n, &in);
    fprintf(c->f, "    k_log_softmax_f32(%s, %s, %lld, %lld, %lld);\n", y->name, x->name, (long long)o, (long long)n,
            (long long)in);
    return 0;
}

int emit_topk(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *v = emit_out(c, 0), *ix = emit_out(c, 1);
    int64_t o, n, in;
    around(x, emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank), &o, &n, &in);
    int64_t k = attr_one(c->n, "k", 0);
    /* Both outputs are required (ops_reduce.def), so ix is never NULL. */
    fprintf(c->f, "    k_topk_%s(%s, %s, %s, %lld, %lld, %lld, %lld, %d);%s\n", x->dtype == DT_F32 ? "f32" : "i64",
            v->name, ix->name, x->name, (long long)o, (long long)n, (long long)in, (long long)k,
            node_attr_int(c->n, "largest", 1) != 0,
            node_attr_int(c->n, "sorted", 1) ? "" : " /* sorted=0: any order is valid; sorted anyway */");
    return 0;
}

int emit_rmsnorm(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *s = emit_in(c, 1), *y = emit_out(c, 0);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank);
    char eps[48];
    fprintf(c->f, "    k_rmsnorm_f32(%s, %s, %s, %lld, %lld, %lld, %s);\n", y->name, x->name, s->name,
            (long long)emit_prod(x->dims, 0, ax), (long long)emit_prod(x->dims, ax, x->rank), (long long)(s->bytes / 4),
            emit_cf(node_attr_float(c->n, "epsilon", 1e-5f), eps));
    return 0;
}

int emit_chan_norm(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *s = emit_in(c, 1), *b = emit_in(c, 2), *y = emit_out(c, 0);
    int64_t ch = x->dims[1];
    /* GroupNormalization may hold whole groups only (partition/rules_reduce.c):
     * this rank's share of them. */
    int64_t groups = c->n->op == OP_GROUPNORM ? node_attr_int(c->n, "num_groups", 1) * ch / c->n->inputs[0]->dims[1]
                                              : ch;
    char eps[48];
    fprintf(c->f, "    k_chan_norm_f32(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %s);\n", y->name, x->name, s->name,
            b->name, (long long)x->dims[0], (long long)ch, (long long)emit_prod(x->dims, 2, x->rank),
            (long long)groups, (long long)(s->bytes / 4), emit_cf(node_attr_float(c->n, "epsilon", 1e-5f), eps));
    return 0;
}

int emit_reduce(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Tensor *xt = c->n->inputs[0];
    const Attr *axes = node_attr(c->n, "axes");
    int keep = node_attr_int(c->n, "keepdims", 1) != 0;
    unsigned mask = 0;
    for (int i = 0; axes && i < axes->n; i++)
        mask |= 1u << emit_norm_axis(axes->ints[i], x->rank);
    if (!axes || axes->n == 0)
        mask = node_attr_int(c->n, "noop_with_empty_axes", 0) ? 0 : (1u << x->rank) - 1;
    /* Output strides per input dim (0 for reduced dims). */
    int64_t ydims[IR_MAX_RANK], sy_full[IR_MAX_RANK], sy[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        ydims[i] = (mask >> i) & 1 ? 1 : x->dims[i];
    emit_strides(ydims, x->rank, sy_full);
    int64_t count = 1;
    for (int i = 0; i < x->rank; i++) {
        sy[i] = (mask >> i) & 1 ? 0 : sy_full[i];
        if ((mask >> i) & 1)
            count *= xt->dims[i]; /* global: a split reduced dim leaves a partial */
    }
    (void)keep;
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", x->dims, x->rank);
    emit_arr(c, "sy", sy, x->rank);
    char sc[48];
    if (y->dtype == DT_F32)
        fprintf(c->f, "        k_reduce_f32(%s, %lld, %s, %d, dims, sy, %s);\n    }\n", y->name, (long long)(y->bytes / 4),
                x->name, x->rank, emit_cf(c->n->op == OP_REDUCE_MEAN ? (float)(1.0 / (double)count) : 1.0f, sc));
    else
        fprintf(c->f, "        k_reduce_i64(%s, %lld, %s, %d, dims, sy);\n    }\n", y->name, (long long)(y->bytes / 8),
                x->name, x->rank);
    return 0;
}
