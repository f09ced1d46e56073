/* emit_ops.c: the kernel call for each op, on local blocks.
 *
 * Every node works on this rank's blocks with shapes fixed at compile
 * time. Sharded dims never need special handling here, by construction of
 * the plan: a split pass-through dim is split alike in every operand, a
 * need-replication dim is whole, and a split reduction dim makes the
 * output a partial sum. Three places do need the rank's position: a
 * masked Gather over a split table (its row offset), a bias added inside a
 * node whose result is partial (added on one coordinate only, or it would
 * be summed once per rank), and ReduceMean over a split dim (divided by
 * the global count).
 */
#include "codegen.h"

#include <string.h>

const char *emit_ctype(DType t)
{
    switch (t) {
    case DT_F32: return "float";
    case DT_F64: return "double";
    case DT_I64: return "int64_t";
    case DT_I32: return "int32_t";
    case DT_U32: return "uint32_t";
    case DT_I16: return "int16_t";
    case DT_U16: return "uint16_t";
    case DT_I8: return "int8_t";
    case DT_F16: case DT_BF16: return "uint16_t"; /* bit patterns: rt_h2f / rt_bf2f read them */
    default: return "unsigned char";
    }
}

void emit_dims(FILE *f, const int64_t *dims, int rank)
{
    fputc('{', f);
    for (int i = 0; i < rank; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (rank == 0)
        fputc('0', f);
    fputc('}', f);
}

/* A float constant as a valid C literal ("1.0f", not "1f"). */
const char *emit_cf(float v, char *buf)
{
    int n = snprintf(buf, 40, "%.9g", (double)v);
    if (!strpbrk(buf, ".en"))
        snprintf(buf + n, 40 - (size_t)n, ".0");
    strcat(buf, "f");
    return buf;
}

void emit_strides(const int64_t *dims, int rank, int64_t *st)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= dims[i];
    }
}

int64_t emit_prod(const int64_t *dims, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++)
        p *= dims[i];
    return p;
}

/* The buffers a kernel reads and writes: the compute-type copy where the
 * operand or output is widened (program.c widen_to), else the value itself. */
const Buffer *emit_in(const EmitCtx *c, int k)
{
    if (k >= c->n->ninputs || !c->n->inputs[k])
        return NULL;
    const int *w = c->pr->nodes[c->n->id].wide;
    return &c->pr->bufs[w && w[k] >= 0 ? w[k] : program_operand_buf(c->pr, c->n, k)];
}

const Buffer *emit_out(const EmitCtx *c, int k)
{
    if (k >= c->n->noutputs || !c->n->outputs[k])
        return NULL;
    const int *w = c->pr->nodes[c->n->id].wide;
    int s = c->n->ninputs + k;
    return &c->pr->bufs[w && w[s] >= 0 ? w[s] : c->pr->tensor_buf[c->n->outputs[k]->id]];
}

/* Strides of operand b broadcast (right-aligned) over output dims y. */
void emit_bcast_strides(const Buffer *b, const Buffer *y, int64_t *out)
{
    int64_t st[IR_MAX_RANK];
    emit_strides(b->dims, b->rank, st);
    for (int o = 0; o < y->rank; o++) {
        int j = o - (y->rank - b->rank);
        out[o] = j < 0 || (b->dims[j] == 1 && y->dims[o] != 1) ? 0 : st[j];
    }
}

void emit_arr(const EmitCtx *c, const char *name, const int64_t *v, int n)
{
    fprintf(c->f, "        static const int64_t %s[] = ", name);
    emit_dims(c->f, v, n);
    fprintf(c->f, ";\n");
}

/* Is the output of this node partial over any axis where this rank's
 * coordinate is not 0? Then biases inside the node must be skipped. */
int emit_skip_bias(const EmitCtx *c)
{
    const Buffer *y = emit_out(c, 0);
    for (int a = 0; a < c->pr->plan->mesh.naxes; a++)
        if ((y->layout.partial & (1u << a)) && c->pr->coords[a] != 0)
            return 1;
    return 0;
}

/* The fused bias Add before this node: its input (*a) and its bias (*b),
 * in the order find_fusions (views.c) took them: bias + x is the same
 * sum as x + bias. */
static const Node *fused_bias_add(const EmitCtx *c, const Buffer **a, const Buffer **b)
{
    const Node *add = c->pr->g->nodes[c->pr->nodes[c->n->id].fused_from];
    int bias = c->pr->nodes[c->n->id].fused_bias;
    *a = &c->pr->bufs[program_operand_buf(c->pr, add, 1 - bias)];
    *b = &c->pr->bufs[program_operand_buf(c->pr, add, bias)];
    return add;
}

/* A residual Add with the bias Add before it fused in:
 * y = r + (a + b[col]) in one pass. */
int emit_bias_residual(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *a, *b;
    const Node *add = fused_bias_add(c, &a, &b);
    int slot = c->n->inputs[0] == add->outputs[0] ? 0 : 1;
    const Buffer *r = &c->pr->bufs[program_operand_buf(c->pr, c->n, 1 - slot)], *y = emit_out(c, 0);
    int64_t n = y->bytes / 4, cols = b->bytes / 4;
    char nm[ESC_NAME_CAP];
    fprintf(c->f, "    /* with node \"%s\" (Add) fused in: residual + bias in one pass */\n", CMT(add->name, nm));
    fprintf(c->f, "    k_bias_residual_f32(%s, %s, %s, %s, %lld, %lld);\n", y->name, a->name, b->name, r->name,
            (long long)(n / cols), (long long)cols);
    return 0;
}

