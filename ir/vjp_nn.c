/* vjp_nn.c: vector-Jacobian rules of the nn family (ops_nn.def): Conv,
 * MaxPool, AveragePool, GlobalAveragePool and BatchNormalization.
 *
 * As in vjp.c, each rule builds its gradients out of ops the compiler
 * already lays out and runs, here the spatial ones:
 *  - Conv: dX is the transposed convolution of dY by the same weight
 *    (ConvTranspose with the forward strides, dilations, begin pads and
 *    groups); dW is a convolution of X by dY with batch and channels
 *    swapped, the forward strides becoming its dilations and the forward
 *    dilations its strides; dB the sum of dY over all but the channels.
 *  - AveragePool: dY divided by each window's divisor (the count the
 *    forward kernel divides by, computed here at compile time), spread
 *    back over its window by a per-channel ConvTranspose with a kernel of
 *    ones.
 *  - MaxPool: dY goes to the one element MaxPool's indices name: the
 *    first maximum of its window in row-major order, which is the element
 *    ONNX Runtime and PyTorch route a tie to. Where windows cannot overlap
 *    that is MaxUnpool; else a ScatterElements that adds, since one
 *    element can be the maximum of several windows. A forward MaxPool
 *    without its indices output is run again with it.
 *  - GlobalAveragePool: dY / (spatial size), expanded over the window.
 *  - BatchNormalization in its inference form, as exporters write it for
 *    eval (training_mode = 1 is refused by its shape function: batch
 *    statistics are not supported): y = (x - mean) / sqrt(var + eps) *
 *    scale + B with mean and var inputs, so the gradient flows through
 *    them as fixed values. Running mean and variance, being float
 *    initializers, get their exact gradients like any weight; PyTorch
 *    treats them as buffers, so freeze them (--frozen) to train as it does.
 * A transposed convolution reaches (O - 1) * stride + span - pad_begin
 * positions, which differs from the input's length where the last window
 * ended early (strides) or ran into the end pads: fit() cuts or zero-pads
 * it to the input.
 */
#include "autodiff.h"

#include <stdlib.h>
#include <string.h>

#define DY0 (v->dy[0])
#define X(k) (v->n->inputs[k])
#define Y(k) (v->n->outputs[k])

static void put(Vjp *v, int k, Tensor *dx)
{
    if (v->want[k])
        v->dx[k] = dx;
}

static int ok(Vjp *v, int k)
{
    return !v->want[k] || v->dx[k] ? 0 : -1;
}

static Tensor *fconst(Vjp *v, float x, const Tensor *like)
{
    return ad_cast(v, ad_scalar(v, x), like->dtype);
}

/* n float32 values as a constant of the given dims, in like's dtype. */
static Tensor *fconst_shaped(Vjp *v, const char *base, const float *vals, const int64_t *dims, int rank,
                             const Tensor *like)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    Tensor *t = ad_const(v, base, DT_F32, vals, n, 1);
    return ad_cast(v, ad_reshape(v, t, dims, rank), like->dtype);
}

static Tensor *zeros_of(Vjp *v, const int64_t *dims, int rank, const Tensor *like)
{
    return ad_expand(v, fconst(v, 0.0f, like), dims, rank);
}

/* Every dim but `keep`. */
static unsigned all_but(int keep, int rank)
{
    unsigned m = 0;
    for (int i = 0; i < rank; i++)
        if (i != keep)
            m |= 1u << i;
    return m;
}

/* The geometry the shape functions resolved: "pads" is always written
 * back there (auto_pad and ceil_mode already applied). */
typedef struct Win {
    int ns;
    int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], d[IR_MAX_RANK], pb[IR_MAX_RANK], pe[IR_MAX_RANK];
} Win;

