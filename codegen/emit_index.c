/* emit_index.c: kernel calls for the index family (ir/ops_index.def).
 *
 * Each emitter works on this rank's blocks. The rules (partition/
 * rules_index.c) keep every dim an op indexes, tiles, pads or regroups
 * whole, so index values and pads are global coordinates there; split dims
 * are pass-through and handled by local shapes and strides alone. Trilu is
 * the one op that needs the rank's position: its mask is offset by the
 * block's global first row and column. Pure rearrangements are strided
 * copies (k_strided_copy): Expand with stride 0 on broadcast dims, Tile as
 * a [repeats, dim] view with stride 0 on the repeats, DepthToSpace and
 * SpaceToDepth as the reshape-transpose-reshape of the ONNX definition.
 * Values the ops need at compile time (Pad's constant, OneHot's off/on)
 * come from constant inputs; the dtype codes passed are ONNX's (1, 7, 9).
 */
#include "codegen.h"

#include <math.h>
#include <string.h>

/* A double as a C expression (infinities and NaN included). */
static const char *emit_double(double v, char *buf)
{
    if (isnan(v))
        snprintf(buf, 40, "__builtin_nan(\"\")");
    else if (isinf(v))
        snprintf(buf, 40, "%s__builtin_inf()", v < 0 ? "-" : "");
    else
        snprintf(buf, 40, "%.17g", v);
    return buf;
}

static void strided_copy(const EmitCtx *c, const Buffer *y, const Buffer *x, int rank, const int64_t *dims,
                         const int64_t *strides, const char *why)
{
    fprintf(c->f, "    { /* %s */\n", why);
    emit_arr(c, "dims", dims, rank);
    emit_arr(c, "strides", strides, rank);
    fprintf(c->f, "        k_strided_copy(%s, %s, %zu, %d, dims, strides, 0);\n    }\n", y->name, x->name,
            dtype_size(y->dtype), rank);
}

int emit_expand(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int64_t s[IR_MAX_RANK];
    emit_bcast_strides(x, y, s);
    strided_copy(c, y, x, y->rank, y->dims, s, "broadcast dims read with stride 0");
    return 0;
}

int emit_tile(const EmitCtx *c, Diag *d)
{
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int64_t sx[IR_MAX_RANK], dims[IR_MAX_RANK], st[IR_MAX_RANK];
    int r = 0;
    emit_strides(x->dims, x->rank, sx);
    if (y->bytes == 0)
        return 0;
    for (int i = 0; i < x->rank; i++) {
        int64_t reps = y->dims[i] / x->dims[i];
        if (reps > 1 && x->dims[i] > 1) {
            if (r + 2 > IR_MAX_RANK)
                goto too_big;
            dims[r] = reps, st[r++] = 0;
            dims[r] = x->dims[i], st[r++] = sx[i];
        } else if (y->dims[i] > 1) {
            if (r + 1 > IR_MAX_RANK)
                goto too_big;
            dims[r] = y->dims[i], st[r++] = reps > 1 ? 0 : sx[i];
        }
    }
    strided_copy(c, y, x, r, dims, st, "viewed as [repeats, dim] per tiled dim, repeats at stride 0");
    return 0;
too_big:
    diag_add(d, "node \"%s\" (Tile): more than %d dims once each tiled dim is split in two", c->n->name,
             IR_MAX_RANK);
    return -1;
}

/* k: a literal when constant, else read by the kernel from its buffer. */
int emit_trilu(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *kb = emit_in(c, 1), *y = emit_out(c, 0);
    const Tensor *kt = c->n->ninputs > 1 ? c->n->inputs[1] : NULL;
    int r = y->rank, upper = node_attr_int(c->n, "upper", 1) != 0;
    int64_t rows = y->dims[r - 2], cols = y->dims[r - 1], k = kt && kt->data ? fold_get_i64(kt, 0) : 0;
    int64_t row_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, y->layout.axes[r - 2], y->layout.naxes[r - 2]) * rows;
    int64_t col_off = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, y->layout.axes[r - 1], y->layout.naxes[r - 1]) * cols;
    fprintf(c->f, "    k_trilu(%s, %s, %zu, %lld, %lld, %lld, %lld, %lld, %lld, %s, %d);%s\n", y->name, x->name,
            dtype_size(y->dtype), (long long)emit_prod(y->dims, 0, r - 2), (long long)rows, (long long)cols,
            (long long)row_off, (long long)col_off, (long long)k, kt && !kt->data ? kb->name : "NULL", upper,
            row_off || col_off ? " /* this block's global first row and column */" : "");
    return 0;
}

