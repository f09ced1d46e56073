/* emit_nn.c: kernel calls for the nn family (ir/ops_nn.def).
 *
 * The factor rules (partition/rules_nn.c) keep every dim a window slides
 * or an interpolation runs along whole on each rank, so these emitters
 * pass the local blocks with geometry that is global along those dims and
 * never need the rank's position. The one split that changes a result is
 * ConvTranspose's input channels: each rank sums its own channels and the
 * plan adds the partial results, so only one rank adds the bias. The
 * kernels are the k_* of templates/kernels_nn.c and templates/cuda_nn.cu.
 */
#include "codegen.h"

#include <string.h>

/* The K_POOL_* selectors of k_pool_f32 (templates/bodies.h), by kind. */
enum { POOL_AVG, POOL_AVG_PAD, POOL_LP, POOL_MAX };
static const char *const pool_codes[] = {"K_POOL_AVG", "K_POOL_AVG_PAD", "K_POOL_LP", "K_POOL_MAX"};

static const char *double_lit(double v, char *buf)
{
    snprintf(buf, 40, "%.17g", v);
    return buf;
}

/* An INTS attribute's entry i, or dflt when it is absent. */
static int64_t ints_at(const Node *n, const char *name, int i, int64_t dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

/* The window array of k_win: x dims (xs, ns of them), y dims, kernel,
 * strides, dilations, begin pads, end pads (the shape functions wrote
 * "pads" and, for GlobalMaxPool, "kernel_shape"). */
static void emit_window(const EmitCtx *c, const int64_t *xs, const Buffer *y, const int64_t *kernel)
{
    int ns = y->rank - 2;
    int64_t g[7 * IR_MAX_RANK];
    for (int i = 0; i < ns; i++) {
        g[i] = xs[i];
        g[ns + i] = y->dims[2 + i];
        g[2 * ns + i] = kernel[i];
        g[3 * ns + i] = ints_at(c->n, "strides", i, 1);
        g[4 * ns + i] = ints_at(c->n, "dilations", i, 1);
        g[5 * ns + i] = ints_at(c->n, "pads", i, 0);
        g[6 * ns + i] = ints_at(c->n, "pads", ns + i, 0);
    }
    emit_arr(c, "win", g, 7 * ns);
}

int emit_nn_pool(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *ks = node_attr(c->n, "kernel_shape");
    int op = c->n->op == OP_GLOBAL_MAXPOOL ? POOL_MAX
           : c->n->op == OP_LP_POOL        ? POOL_LP
           : node_attr_int(c->n, "count_include_pad", 0) ? POOL_AVG_PAD : POOL_AVG;
    static const char *const what[] = {"average over the input", "average over input and pads", "Lp norm",
                                       "maximum"};
    fprintf(c->f, "    {\n");
    emit_window(c, x->dims + 2, y, ks->ints);
    fprintf(c->f, "        k_pool_f32(%s, %s, %s, %lld, %d, win, %d); /* %s */\n    }\n", pool_codes[op], y->name, x->name,
            (long long)(x->dims[0] * x->dims[1]), x->rank - 2, (int)node_attr_int(c->n, "p", 2), what[op]);
    return 0;
}

int emit_lrn(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    char a[40], b[40], k[40];
    fprintf(c->f, "    k_lrn_f32(%s, %s, %lld, %lld, %lld, %lld, %s, %s, %s);\n", y->name, x->name,
            (long long)x->dims[0], (long long)x->dims[1], (long long)emit_prod(x->dims, 2, x->rank),
            (long long)node_attr_int(c->n, "size", 1), emit_cf(node_attr_float(c->n, "alpha", 1e-4f), a),
            emit_cf(node_attr_float(c->n, "beta", 0.75f), b), emit_cf(node_attr_float(c->n, "bias", 1.0f), k));
    return 0;
}

static int code_of(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i]))
            return i;
    return 0; /* the shape function accepted only these names */
}

