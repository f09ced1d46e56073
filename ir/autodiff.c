/* autodiff.c: the backward pass and the optimizer, built in the IR.
 *
 * `--train` turns an inference graph that computes a scalar loss into one
 * training step: the forward nodes as they are, then the gradient of the
 * loss with respect to every trainable initializer (reverse mode, one
 * vector-Jacobian rule per op from the op table, ir/vjp*.c), then one
 * optimizer node per trainable weight (OP_SGD, OP_ADAMW) whose outputs
 * replace the weight and its optimizer state in place. Everything later
 * stages see is ordinary nodes and tensors: propagation lays the backward
 * nodes out by the same factor rules (a weight gradient contracted over a
 * batch split on dp comes out partial over dp, and the optimizer node,
 * elementwise with the weight, asks for it whole: the reshard lowering
 * writes the data-parallel all-reduce; Megatron's conjugate collectives of
 * tensor parallelism appear the same way), and the schedule starts each
 * all-reduce as soon as its gradient is computed and waits for it at its
 * optimizer node, so it overlaps the rest of backward.
 *
 * Gradients flow only along float paths from a trainable weight to the
 * loss: frozen weights, integer tensors (token ids, shapes, masks) and
 * nodes no trainable weight reaches get no gradient code. A value read
 * by several nodes gets the sum of their contributions (one Sum node).
 * Nodes are named after the forward node they differentiate
 * ("fc1/grad2"), gradients after their tensor ("h.grad"), made unique
 * against the model's own names.
 */
#include "autodiff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void train_options_default(TrainOptions *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = OPT_SGD;
    o->lr = 1e-3f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->precision = DT_F32;
    o->loss_scale = 65536.0f; /* torch.cuda.amp.GradScaler's init_scale */
}

static char *node_name(Vjp *v)
{
    size_t len = strlen(v->n->name) + 24;
    char *buf = arena_alloc(&v->g->arena, len);
    snprintf(buf, len, "%s/grad%d", v->n->name, v->seq++);
    return buf;
}

int vjp_fail(Vjp *v, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_add(v->d, "--train: node \"%s\" (%s): %s", v->n->label, node_op_name(v->n), msg);
    return -1;
}

/* A rule's float32 constant (ad_scalar's 1, 0.5, ...) read beside a
 * value of another float type (--precision): the constant in that type. */
static Tensor *const_like(Vjp *v, Tensor *c, DType dt)
{
    if (!c || !c->is_initializer || !c->data || c->producer || c->dtype != DT_F32 || dt == DT_F32 ||
        !dtype_is_float(dt) || c->rank > 1 || tensor_numel(c) > 16)
        return c;
    float vals[16];
    int64_t n = tensor_numel(c);
    for (int64_t i = 0; i < n; i++)
        vals[i] = (float)dtype_load(DT_F32, c->data, i);
    unsigned char buf[16 * 8];
    for (int64_t i = 0; i < n; i++)
        dtype_store(dt, buf, i, vals[i]);
    return ad_const(v, c->name, dt, buf, n, c->rank);
}

Node *ad_begin(Vjp *v, OpKind op, int nin, Tensor *const *ins)
{
    Graph *g = v->g;
    Node *n = graph_node_add(g, op, node_name(v));
    n->grad = 1;
    if (v->n->id < g->nnodes && g->nodes[v->n->id] == v->n) /* (not the seed's stand-in) */
        n->fwd = v->n->fwd ? v->n->fwd : v->n;
    n->inputs = arena_alloc(&g->arena, (size_t)(nin ? nin : 1) * sizeof(Tensor *));
    DType dt = DT_UNDEFINED; /* the type of the values it computes on */
    for (int i = 0; i < nin; i++)
        if (ins[i] && dtype_is_float(ins[i]->dtype) && !(ins[i]->is_initializer && ins[i]->data) && !dt)
            dt = ins[i]->dtype;
    for (int i = 0; i < nin; i++)
        n->inputs[i] = dt ? const_like(v, ins[i], dt) : ins[i];
    n->ninputs = nin;
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->noutputs = 1;
    char base[200];
    snprintf(base, sizeof base, "%.180s", n->name);
    n->outputs[0] = graph_tensor_fresh(g, base);
    n->outputs[0]->producer = n;
    return n;
}

