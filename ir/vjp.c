/* vjp.c: vector-Jacobian rules, one per op (the op table's vjp column).
 *
 * Each rule appends the nodes that turn its outputs' gradients (v->dy)
 * into its wanted inputs' gradients (v->dx), through the builders of
 * autodiff.h, out of ops the compiler already lays out and runs: the
 * backward pass needs no kernel of its own. Where a formula needs a
 * forward intermediate the node does not output (LayerNormalization's
 * mean and 1/std), the rule recomputes it from the node's input; the
 * extra elementwise work is what Megatron's selective recomputation
 * accepts too, and it keeps the forward nodes as the model wrote them.
 * Broadcasting is undone by vjp_sum_to.
 */
#include "autodiff.h"

#include <math.h>
#include <string.h>

#define DY0 (v->dy[0])
#define X(k) (v->n->inputs[k])
#define Y(k) (v->n->outputs[k])

static unsigned mask_from(int lo, int rank)
{
    unsigned m = 0;
    for (int i = lo; i < rank; i++)
        m |= 1u << i;
    return m;
}

static Tensor *i64_const(Vjp *v, const char *what, const int64_t *vals, int n, int rank)
{
    return ad_const(v, what, DT_I64, vals, n, rank);
}

/* zeros shaped like t, in t's dtype */
static Tensor *zeros_like(Vjp *v, const Tensor *t)
{
    Tensor *z = ad_cast(v, ad_scalar(v, 0.0f), t->dtype);
    return ad_expand(v, z, t->dims, t->rank);
}

static void put(Vjp *v, int k, Tensor *dx)
{
    if (v->want[k])
        v->dx[k] = dx;
}

static int ok(Vjp *v, int k)
{
    return !v->want[k] || v->dx[k] ? 0 : -1;
}

int vjp_identity(Vjp *v)
{
    put(v, 0, DY0);
    return 0;
}

int vjp_cast(Vjp *v)
{
    if (!dtype_is_float(X(0)->dtype))
        return 0;
    put(v, 0, DY0); /* autodiff casts it back to the input's dtype */
    return 0;
}

int vjp_constant(Vjp *v)
{
    (void)v;
    return 0;
}

int vjp_arith(Vjp *v)
{
    Tensor *a = X(0), *b = X(1), *dy = DY0;
    OpKind op = v->n->op;
    if (v->want[0]) {
        Tensor *g = op == OP_ADD || op == OP_SUB ? dy : ad_bin(v, op == OP_MUL ? OP_MUL : OP_DIV, dy, b);
        v->dx[0] = ad_sum_to(v, g, a);
    }
    if (v->want[1]) {
        Tensor *g = NULL;
        if (op == OP_ADD)
            g = dy;
        else if (op == OP_SUB)
            g = ad_un(v, OP_NEG, dy);
        else if (op == OP_MUL)
            g = ad_bin(v, OP_MUL, dy, a);
        else /* d(a/b)/db = -a/b^2 = -y/b */
            g = ad_un(v, OP_NEG, ad_bin(v, OP_DIV, ad_bin(v, OP_MUL, dy, Y(0)), b));
        v->dx[1] = ad_sum_to(v, g, b);
    }
    return ok(v, 0) || ok(v, 1);
}

int vjp_pow(Vjp *v)
{
    Tensor *a = X(0), *b = X(1), *dy = DY0;
    if (v->want[0]) {
        /* b * a^(b-1) */
        Tensor *bm1 = ad_bin(v, OP_SUB, b, ad_cast(v, ad_scalar(v, 1.0f), b->dtype));
        Tensor *g = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, dy, b), ad_bin(v, OP_POW, a, bm1));
        v->dx[0] = ad_sum_to(v, g, a);
    }
    if (v->want[1]) { /* y * ln a */
        Tensor *g = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, dy, Y(0)), ad_un(v, OP_LOG, a));
        v->dx[1] = ad_sum_to(v, g, b);
    }
    return ok(v, 0) || ok(v, 1);
}