/* Resize: per dim the input and output lengths (local: a split dim is one
 * of scale 1, marked as untouched), the scale, the unrounded output length
 * scale * input that the coordinate formulas use, and the roi. A scale
 * that came from sizes is the exact ratio of the lengths, as the
 * reference implementation computes it; one from scales is the model's
 * float, multiplied in float as the reference does. */
int emit_resize(const EmitCtx *c, Diag *d)
{
    (void)d;
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    /* Their K_RS_* selectors (templates/bodies.h), in the same order. */
    static const char *const mode_codes[] = {"K_RS_NEAREST", "K_RS_LINEAR", "K_RS_CUBIC"};
    static const char *const coord_codes[] = {"K_RS_HALF_PIXEL", "K_RS_PYTORCH", "K_RS_ALIGN", "K_RS_ASYM",
                                              "K_RS_TF_NN", "K_RS_CROP", "K_RS_SYMMETRIC"};
    static const char *const nearest_codes[] = {"K_RS_PREFER_FLOOR", "K_RS_PREFER_CEIL", "K_RS_FLOOR", "K_RS_CEIL"};
    const Node *n = c->n;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Tensor *xt = n->inputs[0], *yt = n->outputs[0];
    const Tensor *sizes = n->ninputs > 3 ? n->inputs[3] : NULL;
    const Attr *sc = node_attr(n, "scales"), *roi = node_attr(n, "roi");
    int r = x->rank, coord = code_of(node_attr_str(n, "coordinate_transformation_mode", "half_pixel"), coords, 7);
    int from_sizes = sizes && tensor_numel(sizes) > 0 &&
                     !strcmp(node_attr_str(n, "keep_aspect_ratio_policy", "stretch"), "stretch");
    int64_t dims[3 * IR_MAX_RANK];
    char buf[40];
    fprintf(c->f, "    {\n        static const double rs[] = {");
    for (int i = 0; i < r; i++) {
        double s = sc->floats[i], width = (double)(sc->floats[i] * (float)xt->dims[i]);
        if (from_sizes) {
            s = (double)yt->dims[i] / (double)xt->dims[i];
            width = (double)yt->dims[i];
        }
        dims[i] = x->dims[i];
        dims[r + i] = y->dims[i];
        dims[2 * r + i] = coord != 5 && sc->floats[i] == 1.0f && xt->dims[i] == yt->dims[i];
        fprintf(c->f, "%s%s", i ? ", " : "", double_lit(s, buf));
        fprintf(c->f, ", %s", double_lit(width, buf));
        fprintf(c->f, ", %s", double_lit(roi->floats[i], buf));
        fprintf(c->f, ", %s", double_lit(roi->floats[r + i], buf));
    }
    fprintf(c->f, "}; /* per dim: scale, scale * input length, roi begin, roi end */\n");
    emit_arr(c, "rd", dims, 3 * r);
    int mode = code_of(node_attr_str(n, "mode", "nearest"), modes, 3);
    char a[40], e[40];
    fprintf(c->f, "        k_resize_%s(%s, %s, %lld, %d, rd, rs, %s, %s, %s, %d, %d, %s, %s);\n    }\n",
            y->dtype == DT_F32 ? "f32" : "i64", y->name, x->name, (long long)emit_prod(y->dims, 0, r), r,
            mode_codes[mode], coord_codes[coord],
            nearest_codes[code_of(node_attr_str(n, "nearest_mode", "round_prefer_floor"), nearests, 4)],
            node_attr_int(n, "antialias", 0) != 0, node_attr_int(n, "exclude_outside", 0) != 0,
            double_lit(node_attr_float(n, "cubic_coeff_a", -0.75f), a),
            double_lit(node_attr_float(n, "extrapolation_value", 0.0f), e));
    return 0;
}