Tensor *ad_add_output(Vjp *v, Node *n)
{
    Tensor **outs = arena_alloc(&v->g->arena, (size_t)(n->noutputs + 1) * sizeof(Tensor *));
    memcpy(outs, n->outputs, (size_t)n->noutputs * sizeof(Tensor *));
    char base[200];
    snprintf(base, sizeof base, "%.170s.out%d", n->name, n->noutputs);
    Tensor *t = graph_tensor_fresh(v->g, base);
    t->producer = n;
    outs[n->noutputs++] = t;
    n->outputs = outs;
    return t;
}

Tensor *ad_done(Vjp *v, Node *n)
{
    if (ir_infer_node(v->g, n, v->d))
        return NULL;
    return n->outputs[0];
}

Tensor *ad_un(Vjp *v, OpKind op, Tensor *a)
{
    if (!a)
        return NULL;
    return ad_done(v, ad_begin(v, op, 1, &a));
}

Tensor *ad_bin(Vjp *v, OpKind op, Tensor *a, Tensor *b)
{
    if (!a || !b)
        return NULL;
    Tensor *ins[2] = {a, b};
    return ad_done(v, ad_begin(v, op, 2, ins));
}

Tensor *ad_const(Vjp *v, const char *base, DType dt, const void *vals, int64_t n, int rank)
{
    IR_ASSERT(rank == 0 ? n == 1 : rank == 1);
    Tensor *t = graph_tensor_fresh(v->g, base);
    size_t bytes = (size_t)n * dtype_size(dt);
    void *p = arena_alloc(&v->g->arena, bytes);
    memcpy(p, vals, bytes);
    t->data = p;
    t->nbytes = (int64_t)bytes;
    t->dtype = dt;
    t->rank = rank;
    t->dims[0] = rank ? n : 0;
    t->is_initializer = 1;
    return t;
}

Tensor *ad_scalar(Vjp *v, float value)
{
    char base[64];
    snprintf(base, sizeof base, "const_%.9g", (double)value);
    return ad_const(v, base, DT_F32, &value, 1, 0);
}

Tensor *ad_reshape(Vjp *v, Tensor *a, const int64_t *dims, int rank)
{
    if (!a)
        return NULL;
    if (a->rank == rank && !memcmp(a->dims, dims, (size_t)rank * sizeof(int64_t)))
        return a;
    Node *n = ad_begin(v, OP_RESHAPE, 1, &a);
    node_attr_set_ints(v->g, n, "shape", dims, rank);
    return ad_done(v, n);
}

Tensor *ad_transpose(Vjp *v, Tensor *a, const int64_t *perm)
{
    if (!a)
        return NULL;
    Node *n = ad_begin(v, OP_TRANSPOSE, 1, &a);
    node_attr_set_ints(v->g, n, "perm", perm, a->rank);
    return ad_done(v, n);
}

Tensor *ad_swap_last2(Vjp *v, Tensor *a)
{
    if (!a)
        return NULL;
    int64_t perm[IR_MAX_RANK];
    for (int i = 0; i < a->rank; i++)
        perm[i] = i;
    perm[a->rank - 1] = a->rank - 2;
    perm[a->rank - 2] = a->rank - 1;
    return ad_transpose(v, a, perm);
}

Tensor *ad_reduce(Vjp *v, OpKind op, Tensor *a, unsigned mask, int keepdims)
{
    if (!a)
        return NULL;
    if (!mask)
        return a;
    int64_t axes[IR_MAX_RANK], kd = keepdims;
    int na = 0;
    for (int i = 0; i < a->rank; i++)
        if (mask & (1u << i))
            axes[na++] = i;
    Node *n = ad_begin(v, op, 1, &a);
    node_attr_set_ints(v->g, n, "axes", axes, na);
    node_attr_set_int(v->g, n, "keepdims", kd);
    return ad_done(v, n);
}

