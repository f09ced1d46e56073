/* rules_nn.c: factor rules of the nn family (ir/ops_nn.def).
 *
 * The kernels compute each output element from a window of input elements
 * around it, so a dim they slide or interpolate along must be whole on
 * every rank: a block would miss the neighbouring rows of its edges (a
 * halo the plan does not exchange). Those dims are need-replication
 * factors, one for the input's size and one for the output's (they
 * differ). Every dim an op treats element by element passes through:
 * batch and channels of the pools, batch and spatial dims of LRN (which
 * mixes channels), and each Resize dim whose scale is 1. ConvTranspose is
 * Conv's rule: a split of the input channels leaves partial sums (the
 * contraction), output channels pass with the weight's second dim and the
 * bias, except with groups, which tie the two together. Col2Im adds
 * overlapping blocks into the image: the batch passes, the rest is whole.
 * MaxUnpool's indices address all of y, but MaxPool's land in their own
 * [n, c] plane, which the kernels require: batch and channels pass (the
 * emitter tells the kernel where its planes sit), the planes stay whole.
 */
#include "partition.h"

#include <string.h>

static const char *const WINDOW = "windowed op needs neighbouring rows (halo)";

/* dim i of tensor ti and of output yo are the same factor. */
static void pass(FactorRule *r, int64_t size, int ti, int i, int yo, int yi)
{
    if (size <= 1)
        return;
    int f = rule_new_factor(r, size, FK_PASS, NULL);
    rule_map_dim(r, ti, i, f);
    rule_map_dim(r, yo, yi, f);
}

/* dim i of tensor ti must be whole. */
static void whole(FactorRule *r, int64_t size, int ti, int i, const char *why)
{
    if (size > 1)
        rule_map_dim(r, ti, i, rule_new_factor(r, size, FK_NEED_REPL, why));
}

/* AveragePool, LpPool, GlobalMaxPool: batch and channels pass, the
 * spatial dims stay whole. */
int rule_nn_pool(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0);
    pass(r, x->dims[0], 0, 0, yo, 0);
    pass(r, x->dims[1], 0, 1, yo, 1);
    for (int i = 2; i < x->rank; i++) {
        whole(r, x->dims[i], 0, i, WINDOW);
        whole(r, y->dims[i], yo, i, WINDOW);
    }
    return 0;
}

/* LRN: the sum of squares runs over neighbouring channels. */
int rule_lrn(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0];
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < x->rank; i++) {
        if (i != 1) {
            pass(r, x->dims[i], 0, i, yo, i);
            continue;
        }
        if (x->dims[1] > 1) {
            int f = rule_new_factor(r, x->dims[1], FK_NEED_REPL, "LRN sums over neighbouring channels");
            rule_map_dim(r, 0, 1, f);
            rule_map_dim(r, yo, 1, f);
        }
    }
    return 0;
}

/* Resize: a dim with scale 1 maps each output index to the same input
 * index under every coordinate transformation but tf_crop_and_resize, so
 * it passes; the others interpolate and stay whole. roi, scales and sizes
 * are compile-time constants the kernel does not read: left unmapped,
 * they stay replicated. */
int rule_resize(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    const Attr *sc = node_attr(n, "scales");
    int yo = rule_out_idx(n, 0);
    int crop = !strcmp(node_attr_str(n, "coordinate_transformation_mode", "half_pixel"), "tf_crop_and_resize");
    for (int i = 0; i < x->rank; i++) {
        if (!crop && sc->floats[i] == 1.0f && x->dims[i] == y->dims[i]) {
            pass(r, x->dims[i], 0, i, yo, i);
            continue;
        }
        whole(r, x->dims[i], 0, i, "Resize interpolates along this dim");
        whole(r, y->dims[i], yo, i, "Resize interpolates along this dim");
    }
    return 0;
}

/* ConvTranspose(x [N, C, ...], w [C, M/group, ...], b [M]). */
int rule_conv_transpose(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *w = n->inputs[1], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0), grouped = node_attr_int(n, "group", 1) != 1;
    const char *tied = "grouped ConvTranspose ties output to input channels";
    pass(r, x->dims[0], 0, 0, yo, 0);
    if (x->dims[1] > 1) {
        int f = rule_new_factor(r, x->dims[1], grouped ? FK_NEED_REPL : FK_REDUCTION, grouped ? tied : NULL);
        rule_map_dim(r, 0, 1, f);
        rule_map_dim(r, 1, 0, f);
    }
    if (y->dims[1] > 1) {
        int f = rule_new_factor(r, y->dims[1], grouped ? FK_NEED_REPL : FK_PASS, grouped ? tied : NULL);
        rule_map_dim(r, yo, 1, f);
        if (!grouped)
            rule_map_dim(r, 1, 1, f);
        else
            whole(r, w->dims[1], 1, 1, tied);
        if (n->ninputs > 2 && n->inputs[2])
            rule_map_dim(r, 2, 0, f);
    }
    for (int i = 2; i < x->rank; i++) {
        whole(r, x->dims[i], 0, i, WINDOW);
        whole(r, w->dims[i], 1, i, WINDOW);
        whole(r, y->dims[i], yo, i, WINDOW);
    }
    return 0;
}