int emit_gather_elements(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *idx = emit_in(c, 1), *y = emit_out(c, 0);
    int axis = emit_norm_axis(node_attr_int(c->n, "axis", 0), x->rank);
    int64_t sx[IR_MAX_RANK];
    emit_strides(x->dims, x->rank, sx);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", idx->dims, idx->rank);
    emit_arr(c, "sx", sx, x->rank);
    fprintf(c->f, "        k_gather_elements(%s, %s, %s, %zu, %d, dims, sx, %d, %lld);\n    }\n", y->name, x->name,
            idx->name, dtype_size(y->dtype), x->rank, axis, (long long)x->dims[axis]);
    return 0;
}

int emit_gather_nd(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *idx = emit_in(c, 1), *y = emit_out(c, 0);
    int b = (int)node_attr_int(c->n, "batch_dims", 0), q = idx->rank;
    int m = (int)idx->dims[q - 1];
    int64_t sx[IR_MAX_RANK];
    emit_strides(x->dims, x->rank, sx);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", x->dims + b, m);
    emit_arr(c, "sx", sx + b, m);
    fprintf(c->f, "        k_gather_nd(%s, %s, %s, %zu, %lld, %lld, %d, dims, sx, %lld, %lld);\n    }\n", y->name,
            x->name, idx->name, dtype_size(y->dtype), (long long)emit_prod(x->dims, 0, b),
            (long long)emit_prod(idx->dims, b, q - 1), m, (long long)emit_prod(x->dims, b, x->rank),
            (long long)emit_prod(x->dims, b + m, x->rank));
    return 0;
}

/* The K_SCATTER_* selector (templates/bodies.h) of the reduction attribute. */
static const char *reduction_code(const Node *n)
{
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    static const char *const codes[] = {"K_SCATTER_NONE", "K_SCATTER_ADD", "K_SCATTER_MUL", "K_SCATTER_MAX",
                                        "K_SCATTER_MIN"};
    const char *r = node_attr_str(n, "reduction", "none");
    for (int i = 0; i < 5; i++)
        if (strcmp(r, names[i]) == 0)
            return codes[i];
    return codes[0];
}

int emit_scatter_nd(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *idx = emit_in(c, 1), *u = emit_in(c, 2), *y = emit_out(c, 0);
    int q = idx->rank, m = (int)idx->dims[q - 1];
    int64_t sy[IR_MAX_RANK];
    emit_strides(y->dims, y->rank, sy);
    fprintf(c->f, "    k_copy(%s, %s, %lld); /* start from data */\n", y->name, x->name, (long long)y->bytes);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, m);
    emit_arr(c, "sy", sy, m);
    fprintf(c->f, "        k_scatter_nd(%s, %s, %s, %d, %s, %lld, %d, dims, sy, %lld);\n    }\n", y->name, idx->name,
            u->name, (int)y->dtype, reduction_code(c->n), (long long)emit_prod(idx->dims, 0, q - 1), m,
            (long long)emit_prod(y->dims, m, y->rank));
    return 0;
}

int emit_scatter_elements(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *idx = emit_in(c, 1), *u = emit_in(c, 2), *y = emit_out(c, 0);
    int axis = emit_norm_axis(node_attr_int(c->n, "axis", 0), y->rank);
    int64_t sy[IR_MAX_RANK];
    emit_strides(y->dims, y->rank, sy);
    fprintf(c->f, "    k_copy(%s, %s, %lld); /* start from data */\n", y->name, x->name, (long long)y->bytes);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", idx->dims, idx->rank);
    emit_arr(c, "sy", sy, y->rank);
    fprintf(c->f, "        k_scatter_elements(%s, %s, %s, %d, %s, %d, dims, sy, %d, %lld);\n    }\n", y->name,
            idx->name, u->name, (int)y->dtype, reduction_code(c->n), y->rank, axis, (long long)y->dims[axis]);
    return 0;
}

