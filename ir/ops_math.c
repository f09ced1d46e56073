/* ops_math.c: shape and fold functions of the math family (ops_math.def).
 *
 * Two shapes of op cover the whole family. Unary ops (Neg ... Mish, Not,
 * IsNaN, IsInf, Clip, the inverse and hyperbolic trigonometry, Celu,
 * Shrink, Swish, BitwiseNot) keep their input's shape; the dtype rules
 * differ per op and live in one table-like switch below. N-ary ops
 * (comparisons, And/Or/Xor, variadic Min/Max/Mean/Sum, Mod, PRelu, the
 * Bitwise ops) broadcast their inputs numpy-style; comparisons and logic
 * ops give bool. The Bitwise ops take integers only: an int32 or uint8
 * operand is computed widened to int64 and narrowed back by wrapping
 * (codegen/program.c), which is exact for and, or, xor and not. Clip's min and max are
 * one-element tensors of x's dtype, read by the kernel at run time (so they
 * may be graph inputs as well as constants).
 *
 * The fold functions evaluate exporters' mask and position arithmetic
 * (Equal, Not, And, Less, Max, Neg, Cos, Mod, ...) on constants, with the
 * semantics of the generated kernels (templates/kernels_math.c): int64
 * exactly, float32 through double and rounded once.
 */
#include "ir.h"

#include <math.h>
#include <string.h>

static int dt_is(DType dt, int f32, int i64, int b)
{
    dt = dtype_compute(dt);
    return (dt == DT_F32 && f32) || (dt == DT_I64 && i64) || (dt == DT_BOOL && b);
}

static int need_dtype(Diag *d, const Node *n, const Tensor *t, int f32, int i64, int b)
{
    if (dt_is(t->dtype, f32, i64, b))
        return 0;
    char want[48] = "";
    if (f32)
        strcat(want, "float32");
    if (i64)
        strcat(want, *want ? (b ? ", int64" : " or int64") : "int64");
    if (b)
        strcat(want, *want ? " or bool" : "bool");
    return shape_fail(d, n, "input \"%s\" has dtype %s; %s needs %s", t->name, dtype_name(t->dtype),
                      node_op_name(n), want);
}

/* A Clip bound: absent, or one element of x's dtype. */
static int clip_bound_ok(Diag *d, const Node *n, int k)
{
    const Tensor *t = k < n->ninputs ? n->inputs[k] : NULL;
    if (!t)
        return 0;
    if (tensor_numel(t) != 1)
        return shape_fail(d, n, "input \"%s\" (%s) must have one element", t->name, k == 1 ? "min" : "max");
    if (t->dtype != n->inputs[0]->dtype)
        return shape_fail(d, n, "input \"%s\" has dtype %s but \"%s\" is %s", t->name, dtype_name(t->dtype),
                          n->inputs[0]->name, dtype_name(n->inputs[0]->dtype));
    return 0;
}

int shape_math_unary(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    DType out = x->dtype;
    switch (n->op) {
    case OP_NEG: case OP_ABS: case OP_SIGN:
        if (need_dtype(d, n, x, 1, 1, 0))
            return -1;
        break;
    case OP_CLIP:
        if (need_dtype(d, n, x, 1, 1, 0) || clip_bound_ok(d, n, 1) || clip_bound_ok(d, n, 2))
            return -1;
        break;
    case OP_NOT:
        if (need_dtype(d, n, x, 0, 0, 1))
            return -1;
        break;
    case OP_BITWISE_NOT:
        if (need_dtype(d, n, x, 0, 1, 0))
            return -1;
        break;
    case OP_ISNAN: case OP_ISINF:
        if (need_dtype(d, n, x, 1, 0, 0))
            return -1;
        out = DT_BOOL;
        break;
    default:
        if (need_dtype(d, n, x, 1, 0, 0))
            return -1;
        break;
    }
    return shape_set(d, n, n->outputs[0], out, x->rank, x->dims);
}

