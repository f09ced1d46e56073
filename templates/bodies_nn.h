/* ---- onnx2spmd kernel bodies: the nn family (templates/bodies_nn.h) ----
 * Per-element bodies of the nn family's kernels (pooling, LRN, Resize,
 * ConvTranspose, Col2Im, MaxUnpool), shared by templates/kernels_nn.c
 * (which loops over the elements) and templates/cuda_nn.cu (one thread
 * each): both targets compute each element with this same code, in the
 * same order. O2S_HD is from templates/bodies.h.
 */

/* Window geometry per spatial dim, unpacked from the emitter's array
 * g = {x dims, y dims, kernel, strides, dilations, begin pads, end pads},
 * ns entries each. */
typedef struct KWin {
    int ns;
    int64_t x[K_MAX_RANK], y[K_MAX_RANK], k[K_MAX_RANK], s[K_MAX_RANK], d[K_MAX_RANK], pb[K_MAX_RANK],
        pe[K_MAX_RANK];
    int64_t nx, ny, nk; /* spatial element counts of x, y and the window */
} KWin;

static inline KWin k_win(int ns, const int64_t *g)
{
    KWin w;
    memset(&w, 0, sizeof w);
    w.ns = ns;
    w.nx = w.ny = w.nk = 1;
    for (int i = 0; i < ns; i++) {
        w.x[i] = g[i];
        w.y[i] = g[ns + i];
        w.k[i] = g[2 * ns + i];
        w.s[i] = g[3 * ns + i];
        w.d[i] = g[4 * ns + i];
        w.pb[i] = g[5 * ns + i];
        w.pe[i] = g[6 * ns + i];
        w.nx *= w.x[i];
        w.ny *= w.y[i];
        w.nk *= w.k[i];
    }
    return w;
}

/* Output element o of one [N*C] plane: AVG divides by the window's
 * positions inside the input, AVG_PAD by those inside input and pads, LP
 * is (sum |v|^p)^(1/p) with the pads as zeros, MAX the largest input
 * (NaN wins, as in ONNX Runtime). */
O2S_HD static inline float k_pool_one(int op, const float *xp, const KWin *w, int64_t o, int p)
{
    int64_t oc[K_MAX_RANK];
    for (int i = w->ns - 1; i >= 0; i--) {
        oc[i] = o % w->y[i];
        o /= w->y[i];
    }
    double acc = 0.0;
    float mx = -INFINITY;
    int64_t cnt = 0, cnt_pad = 0;
    for (int64_t t = 0; t < w->nk; t++) {
        int64_t q = t, ic[K_MAX_RANK];
        int inside = 1, in_pad = 1;
        for (int i = w->ns - 1; i >= 0; i--) {
            ic[i] = oc[i] * w->s[i] - w->pb[i] + (q % w->k[i]) * w->d[i];
            q /= w->k[i];
            in_pad &= ic[i] < w->x[i] + w->pe[i];
            inside &= ic[i] >= 0 && ic[i] < w->x[i];
        }
        cnt_pad += in_pad;
        if (!inside)
            continue;
        cnt++;
        int64_t idx = 0;
        for (int i = 0; i < w->ns; i++)
            idx = idx * w->x[i] + ic[i];
        float v = xp[idx];
        if (op == K_POOL_MAX)
            mx = v > mx || v != v ? v : mx;
        else if (op == K_POOL_LP)
            acc += pow(fabs((double)v), (double)p);
        else
            acc += v;
    }
    if (op == K_POOL_MAX)
        return mx;
    if (op == K_POOL_LP)
        return (float)pow(acc, 1.0 / p);
    int64_t div = op == K_POOL_AVG_PAD ? cnt_pad : cnt;
    return div ? (float)(acc / (double)div) : 0.0f;
}

/* x as [n, c, inner]: each element divided by (bias + alpha / size * the
 * sum of squares over channels c - (size-1)/2 .. c + size/2)^beta. */
O2S_HD static inline float k_lrn_one(const float *x, int64_t c, int64_t inner, int64_t i, int64_t size, float alpha,
                              float beta, float bias)
{
    int64_t ch = (i / inner) % c, base = i - ch * inner;
    int64_t lo = ch - (size - 1) / 2, hi = ch + size / 2;
    double sq = 0.0;
    for (int64_t k = lo < 0 ? 0 : lo; k <= hi && k < c; k++) {
        double v = x[base + k * inner];
        sq += v * v;
    }
    return (float)(x[i] / pow((double)bias + (double)alpha / (double)size * sq, (double)beta));
}