int emit_binary(const EmitCtx *c, Diag *d)
{
    (void)d;
    if (c->pr->nodes[c->n->id].fused_from >= 0)
        return emit_bias_residual(c, d);
    if (c->pr->nodes[c->n->id].alias) {
        const Node *mm = c->n->inputs[0]->producer && c->n->inputs[0]->producer->op == OP_MATMUL
                             ? c->n->inputs[0]->producer : c->n->inputs[1]->producer;
        char nm[ESC_NAME_CAP];
        fprintf(c->f, "    /* folded into node \"%s\" (MatMul): its GEMM starts from the bias, so %s is %s */\n",
                CMT(mm->name, nm), emit_out(c, 0)->name, c->pr->bufs[c->pr->tensor_buf[mm->outputs[0]->id]].name);
        return 0;
    }
    static const char *const ops[] = {[OP_ADD] = "K_ARITH_ADD", [OP_SUB] = "K_ARITH_SUB", [OP_MUL] = "K_ARITH_MUL",
                                      [OP_DIV] = "K_ARITH_DIV", [OP_POW] = "K_ARITH_POW"};
    const Buffer *a = emit_in(c, 0), *b = emit_in(c, 1), *y = emit_out(c, 0);
    int same = a->rank == y->rank && b->rank == y->rank && !memcmp(a->dims, y->dims, sizeof(int64_t) * y->rank) &&
               !memcmp(b->dims, y->dims, sizeof(int64_t) * y->rank);
    int arith = c->n->op != OP_POW && y->dtype == DT_F32 && a->dtype == DT_F32 && b->dtype == DT_F32;
    int64_t ny = y->bytes / 4, cols = y->rank ? y->dims[y->rank - 1] : 1;
    if (arith && (c->n->op == OP_ADD || c->n->op == OP_MUL) && a->bytes != y->bytes && b->bytes == y->bytes) {
        const Buffer *t = a; /* a bias or scale written first: the same sum or product, operands swapped */
        a = b;
        b = t;
    }
    if (arith && a->bytes == y->bytes) {
        /* b the same shape, a scalar, or a row over the last dim(s). */
        int64_t nb = b->bytes / 4;
        if (same || nb == ny) {
            fprintf(c->f, "    k_arith_f32(%s, %s, %s, %s, 1, %lld, 0, 0, 1);\n", ops[c->n->op], y->name, a->name, b->name,
                    (long long)ny);
            return 0;
        }
        if (nb == 1) {
            fprintf(c->f, "    k_arith_f32(%s, %s, %s, %s, 1, %lld, 0, 0, 0); /* scalar operand */\n", ops[c->n->op],
                    y->name, a->name, b->name, (long long)ny);
            return 0;
        }
        if (ny % nb == 0 && b->rank >= 1) {
            /* b equal to y's trailing dims: one row repeated. */
            int trailing = 1;
            for (int i = 0; i < b->rank; i++) {
                int o = y->rank - b->rank + i;
                if (b->dims[i] != y->dims[o] && !(b->dims[i] == 1 && i < b->rank && emit_prod(b->dims, 0, i + 1) == 1))
                    trailing = 0;
            }
            if (trailing) {
                fprintf(c->f, "    k_arith_f32(%s, %s, %s, %s, %lld, %lld, %lld, 0, 1); /* row broadcast */\n",
                        ops[c->n->op], y->name, a->name, b->name, (long long)(ny / nb), (long long)nb, (long long)nb);
                return 0;
            }
        }
    }
    (void)cols;
    if (c->n->op == OP_POW && y->dtype == DT_F32 && a->dtype == DT_F32 && b->dtype == DT_F32 && a->bytes == y->bytes &&
        b->bytes == 4) {
        fprintf(c->f, "    k_pow_scalar_f32(%s, %s, %s, %lld); /* one exponent */\n", y->name, a->name, b->name,
                (long long)ny);
        return 0;
    }
    int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
    emit_bcast_strides(a, y, sa);
    emit_bcast_strides(b, y, sb);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, y->rank);
    emit_arr(c, "sa", sa, y->rank);
    emit_arr(c, "sb", sb, y->rank);
    if (a->dtype != b->dtype) {
        fprintf(c->f, "        k_pow_mixed(%s, %s, %d, %s, %d, %d, dims, sa, sb);\n    }\n", y->name, a->name,
                (int)a->dtype, b->name, (int)b->dtype, y->rank);
        return 0;
    }
    fprintf(c->f, "        k_binary_%s(%s, %s, %s, %s, %d, dims, sa, sb);\n    }\n",
            y->dtype == DT_F32 ? "f32" : "i64", ops[c->n->op], y->name, a->name, b->name, y->rank);
    return 0;
}

/* The K_UNARY_* selector of k_unary_f32 and k_bias_act_f32 (templates/bodies.h). */
static const char *unary_code(const Node *n)
{
    return n->op == OP_RELU      ? "K_UNARY_RELU"
         : n->op == OP_SQRT      ? "K_UNARY_SQRT"
         : n->op == OP_ERF       ? "K_UNARY_ERF"
         : n->op == OP_TANH      ? "K_UNARY_TANH"
         : n->op == OP_SIGMOID   ? "K_UNARY_SIGMOID"
         : strcmp(node_attr_str(n, "approximate", "none"), "tanh") == 0 ? "K_UNARY_GELU_TANH"
                                 : "K_UNARY_GELU";
}

/* The activation of a fused bias Add: y = act(a + b) in one kernel. */
int emit_bias_act(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *a, *b, *y = emit_out(c, 0);
    const Node *add = fused_bias_add(c, &a, &b);
    int64_t n = y->bytes / 4, cols = b->bytes / 4;
    char nm[ESC_NAME_CAP];
    fprintf(c->f, "    /* with node \"%s\" (Add) fused in: its sum never exists on its own */\n", CMT(add->name, nm));
    fprintf(c->f, "    k_bias_act_f32(%s, %s, %s, %s, %lld, %lld);\n", unary_code(c->n), y->name, a->name, b->name,
            (long long)(n / cols), (long long)cols);
    return 0;
}