static int64_t ints_at(const Node *n, const char *name, int i, int64_t dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

static Win win_of(const Node *n, int ns, const int64_t *kernel)
{
    Win w;
    memset(&w, 0, sizeof w);
    w.ns = ns;
    for (int i = 0; i < ns; i++) {
        w.k[i] = kernel[i];
        w.s[i] = ints_at(n, "strides", i, 1);
        w.d[i] = ints_at(n, "dilations", i, 1);
        w.pb[i] = ints_at(n, "pads", i, 0);
        w.pe[i] = ints_at(n, "pads", ns + i, 0);
    }
    return w;
}

static void copy_attrs(Vjp *v, Node *dst, const Node *src)
{
    for (int i = 0; i < src->nattrs; i++) {
        const Attr *a = &src->attrs[i];
        if (a->type == ATTR_INTS)
            node_attr_set_ints(v->g, dst, a->name, a->ints, a->n);
        else if (a->type == ATTR_FLOATS)
            node_attr_set_floats(v->g, dst, a->name, a->floats, a->n);
        else if (a->type == ATTR_INT)
            node_attr_set_int(v->g, dst, a->name, a->i);
        else if (a->type == ATTR_FLOAT)
            node_attr_set_float(v->g, dst, a->name, a->f);
        else if (a->type == ATTR_STRING)
            node_attr_set_str(v->g, dst, a->name, a->s);
    }
}

/* t [A, B, L...] cut, or zero-padded at the end, to like's spatial dims
 * (dims 2 on); dims 0 and 1 are left alone. */
static Tensor *fit(Vjp *v, Tensor *t, const Tensor *like)
{
    if (!t)
        return NULL;
    int r = t->rank, ncut = 0, npad = 0;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], pads[2 * IR_MAX_RANK] = {0};
    for (int i = 2; i < r; i++) {
        if (t->dims[i] > like->dims[i]) {
            st[ncut] = 0;
            en[ncut] = like->dims[i];
            ax[ncut++] = i;
        } else if (t->dims[i] < like->dims[i]) {
            pads[r + i] = like->dims[i] - t->dims[i];
            npad++;
        }
    }
    if (ncut) {
        Node *s = ad_begin(v, OP_SLICE, 1, &t);
        node_attr_set_ints(v->g, s, "starts", st, ncut);
        node_attr_set_ints(v->g, s, "ends", en, ncut);
        node_attr_set_ints(v->g, s, "axes", ax, ncut);
        if (!(t = ad_done(v, s)))
            return NULL;
    }
    if (npad) {
        Node *p = ad_begin(v, OP_PAD, 1, &t);
        node_attr_set_ints(v->g, p, "pads", pads, 2 * r);
        t = ad_done(v, p);
    }
    return t;
}

/* The adjoint of a windowed sum over x: dy [N, M, O...] spread back over
 * the positions of x through w (ConvTranspose's layout [M, C / group,
 * kernel...]), as ConvTranspose with the forward strides, dilations and
 * begin pads, fitted to x. */
static Tensor *spread(Vjp *v, Tensor *dy, Tensor *w, int64_t group, const Win *win, const Tensor *x)
{
    if (!dy || !w)
        return NULL;
    int ns = win->ns;
    int64_t pads[2 * IR_MAX_RANK] = {0};
    for (int i = 0; i < ns; i++) {
        /* positions up to the last window's end: none means no window
         * reads x at all (every one lies in the begin pad) */
        int64_t reach = (dy->dims[2 + i] - 1) * win->s[i] + (win->k[i] - 1) * win->d[i] + 1 - win->pb[i];
        if (reach < 1)
            return zeros_of(v, x->dims, x->rank, x);
        pads[i] = win->pb[i];
    }
    Tensor *ins[2] = {dy, w};
    Node *n = ad_begin(v, OP_CONV_TRANSPOSE, 2, ins);
    node_attr_set_ints(v->g, n, "strides", win->s, ns);
    node_attr_set_ints(v->g, n, "dilations", win->d, ns);
    node_attr_set_ints(v->g, n, "pads", pads, 2 * ns);
    node_attr_set_int(v->g, n, "group", group);
    return fit(v, ad_done(v, n), x);
}

/* ---- Conv ------------------------------------------------------------------ */

/* dW[g*Mg + m, c, k] = sum over n, o of dy[n, g*Mg + m, o] x[n, g*Cg + c, o*s + k*dl - pb]:
 * a convolution whose batch is x's channels within a group (Cg), whose
 * input channels are the batch (N per group), with dy as its weight
 * ([M, N, O...]: the output positions are its kernel), stride dl and
 * dilation s. Its output [Cg, M, K...] has K >= the kernel (more where
 * the end pads leave room): cut, then transposed to [M, Cg, kernel...]. */
