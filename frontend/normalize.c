/* normalize.c: one IR form for every opset from 7 to 27.
 *
 * Later opsets moved several attributes to inputs (Reshape's shape since 5,
 * Slice's starts/ends/axes/steps since 10, Split's split, Squeeze's and
 * Unsqueeze's and ReduceSum's axes since 13, ReduceMean's since 18). The
 * compiler needs their values at compile time anyway (static shapes), so
 * each such input must be a constant (an initializer or a Constant node);
 * its values become the attribute of the old form and the input is
 * dropped. Two ops went the other way and keep the new form: Pad's pads
 * and value and Clip's min and max were attributes before opset 11, and
 * become constant inputs here. CastLike becomes Cast to the second input's
 * type. Softmax, LogSoftmax and Hardmax before opset 13 normalised over
 * every dim from `axis` on (flattened to 2-D); where that differs from the
 * opset-13 form (axis not the last dim) the model is refused by name.
 * After this pass the arity columns of ops.def hold.
 */
#include "frontend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct FoldRule {
    OpKind op;
    int first;                 /* first input index folded */
    const char *names[4];      /* attribute per folded input, in order */
} FoldRule;

static const FoldRule fold_rules[] = {
    {OP_RESHAPE, 1, {"shape"}},
    {OP_SLICE, 1, {"starts", "ends", "axes", "steps"}},
    {OP_SPLIT, 1, {"split"}},
    {OP_SQUEEZE, 1, {"axes"}},
    {OP_UNSQUEEZE, 1, {"axes"}},
    {OP_REDUCE_SUM, 1, {"axes"}},
    {OP_REDUCE_MEAN, 1, {"axes"}},
    {OP_REDUCE_MAX, 1, {"axes"}},
    {OP_REDUCE_MIN, 1, {"axes"}},
    {OP_REDUCE_PROD, 1, {"axes"}},
    {OP_REDUCE_SUM_SQUARE, 1, {"axes"}},
    {OP_REDUCE_L1, 1, {"axes"}},
    {OP_REDUCE_L2, 1, {"axes"}},
    {OP_REDUCE_LOG_SUM_EXP, 1, {"axes"}},
    {OP_CUMSUM, 1, {"axis"}},
    {OP_CUMPROD, 1, {"axis"}},
    {OP_REDUCE_LOG_SUM, 1, {"axes"}},
    {OP_TOPK, 1, {"k"}},
    {OP_EXPAND, 1, {"shape"}},
    {OP_TILE, 1, {"repeats"}},
};

static int fold_input(Graph *g, Node *n, int idx, const char *attr, Diag *d)
{
    Tensor *t = n->inputs[idx];
    if (!t)
        return 0; /* an omitted optional input keeps the default */
    if (!t->data && (t->rank < 0 || tensor_numel(t) != 0)) {
        diag_add(d, "node \"%s\" (%s): input \"%s\" (%s) must be a constant: dynamic values are not supported%s",
                 n->name, node_op_name(n), t->name, attr, shape_const_hint(t));
        return -1;
    }
    if ((t->dtype != DT_I64 && t->dtype != DT_I32) || t->rank > 1) {
        diag_add(d, "node \"%s\" (%s): input \"%s\" (%s) must be a 1-D int64 or int32 constant",
                 n->name, node_op_name(n), t->name, attr);
        return -1;
    }
    int64_t count = t->rank == 0 ? 1 : t->dims[0];
    if (count > 64) {
        diag_add(d, "node \"%s\" (%s): input \"%s\" (%s) has %lld entries (at most 64)",
                 n->name, node_op_name(n), t->name, attr, (long long)count);
        return -1;
    }
    int64_t vals[64];
    for (int64_t i = 0; i < count; i++)
        vals[i] = t->dtype == DT_I64 ? 0 : (int64_t)dtype_load(t->dtype, t->data, i);
    if (count && t->dtype == DT_I64)
        memcpy(vals, t->data, (size_t)count * sizeof(int64_t)); /* may be unaligned; exact */
    node_attr_set_ints(g, n, attr, vals, (int)count);
    return 0;
}

/* The type every attribute the compiler reads must have; a model that
 * gives, say, perm as floats is refused here rather than misread later. */