static Tensor *fconst(Vjp *v, float x, const Tensor *like)
{
    return ad_cast(v, ad_scalar(v, x), like->dtype);
}

/* d Gelu / dx, both forms, from x. */
static Tensor *gelu_slope(Vjp *v, Tensor *x, int tanh_form)
{
    if (!tanh_form) {
        /* 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi) */
        Tensor *cdf = ad_bin(v, OP_MUL, fconst(v, 0.5f, x),
                              ad_bin(v, OP_ADD, fconst(v, 1.0f, x),
                                      ad_un(v, OP_ERF, ad_bin(v, OP_MUL, x, fconst(v, (float)M_SQRT1_2, x)))));
        Tensor *x2 = ad_bin(v, OP_MUL, x, x);
        Tensor *pdf = ad_bin(v, OP_MUL, fconst(v, (float)(1.0 / sqrt(2 * M_PI)), x),
                              ad_un(v, OP_EXP, ad_bin(v, OP_MUL, x2, fconst(v, -0.5f, x))));
        return ad_bin(v, OP_ADD, cdf, ad_bin(v, OP_MUL, x, pdf));
    }
    /* t = tanh(c (x + 0.044715 x^3)), c = sqrt(2/pi):
     * 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2) */
    const float c = (float)sqrt(2.0 / M_PI), k = 0.044715f;
    Tensor *x2 = ad_bin(v, OP_MUL, x, x);
    Tensor *inner = ad_bin(v, OP_MUL, fconst(v, c, x),
                            ad_bin(v, OP_ADD, x, ad_bin(v, OP_MUL, fconst(v, k, x), ad_bin(v, OP_MUL, x2, x))));
    Tensor *t = ad_un(v, OP_TANH, inner);
    Tensor *left = ad_bin(v, OP_MUL, fconst(v, 0.5f, x), ad_bin(v, OP_ADD, fconst(v, 1.0f, x), t));
    Tensor *sech2 = ad_bin(v, OP_SUB, fconst(v, 1.0f, x), ad_bin(v, OP_MUL, t, t));
    Tensor *dinner = ad_bin(v, OP_MUL, fconst(v, c, x),
                             ad_bin(v, OP_ADD, fconst(v, 1.0f, x), ad_bin(v, OP_MUL, fconst(v, 3 * k, x), x2)));
    Tensor *right = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, fconst(v, 0.5f, x), x), ad_bin(v, OP_MUL, sech2, dinner));
    return ad_bin(v, OP_ADD, left, right);
}

