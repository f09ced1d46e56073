/* ops_shape.c: shape and fold functions of the shape family (ops_shape.def).
 *
 * These ops compute with shapes, which are static once --dim binds the
 * symbolic dims, so they always fold at import (ir/fold.c) and never reach
 * the partitioner or the code generators (their rule and emit columns are
 * rule_none and emit_none).
 */
#include "ir.h"

#include <string.h>

/* Shape(x) with the opset-15 start/end window: int64 [end - start]. */
static void shape_window(const Node *n, int rank, int *lo, int *hi)
{
    int64_t s = node_attr_int(n, "start", 0), e = node_attr_int(n, "end", rank);
    if (s < 0)
        s += rank;
    if (e < 0)
        e += rank;
    *lo = (int)(s < 0 ? 0 : s > rank ? rank : s);
    *hi = (int)(e < 0 ? 0 : e > rank ? rank : e);
    if (*hi < *lo)
        *hi = *lo;
}

int shape_shape(Graph *g, Node *n, Diag *d)
{
    (void)g;
    int lo, hi;
    shape_window(n, n->inputs[0]->rank, &lo, &hi);
    int64_t len = hi - lo;
    return shape_set(d, n, n->outputs[0], DT_I64, 1, &len);
}

int fold_shape(Graph *g, Node *n, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int lo, hi;
    shape_window(n, x->rank, &lo, &hi);
    int64_t *v = fold_alloc(g, n->outputs[0]);
    for (int i = lo; i < hi; i++)
        v[i - lo] = x->dims[i];
    return 1;
}
