/* loss_vocab.c: cross-entropy over a class dim split across ranks
 * (Megatron's vocab-parallel cross-entropy).
 *
 * An LM head column-split over tp leaves each rank a block of the
 * vocabulary's logits. SoftmaxCrossEntropyLoss picks the target's logit
 * from the whole class dim, so its factor rule keeps that dim whole and
 * the plan would all-gather the logits (tokens x vocabulary floats) before
 * the loss, and their gradient again in backward. Written in primitives
 * the planner splits along the class dim,
 *
 *   m    = max over classes of x         (per token; a constant for autodiff)
 *   z    = x - m
 *   s    = ReduceSum(Exp(z))             (a partial sum per token)
 *   t    = ReduceSum(z * onehot(label))  (a partial sum per token: one rank holds the target)
 *   loss = (Log(s) - t) * (label != ignore_index)
 *
 * then the node's reduction (sum or none: ir/loss_split.c has already
 * turned a mean into a sum over a count), each rank touches only its block
 * of the logits; what crosses ranks is a few floats per token. The max has
 * no partial state in the plan (partition/rules_reduce.c), so it is taken
 * in two steps over the logits reshaped to [N, G, C/G, ...]: a local max
 * over each of the G blocks, then the max of G floats per token, for which
 * the plan gathers [N, G] (G = the product of the model-parallel axes, so
 * a split of the class dim over them lands on the blocks' dim). The
 * one-hot compares the label with an int64 constant 0..C-1 that splits
 * like the class dim; being an integer initializer it is never trained.
 * Autodiff of these ops gives softmax(x) - onehot, times the upstream
 * gradient, split as x is: the logits are never gathered. The max's nodes
 * are marked no_grad: their gradient cancels exactly in the formula (d/dm
 * of log(sum exp(x-m)) + m is 0), so it is dropped rather than computed
 * as a rounding residue, and ReduceMax needs no gradient rule for ties.
 * An ignored label's one-hot row is all zeros and its loss is finite
 * before the mask multiplies it by 0, so no NaN reaches the sum.
 *
 * Applied only when the mesh has model-parallel axes (groups > 1): on one
 * rank, or with data parallelism alone, nothing would split the class dim
 * and the fused loss kernel is faster. Left as they are: class weights,
 * a log_prob output something reads, a mean that remained (float16), and
 * a class dim the groups do not divide.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

typedef struct Rw {
    Graph *g;
    Node *n; /* the loss node being rewritten */
    Diag *d;
} Rw;

static Tensor *konst(Rw *w, const char *what, DType dt, const void *vals, int rank, const int64_t *dims)
{
    char name[300];
    snprintf(name, sizeof name, "%.250s/%s", w->n->name, what);
    Tensor *t = graph_tensor_fresh(w->g, name);
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        numel *= dims[i];
    size_t bytes = (size_t)numel * dtype_size(dt);
    void *p = arena_alloc(&w->g->arena, bytes);
    memcpy(p, vals, bytes);
    t->data = p;
    t->nbytes = (int64_t)bytes;
    t->dtype = dt;
    t->rank = rank;
    if (rank) /* (a scalar passes no dims) */
        memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    t->is_initializer = 1;
    return t;
}

/* A node named after the loss, shape-inferred at once (its inputs are). */
static Node *mk(Rw *w, OpKind op, const char *what, Tensor *a, Tensor *b)
{
    char name[300];
    snprintf(name, sizeof name, "%.250s/%s", w->n->name, what);
    Tensor *ins[2] = {a, b};
    return graph_node_make(w->g, op, name, ins, b ? 2 : 1);
}

static Tensor *done(Rw *w, Node *n)
{
    return ir_infer_node(w->g, n, w->d) ? NULL : n->outputs[0];
}

static Tensor *un(Rw *w, OpKind op, const char *what, Tensor *a)
{
    return a ? done(w, mk(w, op, what, a, NULL)) : NULL;
}

