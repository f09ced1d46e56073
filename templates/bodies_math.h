/* ---- onnx2spmd kernel bodies: the math family (templates/bodies_math.h) ----
 * Per-element bodies of the math family's kernels, shared by
 * templates/kernels_math.c (loops) and templates/cuda_math.cu (one thread
 * per element): both targets compute each element with this same code.
 * O2S_HD is from templates/bodies.h.
 */

/* Unary float ops; a and b carry the op's parameters (alpha, beta, gamma,
 * K_MATH_DIV_BY's divisor). Softplus is written the stable
 * way (ONNX Runtime's too): max(v, 0) + log1p(exp(-|v|)). */
#if defined(__GNUC__) && !defined(__CUDACC__)
__attribute__((always_inline)) /* each C loop then folds the switch to its one case */
#endif
O2S_HD static inline float k_math_f32(int op, float v, float a, float b)
{
    switch (op) {
    case K_MATH_NEG: return -v;
    case K_MATH_ABS: return fabsf(v);
    case K_MATH_EXP: return expf(v);
    case K_MATH_LOG: return logf(v);
    case K_MATH_RECIPROCAL: return 1.0f / v;
    case K_MATH_SIN: return sinf(v);
    case K_MATH_COS: return cosf(v);
    case K_MATH_FLOOR: return floorf(v);
    case K_MATH_CEIL: return ceilf(v);
    case K_MATH_ROUND: return nearbyintf(v); /* halves to even */
    case K_MATH_SIGN: return v > 0 ? 1.0f : v < 0 ? -1.0f : 0.0f;
    case K_MATH_LEAKY_RELU: return v < 0 ? a * v : v;
    case K_MATH_ELU: return v < 0 ? a * (expf(v) - 1.0f) : v;
    case K_MATH_SELU: return v > 0 ? b * v : b * (a * expf(v) - a);
    case K_MATH_HARD_SIGMOID: v = a * v + b; return v < 0 ? 0.0f : v > 1 ? 1.0f : v;
    case K_MATH_HARD_SWISH: a = v / 6.0f + 0.5f; return v * (a < 0 ? 0.0f : a > 1 ? 1.0f : a);
    case K_MATH_SOFTPLUS: return (v > 0 ? v : 0.0f) + log1pf(expf(-fabsf(v)));
    case K_MATH_SOFTSIGN: return v / (1.0f + fabsf(v));
    case K_MATH_MISH: return v * tanhf((v > 0 ? v : 0.0f) + log1pf(expf(-fabsf(v))));
    case K_MATH_ACOS: return acosf(v);
    case K_MATH_ACOSH: return acoshf(v);
    case K_MATH_ASIN: return asinf(v);
    case K_MATH_ASINH: return asinhf(v);
    case K_MATH_ATAN: return atanf(v);
    case K_MATH_ATANH: return atanhf(v);
    case K_MATH_COSH: return coshf(v);
    case K_MATH_SINH: return sinhf(v);
    case K_MATH_TAN: return tanf(v);
    case K_MATH_THRESHOLDED_RELU: return v > a ? v : 0.0f;
    case K_MATH_SHRINK: return v < -a ? v + b : v > a ? v - b : 0.0f; /* a: lambd, b: bias */
    case K_MATH_CELU: return (v > 0 ? v : 0.0f) + fminf(0.0f, a * (expf(v / a) - 1.0f));
    case K_MATH_SWISH: return v / (1.0f + expf(-a * v));
    default: return v / a; /* K_MATH_DIV_BY */
    }
}

/* Integer Mod, made total: x mod 0 and x mod -1 are 0. K_MATH_MOD gives
 * the divisor's sign (ONNX's fmod=0), K_MATH_FMOD the dividend's. */
O2S_HD static inline int64_t k_math_imod(int op, int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (op == K_MATH_MOD && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* Neg, Abs, Sign, BitwiseNot on int64 (wrapping: -INT64_MIN is
 * INT64_MIN; ~x of a widened uint8 x narrows back to 255 - x). */
O2S_HD static inline int64_t k_math_i64(int op, int64_t v)
{
    int64_t neg = (int64_t)(0 - (uint64_t)v);
    switch (op) {
    case K_MATH_NEG: return neg;
    case K_MATH_ABS: return v < 0 ? neg : v;
    case K_MATH_BITWISE_NOT: return (int64_t)~(uint64_t)v;
    default: return v > 0 ? 1 : v < 0 ? -1 : 0; /* K_MATH_SIGN */
    }
}

/* One element of the broadcasting binary ops (K_MATH_ADD ... K_MATH_FMOD
 * on float; Min and Max give NaN when either operand is NaN). */
O2S_HD static inline float k_math_bin_f32(int op, float x, float z)
{
    switch (op) {
    case K_MATH_ADD: return x + z;
    case K_MATH_MIN: return isnan(x) || isnan(z) ? NAN : z < x ? z : x;
    case K_MATH_MAX: return isnan(x) || isnan(z) ? NAN : z > x ? z : x;
    case K_MATH_PRELU: return x < 0 ? x * z : x;
    default: return fmodf(x, z); /* K_MATH_FMOD */
    }
}

/* The same on int64 (wrapping arithmetic; Mod and Fmod by k_math_imod). */
O2S_HD static inline int64_t k_math_bin_i64(int op, int64_t x, int64_t z)
{
    switch (op) {
    case K_MATH_ADD: return (int64_t)((uint64_t)x + (uint64_t)z);
    case K_MATH_MIN: return z < x ? z : x;
    case K_MATH_MAX: return z > x ? z : x;
    case K_MATH_PRELU: return x < 0 ? (int64_t)((uint64_t)x * (uint64_t)z) : x;
    case K_MATH_BITWISE_AND: return x & z;
    case K_MATH_BITWISE_OR: return x | z;
    case K_MATH_BITWISE_XOR: return x ^ z;
    default: return k_math_imod(op, x, z);
    }
}

/* One comparison (K_MATH_EQ ... K_MATH_GE), as bool. */
O2S_HD static inline unsigned char k_math_cmp_one_f32(int op, float x, float z)
{
    return op == K_MATH_EQ ? x == z : op == K_MATH_LT ? x < z : op == K_MATH_LE ? x <= z : op == K_MATH_GT ? x > z
                                                                                                       : x >= z;
}

O2S_HD static inline unsigned char k_math_cmp_one_i64(int op, int64_t x, int64_t z)
{
    return op == K_MATH_EQ ? x == z : op == K_MATH_LT ? x < z : op == K_MATH_LE ? x <= z : op == K_MATH_GT ? x > z
                                                                                                       : x >= z;
}

/* And, Or, Xor and XNOR of two bools (0 or 1). */
O2S_HD static inline unsigned char k_math_logic_one(int op, int x, int z)
{
    return op == K_MATH_AND ? x && z : op == K_MATH_OR ? x || z : op == K_MATH_XOR ? x != z : x == z;
}