/* numpy broadcasting of all present inputs. */
static int math_broadcast(Diag *d, const Node *n, int64_t *out, int *out_rank)
{
    int r = 0;
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] && n->inputs[k]->rank > r)
            r = n->inputs[k]->rank;
    for (int i = 0; i < r; i++)
        out[i] = 1;
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        for (int i = 0; t && i < t->rank; i++) {
            int o = r - t->rank + i;
            if (t->dims[i] == out[o] || t->dims[i] == 1)
                continue;
            if (out[o] == 1) {
                out[o] = t->dims[i];
                continue;
            }
            char a[160], b[160];
            return shape_fail(d, n, "input \"%s\" %s does not broadcast with the others (now %s, dim %d)", t->name,
                              shape_str(t->dims, t->rank, a, sizeof a), shape_str(out, r, b, sizeof b), o);
        }
    }
    *out_rank = r;
    return 0;
}

int shape_math_nary(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const Tensor *x = n->inputs[0];
    int f32 = 1, i64 = 1, b = 0;
    DType out = x->dtype;
    switch (n->op) {
    case OP_EQUAL: b = 1; out = DT_BOOL; break;
    case OP_LESS: case OP_LESS_EQUAL: case OP_GREATER: case OP_GREATER_EQUAL: out = DT_BOOL; break;
    case OP_AND: case OP_OR: case OP_XOR: f32 = i64 = 0; b = 1; break;
    case OP_BITWISE_AND: case OP_BITWISE_OR: case OP_BITWISE_XOR: f32 = 0; break;
    case OP_MEAN: case OP_SUM: case OP_PRELU: i64 = 0; break;
    default: break; /* Min, Max, Mod */
    }
    for (int k = 0; k < n->ninputs; k++) {
        const Tensor *t = n->inputs[k];
        if (!t)
            return shape_fail(d, n, "input %d is omitted", k);
        if (need_dtype(d, n, t, f32, i64, b))
            return -1;
        if (t->dtype != x->dtype)
            return shape_fail(d, n, "inputs \"%s\" (%s) and \"%s\" (%s) differ in dtype", x->name,
                              dtype_name(x->dtype), t->name, dtype_name(t->dtype));
    }
    if (n->op == OP_MOD && dtype_is_float(x->dtype) && node_attr_int(n, "fmod", 0) == 0)
        return shape_fail(d, n, "float32 inputs need fmod=1 (ONNX defines only fmod for floats)");
    int64_t dims[IR_MAX_RANK];
    int r = 0;
    if (math_broadcast(d, n, dims, &r))
        return -1;
    if (n->op == OP_PRELU && (r != x->rank || memcmp(dims, x->dims, sizeof(int64_t) * (size_t)r))) {
        char s[160];
        return shape_fail(d, n, "slope \"%s\" %s does not broadcast to X \"%s\"", n->inputs[1]->name,
                          shape_str(n->inputs[1]->dims, n->inputs[1]->rank, s, sizeof s), x->name);
    }
    return shape_set(d, n, n->outputs[0], out, r, dims);
}

/* ---- evaluators ---------------------------------------------------------- */

static int64_t i64_neg(int64_t v)
{
    return (int64_t)(0 - (uint64_t)v);
}

/* Integer Mod as the kernels compute it: fmod truncates (C's %), else the
 * result takes the divisor's sign (Python's %); x mod 0 and x mod -1 are 0. */