int emit_pad(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Tensor *cv = c->n->ninputs > 2 ? c->n->inputs[2] : NULL;
    const Attr *p = node_attr(c->n, "pads");
    const char *mode = node_attr_str(c->n, "mode", "constant");
    static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
    static const char *const codes[] = {"K_PAD_CONSTANT", "K_PAD_REFLECT", "K_PAD_EDGE", "K_PAD_WRAP"};
    int code = 0;
    for (int i = 1; i < 4; i++)
        if (!strcmp(mode, modes[i]))
            code = i;
    double value = cv && tensor_numel(cv) == 1 ? fold_get(cv, 0) : (double)node_attr_float(c->n, "value", 0.0f);
    char vb[40];
    fprintf(c->f, "    {\n");
    emit_arr(c, "ydims", y->dims, y->rank);
    emit_arr(c, "xdims", x->dims, x->rank);
    emit_arr(c, "begin", p->ints, y->rank);
    fprintf(c->f, "        k_pad(%s, %s, %d, %s, %d, ydims, xdims, begin, %s);\n    }\n", y->name, x->name,
            (int)y->dtype, codes[code], y->rank, emit_double(value, vb));
    return 0;
}

int emit_onehot(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *idx = emit_in(c, 0), *y = emit_out(c, 0);
    const Tensor *val = c->n->inputs[2];
    int axis = emit_norm_axis(node_attr_int(c->n, "axis", -1), idx->rank + 1);
    char ob[40], nb[40];
    fprintf(c->f, "    k_onehot(%s, %d, %s, %d, %lld, %lld, %lld, %s, %s);\n", y->name, (int)y->dtype, idx->name,
            (int)idx->dtype, (long long)emit_prod(idx->dims, 0, axis), (long long)y->dims[axis],
            (long long)emit_prod(idx->dims, axis, idx->rank), emit_double(fold_get(val, 0), ob),
            emit_double(fold_get(val, 1), nb));
    return 0;
}

/* DepthToSpace (DCR: x as [N, b, b, C', H, W]; CRD: [N, C', b, b, H, W])
 * and SpaceToDepth (x as [N, C, H', b, W', b]), read in the order of the
 * output's own 6-D view. */
int emit_depth_space(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int64_t b = node_attr_int(c->n, "blocksize", 1), v[6], s[6], dims[6], st[6];
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    static const int dcr[6] = {0, 3, 4, 1, 5, 2}, crd[6] = {0, 1, 4, 2, 5, 3}, s2d[6] = {0, 3, 5, 1, 2, 4};
    const int *perm;
    if (c->n->op == OP_SPACE_TO_DEPTH) {
        int64_t view[6] = {N, C, H / b, b, W / b, b};
        memcpy(v, view, sizeof v);
        perm = s2d;
    } else if (!strcmp(node_attr_str(c->n, "mode", "DCR"), "CRD")) {
        int64_t view[6] = {N, C / (b * b), b, b, H, W};
        memcpy(v, view, sizeof v);
        perm = crd;
    } else {
        int64_t view[6] = {N, b, b, C / (b * b), H, W};
        memcpy(v, view, sizeof v);
        perm = dcr;
    }
    emit_strides(v, 6, s);
    for (int i = 0; i < 6; i++) {
        dims[i] = v[perm[i]];
        st[i] = s[perm[i]];
    }
    strided_copy(c, y, x, 6, dims, st, "6-D view of the input, transposed as the ONNX definition");
    return 0;
}

/* KvCacheWrite (compile --decode): the step's new position into this
 * rank's block of the cache, at g_decode_pos (set by the decoding loop
 * before each forward()). */
int emit_kv_cache_write(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int axis = (int)node_attr_int(c->n, "axis", 0);
    fprintf(c->f, "    k_kv_cache_write(%s, %s, %zu, %lld, %lld, %lld, %lld, g_decode_pos); /* outer, new, inner, slots */\n",
            y->name, x->name, dtype_size(y->dtype), (long long)emit_prod(x->dims, 0, axis), (long long)x->dims[axis],
            (long long)emit_prod(x->dims, axis + 1, x->rank), (long long)y->dims[axis]);
    return 0;
}