#define K_RS_TAPS 32

/* One dim: input and output length, scale, the output length the scale
 * implies (scale * input, not rounded), roi begin and end (crop mode), and
 * whether the dim is untouched (scale 1), so output index = input index. */
typedef struct KRsDim {
    int64_t xd, yd;
    int ident;
    double scale, width, r0, r1;
} KRsDim;

typedef struct KResize {
    int rank, mode, coord, nearest, antialias, exclude;
    double a, extrap;
    KRsDim d[K_MAX_RANK];
} KResize;

/* dims = {x dims, y dims, ident flags}, f = {scale, width, roi begin, roi end} per dim. */
static inline KResize k_resize_params(int rank, const int64_t *dims, const double *f, int mode, int coord,
                                      int nearest, int antialias, int exclude, double a, double extrap)
{
    KResize r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    r.mode = mode;
    r.coord = coord;
    r.nearest = nearest;
    r.antialias = antialias;
    r.exclude = exclude;
    r.a = a;
    r.extrap = extrap;
    for (int i = 0; i < rank; i++) {
        r.d[i].xd = dims[i];
        r.d[i].yd = dims[rank + i];
        r.d[i].ident = (int)dims[2 * rank + i];
        r.d[i].scale = f[4 * i];
        r.d[i].width = f[4 * i + 1];
        r.d[i].r0 = f[4 * i + 2];
        r.d[i].r1 = f[4 * i + 3];
    }
    return r;
}