int emit_unary(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    if (c->pr->nodes[c->n->id].fused_from >= 0)
        return emit_bias_act(c, d);
    int64_t n = y->bytes / (int64_t)dtype_size(y->dtype);
    switch (c->n->op) {
    case OP_IDENTITY: case OP_RESHAPE: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_FLATTEN: case OP_BITCAST:
        if (c->pr->nodes[c->n->id].alias) {
            fprintf(c->f, "    /* %s is %s's storage, new shape: nothing to copy */\n", y->name, x->name);
            return 0;
        }
        fprintf(c->f, "    k_copy(%s, %s, %lld); /* same bytes, new %s */\n", y->name, x->name, (long long)y->bytes,
                c->n->op == OP_BITCAST ? "type" : "shape");
        return 0;
    case OP_CAST:
        fprintf(c->f, "    k_cast(%s, %d, %s, %d, %lld);\n", y->name, (int)y->dtype, x->name, (int)x->dtype, (long long)n);
        return 0;
    case OP_RELU:
        if (x->dtype == DT_I64) {
            fprintf(c->f, "    k_relu_i64(%s, %s, %lld);\n", y->name, x->name, (long long)n);
            return 0;
        }
        break;
    default:
        break;
    }
    fprintf(c->f, "    k_unary_f32(%s, %s, %s, %lld);\n", unary_code(c->n), y->name, x->name, (long long)n);
    return 0;
}

/* Operand k of a MatMul read through the Transpose that made it
 * (views.c find_views): the Transpose's input, its matrices stored
 * transposed or not with leading dimension ld, and the view's strides. */
typedef struct MatView {
    const Buffer *buf;
    int trans;
    int64_t ld;
    int64_t st[IR_MAX_RANK];
} MatView;

static MatView mat_view(const EmitCtx *c, int k)
{
    MatView v = {emit_in(c, k), 0, 0, {0}};
    int tr = c->pr->nodes[c->n->id].mm_view[k], r = v.buf->rank;
    if (tr < 0) {
        emit_strides(v.buf->dims, r, v.st);
        v.ld = v.st[r - 2];
        return v;
    }
    const Node *t = c->pr->g->nodes[tr];
    const Attr *perm = node_attr(t, "perm");
    int64_t sx[IR_MAX_RANK];
    v.buf = &c->pr->bufs[program_operand_buf(c->pr, t, 0)];
    emit_strides(v.buf->dims, r, sx);
    for (int i = 0; i < r; i++)
        v.st[i] = sx[perm ? perm->ints[i] : r - 1 - i];
    int last = perm ? (int)perm->ints[r - 1] : 0;
    v.trans = last != r - 1;
    v.ld = v.trans ? v.st[r - 1] : v.st[r - 2];
    return v;
}

/* One batch dim of a per-batch GEMM loop: rem counts down the output's
 * batch index, ao and bo step by each operand's stride. A dim of 1
 * contributes nothing and a zero stride adds nothing, so neither is
 * written. */
static void emit_batch_offsets(const EmitCtx *c, int64_t dim, int64_t sa, int64_t sb)
{
    if (dim == 1)
        return;
    if (sa)
        fprintf(c->f, "        ao += (rem %% %lld) * %lld;\n", (long long)dim, (long long)sa);
    if (sb)
        fprintf(c->f, "        bo += (rem %% %lld) * %lld;\n", (long long)dim, (long long)sb);
    fprintf(c->f, "        rem /= %lld;\n", (long long)dim);
}

/* A MatMul with an operand read in place through its Transpose. */
static int emit_matmul_view(const EmitCtx *c)
{
    const Buffer *y = emit_out(c, 0);
    MatView a = mat_view(c, 0), b = mat_view(c, 1);
    int r = y->rank;
    int64_t m = y->dims[r - 2], n = y->dims[r - 1], k = emit_in(c, 0)->dims[emit_in(c, 0)->rank - 1];
    char nm[ESC_NAME_CAP];
    for (int q = 0; q < 2; q++) {
        int tr = c->pr->nodes[c->n->id].mm_view[q];
        if (tr >= 0)
            fprintf(c->f, "    /* %s read in place through node \"%s\" (Transpose), whose copy is never made */\n",
                    q ? "B" : "A", CMT(c->pr->g->nodes[tr]->name, nm));
    }
    if (b.buf->rank == 2 && r > 2) {
        /* A shared right operand: the batch folds into M (A is contiguous). */
        fprintf(c->f, "    k_matmul_view_f32(%s, %s, 0, %lld, %s, %d, %lld, %lld, %lld, %lld); /* lda, ldb, M, K, N */\n",
                y->name, a.buf->name,
                (long long)k, b.buf->name, b.trans, (long long)b.ld, (long long)(emit_prod(y->dims, 0, r - 1)),
                (long long)k, (long long)n);
        return 0;
    }
    int64_t batch = emit_prod(y->dims, 0, r - 2);
    if (batch == 1) {
        fprintf(c->f, "    k_matmul_view_f32(%s, %s, %d, %lld, %s, %d, %lld, %lld, %lld, %lld); /* lda, ldb, M, K, N */\n",
                y->name, a.buf->name,
                a.trans, (long long)a.ld, b.buf->name, b.trans, (long long)b.ld, (long long)m, (long long)k,
                (long long)n);
        return 0;
    }
    /* One GEMM per batch: each operand's matrix at its view's batch strides. */
    fprintf(c->f, "    for (int64_t bi = 0; bi < %lld; bi++) {\n        int64_t rem = bi, ao = 0, bo = 0;\n",
            (long long)batch);
    for (int i = r - 3; i >= 0; i--)
        emit_batch_offsets(c, y->dims[i], a.st[i], b.st[i]);
    fprintf(c->f, "        k_matmul_view_f32(%s + bi * %lld, %s + ao, %d, %lld, %s + bo, %d, %lld, %lld, %lld, %lld); "
                  "/* lda, ldb, M, K, N */\n    }\n",
            y->name, (long long)(m * n), a.buf->name, a.trans, (long long)a.ld, b.buf->name, b.trans, (long long)b.ld,
            (long long)m, (long long)k, (long long)n);
    return 0;
}