Tensor *ad_sum_to(Vjp *v, Tensor *g, const Tensor *like)
{
    if (!g)
        return NULL;
    if (g->rank == like->rank && !memcmp(g->dims, like->dims, (size_t)g->rank * sizeof(int64_t)))
        return g;
    /* Broadcasting aligned the trailing dims: sum the leading extra dims
     * and the dims where like has 1, then reshape to like. */
    unsigned mask = 0;
    int lead = g->rank - like->rank;
    for (int i = 0; i < g->rank; i++)
        if (i < lead || (like->dims[i - lead] == 1 && g->dims[i] != 1))
            mask |= 1u << i;
    Tensor *s = ad_reduce(v, OP_REDUCE_SUM, g, mask, 1);
    return ad_reshape(v, s, like->dims, like->rank);
}

Tensor *ad_expand(Vjp *v, Tensor *a, const int64_t *dims, int rank)
{
    if (!a)
        return NULL;
    if (a->rank == rank && !memcmp(a->dims, dims, (size_t)rank * sizeof(int64_t)))
        return a;
    Node *n = ad_begin(v, OP_EXPAND, 1, &a);
    node_attr_set_ints(v->g, n, "shape", dims, rank);
    return ad_done(v, n);
}

Tensor *ad_cast(Vjp *v, Tensor *a, DType to)
{
    if (!a || a->dtype == to)
        return a;
    Node *n = ad_begin(v, OP_CAST, 1, &a);
    node_attr_set_int(v->g, n, "to", to);
    return ad_done(v, n);
}

int vjp_none(Vjp *v)
{
    return vjp_fail(v, "this op has no gradient rule (freeze the weights behind it with --frozen)");
}

/* ---- the pass ------------------------------------------------------------- */

typedef struct Grads {
    Tensor ***parts; /* per tensor id: contributions so far */
    int *nparts, *cap;
    int n;
} Grads;

static void grads_add(Grads *gr, const Tensor *t, Tensor *part)
{
    int id = t->id;
    if (gr->nparts[id] == gr->cap[id]) {
        gr->cap[id] = gr->cap[id] ? 2 * gr->cap[id] : 2;
        gr->parts[id] = realloc(gr->parts[id], (size_t)gr->cap[id] * sizeof(Tensor *));
        if (!gr->parts[id])
            abort();
    }
    gr->parts[id][gr->nparts[id]++] = part;
}

/* The gradient of t: its one contribution, or their Sum, named t.grad. */
static Tensor *grads_get(Graph *g, Grads *gr, const Tensor *t, Diag *d)
{
    int id = t->id, np = gr->nparts[id];
    if (np == 0)
        return NULL;
    if (np == 1)
        return gr->parts[id][0];
    char base[200];
    snprintf(base, sizeof base, "%.170s.grad_sum", t->name);
    Node *n = graph_node_add(g, OP_SUM, base);
    n->grad = 1;
    /* A weight's contributions: with the earliest node reading it (in a
     * pipeline the lowest stage, where the others' gradients flow to). */
    n->fwd = t->producer;
    for (int k = 0; !t->producer && k < np; k++) {
        const Node *f = gr->parts[id][k]->producer ? gr->parts[id][k]->producer->fwd : NULL;
        if (f && (!n->fwd || f->id < n->fwd->id))
            n->fwd = f;
    }
    n->inputs = arena_alloc(&g->arena, (size_t)np * sizeof(Tensor *));
    memcpy(n->inputs, gr->parts[id], (size_t)np * sizeof(Tensor *));
    n->ninputs = np;
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->noutputs = 1;
    snprintf(base, sizeof base, "%.170s.grad", t->name);
    n->outputs[0] = graph_tensor_fresh(g, base);
    n->outputs[0]->producer = n;
    if (ir_infer_node(g, n, d))
        return NULL;
    gr->parts[id][0] = n->outputs[0];
    gr->nparts[id] = 1;
    return n->outputs[0];
}

/* Is name in the comma-separated list? */
static int in_list(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == len && !memcmp(p, name, len))
            return 1;
        p = c ? c + 1 : NULL;
    }
    return 0;
}

/* Every name of a --frozen/--trainable list must be a float initializer. */
static int check_list(const Graph *g, const char *list, const char *flag, Diag *d)
{
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)(l < sizeof name - 1 ? l : sizeof name - 1), p);
        const Tensor *t = graph_tensor_find(g, name);
        if (!t || !t->is_initializer || t->producer) {
            char lab[256];
            esc_term(name, lab, sizeof lab);
            diag_add(d, "%s %s: the model has no initializer of that name", flag, lab);
            return -1;
        }
        if (!dtype_is_float(t->dtype)) {
            diag_add(d, "%s %s: it is %s, not a float weight", flag, t->label, dtype_name(t->dtype));
            return -1;
        }
        p = c ? c + 1 : NULL;
    }
    return 0;
}

