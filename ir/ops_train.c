/* ops_train.c: shape functions of the optimizer updates and GeluGrad
 * (ops_train.def).
 *
 * The compiler makes these nodes itself (ir/autodiff.c), but their shape
 * function still checks what the emitter relies on: the gradient and the
 * state have the weight's shape, the state is float32 (master copies), and
 * each output has its input's shape and dtype, since it takes over that
 * input's storage. Which input that is (ir_output_in_place), and the name
 * --out knows the output by (ir_output_name), are here too.
 */
#include "ir.h"

#include <string.h>

int ir_output_in_place(const Node *n, int k)
{
    if (n->op == OP_SGD)
        return k == 0 ? 0 : 2; /* W' over W, M' over M */
    if (n->op == OP_ADAMW)
        return k == 0 ? 0 : k + 1; /* W', M', V' over W, M, V */
    return -1;
}

int ir_in_optimizer_step(const Node *n)
{
    return n->per_step || ir_output_in_place(n, 0) >= 0;
}

/* The input whose storage t (an update's output) takes over, or NULL. */
static const Tensor *in_place_of(const Tensor *t)
{
    const Node *n = t->producer;
    for (int k = 0; n && k < n->noutputs; k++)
        if (n->outputs[k] == t && ir_output_in_place(n, k) >= 0)
            return n->inputs[ir_output_in_place(n, k)];
    return NULL;
}

int ir_in_place(const Tensor *t)
{
    return in_place_of(t) != NULL;
}

const char *ir_output_name(const Tensor *t)
{
    const Tensor *src = in_place_of(t);
    return src ? src->name : t->name;
}

/* GeluGrad (dY, X): float32, one shape (the vjp rule writes it only so). */
int shape_gelu_grad(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *dy = n->inputs[0], *x = n->inputs[1];
    if (x->dtype != DT_F32 || dy->dtype != DT_F32)
        return shape_fail(d, n, "GeluGrad is float32 only (\"%s\" is %s)", x->name, dtype_name(x->dtype));
    if (dy->rank != x->rank || memcmp(dy->dims, x->dims, (size_t)x->rank * sizeof(int64_t)))
        return shape_fail(d, n, "dY \"%s\" is not shaped like X \"%s\"", dy->name, x->name);
    return shape_set(d, n, n->outputs[0], DT_F32, x->rank, x->dims);
}

int shape_optimizer(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *w = n->inputs[0];
    if (!dtype_is_float(w->dtype))
        return shape_fail(d, n, "weight \"%s\" is %s, not a float type", w->name, dtype_name(w->dtype));
    for (int j = 1; j < n->ninputs; j++) {
        const Tensor *t = n->inputs[j];
        if (t->rank != w->rank || memcmp(t->dims, w->dims, (size_t)w->rank * sizeof(int64_t)))
            return shape_fail(d, n, "input \"%s\" is not shaped like the weight \"%s\"", t->name, w->name);
        if (j >= 2 && t->dtype != DT_F32)
            return shape_fail(d, n, "optimizer state \"%s\" must be float32", t->name);
    }
    for (int k = 0; k < n->noutputs; k++) {
        const Tensor *src = n->inputs[ir_output_in_place(n, k)];
        if (shape_set(d, n, n->outputs[k], src->dtype, src->rank, src->dims))
            return -1;
    }
    return 0;
}