/* A GEMM whose weight B is packed in panels (views.c find_packs): by the
 * compiler into the weight file, or at start-up. A's leading dims fold
 * into M. acc: y already holds Gemm's beta * C. */
static void emit_packed_gemm(const EmitCtx *c, const Buffer *y, const Buffer *a, const Buffer *b, const Buffer *bias,
                             int acc)
{
    const struct PackedWeight *pw = &c->pr->packs[c->pr->nodes[c->n->id].packed_b];
    fprintf(c->f, "    k_matmul_packed_f32(%s, %s, P%s, %s, %lld, %lld, %lld, %d); /* M, K, N, accumulate */\n",
            y->name, a->name, b->name + 1, bias ? bias->name : "NULL", (long long)emit_prod(a->dims, 0, a->rank - 1),
            (long long)pw->k, (long long)pw->n, acc);
}

int emit_matmul(const EmitCtx *c, Diag *d)
{
    (void)d;
    if (c->pr->nodes[c->n->id].mm_view[0] >= 0 || c->pr->nodes[c->n->id].mm_view[1] >= 0)
        return emit_matmul_view(c);
    const Buffer *a = emit_in(c, 0), *b = emit_in(c, 1), *y = emit_out(c, 0);
    MoeMove mv;
    int counts_r = emit_moe_gemm(c->pr, c->n, &mv);
    if (counts_r >= 0) { /* (emit_moe_gemm checked the shapes) */
        int64_t m = a->dims[1], k = a->dims[2], n = b->dims[3];
        fprintf(c->f, "    /* MoE expert GEMM: batch bi is an (expert-side group, expert) block, computed over its filled\n"
                      "     * columns only (counted at the dispatch's all-to-all), zeros in the rest */\n"
                      "    for (int64_t bi = 0; bi < %lld; bi++)\n"
                      "        k_matmul_cols_f32(%s + bi * %lld, %s + (bi %% %lld) * %lld, %s + bi * %lld, %lld, %lld, %lld, "
                      "moe_counts_r%d[1][bi]); /* M, K, N, filled */\n",
                (long long)(b->dims[0] * b->dims[1]), y->name, (long long)(m * n), a->name, (long long)a->dims[0],
                (long long)(m * k), b->name, (long long)(k * n), (long long)m, (long long)k, (long long)n, counts_r);
        return 0;
    }
    if (c->pr->nodes[c->n->id].packed_b >= 0) {
        int bias = c->pr->nodes[c->n->id].gemm_bias;
        char nm[ESC_NAME_CAP];
        if (bias >= 0)
            fprintf(c->f, "    /* with node \"%s\" (Add) folded in: the GEMM starts from its bias */\n",
                    CMT(c->n->outputs[0]->consumers[0]->name, nm));
        emit_packed_gemm(c, y, a, b, bias >= 0 ? &c->pr->bufs[bias] : NULL, 0);
        return 0;
    }
    int64_t m = a->rank > 1 ? a->dims[a->rank - 2] : 1, k = a->dims[a->rank - 1];
    int64_t n = b->rank > 1 ? b->dims[b->rank - 1] : 1;
    int nb = y->rank - (a->rank > 1) - (b->rank > 1);
    int64_t batch = emit_prod(y->dims, 0, nb);
    /* Per-batch offsets of each operand (broadcast batch dims repeat). */
    int64_t aoff = 0, boff = 0, aregular = 1, bregular = 1;
    int64_t ab = a->rank > 2 ? emit_prod(a->dims, 0, a->rank - 2) : 1, bb = b->rank > 2 ? emit_prod(b->dims, 0, b->rank - 2) : 1;
    if (ab == batch)
        aoff = m * k;
    else if (ab != 1)
        aregular = 0;
    if (bb == batch)
        boff = k * n;
    else if (bb != 1)
        bregular = 0;
    const char *sfx = y->dtype == DT_F32 ? "f32" : y->dtype == DT_F16 ? "f16" : y->dtype == DT_BF16 ? "bf16" : "i64";
    if (aregular && ab == batch && bb == 1 && a->rank > 1) {
        /* A shared right operand: fold the batch into M, one GEMM. */
        fprintf(c->f, "    k_matmul_%s(%s, %s, %s, 1, %lld, %lld, %lld, 0, 0); /* batch, M, K, N */\n", sfx, y->name,
                a->name, b->name,
                (long long)(batch * m), (long long)k, (long long)n);
        return 0;
    }
    if (aregular && bregular) {
        fprintf(c->f, "    k_matmul_%s(%s, %s, %s, %lld, %lld, %lld, %lld, %lld, %lld); "
                      "/* batch, M, K, N, A's and B's batch strides */\n",
                sfx, y->name, a->name, b->name,
                (long long)batch, (long long)m, (long long)k, (long long)n, (long long)aoff, (long long)boff);
        return 0;
    }
    /* Mixed broadcasting of batch dims: one call per output batch. */
    fprintf(c->f, "    for (int64_t bi = 0; bi < %lld; bi++) {\n        int64_t rem = bi, ao = 0, bo = 0;\n", (long long)batch);
    for (int i = nb - 1; i >= 0; i--) {
        int ja = i - (nb - (a->rank - 2)), jb = i - (nb - (b->rank - 2));
        int64_t sa = 0, sb = 0;
        if (ja >= 0 && a->dims[ja] != 1)
            sa = emit_prod(a->dims, ja + 1, a->rank);
        if (jb >= 0 && b->dims[jb] != 1)
            sb = emit_prod(b->dims, jb + 1, b->rank);
        emit_batch_offsets(c, y->dims[i], sa, sb);
    }
    fprintf(c->f, "        k_matmul_%s(%s + bi * %lld, %s + ao, %s + bo, 1, %lld, %lld, %lld, 0, 0); /* M, K, N */\n    }\n",
            sfx, y->name,
            (long long)(m * n), a->name, b->name, (long long)m, (long long)k, (long long)n);
    return 0;
}