O2S_HD static inline double k_rs_cubic(double a, double x)
{
    x = fabs(x);
    if (x <= 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/* The input indices and weights output index o reads along one dim, as the
 * ONNX reference implementation computes them: the source coordinate x,
 * its left neighbour i0 = ceil(x) - 1 (so ratio = x - i0 is in (0, 1]),
 * the filter's taps around it, edge-clamped indices. Returns the tap
 * count, 0 when the source lies outside the crop (extrapolation). */
O2S_HD static inline int k_rs_taps(const KResize *r, const KRsDim *dm, int64_t o, int64_t *idx, double *w)
{
    double s = dm->scale, len = (double)dm->xd, x;
    switch (r->coord) {
    case K_RS_PYTORCH: x = dm->width == 1.0 ? -0.5 : (o + 0.5) / s - 0.5; break;
    case K_RS_ALIGN: x = dm->width == 1.0 ? 0.0 : o * (len - 1.0) / (dm->width - 1.0); break;
    case K_RS_ASYM: x = o / s; break;
    case K_RS_TF_NN: x = (o + 0.5) / s; break;
    case K_RS_CROP:
        x = dm->width == 1.0 ? (dm->r1 - dm->r0) * (len - 1.0) / 2.0
                             : o * (dm->r1 - dm->r0) * (len - 1.0) / (dm->width - 1.0);
        x += dm->r0 * (len - 1.0);
        if (x < 0.0 || x > len - 1.0)
            return 0;
        break;
    case K_RS_SYMMETRIC: {
        double off = len / 2.0 * (1.0 - (double)dm->yd / dm->width);
        x = off + (o + 0.5) / s - 0.5;
        break;
    }
    default: x = (o + 0.5) / s - 0.5; break;
    }
    double i0 = ceil(x) - 1.0, ratio = x - i0, sum = 0.0;
    int n = 0;
    if (r->mode == K_RS_NEAREST) {
        int right = ratio == 1.0 || (r->nearest == K_RS_PREFER_FLOOR && ratio > 0.5) ||
                    (r->nearest == K_RS_PREFER_CEIL && ratio >= 0.5) || r->nearest == K_RS_CEIL;
        idx[0] = (int64_t)i0 + right;
        w[0] = 1.0;
        n = 1;
    } else {
        double support = r->mode == K_RS_LINEAR ? 1.0 : 2.0;
        double sc = r->antialias && s < 1.0 ? s : 1.0;
        int64_t start = (int64_t)floor(-support / sc) + 1, count = 2 - 2 * start;
        for (int64_t j = start; j < start + count && n < K_RS_TAPS; j++, n++) {
            double t = ((double)j - ratio) * sc;
            idx[n] = (int64_t)i0 + j;
            w[n] = r->mode == K_RS_LINEAR ? fmax(0.0, 1.0 - fabs(t)) : k_rs_cubic(r->a, t);
            sum += w[n];
        }
        if (r->antialias && sum != 0.0)
            for (int k = 0; k < n; k++)
                w[k] /= sum;
        if (r->exclude) {
            sum = 0.0;
            for (int k = 0; k < n; k++) {
                if (idx[k] < 0 || idx[k] >= dm->xd)
                    w[k] = 0.0;
                sum += w[k];
            }
            for (int k = 0; k < n && sum != 0.0; k++)
                w[k] /= sum;
        }
    }
    for (int k = 0; k < n; k++)
        idx[k] = idx[k] < 0 ? 0 : idx[k] >= dm->xd ? dm->xd - 1 : idx[k];
    return n;
}

/* Output element o: the weighted sum over the product of every dim's taps. */
O2S_HD static inline float k_resize_one(const KResize *r, const float *x, int64_t o)
{
    int64_t oc[K_MAX_RANK], xs[K_MAX_RANK], idx[K_MAX_RANK][K_RS_TAPS], base = 0;
    double w[K_MAX_RANK][K_RS_TAPS];
    int nt[K_MAX_RANK], at[K_MAX_RANK];
    int64_t st = 1;
    for (int i = r->rank - 1; i >= 0; i--) {
        oc[i] = o % r->d[i].yd;
        o /= r->d[i].yd;
        xs[i] = st;
        st *= r->d[i].xd;
    }
    for (int i = 0; i < r->rank; i++) {
        at[i] = 0;
        if (r->d[i].ident) {
            nt[i] = 0;
            base += oc[i] * xs[i];
        } else if (!(nt[i] = k_rs_taps(r, &r->d[i], oc[i], idx[i], w[i]))) {
            return (float)r->extrap;
        }
    }
    double acc = 0.0;
    for (;;) {
        double wt = 1.0;
        int64_t off = base;
        for (int i = 0; i < r->rank; i++)
            if (nt[i]) {
                wt *= w[i][at[i]];
                off += idx[i][at[i]] * xs[i];
            }
        acc += wt * x[off];
        int i = r->rank - 1;
        for (; i >= 0; i--) {
            if (nt[i] && ++at[i] < nt[i])
                break;
            at[i] = 0;
        }
        if (i < 0)
            break;
    }
    return (float)acc;
}

/* Mode nearest on integers: each output copies the one element its taps
 * name (exact for any int64, unlike the weighted sum). */
O2S_HD static inline int64_t k_resize_one_i64(const KResize *r, const int64_t *x, int64_t o)
{
    int64_t off = 0, st = 1, idx[K_RS_TAPS];
    double w[K_RS_TAPS];
    for (int i = r->rank - 1; i >= 0; i--) {
        int64_t oc = o % r->d[i].yd;
        o /= r->d[i].yd;
        if (r->d[i].ident)
            off += oc * st;
        else if (k_rs_taps(r, &r->d[i], oc, idx, w))
            off += idx[0] * st;
        else
            return (int64_t)r->extrap;
        st *= r->d[i].xd;
    }
    return x[off];
}

/* y[n, m, o] = b[m] + sum over the group's input channels c and the kernel
 * positions k with o = i * stride - pad + k * dilation of x[n, c, i] *
 * w[c, m % (M/group), k]: each output gathers its inputs, so no two
 * threads write one element. g as k_win's (x, y, kernel, strides,
 * dilations, begin pads; the end pads unused). */
O2S_HD static inline float k_convt_one(const float *x, const float *wt, const float *b, int64_t cin, int64_t m,
                                int64_t group, const KWin *w, int64_t i)
{
    int64_t o = i % w->ny, mo = (i / w->ny) % m, nb = i / (w->ny * m);
    int64_t cg = cin / group, mg = m / group, grp = mo / mg, mm = mo % mg;
    int64_t oc[K_MAX_RANK], ic[K_MAX_RANK];
    for (int j = w->ns - 1; j >= 0; j--) {
        oc[j] = o % w->y[j];
        o /= w->y[j];
    }
    double acc = b ? b[mo] : 0.0;
    for (int64_t t = 0; t < w->nk; t++) {
        int64_t q = t, xo = 0;
        int ok = 1;
        for (int j = w->ns - 1; j >= 0 && ok; j--) {
            int64_t num = oc[j] + w->pb[j] - (q % w->k[j]) * w->d[j];
            q /= w->k[j];
            ic[j] = num / w->s[j];
            ok = num >= 0 && num % w->s[j] == 0 && ic[j] < w->x[j];
        }
        if (!ok)
            continue;
        for (int j = 0; j < w->ns; j++)
            xo = xo * w->x[j] + ic[j];
        for (int64_t c = grp * cg; c < (grp + 1) * cg; c++)
            acc += (double)x[(nb * cin + c) * w->nx + xo] * wt[(c * mg + mm) * w->nk + t];
    }
    return (float)acc;
}

/* y[nc, o] = the sum over block offsets k and block positions l with
 * o = l * stride - pad + k * dilation of x[nc * K + k, l] (K offsets per
 * channel): each output gathers its inputs, in the order of k. g as
 * k_win's, with the block counts as the input dims. */
O2S_HD static inline float k_col2im_one(const float *x, int64_t kk, const KWin *w, int64_t i)
{
    int64_t o = i % w->ny, nc = i / w->ny, oc[K_MAX_RANK], lc[K_MAX_RANK];
    for (int j = w->ns - 1; j >= 0; j--) {
        oc[j] = o % w->y[j];
        o /= w->y[j];
    }
    double acc = 0.0;
    for (int64_t t = 0; t < w->nk; t++) {
        int64_t q = t, l = 0;
        int ok = 1;
        for (int j = w->ns - 1; j >= 0 && ok; j--) {
            int64_t num = oc[j] + w->pb[j] - (q % w->k[j]) * w->d[j];
            q /= w->k[j];
            lc[j] = num / w->s[j];
            ok = num >= 0 && num % w->s[j] == 0 && lc[j] < w->x[j];
        }
        if (!ok)
            continue;
        for (int j = 0; j < w->ns; j++)
            l = l * w->x[j] + lc[j];
        acc += x[(nc * kk + t) * w->nx + l];
    }
    return (float)acc;
}

/* The spatial dims of y that the indices address (inverting MaxPool) and
 * of y itself, which output_shape may make larger: the addressed part is
 * its leading corner, as in the ONNX reference implementation. */
typedef struct KUnpool {
    int ns;
    int64_t inf[K_MAX_RANK], out[K_MAX_RANK];
    int64_t ninf, nout;
} KUnpool;

static inline KUnpool k_unpool(int ns, const int64_t *g)
{
    KUnpool u;
    memset(&u, 0, sizeof u);
    u.ns = ns;
    u.ninf = u.nout = 1;
    for (int i = 0; i < ns; i++) {
        u.inf[i] = g[i];
        u.out[i] = g[ns + i];
        u.ninf *= u.inf[i];
        u.nout *= u.out[i];
    }
    return u;
}

/* Position pos of the addressed part as an offset into a plane of y. */
O2S_HD static inline int64_t k_unpool_pos(const KUnpool *u, int64_t pos)
{
    int64_t off = 0, st = 1;
    for (int i = u->ns - 1; i >= 0; i--) {
        off += (pos % u->inf[i]) * st;
        pos /= u->inf[i];
        st *= u->out[i];
    }
    return off;
}

/* ---- MaxPool ---- */

/* MaxPool (2-D) output (oy, ox) of one [H, W] plane xp: the largest input
 * in the window (the first one on ties), in *best; returns its index in
 * the plane (-1 when the window holds no input). */
O2S_HD static inline int64_t k_maxpool_one(const float *xp, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t oy,
                                           int64_t ox, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph,
                                           int64_t pw, float *best)
{
    int64_t at = -1;
    *best = -INFINITY;
    for (int64_t i = 0; i < kh; i++) {
        int64_t iy = oy * sh - ph + i * dh;
        if (iy < 0 || iy >= H)
            continue;
        for (int64_t j = 0; j < kw; j++) {
            int64_t ix = ox * sw - pw + j * dw;
            if (ix < 0 || ix >= W)
                continue;
            if (xp[iy * W + ix] > *best || at < 0) {
                *best = xp[iy * W + ix];
                at = iy * W + ix;
            }
        }
    }
    return at;
}