static const Tensor *find_loss(const Graph *g, const TrainOptions *o, Diag *d)
{
    const Tensor *loss = NULL;
    if (o->loss) {
        for (int i = 0; i < g->noutputs; i++)
            if (!strcmp(g->outputs[i]->name, o->loss))
                loss = g->outputs[i];
        if (!loss) {
            char lab[256];
            esc_term(o->loss, lab, sizeof lab);
            diag_add(d, "--loss %s: the model has no output of that name", lab);
            return NULL;
        }
    } else {
        int n = 0;
        for (int i = 0; i < g->noutputs; i++)
            if (tensor_numel(g->outputs[i]) == 1 && dtype_is_float(g->outputs[i]->dtype)) {
                loss = g->outputs[i];
                n++;
            }
        if (n != 1) {
            diag_add(d, "--train: %s; name the loss with --loss NAME",
                     n ? "the model has several scalar float outputs" : "the model has no scalar float output");
            return NULL;
        }
    }
    if (tensor_numel(loss) != 1 || !dtype_is_float(loss->dtype)) {
        char s[160];
        diag_add(d, "--loss %s: it is %s %s, not a float scalar", loss->label, dtype_name(loss->dtype),
                 shape_str(loss->dims, loss->rank, s, sizeof s));
        return NULL;
    }
    return loss;
}

/* A zero-filled float32 initializer shaped like w (optimizer state). */
static Tensor *state_like(Graph *g, const Tensor *w, const char *what)
{
    char base[200];
    snprintf(base, sizeof base, "%.170s.%s", w->name, what);
    Tensor *t = graph_tensor_fresh(g, base);
    t->dtype = DT_F32;
    t->rank = w->rank;
    memcpy(t->dims, w->dims, sizeof t->dims);
    t->nbytes = tensor_numel(w) * 4;
    t->data = graph_zeros(g, (size_t)t->nbytes);
    t->is_initializer = 1;
    return t;
}

static Tensor *new_output(Graph *g, Node *n, int k, const Tensor *like, const char *what)
{
    char base[200];
    snprintf(base, sizeof base, "%.170s.%s", like->name, what);
    Tensor *t = graph_tensor_fresh(g, base);
    t->producer = n;
    n->outputs[k] = t;
    return t;
}

/* The gradients' factor before the updates, from their global squared
 * norm: clipping by global norm, as torch.nn.utils.clip_grad_norm_ (every
 * gradient times min(1, clip / (norm + 1e-6))), and fp16's loss scale
 * taken out (times 1 / scale, as GradScaler.unscale_, the norm being that
 * of the unscaled gradients). Under loss scaling the factor is also times
 * (0 * norm^2 + 1): NaN when a gradient overflowed, which tells the
 * program to skip the step (Graph.grad_factor).
 *
 * These nodes belong to the optimizer step (per_step): under --accum the
 * norm is of the accumulated gradient, once, as PyTorch clips after the
 * last backward. */
static int scale_nodes(Graph *g, Tensor **grads, int n, float clip, Tensor *loss_scale, Diag *d);

static int scale_grads(Graph *g, Tensor **grads, int n, float clip, Tensor *loss_scale, Diag *d)
{
    int first = g->nnodes;
    int rc = scale_nodes(g, grads, n, clip, loss_scale, d);
    for (int i = first; i < g->nnodes; i++)
        g->nodes[i]->per_step = 1;
    return rc;
}