int emit_gemm(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *a = emit_in(c, 0), *b = emit_in(c, 1), *cc = emit_in(c, 2), *y = emit_out(c, 0);
    int ta = node_attr_int(c->n, "transA", 0) != 0, tb = node_attr_int(c->n, "transB", 0) != 0;
    int64_t k = a->dims[ta ? 0 : 1];
    int64_t crs = 0, ccs = 0;
    if (cc) {
        int64_t st[IR_MAX_RANK];
        emit_bcast_strides(cc, y, st);
        crs = st[0];
        ccs = st[1];
    }
    int skip = cc && emit_skip_bias(c);
    char al[48], be[48];
    if (c->pr->nodes[c->n->id].packed_b >= 0) {
        if (cc && !skip && crs == 0 && ccs == 1 && node_attr_float(c->n, "beta", 1.0f) == 1.0f) {
            emit_packed_gemm(c, y, a, b, cc, 0); /* C a row: the GEMM starts from it */
            return 0;
        }
        if (cc && !skip) {
            fprintf(c->f, "    k_gemm_init_f32(%s, %s, %lld, %lld, %s, %lld, %lld); /* beta * C, the GEMM adds to it */\n",
                    y->name, cc->name, (long long)y->dims[0], (long long)y->dims[1],
                    emit_cf(node_attr_float(c->n, "beta", 1.0f), be), (long long)crs, (long long)ccs);
        } else if (skip) {
            fprintf(c->f, "    /* C is added by coordinate 0 of the partial axes */\n");
        }
        emit_packed_gemm(c, y, a, b, NULL, cc && !skip);
        return 0;
    }
    fprintf(c->f, "    k_gemm_f32(%s, %s, %s, %s, %lld, %lld, %lld, %d, %d, %s, %s, %lld, %lld); "
                  "/* M, N, K, transA, transB, alpha, beta, C's strides */%s\n",
            y->name,
            a->name, b->name, cc && !skip ? cc->name : "NULL", (long long)y->dims[0], (long long)y->dims[1],
            (long long)k, ta, tb, emit_cf(node_attr_float(c->n, "alpha", 1.0f), al), emit_cf(node_attr_float(c->n, "beta", 1.0f), be),
            (long long)crs, (long long)ccs, skip ? " /* C is added by coordinate 0 of the partial axes */" : "");
    return 0;
}

int emit_norm_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
}

int emit_softmax(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank);
    fprintf(c->f, "    k_softmax_f32(%s, %s, %lld, %lld, %lld); /* outer, n, inner */\n", y->name, x->name, (long long)emit_prod(x->dims, 0, ax),
            (long long)x->dims[ax], (long long)emit_prod(x->dims, ax + 1, x->rank));
    return 0;
}

int emit_layernorm(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *s = emit_in(c, 1), *b = emit_in(c, 2), *y = emit_out(c, 0);
    const Buffer *mo = emit_out(c, 1), *io = emit_out(c, 2);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", -1), x->rank);
    char eps[48];
    fprintf(c->f, "    k_layernorm_f32(%s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %s); "
                  "/* rows, n, scale and bias lengths, epsilon */\n",
            y->name,
            mo ? mo->name : "NULL", io ? io->name : "NULL", x->name, s->name, b ? b->name : "NULL",
            (long long)emit_prod(x->dims, 0, ax), (long long)emit_prod(x->dims, ax, x->rank), (long long)(s->bytes / 4),
            (long long)(b ? b->bytes / 4 : 1), emit_cf(node_attr_float(c->n, "epsilon", 1e-5f), eps));
    return 0;
}

int emit_transpose(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *perm = node_attr(c->n, "perm");
    int64_t sx[IR_MAX_RANK], s[IR_MAX_RANK];
    emit_strides(x->dims, x->rank, sx);
    for (int i = 0; i < x->rank; i++)
        s[i] = sx[perm ? perm->ints[i] : x->rank - 1 - i];
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, y->rank);
    emit_arr(c, "strides", s, y->rank);
    fprintf(c->f, "        k_strided_copy(%s, %s, %zu, %d, dims, strides, 0);\n    }\n", y->name, x->name,
            dtype_size(y->dtype), y->rank);
    return 0;
}