int vjp_unary(Vjp *v)
{
    Tensor *x = X(0), *y = Y(0), *dy = DY0, *g = NULL;
    switch (v->n->op) {
    case OP_SQRT: /* 0.5 / y */
        g = ad_bin(v, OP_DIV, ad_bin(v, OP_MUL, dy, fconst(v, 0.5f, x)), y);
        break;
    case OP_ERF: /* 2 / sqrt(pi) exp(-x^2) */
        g = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, dy, fconst(v, (float)(2.0 / sqrt(M_PI)), x)),
                    ad_un(v, OP_EXP, ad_un(v, OP_NEG, ad_bin(v, OP_MUL, x, x))));
        break;
    case OP_TANH: /* 1 - y^2 */
        g = ad_bin(v, OP_MUL, dy, ad_bin(v, OP_SUB, fconst(v, 1.0f, x), ad_bin(v, OP_MUL, y, y)));
        break;
    case OP_SIGMOID: /* y (1 - y) */
        g = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, dy, y), ad_bin(v, OP_SUB, fconst(v, 1.0f, x), y));
        break;
    case OP_RELU: { /* dy where x > 0 */
        Tensor *pos = ad_bin(v, OP_GREATER, x, fconst(v, 0.0f, x));
        Tensor *ins[3] = {pos, dy, fconst(v, 0.0f, x)};
        g = pos && ins[2] ? ad_done(v, ad_begin(v, OP_WHERE, 3, ins)) : NULL;
        break;
    }
    case OP_GELU: {
        int tanh_form = !strcmp(node_attr_str(v->n, "approximate", "none"), "tanh");
        if (x && dy && x->dtype == DT_F32 && dy->dtype == DT_F32) { /* one GeluGrad node: one pass */
            Tensor *ins[2] = {dy, x};
            Node *gg = ad_begin(v, OP_GELU_GRAD, 2, ins);
            if (tanh_form)
                node_attr_set_str(v->g, gg, "approximate", "tanh");
            g = ad_done(v, gg);
        } else {
            g = ad_bin(v, OP_MUL, dy, gelu_slope(v, x, tanh_form));
        }
        break;
    }
    case OP_NEG:
        g = ad_un(v, OP_NEG, dy);
        break;
    case OP_EXP:
        g = ad_bin(v, OP_MUL, dy, y);
        break;
    case OP_LOG:
        g = ad_bin(v, OP_DIV, dy, x);
        break;
    case OP_RECIPROCAL: /* -y^2 */
        g = ad_un(v, OP_NEG, ad_bin(v, OP_MUL, dy, ad_bin(v, OP_MUL, y, y)));
        break;
    case OP_ABS:
        g = ad_bin(v, OP_MUL, dy, ad_un(v, OP_SIGN, x));
        break;
    case OP_SIN:
        g = ad_bin(v, OP_MUL, dy, ad_un(v, OP_COS, x));
        break;
    case OP_COS:
        g = ad_un(v, OP_NEG, ad_bin(v, OP_MUL, dy, ad_un(v, OP_SIN, x)));
        break;
    default:
        return vjp_none(v);
    }
    put(v, 0, g);
    return ok(v, 0);
}

/* Sum and Mean of any number of inputs, broadcast together: each input
 * gets dy (over n for Mean), summed down to its shape. */
int vjp_sum_mean(Vjp *v)
{
    Tensor *g = DY0;
    if (v->n->op == OP_MEAN)
        g = ad_bin(v, OP_MUL, g, fconst(v, (float)(1.0 / v->n->ninputs), DY0));
    for (int k = 0; k < v->n->ninputs; k++)
        if (v->want[k] && !(v->dx[k] = ad_sum_to(v, g, X(k))))
            return -1;
    return 0;
}

/* ---- linear algebra ------------------------------------------------------ */

/* t viewed as a matrix: its leading dims merged into the rows. */
static Tensor *as_rows(Vjp *v, Tensor *t)
{
    int64_t rows = 1;
    for (int i = 0; i < t->rank - 1; i++)
        rows *= t->dims[i];
    int64_t dims[2] = {rows, t->dims[t->rank - 1]};
    return ad_reshape(v, t, dims, 2);
}

int vjp_matmul(Vjp *v)
{
    Tensor *a = X(0), *b = X(1), *dy = DY0;
    if (a->rank < 2 || b->rank < 2)
        return vjp_fail(v, "a 1-D operand has no gradient rule yet (reshape it to a matrix)");
    if (v->want[0]) /* dA = dY B^T, summed over what A broadcast */
        v->dx[0] = ad_sum_to(v, ad_bin(v, OP_MATMUL, dy, ad_swap_last2(v, b)), a);
    if (v->want[1]) {
        if (b->rank == 2) /* a weight: dB = A^T dY over every row of the batch */
            v->dx[1] = ad_bin(v, OP_MATMUL, ad_swap_last2(v, as_rows(v, a)), as_rows(v, dy));
        else
            v->dx[1] = ad_sum_to(v, ad_bin(v, OP_MATMUL, ad_swap_last2(v, a), dy), b);
    }
    return ok(v, 0) || ok(v, 1);
}

static Tensor *gemm(Vjp *v, Tensor *a, Tensor *b, int ta, int tb, float alpha)
{
    if (!a || !b)
        return NULL;
    Tensor *ins[2] = {a, b};
    Node *n = ad_begin(v, OP_GEMM, 2, ins);
    node_attr_set_int(v->g, n, "transA", ta);
    node_attr_set_int(v->g, n, "transB", tb);
    if (alpha != 1.0f)
        node_attr_set_float(v->g, n, "alpha", alpha);
    return ad_done(v, n);
}