static int scale_nodes(Graph *g, Tensor **grads, int n, float clip, Tensor *loss_scale, Diag *d)
{
    Node fake = {.name = clip > 0 ? "clip_grad_norm" : "unscale_grads", .op = OP_SUM};
    fake.label = fake.name;
    Vjp v = {.g = g, .n = &fake, .d = d};
    Tensor **sq = malloc((size_t)(n ? n : 1) * sizeof(Tensor *));
    if (!sq)
        abort();
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!grads[i])
            continue;
        Tensor *s = ad_un(&v, OP_REDUCE_SUM_SQUARE, grads[i]);
        if (!s)
            goto fail;
        int64_t scalar[1] = {1};
        if (s->rank && !(s = ad_reshape(&v, s, scalar, 0)))
            goto fail;
        sq[k++] = s;
    }
    if (!k) {
        free(sq);
        return 0;
    }
    Node *sum = ad_begin(&v, OP_SUM, k, sq);
    Tensor *tot = ad_done(&v, sum), *factor = NULL;
    Tensor *inv = loss_scale ? ad_bin(&v, OP_DIV, ad_scalar(&v, 1.0f), loss_scale) : NULL;
    if (clip > 0) {
        Tensor *norm = ad_un(&v, OP_SQRT, tot);
        if (inv)
            norm = ad_bin(&v, OP_MUL, norm, inv);
        Tensor *den = ad_bin(&v, OP_ADD, norm, ad_scalar(&v, 1e-6f));
        Tensor *ratio = ad_bin(&v, OP_DIV, ad_scalar(&v, clip), den);
        factor = ad_bin(&v, OP_MIN, ratio, ad_scalar(&v, 1.0f));
        if (inv)
            factor = ad_bin(&v, OP_MUL, factor, inv);
    } else {
        factor = inv;
    }
    if (inv) {
        Tensor *nan_if_overflow = ad_bin(&v, OP_ADD, ad_bin(&v, OP_MUL, tot, ad_scalar(&v, 0.0f)), ad_scalar(&v, 1.0f));
        factor = ad_bin(&v, OP_MUL, factor, nan_if_overflow);
        g->grad_factor = factor;
    }
    if (!factor)
        goto fail;
    for (int i = 0; i < n; i++)
        if (grads[i] && !(grads[i] = ad_bin(&v, OP_MUL, grads[i], factor)))
            goto fail;
    free(sq);
    return 0;
fail:
    free(sq);
    return -1;
}

/* --accum: the optimizer step's gradient is summed over the microbatches
 * in place (codegen's k_accumulate_f32, which leaves the mean in the value
 * at the last one). A gradient that backward reads too (a Gemm's bias
 * gradient is its output's) must stay this microbatch's own for that
 * reader: the update gets a copy, which is what accumulates. */
static int accum_copies(Graph *g, Tensor **grads, int n, Diag *d)
{
    char *read = calloc((size_t)g->ntensors + 1, 1);
    if (!read)
        abort();
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->ninputs; j++)
            if (g->nodes[i]->inputs[j])
                read[g->nodes[i]->inputs[j]->id] = 1;
    int rc = 0;
    for (int w = 0; w < n && !rc; w++) {
        if (!grads[w] || !grads[w]->producer || !read[grads[w]->id])
            continue;
        Node fake = {.name = grads[w]->name, .label = grads[w]->label, .op = OP_IDENTITY};
        Vjp v = {.g = g, .n = &fake, .d = d};
        const Node *of = grads[w]->producer->fwd;
        if (!(grads[w] = ad_un(&v, OP_IDENTITY, grads[w])))
            rc = -1;
        else
            ((Node *)grads[w]->producer)->fwd = of;
    }
    free(read);
    return rc;
}

/* The optimizer step after every other node: the clipping nodes, then
 * the updates. An update writes its weight in place, which the graph does
 * not show as an edge: a backward node that reads the weight (a MatMul's
 * input gradient dY W^T, a recomputed forward node) must run before it,
 * so none may be placed among them. Nothing reads an update's outputs, and
 * the clipping nodes read only gradients and each other: moving each group
 * to the end, in its order, keeps the order topological.
 *
 * Among themselves the updates run in the order backward finishes their
 * gradients (the position of the gradient's producer; ties and gradients
 * no node makes keep the weights' order). Under data parallelism the
 * gradients are all-reduced in buckets filled in that same order and each
 * update waits for its own bucket, so the first updates wait for the
 * buckets that started earliest, and the last bucket, started as backward
 * ends, moves while the other buckets' updates run. In the weights' order
 * the first update (the token embedding, whose gradient comes last) would
 * wait for that last bucket at once, with nothing to hide it behind. */