static Tensor *conv_weight_grad(Vjp *v, Tensor *x, Tensor *dy, const Tensor *w, int64_t group, const Win *win)
{
    int r = x->rank, ns = win->ns;
    int64_t N = x->dims[0], Cg = x->dims[1] / group, Mg = dy->dims[1] / group;
    int64_t perm[IR_MAX_RANK], dims[IR_MAX_RANK];
    Tensor *xt, *gt;
    if (group == 1) {
        for (int i = 0; i < r; i++)
            perm[i] = i < 2 ? 1 - i : i;
        xt = ad_transpose(v, x, perm);
        gt = ad_transpose(v, dy, perm);
    } else {
        if (r + 1 > IR_MAX_RANK) {
            vjp_fail(v, "a grouped convolution of rank %d has no gradient rule", r);
            return NULL;
        }
        /* x [N, G, Cg, sp...] -> [Cg, G, N, sp...] -> [Cg, G*N, sp...] */
        dims[0] = N, dims[1] = group, dims[2] = Cg;
        memcpy(dims + 3, x->dims + 2, sizeof(int64_t) * (size_t)ns);
        perm[0] = 2, perm[1] = 1, perm[2] = 0;
        for (int i = 3; i <= r; i++)
            perm[i] = i;
        xt = ad_transpose(v, ad_reshape(v, x, dims, r + 1), perm);
        dims[0] = Cg, dims[1] = group * N;
        memcpy(dims + 2, x->dims + 2, sizeof(int64_t) * (size_t)ns);
        xt = ad_reshape(v, xt, dims, r);
        /* dy [N, G, Mg, O...] -> [G, Mg, N, O...] -> [M, N, O...] */
        dims[0] = N, dims[1] = group, dims[2] = Mg;
        memcpy(dims + 3, dy->dims + 2, sizeof(int64_t) * (size_t)ns);
        perm[0] = 1, perm[1] = 2, perm[2] = 0;
        gt = ad_transpose(v, ad_reshape(v, dy, dims, r + 1), perm);
        dims[0] = group * Mg, dims[1] = N;
        memcpy(dims + 2, dy->dims + 2, sizeof(int64_t) * (size_t)ns);
        gt = ad_reshape(v, gt, dims, r);
    }
    if (!xt || !gt)
        return NULL;
    int64_t pads[2 * IR_MAX_RANK];
    memcpy(pads, win->pb, sizeof(int64_t) * (size_t)ns);
    memcpy(pads + ns, win->pe, sizeof(int64_t) * (size_t)ns);
    Tensor *ins[2] = {xt, gt};
    Node *n = ad_begin(v, OP_CONV, 2, ins);
    node_attr_set_ints(v->g, n, "strides", win->d, ns);
    node_attr_set_ints(v->g, n, "dilations", win->s, ns);
    node_attr_set_ints(v->g, n, "pads", pads, 2 * ns);
    node_attr_set_int(v->g, n, "group", group);
    Tensor *c = fit(v, ad_done(v, n), w);
    for (int i = 0; i < r; i++)
        perm[i] = i < 2 ? 1 - i : i;
    return c ? ad_transpose(v, c, perm) : NULL;
}

int vjp_conv(Vjp *v)
{
    Tensor *x = X(0), *w = X(1), *dy = DY0;
    int64_t group = node_attr_int(v->n, "group", 1);
    Win win = win_of(v->n, x->rank - 2, w->dims + 2);
    if (v->want[0])
        v->dx[0] = spread(v, dy, w, group, &win, x);
    if (v->want[1])
        v->dx[1] = conv_weight_grad(v, x, dy, w, group, &win);
    if (v->n->ninputs > 2 && X(2) && v->want[2])
        v->dx[2] = ad_reduce(v, OP_REDUCE_SUM, dy, all_but(1, dy->rank), 0);
    return ok(v, 0) || ok(v, 1) || (v->n->ninputs > 2 && ok(v, 2));
}

/* ---- pooling ------------------------------------------------------------- */