int emit_conv_transpose(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *w = emit_in(c, 1), *b = emit_in(c, 2), *y = emit_out(c, 0);
    int skip = b && emit_skip_bias(c);
    fprintf(c->f, "    {\n");
    emit_window(c, x->dims + 2, y, w->dims + 2);
    fprintf(c->f, "        k_conv_transpose_f32(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %d, win);%s\n    }\n", y->name,
            x->name, w->name, b && !skip ? b->name : "NULL", (long long)x->dims[0], (long long)x->dims[1],
            (long long)y->dims[1], (long long)node_attr_int(c->n, "group", 1), x->rank - 2,
            y->layout.partial ? " /* a local sum over this rank's input channels: the plan adds the ranks' results */"
                              : "");
    return 0;
}

/* Col2Im: the window's "input" dims are the block counts per dim. */
int emit_col2im(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *blk = node_attr(c->n, "block_shape");
    int ns = y->rank - 2;
    int64_t nb[IR_MAX_RANK], bsize = emit_prod(blk->ints, 0, ns);
    for (int i = 0; i < ns; i++) {
        int64_t span = (blk->ints[i] - 1) * ints_at(c->n, "dilations", i, 1) + 1;
        int64_t padded = y->dims[2 + i] + ints_at(c->n, "pads", i, 0) + ints_at(c->n, "pads", ns + i, 0);
        nb[i] = (padded - span) / ints_at(c->n, "strides", i, 1) + 1;
    }
    fprintf(c->f, "    {\n");
    emit_window(c, nb, y, blk->ints);
    fprintf(c->f, "        k_col2im_f32(%s, %s, %lld, %lld, %d, win);\n    }\n", y->name, x->name,
            (long long)(x->dims[0] * (x->dims[1] / bsize)), (long long)bsize, ns);
    return 0;
}

/* MaxUnpool: this rank's [n, c] planes start at global batch n_off and
 * channel c_off (the factor rule lets both pass), which the kernel needs
 * to read the global flat indices; those address the spatial size that
 * inverts MaxPool, the leading corner of a larger output_shape. */
int emit_max_unpool(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *ix = emit_in(c, 1), *y = emit_out(c, 0);
    int ns = x->rank - 2;
    int64_t g[2 * IR_MAX_RANK];
    for (int i = 0; i < ns; i++) {
        g[i] = (x->dims[2 + i] - 1) * ints_at(c->n, "strides", i, 1) - ints_at(c->n, "pads", i, 0) -
               ints_at(c->n, "pads", ns + i, 0) + ints_at(c->n, "kernel_shape", i, 1);
        g[ns + i] = y->dims[2 + i];
    }
    int64_t n_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, x->layout.axes[0], x->layout.naxes[0]) * x->dims[0];
    int64_t c_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, x->layout.axes[1], x->layout.naxes[1]) * x->dims[1];
    fprintf(c->f, "    {\n");
    emit_arr(c, "unpool", g, 2 * ns);
    fprintf(c->f, "        k_max_unpool_f32(%s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %d, unpool);\n    }\n",
            y->name, x->name, ix->name, (long long)x->dims[0], (long long)x->dims[1],
            (long long)c->n->inputs[0]->dims[1], (long long)n_off, (long long)c_off,
            (long long)emit_prod(x->dims, 2, x->rank), ns);
    return 0;
}

/* Spatial params as 2-D (a 1-D op is H = 1). */
static void spatial2(const EmitCtx *c, const Buffer *x, const Buffer *y, const int64_t *kernel, int64_t *p)
{
    const Attr *pads = node_attr(c->n, "pads"), *st = node_attr(c->n, "strides"), *dl = node_attr(c->n, "dilations");
    int ns = x->rank - 2, two = ns == 2;
    /* H, W, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw */
    p[0] = two ? x->dims[2] : 1;
    p[1] = x->dims[x->rank - 1];
    p[2] = two ? kernel[0] : 1;
    p[3] = kernel[ns - 1];
    p[4] = two ? y->dims[2] : 1;
    p[5] = y->dims[y->rank - 1];
    p[6] = two && st && st->n ? st->ints[0] : 1;
    p[7] = st && st->n ? st->ints[ns - 1] : 1;
    p[8] = two && dl && dl->n ? dl->ints[0] : 1;
    p[9] = dl && dl->n ? dl->ints[ns - 1] : 1;
    p[10] = two && pads ? pads->ints[0] : 0;
    p[11] = pads ? pads->ints[ns - 1] : 0;
}