static int update_key(const Node *n)
{
    const Tensor *gr = n->ninputs > 1 ? n->inputs[1] : NULL;
    return gr && gr->producer ? gr->producer->id : -1;
}

static void updates_last(Graph *g)
{
    Node **tmp = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(Node *));
    if (!tmp)
        abort();
    int k = 0, first = 0;
    for (int pass = 0; pass < 3; pass++) {
        first = pass == 2 ? k : first;
        for (int i = 0; i < g->nnodes; i++) {
            const Node *n = g->nodes[i];
            if ((ir_output_in_place(n, 0) >= 0 ? 2 : n->per_step) == pass)
                tmp[k++] = g->nodes[i];
        }
    }
    /* a stable insertion sort of the updates by update_key: the ids are
     * still those of the topological order */
    for (int i = first + 1; i < k; i++) {
        Node *n = tmp[i];
        int key = update_key(n), j = i;
        for (; j > first && update_key(tmp[j - 1]) > key; j--)
            tmp[j] = tmp[j - 1];
        tmp[j] = n;
    }
    memcpy(g->nodes, tmp, (size_t)g->nnodes * sizeof(Node *));
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->id = i;
    free(tmp);
}

/* Trainable weights that feed several nodes of one op at the same input:
 * structurally parallel layers reading one initializer. Training ties
 * them (one weight, its gradient summed over the readers), which is right
 * for a weight shared on purpose and wrong for layers an exporter merged
 * because their fresh initial values were equal (TorchScript folds equal
 * initializers into one: every LayerNorm weight of ones). A tied
 * embedding and LM head (a Gather and a MatMul) is not counted, nor is a
 * scalar. */
static void note_shared_weights(Graph *g, Tensor *const *weights, int nw)
{
    g->shared_weights = 0;
    g->shared_example = NULL;
    for (int w = 0; w < nw; w++) {
        const Tensor *t = weights[w];
        if (tensor_numel(t) == 1)
            continue; /* a scalar shared by several nodes is far likelier a constant (a mask's -inf) */
        int best = 0, best_in = 0;
        const Node *reader = NULL;
        for (int a = 0; a < t->nconsumers; a++) {
            const Node *n = t->consumers[a];
            for (int i = 0; i < n->ninputs && !n->folded; i++) {
                if (n->inputs[i] != t)
                    continue;
                int same = 0; /* live readers of t with n's op, at input i */
                for (int b = 0; b < t->nconsumers; b++) {
                    const Node *m = t->consumers[b];
                    int dup = 0; /* a node listed twice counts once */
                    for (int c = 0; c < b; c++)
                        dup |= t->consumers[c] == m;
                    same += !dup && !m->folded && m->op == n->op && i < m->ninputs && m->inputs[i] == t;
                }
                if (same > best) {
                    best = same;
                    best_in = i;
                    reader = n;
                }
            }
        }
        if (best < 2)
            continue;
        if (!g->shared_weights++) {
            g->shared_example = t;
            g->shared_reader = reader;
            g->shared_readers = best;
            g->shared_input = best_in;
        }
    }
}