static int64_t i64_mod(int64_t a, int64_t b, int fmod_)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (!fmod_ && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* An int64 result narrowed to dtype t by wrapping, as the generated code
 * narrows (dtype_store would saturate): ~x of a uint8 x is 255 - x. */
static int64_t int_wrap(DType t, int64_t v)
{
    switch (t) {
    case DT_U8: return (uint8_t)(uint64_t)v;
    case DT_I8: return (int8_t)(uint8_t)(uint64_t)v;
    case DT_U16: return (uint16_t)(uint64_t)v;
    case DT_I16: return (int16_t)(uint16_t)(uint64_t)v;
    case DT_U32: return (uint32_t)(uint64_t)v;
    case DT_I32: return (int32_t)(uint32_t)(uint64_t)v;
    default: return v;
    }
}

static double f_unary(const Node *n, double v, double lo, double hi)
{
    double a = node_attr_float(n, "alpha", 0.0f), gm;
    switch (n->op) {
    case OP_NEG: return -v;
    case OP_ABS: return fabs(v);
    case OP_EXP: return exp(v);
    case OP_LOG: return log(v);
    case OP_RECIPROCAL: return 1.0 / v;
    case OP_SIN: return sin(v);
    case OP_COS: return cos(v);
    case OP_FLOOR: return floor(v);
    case OP_CEIL: return ceil(v);
    case OP_ROUND: return nearbyint(v);
    case OP_SIGN: return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0;
    case OP_CLIP: v = v < lo ? lo : v; return v > hi ? hi : v;
    case OP_LEAKY_RELU: a = node_attr_float(n, "alpha", 0.01f); return v < 0 ? a * v : v;
    case OP_ELU: a = node_attr_float(n, "alpha", 1.0f); return v < 0 ? a * (exp(v) - 1.0) : v;
    case OP_SELU:
        a = node_attr_float(n, "alpha", 1.67326319217681884765625f);
        gm = node_attr_float(n, "gamma", 1.05070102214813232421875f);
        return v > 0 ? gm * v : gm * (a * exp(v) - a);
    case OP_HARD_SIGMOID:
        a = node_attr_float(n, "alpha", 0.2f) * v + node_attr_float(n, "beta", 0.5f);
        return a < 0 ? 0 : a > 1 ? 1 : a;
    case OP_HARD_SWISH: a = v / 6.0 + 0.5; return v * (a < 0 ? 0 : a > 1 ? 1 : a);
    case OP_SOFTPLUS: return (v > 0 ? v : 0) + log1p(exp(-fabs(v)));
    case OP_SOFTSIGN: return v / (1.0 + fabs(v));
    case OP_ACOS: return acos(v);
    case OP_ACOSH: return acosh(v);
    case OP_ASIN: return asin(v);
    case OP_ASINH: return asinh(v);
    case OP_ATAN: return atan(v);
    case OP_ATANH: return atanh(v);
    case OP_COSH: return cosh(v);
    case OP_SINH: return sinh(v);
    case OP_TAN: return tan(v);
    case OP_THRESHOLDED_RELU: return v > node_attr_float(n, "alpha", 1.0f) ? v : 0.0;
    case OP_SHRINK:
        a = node_attr_float(n, "lambd", 0.5f);
        gm = node_attr_float(n, "bias", 0.0f);
        return v < -a ? v + gm : v > a ? v - gm : 0.0;
    case OP_CELU:
        a = node_attr_float(n, "alpha", 1.0f);
        return (v > 0 ? v : 0.0) + fmin(0.0, a * (exp(v / a) - 1.0));
    case OP_SWISH: return v / (1.0 + exp(-node_attr_float(n, "alpha", 1.0f) * v));
    default: return v * tanh((v > 0 ? v : 0) + log1p(exp(-fabs(v)))); /* Mish */
    }
}

int fold_math_unary(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *x = n->inputs[0], *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    const Tensor *tl = n->ninputs > 1 ? n->inputs[1] : NULL, *th = n->ninputs > 2 ? n->inputs[2] : NULL;
    fold_alloc(g, y);
    int64_t count = tensor_numel(y);
    for (int64_t i = 0; i < count; i++) {
        if (n->op == OP_BITWISE_NOT) {
            int64_t r = (int64_t)~(uint64_t)fold_get_i64(x, i);
            if (y->dtype == DT_I64)
                memcpy((char *)(uintptr_t)y->data + 8 * i, &r, 8);
            else
                fold_set(y, i, (double)int_wrap(y->dtype, r));
        } else if (y->dtype == DT_BOOL) {
            double v = fold_get(x, i);
            int r = n->op == OP_NOT ? v == 0
                  : n->op == OP_ISNAN ? isnan(v)
                  : isinf(v) && (v > 0 ? node_attr_int(n, "detect_positive", 1) : node_attr_int(n, "detect_negative", 1));
            fold_set(y, i, r);
        } else if (y->dtype == DT_I64) {
            int64_t v = fold_get_i64(x, i), r;
            switch (n->op) {
            case OP_NEG: r = i64_neg(v); break;
            case OP_ABS: r = v < 0 ? i64_neg(v) : v; break;
            case OP_SIGN: r = v > 0 ? 1 : v < 0 ? -1 : 0; break;
            default: {
                int64_t lo = tl ? fold_get_i64(tl, 0) : INT64_MIN, hi = th ? fold_get_i64(th, 0) : INT64_MAX;
                r = v < lo ? lo : v;
                r = r > hi ? hi : r;
                break;
            }
            }
            memcpy((char *)(uintptr_t)y->data + 8 * i, &r, 8);
        } else {
            double lo = tl ? fold_get(tl, 0) : -INFINITY, hi = th ? fold_get(th, 0) : INFINITY;
            fold_set(y, i, f_unary(n, fold_get(x, i), lo, hi));
        }
    }
    return 1;
}

int fold_math_nary(Graph *g, Node *n, Diag *d)
{
    (void)d;
    Tensor *y = n->outputs[0];
    if (!fold_inputs_const(n) || !fold_is_shape_math(n))
        return 0;
    fold_alloc(g, y);
    int64_t count = tensor_numel(y);
    DType dt = n->inputs[0]->dtype;
    int fm = node_attr_int(n, "fmod", 0) != 0;
    for (int64_t i = 0; i < count; i++) {
        const Tensor *a = n->inputs[0];
        int64_t ia = fold_bcast_index(y, a, i);
        int bitwise = n->op == OP_BITWISE_AND || n->op == OP_BITWISE_OR || n->op == OP_BITWISE_XOR;
        if (dt == DT_I64 || bitwise) { /* and/or/xor of in-range values stay in range */
            int64_t r = fold_get_i64(a, ia);
            for (int k = 1; k < n->ninputs; k++) {
                const Tensor *b = n->inputs[k];
                int64_t z = fold_get_i64(b, fold_bcast_index(y, b, i)), x = r;
                switch (n->op) {
                case OP_EQUAL: r = x == z; break;
                case OP_LESS: r = x < z; break;
                case OP_LESS_EQUAL: r = x <= z; break;
                case OP_GREATER: r = x > z; break;
                case OP_GREATER_EQUAL: r = x >= z; break;
                case OP_MIN: r = z < x ? z : x; break;
                case OP_MAX: r = z > x ? z : x; break;
                case OP_BITWISE_AND: r = x & z; break;
                case OP_BITWISE_OR: r = x | z; break;
                case OP_BITWISE_XOR: r = x ^ z; break;
                default: r = i64_mod(x, z, fm); break;
                }
            }
            if (y->dtype == DT_I64)
                memcpy((char *)(uintptr_t)y->data + 8 * i, &r, 8);
            else
                fold_set(y, i, (double)r);
            continue;
        }
        double r = fold_get(a, ia);
        for (int k = 1; k < n->ninputs; k++) {
            const Tensor *b = n->inputs[k];
            double z = fold_get(b, fold_bcast_index(y, b, i)), x = r;
            switch (n->op) {
            case OP_EQUAL: r = x == z; break;
            case OP_LESS: r = x < z; break;
            case OP_LESS_EQUAL: r = x <= z; break;
            case OP_GREATER: r = x > z; break;
            case OP_GREATER_EQUAL: r = x >= z; break;
            case OP_AND: r = x != 0 && z != 0; break;
            case OP_OR: r = x != 0 || z != 0; break;
            case OP_XOR: r = (x != 0) != (z != 0); break;
            case OP_MIN: r = isnan(x) || isnan(z) ? NAN : z < x ? z : x; break;
            case OP_MAX: r = isnan(x) || isnan(z) ? NAN : z > x ? z : x; break;
            case OP_MEAN: case OP_SUM: r = (float)(x + z); break;
            case OP_MOD: r = fmodf((float)x, (float)z); break;
            default: r = x < 0 ? x * z : x; break; /* PRelu */
            }
        }
        if (n->op == OP_MEAN)
            r = (float)r / (float)n->ninputs;
        fold_set(y, i, r);
    }
    return 1;
}