int vjp_gemm(Vjp *v)
{
    Tensor *a = X(0), *b = X(1), *dy = DY0;
    int ta = node_attr_int(v->n, "transA", 0) != 0, tb = node_attr_int(v->n, "transB", 0) != 0;
    float alpha = node_attr_float(v->n, "alpha", 1.0f), beta = node_attr_float(v->n, "beta", 1.0f);
    /* Y = alpha op(A) op(B) + beta C */
    if (v->want[0])
        v->dx[0] = ta ? gemm(v, b, dy, tb, 1, alpha) : gemm(v, dy, b, 0, !tb, alpha);
    if (v->want[1])
        v->dx[1] = tb ? gemm(v, dy, a, 1, ta, alpha) : gemm(v, a, dy, !ta, 0, alpha);
    if (v->n->ninputs > 2 && X(2) && v->want[2]) {
        Tensor *g = beta == 1.0f ? dy : ad_bin(v, OP_MUL, dy, fconst(v, beta, dy));
        v->dx[2] = ad_sum_to(v, g, X(2));
    }
    return ok(v, 0) || ok(v, 1) || (v->n->ninputs > 2 && ok(v, 2));
}

/* ---- normalisation and softmax ------------------------------------------- */

static int norm_axis(Vjp *v, int64_t dflt, int rank)
{
    int64_t a = node_attr_int(v->n, "axis", dflt);
    return (int)(a < 0 ? a + rank : a);
}

int vjp_softmax(Vjp *v)
{
    Tensor *y = Y(0), *dy = DY0;
    unsigned m = 1u << norm_axis(v, -1, y->rank);
    /* y (dy - sum(dy y)) */
    Tensor *s = ad_reduce(v, OP_REDUCE_SUM, ad_bin(v, OP_MUL, dy, y), m, 1);
    put(v, 0, ad_bin(v, OP_MUL, y, ad_bin(v, OP_SUB, dy, s)));
    return ok(v, 0);
}

int vjp_log_softmax(Vjp *v)
{
    Tensor *y = Y(0), *dy = DY0;
    unsigned m = 1u << norm_axis(v, -1, y->rank);
    /* dy - exp(y) sum(dy) */
    Tensor *s = ad_reduce(v, OP_REDUCE_SUM, dy, m, 1);
    put(v, 0, ad_bin(v, OP_SUB, dy, ad_bin(v, OP_MUL, ad_un(v, OP_EXP, y), s)));
    return ok(v, 0);
}

/* Shared by LayerNormalization (centred) and RMSNormalization: with
 * xhat = (x - mean) rstd, y = xhat * scale (+ bias),
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * scale
 * (RMS: no mean(g) term and no centring). */