int emit_concat_split(const EmitCtx *c, Diag *d)
{
    (void)d;
    int concat = c->n->op == OP_CONCAT;
    const Buffer *whole = concat ? emit_out(c, 0) : emit_in(c, 0);
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", 0), whole->rank);
    int64_t outer = emit_prod(whole->dims, 0, ax), inner = emit_prod(whole->dims, ax + 1, whole->rank), off = 0;
    int parts = concat ? c->n->ninputs : c->n->noutputs;
    for (int k = 0; k < parts; k++) {
        const Buffer *pb = concat ? emit_in(c, k) : emit_out(c, k);
        if (!pb) {
            off += 0;
            continue;
        }
        if (concat)
            fprintf(c->f, "    k_copy_axis(%s, %lld, %lld, %s, %lld, 0, %lld, %lld, %lld, %zu);\n", whole->name,
                    (long long)whole->dims[ax], (long long)off, pb->name, (long long)pb->dims[ax], (long long)outer,
                    (long long)pb->dims[ax], (long long)inner, dtype_size(whole->dtype));
        else
            fprintf(c->f, "    k_copy_axis(%s, %lld, 0, %s, %lld, %lld, %lld, %lld, %lld, %zu);\n", pb->name,
                    (long long)pb->dims[ax], whole->name, (long long)whole->dims[ax], (long long)off, (long long)outer,
                    (long long)pb->dims[ax], (long long)inner, dtype_size(whole->dtype));
        off += pb->dims[ax];
    }
    return 0;
}

int emit_slice(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    const Attr *st = node_attr(c->n, "starts"), *ax = node_attr(c->n, "axes"), *sp = node_attr(c->n, "steps");
    int64_t sx[IR_MAX_RANK], s[IR_MAX_RANK], offset = 0;
    emit_strides(x->dims, x->rank, sx);
    memcpy(s, sx, sizeof s);
    for (int i = 0; st && i < st->n; i++) {
        int a = emit_norm_axis(ax ? ax->ints[i] : i, x->rank);
        int64_t dim = x->dims[a], step = sp ? sp->ints[i] : 1, b = st->ints[i];
        if (b < 0)
            b = b < -dim ? 0 : b + dim;
        if (step > 0)
            b = b > dim ? dim : b;
        else
            b = b > dim - 1 ? dim - 1 : b;
        offset += b * sx[a];
        s[a] = sx[a] * step;
    }
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, y->rank);
    emit_arr(c, "strides", s, y->rank);
    fprintf(c->f, "        k_strided_copy(%s, %s, %zu, %d, dims, strides, %lld);\n    }\n", y->name, x->name,
            dtype_size(y->dtype), y->rank, (long long)offset);
    return 0;
}

int emit_gather(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *x = emit_in(c, 0), *idx = emit_in(c, 1), *y = emit_out(c, 0);
    const Tensor *xt = c->n->inputs[0];
    int ax = emit_norm_axis(node_attr_int(c->n, "axis", 0), x->rank);
    int shard = mesh_block_index(&c->pr->plan->mesh, c->pr->vrank, x->layout.axes[ax], x->layout.naxes[ax]);
    int64_t len = x->dims[ax];
    fprintf(c->f, "    k_gather(%s, %s, %s, %lld, %zu, %lld, %lld, %lld, %lld, %lld);%s\n", y->name, x->name, idx->name,
            (long long)(idx->bytes / 8), dtype_size(x->dtype), (long long)emit_prod(x->dims, 0, ax), (long long)len,
            (long long)emit_prod(x->dims, ax + 1, x->rank), (long long)(shard * len), (long long)xt->dims[ax],
            x->layout.naxes[ax] ? " /* masked lookup: this rank owns a block of rows */" : "");
    return 0;
}

int emit_where(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Buffer *cd = emit_in(c, 0), *a = emit_in(c, 1), *b = emit_in(c, 2), *y = emit_out(c, 0);
    int64_t sc[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK];
    emit_bcast_strides(cd, y, sc);
    emit_bcast_strides(a, y, sa);
    emit_bcast_strides(b, y, sb);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, y->rank);
    emit_arr(c, "sc", sc, y->rank);
    emit_arr(c, "sx", sa, y->rank);
    emit_arr(c, "sz", sb, y->rank);
    fprintf(c->f, "        k_where(%s, %s, %s, %s, %zu, %d, dims, sc, sx, sz);\n    }\n", y->name, cd->name, a->name,
            b->name, dtype_size(y->dtype), y->rank);
    return 0;
}

int emit_constant(const EmitCtx *c, Diag *d)
{
    (void)d;
    fprintf(c->f, "    /* value stored with the weights as %s */\n", emit_out(c, 0)->name);
    return 0;
}

int emit_none(const EmitCtx *c, Diag *d)
{
    diag_add(d, "node \"%s\" (%s): no kernel for this op yet", c->n->name, node_op_name(c->n));
    return -1;
}

/* The emit column of ir/ops.def. */
typedef int (*EmitFn)(const EmitCtx *c, Diag *d);
static const EmitFn emit_fns[OP_COUNT] = {
#define OP(e, name, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) [e] = emit,
#include "../ir/ops.def"
#undef OP
};

/* A node that sums over a padded factor (an uneven split, see sharding.c)
 * must not sum the padding: on a rank whose block runs past the dim's
 * end, the operands' padding is zeroed first. Every such reduction is a
 * sum (rules refuse padding elsewhere: rule_factor_can_pad), so zeros
 * leave it exact; weights and inputs are zero-padded when loaded. Other
 * values' padding is never read into a valid element, so it may hold
 * anything, except in integers (see below). */