static const struct {
    const char *name;
    AttrType type;
} attr_types[] = {
    {"perm", ATTR_INTS}, {"axes", ATTR_INTS}, {"pads", ATTR_INTS},
    {"strides", ATTR_INTS}, {"dilations", ATTR_INTS}, {"kernel_shape", ATTR_INTS},
    {"split", ATTR_INTS}, {"shape", ATTR_INTS}, {"starts", ATTR_INTS},
    {"ends", ATTR_INTS}, {"steps", ATTR_INTS},
    {"axis", ATTR_INT}, {"keepdims", ATTR_INT}, {"transA", ATTR_INT},
    {"transB", ATTR_INT}, {"group", ATTR_INT}, {"ceil_mode", ATTR_INT},
    {"to", ATTR_INT}, {"allowzero", ATTR_INT}, {"noop_with_empty_axes", ATTR_INT},
    {"num_outputs", ATTR_INT}, {"storage_order", ATTR_INT}, {"training_mode", ATTR_INT},
    {"stash_type", ATTR_INT},
    {"epsilon", ATTR_FLOAT}, {"alpha", ATTR_FLOAT}, {"beta", ATTR_FLOAT},
    {"momentum", ATTR_FLOAT},
    {"fmod", ATTR_INT}, {"detect_positive", ATTR_INT}, {"detect_negative", ATTR_INT}, {"gamma", ATTR_FLOAT},
    {"auto_pad", ATTR_STRING}, {"approximate", ATTR_STRING},
    {"blocksize", ATTR_INT}, {"batch_dims", ATTR_INT}, {"upper", ATTR_INT},
    {"reduction", ATTR_STRING}, {"mode", ATTR_STRING},
};

static const char *attr_type_name(AttrType t)
{
    switch (t) {
    case ATTR_FLOAT: return "float";
    case ATTR_INT: return "int";
    case ATTR_STRING: return "string";
    case ATTR_TENSOR: return "tensor";
    case ATTR_GRAPH: return "graph";
    case ATTR_FLOATS: return "floats";
    case ATTR_INTS: return "ints";
    case ATTR_STRINGS: return "strings";
    default: return "another type";
    }
}

static int check_attr_types(const Node *n, Diag *d)
{
    for (int i = 0; i < n->nattrs; i++)
        for (size_t k = 0; k < sizeof(attr_types) / sizeof(attr_types[0]); k++)
            if (strcmp(n->attrs[i].name, attr_types[k].name) == 0 &&
                n->attrs[i].type != attr_types[k].type) {
                diag_add(d, "node \"%s\" (%s): attribute \"%s\" must be %s, not %s", n->name,
                         node_op_name(n), n->attrs[i].name, attr_type_name(attr_types[k].type),
                         attr_type_name(n->attrs[i].type));
                return -1;
            }
    return 0;
}

/* A new constant tensor for an attribute that later opsets made an input:
 * named after the node and the attribute, made unique. */
static Tensor *const_input(Graph *g, const Node *n, const char *what, DType dt, int rank, const int64_t *dims)
{
    char name[256];
    snprintf(name, sizeof name, "%.200s.%s", n->name, what);
    for (int k = 2; graph_tensor_find(g, name); k++)
        snprintf(name, sizeof name, "%.200s.%s.%d", n->name, what, k);
    Tensor *t = graph_tensor_get(g, name);
    t->dtype = dt;
    t->rank = rank;
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        numel *= t->dims[i] = dims[i];
    t->nbytes = numel * (int64_t)dtype_size(dt);
    t->data = arena_alloc(&g->arena, (size_t)t->nbytes + 8);
    t->is_initializer = 1;
    return t;
}

static void set_inputs(Graph *g, Node *n, Tensor *const *ins, int count)
{
    Tensor **na = arena_alloc(&g->arena, (size_t)count * sizeof(Tensor *));
    memcpy(na, ins, (size_t)count * sizeof(Tensor *));
    n->inputs = na;
    n->ninputs = count;
}

/* The pre-opset-11 forms of Pad (pads, value) and Clip (min, max) as
 * attributes: made constant inputs of the data's type. */
static int old_attrs_to_inputs(Graph *g, Node *n, Diag *d)
{
    const Tensor *x = n->ninputs ? n->inputs[0] : NULL;
    if (!x || x->rank < 0 || !dtype_size(x->dtype))
        return 0;
    if (n->op == OP_PAD && n->ninputs == 1 && node_attr(n, "pads")) {
        const Attr *p = node_attr(n, "pads");
        if (p->type != ATTR_INTS) {
            diag_add(d, "node \"%s\" (Pad): attribute \"pads\" must be ints", n->name);
            return -1;
        }
        int64_t len = p->n;
        Tensor *pads = const_input(g, n, "pads", DT_I64, 1, &len);
        memcpy((void *)(uintptr_t)pads->data, p->ints, (size_t)len * sizeof(int64_t));
        Tensor *value = const_input(g, n, "value", x->dtype, 0, NULL);
        dtype_store(x->dtype, (void *)(uintptr_t)value->data, 0, node_attr_float(n, "value", 0.0f));
        Tensor *ins[3] = {n->inputs[0], pads, value};
        set_inputs(g, n, ins, 3);
    } else if (n->op == OP_CLIP && n->ninputs == 1 && (node_attr(n, "min") || node_attr(n, "max"))) {
        Tensor *ins[3] = {n->inputs[0], NULL, NULL};
        const char *names[2] = {"min", "max"};
        for (int k = 0; k < 2; k++)
            if (node_attr(n, names[k])) {
                ins[1 + k] = const_input(g, n, names[k], x->dtype, 0, NULL);
                dtype_store(x->dtype, (void *)(uintptr_t)ins[1 + k]->data, 0, node_attr_float(n, names[k], 0.0f));
            }
        set_inputs(g, n, ins, 3);
    }
    return 0;
}

