/* emit_math.c: kernel calls for the math family (ir/ops_math.def).
 *
 * Two emitters cover the family, each writing calls to a few generic
 * kernels that take an op code (templates/kernels_math.c, cuda_math.cu,
 * whose enums give the codes their names in the generated source):
 * emit_math_unary for the elementwise unary ops (one kernel per dtype, plus
 * Not and the IsNaN/IsInf tests), emit_math_nary for comparisons, logic
 * and the broadcasting binary ops. Variadic Min/Max/Sum/Mean fold their
 * inputs pairwise into the output: y = op(x0, x1), then y = op(y, xk); the
 * output has the broadcast shape, so it is its own contiguous operand.
 * Attributes become literals in the call; Clip's bounds are one-element
 * buffers (NULL when omitted) that the kernel reads, so they may be inputs.
 */
#include "codegen.h"

#include <math.h>
#include <string.h>

/* A float as a C expression, including the infinities and NaN. */
static const char *math_cf(float v, char *buf)
{
    if (isnan(v))
        return strcpy(buf, "NAN");
    if (isinf(v))
        return strcpy(buf, v > 0 ? "INFINITY" : "-INFINITY");
    return emit_cf(v, buf);
}

int emit_math_unary(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Node *n = c->n;
    const Buffer *x = emit_in(c, 0), *y = emit_out(c, 0);
    int64_t count = y->bytes / (int64_t)dtype_size(y->dtype);
    char a[48], b[48];
    if (n->op == OP_NOT) {
        fprintf(c->f, "    k_math_not(%s, %s, %lld);\n", y->name, x->name, (long long)count);
        return 0;
    }
    if (n->op == OP_ISNAN || n->op == OP_ISINF) {
        fprintf(c->f, "    k_math_test_f32(%s, %s, %s, %lld, %d, %d);\n", n->op == OP_ISNAN ? "K_MATH_ISNAN" : "K_MATH_ISINF",
                y->name, x->name, (long long)count, node_attr_int(n, "detect_positive", 1) != 0,
                node_attr_int(n, "detect_negative", 1) != 0);
        return 0;
    }
    if (n->op == OP_CLIP) {
        const Buffer *lo = emit_in(c, 1), *hi = emit_in(c, 2);
        fprintf(c->f, "    k_math_clip_%s(%s, %s, %lld, %s, %s);\n", y->dtype == DT_I64 ? "i64" : "f32", y->name, x->name,
                (long long)count, lo ? lo->name : "NULL", hi ? hi->name : "NULL");
        return 0;
    }
    const char *code;
    float fa = 0.0f, fb = 0.0f;
    switch (n->op) {
    case OP_NEG: code = "K_MATH_NEG"; break;
    case OP_ABS: code = "K_MATH_ABS"; break;
    case OP_EXP: code = "K_MATH_EXP"; break;
    case OP_LOG: code = "K_MATH_LOG"; break;
    case OP_RECIPROCAL: code = "K_MATH_RECIPROCAL"; break;
    case OP_SIN: code = "K_MATH_SIN"; break;
    case OP_COS: code = "K_MATH_COS"; break;
    case OP_FLOOR: code = "K_MATH_FLOOR"; break;
    case OP_CEIL: code = "K_MATH_CEIL"; break;
    case OP_ROUND: code = "K_MATH_ROUND"; break;
    case OP_SIGN: code = "K_MATH_SIGN"; break;
    case OP_LEAKY_RELU: code = "K_MATH_LEAKY_RELU"; fa = node_attr_float(n, "alpha", 0.01f); break;
    case OP_ELU: code = "K_MATH_ELU"; fa = node_attr_float(n, "alpha", 1.0f); break;
    case OP_SELU:
        code = "K_MATH_SELU";
        fa = node_attr_float(n, "alpha", 1.67326319217681884765625f);
        fb = node_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case OP_HARD_SIGMOID:
        code = "K_MATH_HARD_SIGMOID";
        fa = node_attr_float(n, "alpha", 0.2f);
        fb = node_attr_float(n, "beta", 0.5f);
        break;
    case OP_HARD_SWISH: code = "K_MATH_HARD_SWISH"; break;
    case OP_SOFTPLUS: code = "K_MATH_SOFTPLUS"; break;
    case OP_SOFTSIGN: code = "K_MATH_SOFTSIGN"; break;
    case OP_ACOS: code = "K_MATH_ACOS"; break;
    case OP_ACOSH: code = "K_MATH_ACOSH"; break;
    case OP_ASIN: code = "K_MATH_ASIN"; break;
    case OP_ASINH: code = "K_MATH_ASINH"; break;
    case OP_ATAN: code = "K_MATH_ATAN"; break;
    case OP_ATANH: code = "K_MATH_ATANH"; break;
    case OP_COSH: code = "K_MATH_COSH"; break;
    case OP_SINH: code = "K_MATH_SINH"; break;
    case OP_TAN: code = "K_MATH_TAN"; break;
    case OP_THRESHOLDED_RELU: code = "K_MATH_THRESHOLDED_RELU"; fa = node_attr_float(n, "alpha", 1.0f); break;
    case OP_SHRINK:
        code = "K_MATH_SHRINK";
        fa = node_attr_float(n, "lambd", 0.5f);
        fb = node_attr_float(n, "bias", 0.0f);
        break;
    case OP_CELU: code = "K_MATH_CELU"; fa = node_attr_float(n, "alpha", 1.0f); break;
    case OP_SWISH: code = "K_MATH_SWISH"; fa = node_attr_float(n, "alpha", 1.0f); break;
    case OP_BITWISE_NOT: code = "K_MATH_BITWISE_NOT"; break;
    default: code = "K_MATH_MISH"; break;
    }
    if (y->dtype == DT_I64) {
        fprintf(c->f, "    k_math_unary_i64(%s, %s, %s, %lld);\n", code, y->name, x->name, (long long)count);
        return 0;
    }
    fprintf(c->f, "    k_math_unary_f32(%s, %s, %s, %lld, %s, %s);\n", code, y->name, x->name, (long long)count,
            math_cf(fa, a), math_cf(fb, b));
    return 0;
}

