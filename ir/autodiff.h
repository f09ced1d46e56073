/* autodiff.h: what the vector-Jacobian rules (ir/vjp*.c) see and build.
 *
 * ir/autodiff.c walks the graph backwards from the loss and calls, for
 * each node some gradient flows through, its op's vjp_fn (the op table's
 * last column). A rule reads the node, the gradients of its outputs
 * (dy, NULL where none flows) and which inputs want one (want), and
 * appends ordinary nodes to the graph that compute them (dx): the
 * backward pass is IR like the forward one, so shape inference, factor
 * rules, propagation, reshard lowering and both emitters serve it as they
 * are. The builders below name each new node after the forward node it
 * differentiates ("fc1/grad3"), infer its shape at once, and return its
 * output, or NULL with a diagnostic naming that node.
 */
#ifndef ONNX2SPMD_AUTODIFF_H
#define ONNX2SPMD_AUTODIFF_H

#include "ir.h"

struct Vjp {
    Graph *g;
    Node *n;              /* the forward node */
    Tensor *const *dy;    /* per output: its gradient, or NULL */
    const unsigned char *want; /* per input: 1 when a gradient is wanted */
    Tensor **dx;          /* per input: set by the rule (NULL: none) */
    Diag *d;
    int seq;              /* names the next node */
};

/* A node of `op` over the given inputs (NULL-terminated list in ins), its
 * attributes set by the caller before vjp_done infers its shape. */
Node *ad_begin(Vjp *v, OpKind op, int nin, Tensor *const *ins);
Tensor *ad_done(Vjp *v, Node *n);      /* output 0, or NULL on error */
/* One more output of n (a MaxPool's indices), before ad_done. */
Tensor *ad_add_output(Vjp *v, Node *n);
Tensor *ad_un(Vjp *v, OpKind op, Tensor *a);
Tensor *ad_bin(Vjp *v, OpKind op, Tensor *a, Tensor *b);
Tensor *ad_scalar(Vjp *v, float value); /* a float32 constant, rank 0 */
/* A constant of n values of dt, rank 0 (n 1) or 1, named from base. */
Tensor *ad_const(Vjp *v, const char *base, DType dt, const void *vals, int64_t n, int rank);
Tensor *ad_reshape(Vjp *v, Tensor *a, const int64_t *dims, int rank);
Tensor *ad_transpose(Vjp *v, Tensor *a, const int64_t *perm);
Tensor *ad_swap_last2(Vjp *v, Tensor *a); /* the last two dims exchanged (a matrix transposed) */
/* ReduceSum or ReduceMean over the dims in mask (bit i: dim i). */
Tensor *ad_reduce(Vjp *v, OpKind op, Tensor *a, unsigned mask, int keepdims);
/* g summed down to the shape of like (undoing broadcasting), or g itself. */
Tensor *ad_sum_to(Vjp *v, Tensor *g, const Tensor *like);
Tensor *ad_expand(Vjp *v, Tensor *a, const int64_t *dims, int rank);
Tensor *ad_cast(Vjp *v, Tensor *a, DType to);
/* -1 with a diagnostic "node X (Op): no gradient for ...: why". */
int vjp_fail(Vjp *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