int ir_build_training(Graph *g, const TrainOptions *o, Diag *d)
{
    if (check_list(g, o->frozen, "--frozen", d) || check_list(g, o->trainable, "--trainable", d))
        return -1;
    const Tensor *loss = find_loss(g, o, d);
    if (!loss)
        return -1;
    int nt = g->ntensors, nn, rc = -1;
    /* trainable weights, in initializer order */
    unsigned char *needs = calloc((size_t)nt, 1);
    Tensor **weights = malloc((size_t)nt * sizeof(Tensor *));
    Grads gr = {0};
    if (!needs || !weights)
        abort();
    int nw = 0;
    for (int i = 0; i < nt; i++) {
        Tensor *t = g->tensors[i];
        if (!t->is_initializer || t->producer || t->folded || !dtype_is_float(t->dtype) || t->nconsumers == 0)
            continue;
        if ((o->trainable && !in_list(o->trainable, t->name)) || in_list(o->frozen, t->name))
            continue;
        needs[i] = 1;
        weights[nw++] = t;
    }
    if (!nw) {
        diag_add(d, "--train: the model has no trainable float initializer");
        goto out;
    }
    note_shared_weights(g, weights, nw);
    /* Mixed precision: the forward graph rewritten first, so that backward
     * is built from (and computes in) the types it computes in. */
    if (o->precision != DT_F32 && ir_autocast(g, o->precision, needs, d))
        goto out;
    nt = g->ntensors;
    nn = g->nnodes;
    needs = realloc(needs, (size_t)nt);
    if (!needs)
        abort();
    memset(needs, 0, (size_t)nt);
    for (int w = 0; w < nw; w++)
        needs[weights[w]->id] = 1;
    gr = (Grads){.parts = calloc((size_t)nt, sizeof(Tensor **)), .nparts = calloc((size_t)nt, sizeof(int)),
                 .cap = calloc((size_t)nt, sizeof(int)), .n = nt};
    if (!gr.parts || !gr.nparts || !gr.cap)
        abort();
    /* Forward: which values depend on a trainable weight along float paths. */
    for (int i = 0; i < nn; i++) {
        Node *n = g->nodes[i];
        int any = 0;
        if (n->no_grad) /* its outputs carry no gradient back (ir/loss_vocab.c) */
            continue;
        for (int j = 0; j < n->ninputs; j++)
            any |= n->inputs[j] && needs[n->inputs[j]->id];
        for (int k = 0; any && k < n->noutputs; k++)
            if (n->outputs[k] && dtype_is_float(n->outputs[k]->dtype))
                needs[n->outputs[k]->id] = 1;
    }
    if (!needs[loss->id]) {
        diag_add(d, "--train: the loss %s does not depend on any trainable weight", loss->label);
        goto out;
    }

    /* Backward, in reverse node order, from d loss / d loss = 1 (fp16:
     * the loss scale, so small gradients stay above float16's subnormals). */
    Tensor *scale = NULL;
    {
        Node seed = {.name = "loss", .label = "loss", .op = OP_IDENTITY};
        Vjp v = {.g = g, .n = &seed, .d = d};
        Tensor *one = ad_scalar(&v, 1.0f);
        if (o->precision == DT_F16) {
            float state[3] = {o->loss_scale, 0, 0};
            int64_t first = 0;
            g->loss_scale = ad_const(&v, "loss_scale", DT_F32, state, 3, 1);
            Tensor *ins[2] = {g->loss_scale, ad_const(&v, "loss_scale_index", DT_I64, &first, 1, 0)};
            scale = ad_done(&v, ad_begin(&v, OP_GATHER, 2, ins));
            one = ad_cast(&v, scale, loss->dtype);
        }
        if (loss->rank)
            one = ad_expand(&v, one, loss->dims, loss->rank);
        if (!one)
            goto out;
        grads_add(&gr, loss, one);
    }
    for (int i = nn - 1; i >= 0; i--) {
        Node *n = g->nodes[i];
        Tensor *dy[64] = {0};
        unsigned char want[64] = {0};
        Tensor *dx[64] = {0};
        int flows = 0, wants = 0;
        IR_ASSERT(n->noutputs <= 64 && n->ninputs <= 64);
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k] && n->outputs[k]->id < nt && needs[n->outputs[k]->id]) {
                dy[k] = grads_get(g, &gr, n->outputs[k], d);
                if (!dy[k] && d->n)
                    goto out;
                flows |= dy[k] != NULL;
            }
        for (int j = 0; j < n->ninputs; j++) {
            Tensor *t = n->inputs[j];
            want[j] = t && t->id < nt && needs[t->id] && dtype_is_float(t->dtype);
            wants |= want[j];
        }
        if (!flows || !wants)
            continue;
        Vjp v = {.g = g, .n = n, .dy = dy, .want = want, .dx = dx, .d = d};
        if (op_table[n->op].vjp(&v))
            goto out;
        for (int j = 0; j < n->ninputs; j++) {
            if (!want[j] || !dx[j])
                continue;
            const Tensor *t = n->inputs[j];
            if (dx[j]->rank != t->rank || memcmp(dx[j]->dims, t->dims, (size_t)t->rank * sizeof(int64_t))) {
                char a[160], b[160];
                vjp_fail(&v, "the gradient of input \"%s\" came out %s, not %s (a bug in its vjp rule)", t->label,
                         shape_str(dx[j]->dims, dx[j]->rank, a, sizeof a), shape_str(t->dims, t->rank, b, sizeof b));
                goto out;
            }
            grads_add(&gr, t, ad_cast(&v, dx[j], t->dtype));
        }
    }

    /* The weights' gradients, clipped, and one optimizer node each. */
    Tensor **wg = calloc((size_t)nw, sizeof(Tensor *));
    if (!wg)
        abort();
    int ng = 0;
    for (int w = 0; w < nw; w++) {
        wg[w] = grads_get(g, &gr, weights[w], d);
        if (!wg[w] && d->n) {
            free(wg);
            goto out;
        }
        ng += wg[w] != NULL;
    }
    if (!ng) {
        free(wg);
        diag_add(d, "--train: no gradient reaches any trainable weight");
        goto out;
    }
    if (o->accum > 1 && accum_copies(g, wg, nw, d)) {
        free(wg);
        goto out;
    }
    if ((o->clip_norm > 0 || scale) && scale_grads(g, wg, nw, o->clip_norm, scale, d)) {
        free(wg);
        goto out;
    }
    int nout = g->noutputs;
    Tensor **outs = arena_alloc(&g->arena, (size_t)(nout + 3 * nw) * sizeof(Tensor *));
    memcpy(outs, g->outputs, (size_t)nout * sizeof(Tensor *));
    for (int w = 0; w < nw; w++) {
        Tensor *W = weights[w], *G = wg[w];
        if (!G)
            continue; /* the loss does not reach it: left as it is */
        int adam = o->optimizer == OPT_ADAMW, mom = !adam && o->momentum != 0;
        char base[200];
        snprintf(base, sizeof base, "%.170s/%s", W->name, adam ? "adamw" : "sgd");
        Node *n = graph_node_add(g, adam ? OP_ADAMW : OP_SGD, base);
        int nin = adam ? 4 : mom ? 3 : 2, no = adam ? 3 : mom ? 2 : 1;
        n->inputs = arena_alloc(&g->arena, (size_t)nin * sizeof(Tensor *));
        n->outputs = arena_alloc(&g->arena, (size_t)no * sizeof(Tensor *));
        n->ninputs = nin;
        n->noutputs = no;
        n->inputs[0] = W;
        n->inputs[1] = G;
        if (adam) {
            n->inputs[2] = state_like(g, W, "adam_m");
            n->inputs[3] = state_like(g, W, "adam_v");
        } else if (mom) {
            n->inputs[2] = state_like(g, W, "momentum");
        }
        outs[nout++] = new_output(g, n, 0, W, "updated");
        if (adam) {
            outs[nout++] = new_output(g, n, 1, n->inputs[2], "updated");
            outs[nout++] = new_output(g, n, 2, n->inputs[3], "updated");
        } else if (mom) {
            outs[nout++] = new_output(g, n, 1, n->inputs[2], "updated");
        }
        node_attr_set_float(g, n, "lr", o->lr);
        node_attr_set_int(g, n, "cosine", o->cosine);
        node_attr_set_int(g, n, "warmup_steps", o->warmup_steps);
        node_attr_set_int(g, n, "total_steps", o->total_steps);
        node_attr_set_float(g, n, "weight_decay", o->weight_decay);
        if (adam) {
            node_attr_set_float(g, n, "beta1", o->beta1);
            node_attr_set_float(g, n, "beta2", o->beta2);
            node_attr_set_float(g, n, "eps", o->eps);
        } else {
            node_attr_set_float(g, n, "momentum", o->momentum);
        }
        for (int k = 0; k < no; k++)
            n->outputs[k]->is_output = 1;
        if (ir_infer_node(g, n, d)) {
            free(wg);
            goto out;
        }
    }
    free(wg);
    g->outputs = outs;
    g->noutputs = nout;
    g->loss = loss;
    g->accum = o->accum > 1 ? o->accum : 0;
    if (graph_toposort(g, d) || ir_recompute(g, o->recompute, d))
        goto out;
    updates_last(g);
    rc = 0;
out:
    for (int i = 0; gr.parts && i < gr.n; i++)
        free(gr.parts[i]);
    free(gr.parts);
    free(gr.nparts);
    free(gr.cap);
    free(needs);
    free(weights);
    return rc;
}
