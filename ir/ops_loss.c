/* ops_loss.c: shape and fold functions of the loss family (ops_loss.def):
 * NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, Dropout (inference
 * only), Hardmax, LpNormalization, ReduceLogSum, MeanVarianceNormalization
 * and EyeLike.
 *
 * The two losses take input [N, C, d1..dk] (scores for
 * SoftmaxCrossEntropyLoss) and integer targets [N, d1..dk]; the optional
 * weight is [C]. reduction "none" keeps the per-element loss, "sum" and
 * "mean" give a scalar. Dropout is accepted only where ONNX makes it the
 * identity: training_mode absent or a constant false, or a constant ratio
 * of 0 (the frontend reads opset 7 on, so the older is_test form never
 * arrives here; opsets 7 to 11 have no training mode). A random mask cannot match any reference, so training
 * with a non-zero ratio is refused at compile time. EyeLike depends only
 * on its input's shape, so it folds to a constant whenever the result is
 * small (up to 1 MiB); larger ones run a kernel.
 */
#include "ir.h"

#include <string.h>

static int need_float(Diag *d, const Node *n, const Tensor *t, const char *what)
{
    if (dtype_is_float(t->dtype))
        return 0;
    return shape_fail(d, n, "%s \"%s\" has dtype %s; %s needs a float type", what, t->name, dtype_name(t->dtype),
                      node_op_name(n));
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. */
int shape_loss(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0], *t = n->inputs[1], *w = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (need_float(d, n, x, "input"))
        return -1;
    if (!dtype_is_int(t->dtype))
        return shape_fail(d, n, "target \"%s\" has dtype %s; needs an integer type", t->name, dtype_name(t->dtype));
    if (x->rank < 2)
        return shape_fail(d, n, "input \"%s\" has rank %d; needs [N, C, d1...]", x->name, x->rank);
    int ok = t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
    for (int i = 1; ok && i < t->rank; i++)
        ok = t->dims[i] == x->dims[i + 1];
    if (!ok) {
        char a[160], b[160];
        return shape_fail(d, n, "target \"%s\" %s must be input \"%s\" %s without its class dim 1", t->name,
                          shape_str(t->dims, t->rank, a, sizeof a), x->name, shape_str(x->dims, x->rank, b, sizeof b));
    }
    if (w && (w->rank != 1 || w->dims[0] != x->dims[1]))
        return shape_fail(d, n, "weight \"%s\" must have shape [%lld]", w->name, (long long)x->dims[1]);
    if (w && w->dtype != x->dtype)
        return shape_fail(d, n, "weight \"%s\" (%s) and input \"%s\" (%s) differ in dtype", w->name,
                          dtype_name(w->dtype), x->name, dtype_name(x->dtype));
    const char *red = node_attr_str(n, "reduction", "mean");
    int none = strcmp(red, "none") == 0;
    if (!none && strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
        return shape_fail(d, n, "reduction \"%s\" is not one of none, sum, mean", red);
    if (shape_set(d, n, n->outputs[0], x->dtype, none ? t->rank : 0, t->dims))
        return -1;
    if (n->noutputs > 1 && n->outputs[1])
        return shape_set(d, n, n->outputs[1], x->dtype, x->rank, x->dims);
    return 0;
}

/* Whether a Dropout is the identity, from its constant inputs and
 * attributes; -1 with a diagnostic when it would be random. */
int shape_dropout(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    const Tensor *ratio = n->ninputs > 1 ? n->inputs[1] : NULL, *train = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (need_float(d, n, x, "data"))
        return -1;
    int training = 0;
    if (train) {
        if (train->dtype != DT_BOOL || tensor_numel(train) != 1)
            return shape_fail(d, n, "training_mode \"%s\" must be one bool", train->name);
        if (!train->data)
            return shape_fail(d, n, "input \"%s\" (training_mode) must be a constant: a run-time training switch is "
                                    "not supported%s", train->name, shape_const_hint(train));
        training = dtype_load(DT_BOOL, train->data, 0) != 0;
    }
    if (ratio && (!dtype_is_float(ratio->dtype) || tensor_numel(ratio) != 1))
        return shape_fail(d, n, "ratio \"%s\" must be one float", ratio->name);
    if (training) {
        /* Training with ratio 0 keeps every element: still the identity. */
        if (ratio && !ratio->data)
            return shape_fail(d, n, "input \"%s\" (ratio) must be a constant when training_mode is true: random "
                                    "dropout is not supported%s", ratio->name, shape_const_hint(ratio));
        double r = ratio ? dtype_load(ratio->dtype, ratio->data, 0) : 0.5;
        if (r != 0.0)
            return shape_fail(d, n, "training_mode is true with ratio %g: random dropout is not supported "
                                    "(inference, or ratio 0, is the identity)", r);
    }
    if (shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims))
        return -1;
    if (n->noutputs > 1 && n->outputs[1])
        return shape_set(d, n, n->outputs[1], DT_BOOL, x->rank, x->dims);
    return 0;
}