static int norm_rule(Vjp *v, int centred)
{
    Tensor *x = X(0), *scale = X(1), *dy = DY0;
    if (v->dy[0] == NULL)
        return 0;
    if (v->n->noutputs > 1)
        for (int k = 1; k < v->n->noutputs; k++)
            if (v->dy[k])
                return vjp_fail(v, "gradients through its mean or inverse-std outputs are not supported");
    int axis = norm_axis(v, -1, x->rank);
    unsigned m = mask_from(axis, x->rank);
    float eps = node_attr_float(v->n, "epsilon", 1e-5f);
    Tensor *xc = x;
    if (centred)
        xc = ad_bin(v, OP_SUB, x, ad_reduce(v, OP_REDUCE_MEAN, x, m, 1));
    Tensor *var = ad_reduce(v, OP_REDUCE_MEAN, ad_bin(v, OP_MUL, xc, xc), m, 1);
    Tensor *rstd = ad_un(v, OP_RECIPROCAL, ad_un(v, OP_SQRT, ad_bin(v, OP_ADD, var, fconst(v, eps, x))));
    Tensor *xhat = ad_bin(v, OP_MUL, xc, rstd);
    if (v->want[1])
        v->dx[1] = ad_sum_to(v, ad_bin(v, OP_MUL, dy, xhat), scale);
    if (v->n->ninputs > 2 && X(2) && v->want[2])
        v->dx[2] = ad_sum_to(v, dy, X(2));
    if (v->want[0]) {
        Tensor *g = ad_bin(v, OP_MUL, dy, scale);
        Tensor *inner = ad_bin(v, OP_MUL, xhat, ad_reduce(v, OP_REDUCE_MEAN, ad_bin(v, OP_MUL, g, xhat), m, 1));
        Tensor *t = ad_bin(v, OP_SUB, g, inner);
        if (centred)
            t = ad_bin(v, OP_SUB, t, ad_reduce(v, OP_REDUCE_MEAN, g, m, 1));
        v->dx[0] = ad_bin(v, OP_MUL, t, rstd);
    }
    return ok(v, 0) || ok(v, 1) || (v->n->ninputs > 2 && ok(v, 2));
}

int vjp_layernorm(Vjp *v)
{
    return norm_rule(v, 1);
}

int vjp_rmsnorm(Vjp *v)
{
    return norm_rule(v, 0);
}

/* ---- shape ops ----------------------------------------------------------- */

int vjp_transpose(Vjp *v)
{
    const Attr *perm = node_attr(v->n, "perm");
    int r = X(0)->rank;
    int64_t inv[IR_MAX_RANK];
    for (int i = 0; i < r; i++)
        inv[perm ? perm->ints[i] : r - 1 - i] = i;
    put(v, 0, ad_transpose(v, DY0, inv));
    return ok(v, 0);
}

int vjp_reshape(Vjp *v)
{
    put(v, 0, ad_reshape(v, DY0, X(0)->dims, X(0)->rank));
    return ok(v, 0);
}

int vjp_expand(Vjp *v)
{
    put(v, 0, ad_sum_to(v, DY0, X(0)));
    return ok(v, 0);
}

int vjp_reduce(Vjp *v)
{
    Tensor *x = X(0), *dy = DY0;
    const Attr *axes = node_attr(v->n, "axes");
    unsigned m = 0;
    if (axes && axes->n) {
        for (int i = 0; i < axes->n; i++)
            m |= 1u << (axes->ints[i] < 0 ? axes->ints[i] + x->rank : axes->ints[i]);
    } else if (!node_attr_int(v->n, "noop_with_empty_axes", 0)) {
        m = mask_from(0, x->rank);
    }
    int64_t kept[IR_MAX_RANK], count = 1;
    for (int i = 0; i < x->rank; i++) {
        kept[i] = (m & (1u << i)) ? 1 : x->dims[i];
        if (m & (1u << i))
            count *= x->dims[i];
    }
    Tensor *g = ad_reshape(v, dy, kept, x->rank);
    if (v->n->op == OP_REDUCE_MEAN)
        g = ad_bin(v, OP_MUL, g, fconst(v, (float)(1.0 / (double)count), x));
    put(v, 0, ad_expand(v, g, x->dims, x->rank));
    return ok(v, 0);
}

int vjp_concat(Vjp *v)
{
    const Tensor *y = Y(0);
    int axis = norm_axis(v, 0, y->rank);
    int64_t off = 0;
    for (int j = 0; j < v->n->ninputs; j++) {
        int64_t len = X(j)->dims[axis];
        if (v->want[j]) {
            Node *s = ad_begin(v, OP_SLICE, 1, &v->dy[0]);
            int64_t st = off, en = off + len, ax = axis;
            node_attr_set_ints(v->g, s, "starts", &st, 1);
            node_attr_set_ints(v->g, s, "ends", &en, 1);
            node_attr_set_ints(v->g, s, "axes", &ax, 1);
            v->dx[j] = ad_done(v, s);
            if (!v->dx[j])
                return -1;
        }
        off += len;
    }
    return 0;
}