static void emit_pad_mask(const EmitCtx *c)
{
    const Program *pr = c->pr;
    const Node *n = c->n;
    const FactorRule *r = &pr->plan->nodes[n->id].rule;
    for (int t = 0; t < n->ninputs; t++) {
        const Buffer *b = emit_in(c, t), *store = b;
        /* A Transpose a GEMM reads in place (views.c) has no storage of its
         * own: its padding is its input's, operand dim i being input dim
         * perm[i]. */
        int64_t perm[IR_MAX_RANK];
        for (int i = 0; b && i < b->rank; i++)
            perm[i] = i;
        if (b && n->op == OP_MATMUL && t < 2 && pr->nodes[n->id].mm_view[t] >= 0) {
            const Node *tr = pr->g->nodes[pr->nodes[n->id].mm_view[t]];
            const Attr *pa = node_attr(tr, "perm");
            store = &pr->bufs[program_operand_buf(pr, tr, 0)];
            for (int i = 0; i < b->rank; i++)
                perm[i] = pa ? pa->ints[i] : b->rank - 1 - i;
        }
        if (!b || store->kind == BUF_WEIGHT || store->kind == BUF_INPUT)
            continue;
        /* The operand's layout as the node reads it (a cast copy has none of its own). */
        const Sharding *lay = &pr->bufs[program_operand_buf(pr, n, t)].layout;
        /* An integer operand's padding may be an index: zeroed for every node,
         * or a bounds check (Gather's) would trip over stale arena bytes. */
        int ints = !dtype_is_float(b->dtype);
        for (int i = 0; i < b->rank; i++) {
            const DimFactors *df = &r->dims[t][i];
            int sums = df->n == 1 && r->kind[df->f[0]] == FK_REDUCTION;
            if (!lay->naxes[i] || !(sums || ints))
                continue;
            int64_t blk = mesh_block_index(&pr->plan->mesh, pr->vrank, lay->axes[i], lay->naxes[i]);
            int64_t len = b->dims[i], valid = sharding_block_valid(n->inputs[t]->dims[i], len, blk);
            if (valid == len)
                continue;
            int64_t dims[IR_MAX_RANK], st[IR_MAX_RANK];
            int si = (int)perm[i]; /* the dim in the storage */
            memcpy(dims, store->dims, sizeof dims);
            emit_strides(store->dims, store->rank, st);
            dims[si] = len - valid;
            fprintf(c->f, "    { /* padding: block %lld of dim %d holds %lld of %lld; zeroed %s%s */\n"
                          "        static const int64_t dims[] = ",
                    (long long)blk, i, (long long)valid, (long long)len,
                    sums ? "before the sum" : "(an integer: it may be an index)",
                    store != b ? " (in the storage of the Transpose read in place)" : "");
            emit_dims(c->f, dims, store->rank);
            fprintf(c->f, ", strides[] = ");
            emit_dims(c->f, st, store->rank);
            fprintf(c->f, ";\n        k_strided_zero(%s, %zu, %d, dims, strides, %lld);\n    }\n", store->name,
                    dtype_size(store->dtype), store->rank, (long long)(valid * st[si]));
        }
    }
}

int emit_node(const Program *pr, const Node *n, TraceTables *trace, FILE *f, Diag *d)
{
    EmitCtx c = {pr, n, f};
    char g[128], l[128], s[128], nm[ESC_NAME_CAP];
    fprintf(f, "\n    /* node \"%s\" (%s)", CMT(n->name, nm), node_op_name(n));
    for (int k = 0; k < n->noutputs; k++) {
        const Buffer *y = emit_out(&c, k);
        if (y)
            fprintf(f, "\n     *   %s: local %s of %s, %s", CMT(n->outputs[k]->name, nm), shape_str(y->dims, y->rank, l, sizeof l),
                    shape_str(n->outputs[k]->dims, n->outputs[k]->rank, g, sizeof g),
                    sharding_str(&y->layout, &pr->plan->mesh, s, sizeof s));
    }
    fprintf(f, " */\n");
    const Buffer *y0 = n->noutputs ? emit_out(&c, 0) : NULL;
    if (y0)
        fprintf(f, "    rt_enter(%d);\n", trace_node(trace, n, y0->dims, y0->rank));
    else
        fprintf(f, "    rt_enter(%d);\n", trace_node(trace, n, NULL, 0));
    const int *w = pr->nodes[n->id].wide;
    for (int k = 0; w && k < n->ninputs; k++)
        if (w[k] >= 0) {
            const Buffer *s = &pr->bufs[program_operand_buf(pr, n, k)], *b = &pr->bufs[w[k]];
            fprintf(f, "    k_cast(%s, %d, %s, %d, %lld); /* %s operand in %s */\n", b->name, (int)b->dtype, s->name,
                    (int)s->dtype, (long long)(s->bytes / (int64_t)dtype_size(s->dtype)), dtype_name(s->dtype),
                    dtype_name(b->dtype));
        }
    emit_pad_mask(&c);
    if (emit_fns[n->op](&c, d))
        return -1;
    for (int k = 0; w && k < n->noutputs; k++)
        if (w[n->ninputs + k] >= 0) {
            const Buffer *b = &pr->bufs[w[n->ninputs + k]], *y = &pr->bufs[pr->tensor_buf[n->outputs[k]->id]];
            fprintf(f, "    k_cast(%s, %d, %s, %d, %lld); /* result stored as %s */\n", y->name, (int)y->dtype, b->name,
                    (int)b->dtype, (long long)(y->bytes / (int64_t)dtype_size(y->dtype)), dtype_name(y->dtype));
        }
    return 0;
}

/* Einsum over this rank's blocks: the equation parsed again on the local
 * dims; one loop nest over the output letters (the output is contiguous
 * in their order) and, inside, over the summed letters, with each
 * operand's stride per letter (a repeated letter's strides add up: its
 * diagonal; a broadcast dim has stride 0). */