int vjp_maxpool(Vjp *v)
{
    Tensor *x = X(0), *dy = DY0;
    if (!v->want[0] || !dy)
        return 0; /* the indices output is int64: no gradient flows back through it */
    Tensor *idx = v->n->noutputs > 1 ? Y(1) : NULL;
    if (!idx) {
        Node *m = ad_begin(v, OP_MAXPOOL, 1, &v->n->inputs[0]);
        copy_attrs(v, m, v->n);
        idx = ad_add_output(v, m);
        if (!ad_done(v, m))
            return -1;
    }
    int ns = x->rank - 2;
    Win win = win_of(v->n, ns, node_attr(v->n, "kernel_shape")->ints);
    /* MaxUnpool places each gradient at its index, one per element: exact
     * when no two windows share an element and its inverse of MaxPool's
     * size is x's (its indices address that size). */
    int disjoint = 1;
    for (int i = 0; i < ns; i++)
        if (win.d[i] != 1 || win.s[i] < win.k[i] ||
            (dy->dims[2 + i] - 1) * win.s[i] - win.pb[i] - win.pe[i] + win.k[i] != x->dims[2 + i])
            disjoint = 0;
    if (disjoint) {
        Tensor *shape = ad_const(v, "unpool_shape", DT_I64, x->dims, x->rank, 1);
        Tensor *ins[3] = {dy, idx, shape};
        Node *u = ad_begin(v, OP_MAX_UNPOOL, 3, ins);
        int64_t pads[2 * IR_MAX_RANK];
        memcpy(pads, win.pb, sizeof(int64_t) * (size_t)ns);
        memcpy(pads + ns, win.pe, sizeof(int64_t) * (size_t)ns);
        node_attr_set_ints(v->g, u, "kernel_shape", win.k, ns);
        node_attr_set_ints(v->g, u, "strides", win.s, ns);
        node_attr_set_ints(v->g, u, "pads", pads, 2 * ns);
        put(v, 0, ad_done(v, u));
        return ok(v, 0);
    }
    /* Overlapping windows: over x flattened (MaxPool's indices are flat
     * over the whole tensor), each window adds its gradient at its index. */
    int64_t nx = tensor_numel(x), ny = tensor_numel(dy);
    Tensor *ins[3] = {zeros_of(v, &nx, 1, x), ad_reshape(v, idx, &ny, 1), ad_reshape(v, dy, &ny, 1)};
    if (!ins[0] || !ins[1] || !ins[2])
        return -1;
    Node *s = ad_begin(v, OP_SCATTER_ELEMENTS, 3, ins);
    node_attr_set_int(v->g, s, "axis", 0);
    node_attr_set_str(v->g, s, "reduction", "add");
    put(v, 0, ad_reshape(v, ad_done(v, s), x->dims, x->rank));
    return ok(v, 0);
}

/* 1 / (what the forward kernel divides output position o by): the window's
 * positions inside x, or (count_include_pad) inside x and its pads; 0 for
 * a window with none, whose output the kernel sets to 0. */
static float *avgpool_scales(const Win *w, const int64_t *xs, const int64_t *ys, int64_t ny, int incl)
{
    float *out = malloc((size_t)ny * sizeof(float));
    if (!out)
        abort();
    int64_t nk = 1;
    for (int i = 0; i < w->ns; i++)
        nk *= w->k[i];
    for (int64_t o = 0; o < ny; o++) {
        int64_t oc[IR_MAX_RANK], rest = o, cnt = 0;
        for (int i = w->ns - 1; i >= 0; i--) {
            oc[i] = rest % ys[i];
            rest /= ys[i];
        }
        for (int64_t t = 0; t < nk; t++) {
            int64_t q = t;
            int inside = 1, in_pad = 1;
            for (int i = w->ns - 1; i >= 0; i--) {
                int64_t ic = oc[i] * w->s[i] - w->pb[i] + (q % w->k[i]) * w->d[i];
                q /= w->k[i];
                in_pad &= ic < xs[i] + w->pe[i];
                inside &= ic >= 0 && ic < xs[i];
            }
            cnt += incl ? in_pad : inside;
        }
        out[o] = cnt ? (float)(1.0 / (double)cnt) : 0.0f;
    }
    return out;
}