/* The first index of this rank's block of dim `dim` of b (an expert, a group). */
static int64_t moe_expert_offset(const EmitCtx *c, const Buffer *b, int dim)
{
    return mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, b->layout.axes[dim], b->layout.naxes[dim]) *
           b->dims[dim];
}

/* MoeDispatch (ir/moe.c): this rank's experts' columns of the buffer, and
 * its count of dropped pairs in g_moe_dropped[layer] where it is the first
 * of the ranks holding the same block (the others pass NULL), so that the
 * sum over ranks is the model's. */
int emit_moe_dispatch(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *ids = emit_in(c, 1), *buf = emit_out(c, 0), *slots = emit_out(c, 1);
    int layer = moe_layer_index(c->pr->g, c->n), counts = 1;
    unsigned used = sharding_used_axes(&buf->layout);
    for (int a = 0; a < c->pr->plan->mesh.naxes; a++)
        if (!(used & (1u << a)) && c->pr->coords[a])
            counts = 0;
    char ctr[64] = "NULL";
    if (counts)
        snprintf(ctr, sizeof ctr, "g_moe_dropped + %d", layer);
    /* Groups past the model's (a padded block of them) hold no tokens: not counted. */
    int64_t g_first = moe_expert_offset(c, buf, 0), g_real = c->n->outputs[0]->dims[0] - g_first;
    g_real = g_real < 0 ? 0 : g_real > buf->dims[0] ? buf->dims[0] : g_real;
    fprintf(c->f,
            "    k_moe_dispatch(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %s, %lld); /* groups, "
            "tokens, k, D, experts, this rank's, its first, capacity, counter, groups counted */\n",
            buf->name, slots->name, x->name, ids->name, (long long)x->dims[0], (long long)x->dims[1],
            (long long)ids->dims[2], (long long)x->dims[2], (long long)node_attr_int(c->n, "experts", 0),
            (long long)buf->dims[1], (long long)moe_expert_offset(c, buf, 1), (long long)buf->dims[3], ctr,
            (long long)g_real);
    return 0;
}

/* A call of the combine family: kernel(args[0..3], then the tokens'
 * [groups, tokens, D] as `rows` holds them, the choices k of `slots`,
 * this rank's experts of the expert-side buffer y [G, E, D, C] and the
 * first of them, and the capacity). */
static void moe_call(const EmitCtx *c, const char *kernel, const Buffer *const *args, const Buffer *rows,
                     const Buffer *slots, const Buffer *y)
{
    fprintf(c->f,
            "    %s(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %lld); /* groups, tokens, k, D, this rank's "
            "experts, its first, capacity */\n",
            kernel, args[0]->name, args[1]->name, args[2]->name, args[3]->name, (long long)rows->dims[0],
            (long long)rows->dims[1], (long long)slots->dims[2], (long long)rows->dims[2], (long long)y->dims[1],
            (long long)moe_expert_offset(c, y, 1), (long long)y->dims[3]);
}

/* MoeCombine: this rank's experts' share of each token's output. */
int emit_moe_combine(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *y = emit_in(c, 0), *slots = emit_in(c, 1), *w = emit_in(c, 2), *out = emit_out(c, 0);
    moe_call(c, "k_moe_combine", (const Buffer *[]){out, y, slots, w}, out, slots, y);
    return 0;
}

/* MoeScatter (MoeCombine's gradient by expert output): this rank's
 * experts' columns, each kept pair's weight times its token's row. */
int emit_moe_scatter(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *slots = emit_in(c, 1), *w = emit_in(c, 2), *y = emit_out(c, 0);
    moe_call(c, "k_moe_scatter", (const Buffer *[]){y, x, slots, w}, x, slots, y);
    return 0;
}

/* MoePairDot (MoeCombine's gradient by routing weight). */
int emit_moe_pair_dot(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *a = emit_in(c, 0), *y = emit_in(c, 1), *slots = emit_in(c, 2), *out = emit_out(c, 0);
    moe_call(c, "k_moe_pair_dot", (const Buffer *[]){out, a, y, slots}, a, slots, y);
    return 0;
}