static Tensor *bin(Rw *w, OpKind op, const char *what, Tensor *a, Tensor *b)
{
    return a && b ? done(w, mk(w, op, what, a, b)) : NULL;
}

static Tensor *reshape(Rw *w, const char *what, Tensor *a, const int64_t *dims, int rank, int no_grad)
{
    if (!a)
        return NULL;
    Node *n = mk(w, OP_RESHAPE, what, a, NULL);
    n->no_grad = (unsigned)no_grad;
    node_attr_set_ints(w->g, n, "shape", dims, rank);
    return done(w, n);
}

static Tensor *reduce(Rw *w, OpKind op, const char *what, Tensor *a, const int64_t *axes, int naxes, int keep,
                      int no_grad)
{
    if (!a)
        return NULL;
    Node *n = mk(w, op, what, a, NULL);
    n->no_grad = (unsigned)no_grad;
    node_attr_set_ints(w->g, n, "axes", axes, naxes);
    node_attr_set_int(w->g, n, "keepdims", keep);
    return done(w, n);
}

/* Is n a cross-entropy this pass rewrites for groups blocks of classes? */
static int applies(const Node *n, int64_t groups)
{
    if (n->folded || n->op != OP_SCE_LOSS)
        return 0;
    const char *red = node_attr_str(n, "reduction", "mean");
    if (strcmp(red, "sum") != 0 && strcmp(red, "none") != 0)
        return 0;
    if (n->ninputs > 2 && n->inputs[2])
        return 0; /* class weights */
    const Tensor *lp = n->noutputs > 1 ? n->outputs[1] : NULL;
    if (lp && (lp->is_output || lp->nconsumers))
        return 0;
    const Tensor *x = n->inputs[0], *lab = n->inputs[1];
    return x->rank >= 2 && x->rank < IR_MAX_RANK && (x->dtype == DT_F32 || x->dtype == DT_F64) &&
           (lab->dtype == DT_I64 || lab->dtype == DT_I32) && x->dims[1] > groups && x->dims[1] % groups == 0;
}