int vjp_avgpool(Vjp *v)
{
    Tensor *x = X(0), *dy = DY0;
    int r = x->rank, ns = r - 2;
    int64_t C = x->dims[1], ny = 1, nk = 1;
    Win win = win_of(v->n, ns, node_attr(v->n, "kernel_shape")->ints);
    for (int i = 0; i < ns; i++) {
        ny *= dy->dims[2 + i];
        nk *= win.k[i];
    }
    float *sc = avgpool_scales(&win, x->dims + 2, dy->dims + 2, ny, (int)node_attr_int(v->n, "count_include_pad", 0));
    int64_t dims[IR_MAX_RANK];
    dims[0] = dims[1] = 1;
    memcpy(dims + 2, dy->dims + 2, sizeof(int64_t) * (size_t)ns);
    Tensor *scale = fconst_shaped(v, "avgpool_scale", sc, dims, r, dy);
    free(sc);
    /* a kernel of ones per channel: group = C, weight [C, 1, kernel...] */
    float *ones = malloc((size_t)(C * nk) * sizeof(float));
    if (!ones)
        abort();
    for (int64_t i = 0; i < C * nk; i++)
        ones[i] = 1.0f;
    dims[0] = C;
    memcpy(dims + 2, win.k, sizeof(int64_t) * (size_t)ns);
    Tensor *w = fconst_shaped(v, "avgpool_ones", ones, dims, r, dy);
    free(ones);
    put(v, 0, spread(v, ad_bin(v, OP_MUL, dy, scale), w, C, &win, x));
    return ok(v, 0);
}

int vjp_global_avgpool(Vjp *v)
{
    Tensor *x = X(0);
    int64_t spatial = 1;
    for (int i = 2; i < x->rank; i++)
        spatial *= x->dims[i];
    Tensor *g = ad_bin(v, OP_MUL, DY0, fconst(v, (float)(1.0 / (double)spatial), x));
    put(v, 0, ad_expand(v, g, x->dims, x->rank));
    return ok(v, 0);
}

/* ---- BatchNormalization -------------------------------------------------- */

/* With a = scale * rstd, rstd = 1 / sqrt(var + eps), y = (x - mean) a + B:
 *   dx = dy a;  dscale = S2 rstd;  dB = S1;  dmean = -S1 a;
 *   dvar = -S2 scale rstd^3 / 2,
 * S1 = sum(dy) and S2 = sum(dy (x - mean)) over all but the channels. */
int vjp_batchnorm(Vjp *v)
{
    Tensor *x = X(0), *scale = X(1), *mean = X(3), *var = X(4), *dy = DY0;
    int r = x->rank;
    unsigned m = all_but(1, r);
    int64_t cdims[IR_MAX_RANK];
    cdims[0] = x->dims[1];
    for (int i = 1; i < r - 1; i++)
        cdims[i] = 1; /* [C, 1, ...]: broadcasts along x's channels */
    float eps = node_attr_float(v->n, "epsilon", 1e-5f);
    Tensor *rstd = ad_un(v, OP_RECIPROCAL, ad_un(v, OP_SQRT, ad_bin(v, OP_ADD, var, fconst(v, eps, var))));
    Tensor *a = ad_bin(v, OP_MUL, scale, rstd);
    if (v->want[0])
        v->dx[0] = ad_bin(v, OP_MUL, dy, ad_reshape(v, a, cdims, r - 1));
    Tensor *s1 = NULL, *s2 = NULL;
    if (v->want[2] || v->want[3])
        s1 = ad_reduce(v, OP_REDUCE_SUM, dy, m, 0);
    if (v->want[1] || v->want[4]) {
        Tensor *xc = ad_bin(v, OP_SUB, x, ad_reshape(v, mean, cdims, r - 1));
        s2 = ad_reduce(v, OP_REDUCE_SUM, ad_bin(v, OP_MUL, dy, xc), m, 0);
    }
    if (v->want[1])
        v->dx[1] = ad_bin(v, OP_MUL, s2, rstd);
    put(v, 2, s1);
    if (v->want[3])
        v->dx[3] = ad_un(v, OP_NEG, ad_bin(v, OP_MUL, s1, a));
    if (v->want[4])
        v->dx[4] = ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, s2, a),
                          ad_bin(v, OP_MUL, ad_bin(v, OP_MUL, rstd, rstd), fconst(v, -0.5f, var)));
    return ok(v, 0) || ok(v, 1) || ok(v, 2) || ok(v, 3) || ok(v, 4);
}