/* Hardmax and LpNormalization work along one axis. Hardmax before opset
 * 13 flattens x to 2-D at axis (default 1) and works along all dims from
 * axis on together; that is the opset-13 form when axis is the last dim,
 * the only old form accepted. (The rule and the emitter read axis with
 * the default -1, which then names the same dim: an absent axis is 1 and
 * the last dim only for a 2-D input.) */
int shape_loss_axis(Graph *g, Node *n, Diag *d)
{
    const Tensor *x = n->inputs[0];
    int axis, old = n->op == OP_HARDMAX && g->opset < 13;
    if (need_float(d, n, x, "input") ||
        shape_norm_axis(d, n, node_attr_int(n, "axis", old ? 1 : -1), x->rank, "axis", &axis))
        return -1;
    if (old && axis != x->rank - 1)
        return shape_fail(d, n, "the opset-%lld form (flattened to 2-D from axis %d of rank %d) is not supported; "
                          "opset 13 or later, or axis the last dim", (long long)g->opset, axis, x->rank);
    if (n->op == OP_LP_NORM) {
        int64_t p = node_attr_int(n, "p", 2);
        if (p != 1 && p != 2)
            return shape_fail(d, n, "p = %lld; ONNX defines only p = 1 or 2", (long long)p);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* MeanVarianceNormalization: statistics over axes (default N, H, W of
 * NCHW), the output x's shape. */
int shape_loss_mvn(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    if (need_float(d, n, x, "input"))
        return -1;
    const Attr *axes = node_attr(n, "axes");
    unsigned mask;
    if (axes) {
        if (axes->n == 0)
            return shape_fail(d, n, "axes is empty");
        if (shape_axes_mask(d, n, axes, x->rank, &mask))
            return -1;
    } else if (x->rank < 4) {
        return shape_fail(d, n, "the default axes [0, 2, 3] need a rank-4 input; \"%s\" has rank %d", x->name,
                          x->rank);
    }
    return shape_set(d, n, n->outputs[0], x->dtype, x->rank, x->dims);
}

/* EyeLike: the input's 2-D shape, the dtype attribute or the input's. */
int shape_eyelike(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    if (x->rank != 2)
        return shape_fail(d, n, "input \"%s\" has rank %d; EyeLike needs a 2-D input", x->name, x->rank);
    int64_t dt = node_attr_int(n, "dtype", x->dtype);
    if (!dtype_supported((int)dt))
        return shape_fail(d, n, "dtype %s is not supported (%s)", dtype_onnx_name((int)dt), DTYPE_SUPPORTED_LIST);
    return shape_set(d, n, n->outputs[0], (DType)dt, 2, x->dims);
}

/* Largest EyeLike folded to a constant: a bigger one would only swell
 * the weight file with zeros that the kernel writes as fast. */
#define EYELIKE_FOLD_MAX_BYTES ((int64_t)1 << 20)

/* The output depends only on the input's shape, so it folds whenever it
 * is small, whether or not the input is a constant. */
int fold_eyelike(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *y = n->outputs[0];
    int64_t k = node_attr_int(n, "k", 0), rows = y->dims[0], cols = y->dims[1];
    if (tensor_numel(y) * (int64_t)dtype_size(y->dtype) > EYELIKE_FOLD_MAX_BYTES)
        return 0; /* the product was checked against ir/fold.c's limit before this call */
    fold_alloc(g, y);
    for (int64_t i = 0; i < rows; i++)
        if (k >= -i && k < cols - i) /* i + k would overflow for a huge k */
            fold_set(y, i * cols + i + k, 1.0);
    return 1;
}