int emit_einsum(const EmitCtx *c, Diag *d)
{
    const Node *n = c->n;
    const Buffer *y = emit_out(c, 0);
    int ranks[EINSUM_MAX_INPUTS];
    int64_t dims[EINSUM_MAX_INPUTS][IR_MAX_RANK];
    for (int i = 0; i < n->ninputs; i++) {
        ranks[i] = emit_in(c, i)->rank;
        memcpy(dims[i], emit_in(c, i)->dims, sizeof dims[i]);
    }
    EinsumSpec s;
    char err[160];
    if (einsum_parse(node_attr_str(n, "equation", ""), n->ninputs, ranks, (const int64_t(*)[IR_MAX_RANK])dims, &s,
                     err, sizeof err)) {
        diag_add(d, "node \"%s\" (Einsum): local equation: %s", n->label, err);
        return -1;
    }
    int con[EINSUM_MAX_LETTERS], ncon = 0;
    for (int l = 0; l < s.nletters; l++) {
        int in_out = 0;
        for (int q = 0; q < s.out_rank; q++)
            in_out |= s.out[q] == l;
        if (!in_out && s.size[l] > 1)
            con[ncon++] = l;
    }
    if (ncon > K_EINSUM_MAX_SUMMED) {
        diag_add(d, "node \"%s\" (Einsum): sums over %d letters (at most %d)", n->label, ncon, K_EINSUM_MAX_SUMMED);
        return -1;
    }
    int64_t osz[IR_MAX_RANK] = {1}, csz[K_EINSUM_MAX_SUMMED] = {1};
    int64_t ost[EINSUM_MAX_INPUTS * IR_MAX_RANK] = {0}, cst[EINSUM_MAX_INPUTS * K_EINSUM_MAX_SUMMED] = {0};
    for (int q = 0; q < s.out_rank; q++)
        osz[q] = s.size[s.out[q]];
    for (int q = 0; q < ncon; q++)
        csz[q] = s.size[con[q]];
    for (int i = 0; i < s.nin; i++) {
        int64_t st[IR_MAX_RANK];
        emit_strides(dims[i], ranks[i], st);
        for (int j = 0; j < ranks[i]; j++) {
            int l = s.letter[i][j];
            if (dims[i][j] != s.size[l])
                continue; /* broadcast from 1 */
            for (int q = 0; q < s.out_rank; q++)
                if (s.out[q] == l)
                    ost[i * s.out_rank + q] += st[j];
            for (int q = 0; q < ncon; q++)
                if (con[q] == l)
                    cst[i * ncon + q] += st[j];
        }
    }
    const char *ct = y->dtype == DT_F32 ? "float" : "int64_t";
    fprintf(c->f, "    {\n");
    emit_arr(c, "osz", osz, s.out_rank ? s.out_rank : 1);
    emit_arr(c, "ost", ost, s.out_rank ? s.nin * s.out_rank : 1);
    emit_arr(c, "csz", csz, ncon ? ncon : 1);
    emit_arr(c, "cst", cst, ncon ? s.nin * ncon : 1);
    fprintf(c->f, "        const %s *ops[] = {", ct);
    for (int i = 0; i < s.nin; i++)
        fprintf(c->f, "%s%s", i ? ", " : "", emit_in(c, i)->name);
    fprintf(c->f, "};\n        k_einsum_%s(%s, %d, ops, %d, osz, ost, %d, csz, cst); /* inputs, output letters, summed letters */\n    }\n",
            y->dtype == DT_F32 ? "f32" : "i64", y->name, s.nin, s.out_rank, ncon);
    return 0;
}

/* QuantizeLinear / DequantizeLinear over this rank's block: x seen as
 * [outer, len, inner] around the scale's axis (the scale's index: 0 per
 * tensor, the position along the axis, or the block's). The integer side
 * arrives widened to int64; QuantizeLinear clamps to its stored type's
 * range before the narrowing. */
int emit_quant(const EmitCtx *c, Diag *d)
{
    const Node *n = c->n;
    const Buffer *x = emit_in(c, 0), *s = emit_in(c, 1), *zp = emit_in(c, 2), *y = emit_out(c, 0);
    int axis;
    int64_t block;
    int mode = quant_layout(n, n->inputs[0], n->inputs[1], &axis, &block, d);
    if (mode < 0)
        return -1;
    static const char *const codes[] = {"K_QUANT_TENSOR", "K_QUANT_AXIS", "K_QUANT_BLOCK"};
    int64_t outer = 1, len = emit_prod(x->dims, 0, x->rank), inner = 1;
    if (mode) {
        outer = emit_prod(x->dims, 0, axis);
        len = x->dims[axis];
        inner = emit_prod(x->dims, axis + 1, x->rank);
    }
    if (n->op == OP_DEQUANTIZE) {
        fprintf(c->f, "    k_dequantize(%s, %s, %s, %s, %lld, %lld, %lld, %s, %lld); /* outer, axis, inner, scales, block */\n",
                y->name, x->name, s->name, zp ? zp->name : "NULL", (long long)outer, (long long)len, (long long)inner,
                codes[mode], (long long)block);
        return 0;
    }
    DType out = n->outputs[0]->dtype;
    int64_t lo = out == DT_I8 ? -128 : out == DT_I16 ? -32768 : out == DT_I32 ? INT32_MIN : 0;
    int64_t hi = out == DT_I8 ? 127 : out == DT_U8 ? 255 : out == DT_I16 ? 32767 : out == DT_U16 ? 65535 : INT32_MAX;
    fprintf(c->f, "    k_quantize(%s, %s, %s, %s, %lld, %lld, %lld, %s, %lld, %lld, %lld); /* outer, axis, inner, scales, block, %s range */\n",
            y->name, x->name, s->name, zp ? zp->name : "NULL", (long long)outer, (long long)len, (long long)inner, codes[mode],
            (long long)block, (long long)lo, (long long)hi, dtype_name(out));
    return 0;
}