/* One broadcasting call: y = op(a, b) over y's dims. */
static void emit_pair(const EmitCtx *c, const char *kernel, const char *code, const Buffer *y, const Buffer *a,
                      const Buffer *b)
{
    int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
    emit_bcast_strides(a, y, sa);
    emit_bcast_strides(b, y, sb);
    fprintf(c->f, "    {\n");
    emit_arr(c, "dims", y->dims, y->rank);
    emit_arr(c, "sa", sa, y->rank);
    emit_arr(c, "sb", sb, y->rank);
    fprintf(c->f, "        %s(%s, %s, %s, %s, %d, dims, sa, sb);\n    }\n", kernel, code, y->name, a->name, b->name,
            y->rank);
}

int emit_math_nary(const EmitCtx *c, Diag *d)
{
    (void)d;
    const Node *n = c->n;
    const Buffer *y = emit_out(c, 0), *x0 = emit_in(c, 0);
    DType dt = x0->dtype;
    const char *sfx = dt == DT_F32 ? "f32" : "i64", *code, *kind = "binary";
    switch (n->op) {
    case OP_EQUAL: code = dt == DT_BOOL ? "K_MATH_XNOR" : "K_MATH_EQ"; kind = "cmp"; break;
    case OP_LESS: code = "K_MATH_LT"; kind = "cmp"; break;
    case OP_LESS_EQUAL: code = "K_MATH_LE"; kind = "cmp"; break;
    case OP_GREATER: code = "K_MATH_GT"; kind = "cmp"; break;
    case OP_GREATER_EQUAL: code = "K_MATH_GE"; kind = "cmp"; break;
    case OP_AND: code = "K_MATH_AND"; break;
    case OP_OR: code = "K_MATH_OR"; break;
    case OP_XOR: code = "K_MATH_XOR"; break;
    case OP_MIN: code = "K_MATH_MIN"; break;
    case OP_MAX: code = "K_MATH_MAX"; break;
    case OP_MEAN: case OP_SUM: code = "K_MATH_ADD"; break;
    case OP_MOD: code = node_attr_int(n, "fmod", 0) ? "K_MATH_FMOD" : "K_MATH_MOD"; break;
    case OP_BITWISE_AND: code = "K_MATH_BITWISE_AND"; break;
    case OP_BITWISE_OR: code = "K_MATH_BITWISE_OR"; break;
    case OP_BITWISE_XOR: code = "K_MATH_BITWISE_XOR"; break;
    default: code = "K_MATH_PRELU"; break;
    }
    char kernel[40];
    if (dt == DT_BOOL)
        snprintf(kernel, sizeof kernel, "k_math_logic");
    else
        snprintf(kernel, sizeof kernel, "k_math_%s_%s", kind, sfx);
    if (n->ninputs == 1) {
        fprintf(c->f, "    k_copy(%s, %s, %lld); /* one input: the identity */\n", y->name, x0->name, (long long)y->bytes);
        return 0;
    }
    emit_pair(c, kernel, code, y, x0, emit_in(c, 1));
    for (int k = 2; k < n->ninputs; k++)
        emit_pair(c, kernel, code, y, y, emit_in(c, k));
    if (n->op == OP_MEAN) {
        char cnt[48];
        fprintf(c->f, "    k_math_unary_f32(K_MATH_DIV_BY, %s, %s, %lld, %s, 0.0f); /* sum / input count */\n", y->name,
                y->name, (long long)(y->bytes / 4), emit_cf((float)n->ninputs, cnt));
    }
    return 0;
}