int emit_conv(const EmitCtx *c, Diag *d)
{
    const Buffer *x = emit_in(c, 0), *w = emit_in(c, 1), *b = emit_in(c, 2), *y = emit_out(c, 0);
    if (x->rank != 3 && x->rank != 4) {
        diag_add(d, "node \"%s\" (Conv): only 1-D and 2-D convolutions are generated", c->n->name);
        return -1;
    }
    int64_t kernel[2] = {w->dims[2], w->dims[w->rank - 1]}, p[12];
    if (x->rank == 3)
        kernel[0] = w->dims[2];
    spatial2(c, x, y, kernel, p);
    int skip = b && emit_skip_bias(c);
    fprintf(c->f, "    /* N, C, H, W, M, kernel h w, output h w, stride h w, dilation h w, pads h w, group, im2col scratch */\n"
                  "    k_conv2d_f32(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                  "%lld, %lld, %lld, %lld, %lld, %s);\n",
            y->name, x->name, w->name, b && !skip ? b->name : "NULL", (long long)x->dims[0], (long long)x->dims[1],
            (long long)p[0], (long long)p[1], (long long)y->dims[1], (long long)p[2], (long long)p[3], (long long)p[4],
            (long long)p[5], (long long)p[6], (long long)p[7], (long long)p[8], (long long)p[9], (long long)p[10],
            (long long)p[11], (long long)node_attr_int(c->n, "group", 1),
            c->pr->bufs[c->pr->nodes[c->n->id].scratch].name);
    return 0;
}

int emit_maxpool(const EmitCtx *c, Diag *d)
{
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0), *ind = emit_out(c, 1);
    if (x->rank != 3 && x->rank != 4) {
        diag_add(d, "node \"%s\" (MaxPool): only 1-D and 2-D pooling is generated", c->n->name);
        return -1;
    }
    const Attr *ks = node_attr(c->n, "kernel_shape");
    int64_t p[12];
    spatial2(c, x, y, ks->ints, p);
    const Tensor *xt = c->n->inputs[0];
    int64_t n_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, x->layout.axes[0], x->layout.naxes[0]) * x->dims[0];
    int64_t c_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, x->layout.axes[1], x->layout.naxes[1]) * x->dims[1];
    fprintf(c->f, "    /* N, C, H, W, kernel h w, output h w, stride h w, dilation h w, pads h w, this shard's N and C "
                  "offsets, global C */\n"
                  "    k_maxpool2d_f32(%s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                  "%lld, %lld, %lld, %lld, %lld, %lld);\n",
            y->name, ind ? ind->name : "NULL", x->name, (long long)x->dims[0], (long long)x->dims[1], (long long)p[0],
            (long long)p[1], (long long)p[2], (long long)p[3], (long long)p[4], (long long)p[5], (long long)p[6],
            (long long)p[7], (long long)p[8], (long long)p[9], (long long)p[10], (long long)p[11], (long long)n_off,
            (long long)c_off, (long long)xt->dims[1]);
    return 0;
}

int emit_global_avgpool(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    fprintf(c->f, "    k_global_avgpool_f32(%s, %s, %lld, %lld); /* N * C, spatial */\n", y->name, x->name,
            (long long)(x->dims[0] * x->dims[1]), (long long)emit_prod(x->dims, 2, x->rank));
    return 0;
}

int emit_batchnorm(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    char eps[48];
    fprintf(c->f, "    k_batchnorm_f32(%s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %s); /* N, C, spatial, epsilon */\n",
            y->name, x->name,
            emit_in(c, 1)->name, emit_in(c, 2)->name, emit_in(c, 3)->name, emit_in(c, 4)->name,
            (long long)x->dims[0], (long long)x->dims[1], (long long)emit_prod(x->dims, 2, x->rank),
            emit_cf(node_attr_float(c->n, "epsilon", 1e-5f), eps));
    return 0;
}