int vjp_split(Vjp *v)
{
    Tensor *x = X(0);
    int axis = norm_axis(v, 0, x->rank);
    Tensor *parts[64];
    int n = v->n->noutputs;
    for (int k = 0; k < n; k++) {
        parts[k] = v->dy[k] ? v->dy[k] : zeros_like(v, Y(k));
        if (!parts[k])
            return -1;
    }
    Node *c = ad_begin(v, OP_CONCAT, n, parts);
    node_attr_set_int(v->g, c, "axis", axis);
    put(v, 0, ad_done(v, c));
    return ok(v, 0);
}

int vjp_slice(Vjp *v)
{
    Tensor *x = X(0);
    const Attr *st = node_attr(v->n, "starts"), *ax = node_attr(v->n, "axes"), *sp = node_attr(v->n, "steps");
    int r = x->rank;
    int64_t pads[2 * IR_MAX_RANK] = {0};
    for (int i = 0; i < st->n; i++) {
        if (sp && sp->ints[i] != 1)
            return vjp_fail(v, "a Slice with steps other than 1 has no gradient rule yet");
        int64_t a = ax ? ax->ints[i] : i;
        if (a < 0)
            a += r;
        int64_t dim = x->dims[a], s = st->ints[i];
        s = s < 0 ? (s < -dim ? 0 : s + dim) : (s > dim ? dim : s);
        pads[a] = s;
    }
    for (int a = 0; a < r; a++)
        pads[r + a] = x->dims[a] - pads[a] - DY0->dims[a];
    Node *p = ad_begin(v, OP_PAD, 1, &v->dy[0]);
    node_attr_set_ints(v->g, p, "pads", pads, 2 * r);
    put(v, 0, ad_done(v, p));
    return ok(v, 0);
}

int vjp_where(Vjp *v)
{
    Tensor *c = X(0), *dy = DY0;
    for (int k = 1; k <= 2; k++) {
        if (!v->want[k])
            continue;
        Tensor *z = fconst(v, 0.0f, dy);
        Tensor *ins[3] = {c, k == 1 ? dy : z, k == 1 ? z : dy};
        Tensor *g = z ? ad_done(v, ad_begin(v, OP_WHERE, 3, ins)) : NULL;
        v->dx[k] = ad_sum_to(v, g, X(k));
        if (!v->dx[k])
            return -1;
    }
    return 0;
}

/* Gather along axis 0 (an embedding lookup): the gradient of the table
 * is zeros with each looked-up row's gradient added in (ScatterND with
 * reduction add: repeated indices accumulate). */
int vjp_gather(Vjp *v)
{
    Tensor *data = X(0), *idx = X(1), *dy = DY0;
    if (!v->want[0])
        return 0;
    int axis = norm_axis(v, 0, data->rank);
    if (axis != 0)
        return vjp_fail(v, "a Gather along axis %d has no gradient rule yet (axis 0 only)", axis);
    if (idx->rank == 0 || idx->rank + 1 > IR_MAX_RANK)
        return vjp_fail(v, "a Gather of one index has no gradient rule yet");
    Tensor *ix = ad_cast(v, idx, DT_I64);
    /* negative indices count from the end, as Gather reads them */
    int64_t rows = data->dims[0];
    Tensor *neg = ad_bin(v, OP_LESS, ix, i64_const(v, "zero", (int64_t[]){0}, 1, 0));
    Tensor *wrapped = ad_bin(v, OP_ADD, ix, i64_const(v, "rows", &rows, 1, 0));
    Tensor *ins[3] = {neg, wrapped, ix};
    Tensor *fixed = neg && wrapped ? ad_done(v, ad_begin(v, OP_WHERE, 3, ins)) : NULL;
    if (!fixed)
        return -1;
    Node *u = ad_begin(v, OP_UNSQUEEZE, 1, &fixed);
    int64_t last = idx->rank;
    node_attr_set_ints(v->g, u, "axes", &last, 1);
    Tensor *ind = ad_done(v, u);
    Tensor *zero = zeros_like(v, data);
    if (!ind || !zero)
        return -1;
    Tensor *sins[3] = {zero, ind, dy};
    Node *s = ad_begin(v, OP_SCATTER_ND, 3, sins);
    node_attr_set_str(v->g, s, "reduction", "add");
    v->dx[0] = ad_done(v, s);
    return ok(v, 0);
}