/* Col2Im(x [N, C * block, L]) -> y [N, C, image...]. */
int rule_col2im(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0);
    const char *why = "Col2Im adds overlapping blocks into the image";
    pass(r, x->dims[0], 0, 0, yo, 0);
    for (int i = 1; i < x->rank; i++)
        whole(r, x->dims[i], 0, i, why);
    for (int i = 1; i < y->rank; i++)
        whole(r, y->dims[i], yo, i, why);
    return 0;
}

/* MaxUnpool(x, indices, output_shape) -> y: x and indices alike. Batch
 * and channels split only evenly: an index addresses its global [n, c]
 * plane, which a padded plane does not have. */
int rule_max_unpool(const Node *n, FactorRule *r, Diag *d)
{
    (void)d;
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0);
    for (int i = 0; i < 2; i++) {
        if (x->dims[i] <= 1)
            continue;
        int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
        r->nopad[f] = 1;
        rule_map_dim(r, 0, i, f);
        rule_map_dim(r, 1, i, f);
        rule_map_dim(r, yo, i, f);
    }
    for (int i = 2; i < x->rank; i++) {
        if (x->dims[i] > 1) {
            int f = rule_new_factor(r, x->dims[i], FK_NEED_REPL, "MaxUnpool scatters within whole planes");
            rule_map_dim(r, 0, i, f);
            rule_map_dim(r, 1, i, f);
        }
        whole(r, y->dims[i], yo, i, "MaxUnpool scatters within whole planes");
    }
    return 0;
}

/* NCHW-style ops: batch passes, channels pass (or reduce, for Conv's input
 * channels), spatial dims need their neighbours (halos) and stay whole. */
int rule_spatial(const Node *n, FactorRule *r, Diag *d)
{
    const Tensor *x = n->inputs[0], *y = n->outputs[0];
    int yo = rule_out_idx(n, 0);
    if (x->dims[0] > 1) {
        int f = rule_new_factor(r, x->dims[0], FK_PASS, NULL);
        rule_map_dim(r, 0, 0, f);
        rule_map_dim(r, yo, 0, f);
        if (n->noutputs > 1 && n->outputs[1])
            rule_map_dim(r, rule_out_idx(n, 1), 0, f);
    }
    if (n->op == OP_CONV) {
        const Tensor *w = n->inputs[1];
        int grouped = node_attr_int(n, "group", 1) != 1;
        if (y->dims[1] > 1) {
            int f = rule_new_factor(r, y->dims[1], grouped ? FK_NEED_REPL : FK_PASS,
                               grouped ? "grouped Conv ties output to input channels" : NULL);
            rule_map_dim(r, 1, 0, f);
            rule_map_dim(r, yo, 1, f);
            if (n->ninputs > 2 && n->inputs[2])
                rule_map_dim(r, 2, 0, f);
        }
        if (x->dims[1] > 1) {
            int f = rule_new_factor(r, x->dims[1], grouped ? FK_NEED_REPL : FK_REDUCTION,
                               grouped ? "grouped Conv ties output to input channels" : NULL);
            rule_map_dim(r, 0, 1, f);
            if (w->dims[1] > 1)
                rule_map_dim(r, 1, 1, f);
        }
    } else if (x->dims[1] > 1) {
        int f = rule_new_factor(r, x->dims[1], FK_PASS, NULL);
        rule_map_dim(r, 0, 1, f);
        rule_map_dim(r, yo, 1, f);
        if (n->noutputs > 1 && n->outputs[1])
            rule_map_dim(r, rule_out_idx(n, 1), 1, f);
        if (n->op == OP_BATCHNORM)
            for (int k = 1; k < 5; k++)
                rule_map_dim(r, k, 0, f);
    }
    for (int i = 2; i < x->rank; i++) {
        if (n->op == OP_BATCHNORM) {
            if (x->dims[i] > 1) {
                int f = rule_new_factor(r, x->dims[i], FK_PASS, NULL);
                rule_map_dim(r, 0, i, f);
                rule_map_dim(r, yo, i, f);
            }
            continue;
        }
        const char *why = "windowed op needs neighbouring rows (halo)";
        if (x->dims[i] > 1)
            rule_map_dim(r, 0, i, rule_new_factor(r, x->dims[i], FK_NEED_REPL, why));
        if (y->dims[i] > 1) {
            int f = rule_new_factor(r, y->dims[i], FK_NEED_REPL, why);
            for (int k = 0; k < n->noutputs; k++)
                if (n->outputs[k])
                    rule_map_dim(r, rule_out_idx(n, k), i, f);
        }
    }
    (void)d;
    return 0;
}