int frontend_normalize(Graph *g, Diag *d)
{
    for (int i = 0; i < g->nnodes; i++)
        if (frontend_normalize_node(g, g->nodes[i], d))
            return -1;
    return 0;
}

int frontend_normalize_node(Graph *g, Node *n, Diag *d)
{
    {
        const OpInfo *info = &op_table[n->op];
        if (check_attr_types(n, d))
            return -1;
        if (n->op == OP_CAST && n->ninputs == 2 && !node_attr(n, "to")) { /* CastLike */
            const Tensor *like = n->inputs[1];
            if (!like || like->rank < 0) {
                diag_add(d, "node \"%s\" (CastLike): its second input has no known type", n->name);
                return -1;
            }
            int64_t to = like->dtype;
            node_attr_set_ints(g, n, "to", &to, 1);
            Attr *a = (Attr *)node_attr(n, "to");
            a->type = ATTR_INT;
            a->i = to;
            n->ninputs = 1;
        }
        if (g->opset < 11 && old_attrs_to_inputs(g, n, d))
            return -1;
        if (g->opset < 13 && (n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX) && n->ninputs && n->inputs[0] &&
            n->inputs[0]->rank >= 0) {
            int64_t axis = node_attr_int(n, "axis", 1), r = n->inputs[0]->rank;
            if (axis < 0)
                axis += r;
            if (axis < 0 || axis >= (r ? r : 1)) {
                diag_add(d, "node \"%s\" (%s): axis %lld is out of range for input rank %lld", n->name,
                         node_op_name(n), (long long)node_attr_int(n, "axis", 1), (long long)r);
                return -1;
            }
            int64_t flat = 1;
            for (int64_t i = axis + 1; i < r; i++)
                flat *= n->inputs[0]->dims[i];
            if (axis != r - 1 && flat != 1) {
                diag_add(d, "node \"%s\" (%s): opset %lld normalises over the dims from axis %lld on, flattened; "
                            "only the last dim (opset 13 and later) is supported",
                         n->name, node_op_name(n), (long long)g->opset, (long long)axis);
                return -1;
            }
            /* Here the flattened block is dim `axis` alone: the same result. */
            node_attr_set_ints(g, n, "axis", &axis, 1);
            Attr *a = (Attr *)node_attr(n, "axis");
            a->type = ATTR_INT;
            a->i = axis;
        }
        for (size_t r = 0; r < sizeof(fold_rules) / sizeof(fold_rules[0]); r++) {
            const FoldRule *fr = &fold_rules[r];
            if (fr->op != n->op || n->ninputs <= fr->first)
                continue;
            int nfold = n->ninputs - fr->first;
            if (nfold > 4 || !fr->names[nfold - 1]) {
                diag_add(d, "node \"%s\" (%s): has %d inputs, at most %d expected", n->name,
                         info->name, n->ninputs, fr->first + (int)(sizeof(fr->names) / sizeof(fr->names[0])));
                return -1;
            }
            for (int k = 0; k < nfold; k++)
                if (fold_input(g, n, fr->first + k, fr->names[k], d))
                    return -1;
            n->ninputs = fr->first;
        }
        /* Trailing omitted optional inputs/outputs do not count. */
        while (n->ninputs > 0 && !n->inputs[n->ninputs - 1])
            n->ninputs--;
        while (n->noutputs > 1 && !n->outputs[n->noutputs - 1])
            n->noutputs--;
        if (n->ninputs < info->min_inputs || n->ninputs > info->max_inputs) {
            diag_add(d, "node \"%s\" (%s): has %d inputs, expected %d to %d", n->name,
                     info->name, n->ninputs, info->min_inputs, info->max_inputs);
            return -1;
        }
        if (n->noutputs < info->min_outputs || n->noutputs > info->max_outputs) {
            diag_add(d, "node \"%s\" (%s): has %d outputs, expected %d to %d", n->name,
                     info->name, n->noutputs, info->min_outputs, info->max_outputs);
            return -1;
        }
        for (int k = 0; k < info->min_inputs; k++)
            if (!n->inputs[k]) {
                diag_add(d, "node \"%s\" (%s): required input %d is empty", n->name,
                         info->name, k);
                return -1;
            }
        if (!n->outputs[0]) {
            diag_add(d, "node \"%s\" (%s): first output is empty", n->name, info->name);
            return -1;
        }
    }
    return 0;
}