/* ---- losses -------------------------------------------------------------- */

/* SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss over scores
 * [N, C, d...] and labels [N, d...]: the gradient of the scores is
 * (softmax(x) - onehot(label)) (SCE) or -onehot(label) (NLL), times the
 * loss's gradient, divided by the count of labels that are not
 * ignore_index for reduction "mean", zero where a label is ignored. */
int vjp_loss(Vjp *v)
{
    Tensor *x = X(0), *lab = X(1), *dy = DY0;
    if (!v->want[0])
        return 0;
    if (v->n->ninputs > 2 && X(2))
        return vjp_fail(v, "class weights have no gradient rule yet");
    if (v->n->noutputs > 1 && v->dy[1])
        return vjp_fail(v, "gradients through its log-probability output are not supported");
    if (!dy)
        return 0;
    const char *red = node_attr_str(v->n, "reduction", "mean");
    const Attr *ign = node_attr(v->n, "ignore_index");
    int64_t C = x->dims[1];
    Tensor *li = ad_cast(v, lab, DT_I64);
    Tensor *mask = NULL, *cls = li;
    if (ign) {
        Tensor *bad = ad_bin(v, OP_EQUAL, li, i64_const(v, "ignore", &ign->i, 1, 0));
        mask = ad_cast(v, ad_un(v, OP_NOT, bad), x->dtype);
        Tensor *ins[3] = {bad, i64_const(v, "zero", (int64_t[]){0}, 1, 0), li};
        cls = bad ? ad_done(v, ad_begin(v, OP_WHERE, 3, ins)) : NULL;
    }
    static const float offon[2] = {0.0f, 1.0f};
    Tensor *vals = ad_const(v, "onehot_values", DT_F32, offon, 2, 1);
    Tensor *oins[3] = {cls, i64_const(v, "depth", &C, 1, 0), vals};
    if (!cls)
        return -1;
    Node *oh = ad_begin(v, OP_ONEHOT, 3, oins);
    node_attr_set_int(v->g, oh, "axis", 1);
    Tensor *onehot = ad_cast(v, ad_done(v, oh), x->dtype);
    Tensor *g;
    if (v->n->op == OP_SCE_LOSS) {
        Node *sm = ad_begin(v, OP_SOFTMAX, 1, &v->n->inputs[0]);
        node_attr_set_int(v->g, sm, "axis", 1);
        g = ad_bin(v, OP_SUB, ad_done(v, sm), onehot);
    } else {
        g = ad_un(v, OP_NEG, onehot);
    }
    /* per label: the loss's gradient, scaled for "mean", masked */
    Tensor *w;
    if (!strcmp(red, "none")) {
        w = dy;
    } else {
        w = dy;
        if (!strcmp(red, "mean")) {
            Tensor *cnt = mask ? ad_reduce(v, OP_REDUCE_SUM, mask, mask_from(0, mask->rank), 0)
                               : fconst(v, (float)tensor_numel(lab), x);
            w = ad_bin(v, OP_DIV, dy, cnt);
        }
    }
    if (mask)
        w = ad_bin(v, OP_MUL, mask, w); /* [N, d...] */
    if (w && w->rank) {
        Node *u = ad_begin(v, OP_UNSQUEEZE, 1, &w);
        int64_t one = 1;
        node_attr_set_ints(v->g, u, "axes", &one, 1);
        w = ad_done(v, u);
    }
    put(v, 0, ad_bin(v, OP_MUL, g, w));
    return ok(v, 0);
}