static int rewrite(Rw *w, int64_t groups)
{
    Node *n = w->n;
    Graph *g = w->g;
    Tensor *x = n->inputs[0], *lab = n->inputs[1], *loss = n->outputs[0];
    int r = x->rank;
    int64_t C = x->dims[1];
    DType ft = x->dtype;

    /* m: the per-token max, in two steps so that a split class dim gathers G floats per token. */
    int64_t blk[IR_MAX_RANK], tok[IR_MAX_RANK], lab1[IR_MAX_RANK];
    blk[0] = x->dims[0];
    blk[1] = groups;
    blk[2] = C / groups;
    for (int i = 2; i < r; i++)
        blk[i + 1] = x->dims[i];
    for (int i = 0; i < r; i++)
        tok[i] = i == 1 ? 1 : x->dims[i];
    for (int i = 0; i < r; i++) /* the labels with a class dim of 1: [N, 1, d...] */
        lab1[i] = i == 1 ? 1 : lab->dims[i == 0 ? 0 : i - 1];
    int64_t ax1 = 1, ax2 = 2;
    Tensor *xb = reshape(w, "blocks", x, blk, r + 1, 1);
    Tensor *mb = reduce(w, OP_REDUCE_MAX, "block_max", xb, &ax2, 1, 1, 1);
    Tensor *mg = reduce(w, OP_REDUCE_MAX, "max", mb, &ax1, 1, 1, 1);
    Tensor *m = reshape(w, "max_token", mg, tok, r, 1);

    Tensor *z = bin(w, OP_SUB, "shifted", x, m);
    Tensor *s = reduce(w, OP_REDUCE_SUM, "sum_exp", un(w, OP_EXP, "exp", z), &ax1, 1, 1, 0);
    Tensor *ls = un(w, OP_LOG, "log_sum_exp", s);

    /* The one-hot of the label against 0..C-1 (shaped [1, C, 1...] to broadcast). */
    int64_t idims[IR_MAX_RANK];
    for (int i = 0; i < r; i++)
        idims[i] = i == 1 ? C : 1;
    size_t es = dtype_size(lab->dtype);
    unsigned char *iv = arena_alloc(&g->arena, (size_t)C * es);
    for (int64_t c = 0; c < C; c++) {
        int64_t v64 = c;
        int32_t v32 = (int32_t)c;
        memcpy(iv + (size_t)c * es, lab->dtype == DT_I64 ? (const void *)&v64 : (const void *)&v32, es);
    }
    Tensor *iota = konst(w, "classes", lab->dtype, iv, r, idims);
    Tensor *lu = reshape(w, "label", lab, lab1, r, 0);
    Tensor *oh = bin(w, OP_EQUAL, "is_target", lu, iota);
    Node *cn = oh ? mk(w, OP_CAST, "onehot", oh, NULL) : NULL;
    if (cn)
        node_attr_set_int(g, cn, "to", ft);
    Tensor *ohf = cn ? done(w, cn) : NULL;
    Tensor *t = reduce(w, OP_REDUCE_SUM, "target", bin(w, OP_MUL, "target_terms", z, ohf), &ax1, 1, 1, 0);
    Tensor *per = bin(w, OP_SUB, "token_loss", ls, t);

    const Attr *ign = node_attr(n, "ignore_index");
    if (ign) {
        int64_t v64 = ign->i;
        int32_t v32 = (int32_t)ign->i;
        Tensor *ix = konst(w, "ignore_index", lab->dtype, lab->dtype == DT_I64 ? (const void *)&v64 : (const void *)&v32,
                           0, NULL);
        Tensor *counted = un(w, OP_NOT, "counted", bin(w, OP_EQUAL, "ignored", lu, ix));
        Node *vn = counted ? mk(w, OP_CAST, "counted_float", counted, NULL) : NULL;
        if (vn)
            node_attr_set_int(g, vn, "to", ft);
        per = bin(w, OP_MUL, "token_loss_counted", per, vn ? done(w, vn) : NULL);
    }
    if (!per)
        return -1;

    /* The loss node becomes the last step, so the loss tensor keeps its
     * name and producer: a Reshape to the labels' shape ("none") or a
     * ReduceSum over every element ("sum"). */
    int sum = strcmp(node_attr_str(n, "reduction", "mean"), "sum") == 0;
    if (n->noutputs > 1 && n->outputs[1])
        n->outputs[1]->producer = NULL; /* an unread log_prob: dropped */
    n->noutputs = 1;
    n->nattrs = 0;
    n->attrs = NULL;
    n->inputs[0] = per;
    n->ninputs = 1;
    if (sum) {
        n->op = OP_REDUCE_SUM;
        int64_t axes[IR_MAX_RANK];
        for (int i = 0; i < r; i++)
            axes[i] = i;
        node_attr_set_ints(g, n, "axes", axes, r);
        node_attr_set_int(g, n, "keepdims", 0);
    } else {
        n->op = OP_RESHAPE;
        node_attr_set_ints(g, n, "shape", lab->dims, lab->rank);
    }
    n->outputs[0] = loss;
    return ir_infer_node(g, n, w->d);
}

int ir_split_vocab_losses(Graph *g, int64_t groups, Diag *d)
{
    if (groups <= 1)
        return 0;
    graph_link_consumers(g);
    int nnodes = g->nnodes, any = 0;
    for (int i = 0; i < nnodes; i++) {
        Node *n = g->nodes[i];
        if (!applies(n, groups))
            continue;
        Rw w = {.g = g, .n = n, .d = d};
        if (rewrite(&w, groups))
            return -1;
        any = 1;
    }
    if (!any)
        return 0;
    graph_link_consumers(g);
    return graph_toposort(g, d); /* (the new nodes were appended after the loss node they feed) */
}
