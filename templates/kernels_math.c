/* ---- onnx2spmd kernels: math family (templates/kernels_math.c) ----------
 * C kernels for the ops of ir/ops_math.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_math.cu.
 */

/* Unary float ops; a and b carry the op's parameters (alpha, beta, gamma,
 * K_MATH_DIV_BY's divisor). Softplus is written the stable
 * way (ONNX Runtime's too): max(v, 0) + log1p(exp(-|v|)). */
#if defined(__GNUC__)
__attribute__((always_inline)) /* each loop below then folds the switch to its one case */
#endif
static inline float k_math_f32(int op, float v, float a, float b)
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

/* One loop per op with the code a constant, so each inlines to a plain
 * loop the compiler can vectorise. */
static inline void k_math_unary_f32(int op, float *y, const float *x, int64_t n, float a, float b)
{
    switch (op) {
    case K_MATH_NEG: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_NEG, x[i], a, b); break;
    case K_MATH_ABS: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_ABS, x[i], a, b); break;
    case K_MATH_FLOOR: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_FLOOR, x[i], a, b); break;
    case K_MATH_CEIL: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_CEIL, x[i], a, b); break;
    case K_MATH_LEAKY_RELU: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_LEAKY_RELU, x[i], a, b); break;
    case K_MATH_HARD_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_HARD_SIGMOID, x[i], a, b); break;
    case K_MATH_HARD_SWISH: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_HARD_SWISH, x[i], a, b); break;
    case K_MATH_SOFTSIGN: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_SOFTSIGN, x[i], a, b); break;
    case K_MATH_DIV_BY: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(K_MATH_DIV_BY, x[i], a, b); break;
    default: for (int64_t i = 0; i < n; i++) y[i] = k_math_f32(op, x[i], a, b); break; /* libm calls */
    }
}

/* Neg, Abs, Sign, BitwiseNot on int64 (wrapping: -INT64_MIN is
 * INT64_MIN; ~x of a widened uint8 x narrows back to 255 - x). */
static inline void k_math_unary_i64(int op, int64_t *y, const int64_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i], neg = (int64_t)(0 - (uint64_t)v);
        switch (op) {
        case K_MATH_NEG: y[i] = neg; break;
        case K_MATH_ABS: y[i] = v < 0 ? neg : v; break;
        case K_MATH_BITWISE_NOT: y[i] = (int64_t)~(uint64_t)v; break;
        default: y[i] = v > 0 ? 1 : v < 0 ? -1 : 0; break; /* K_MATH_SIGN */
        }
    }
}

/* Clip with one-element bounds read here (NULL: that side open), so they
 * may be computed or fed at run time: min(max(x, lo), hi). */
static inline void k_math_clip_f32(float *y, const float *x, int64_t n, const float *lo, const float *hi)
{
    float a = lo ? *lo : -INFINITY, b = hi ? *hi : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] < a ? a : x[i];
        y[i] = v > b ? b : v;
    }
}

static inline void k_math_clip_i64(int64_t *y, const int64_t *x, int64_t n, const int64_t *lo, const int64_t *hi)
{
    int64_t a = lo ? *lo : INT64_MIN, b = hi ? *hi : INT64_MAX;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i] < a ? a : x[i];
        y[i] = v > b ? b : v;
    }
}

/* IsNaN, IsInf (pos / neg: which infinities count). */
static inline void k_math_test_f32(int op, unsigned char *y, const float *x, int64_t n, int pos, int neg)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = op == K_MATH_ISNAN ? isnan(x[i]) != 0 : isinf(x[i]) && (x[i] > 0 ? pos : neg);
}

static inline void k_math_not(unsigned char *y, const unsigned char *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = !x[i];
}

/* Advances the output index idx and both operand offsets by one element
 * (strides 0 on broadcast dims), as in k_binary_f32. */
static inline void k_math_next(int rank, const int64_t *dims, const int64_t *sa, const int64_t *sb, int64_t *idx,
                               int64_t *oa, int64_t *ob)
{
    for (int i = rank - 1; i >= 0; i--) {
        *oa += sa[i];
        *ob += sb[i];
        if (++idx[i] < dims[i])
            return;
        *oa -= sa[i] * dims[i];
        *ob -= sb[i] * dims[i];
        idx[i] = 0;
    }
}

static inline int64_t k_math_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* Integer Mod, made total: x mod 0 and x mod -1 are 0. K_MATH_MOD gives
 * the divisor's sign (ONNX's fmod=0), K_MATH_FMOD the dividend's. */
static inline int64_t k_math_imod(int op, int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (op == K_MATH_MOD && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* Broadcasting binary ops; y may be a itself (the variadic ops
 * accumulate into y), each element is read before it is written. */
static inline void k_math_binary_f32(int op, float *y, const float *a, const float *b, int rank, const int64_t *dims,
                                     const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        float x = a[oa], z = b[ob];
        switch (op) {
        case K_MATH_ADD: y[k] = x + z; break;
        case K_MATH_MIN: y[k] = isnan(x) || isnan(z) ? NAN : z < x ? z : x; break;
        case K_MATH_MAX: y[k] = isnan(x) || isnan(z) ? NAN : z > x ? z : x; break;
        case K_MATH_PRELU: y[k] = x < 0 ? x * z : x; break;
        default: y[k] = fmodf(x, z); break; /* K_MATH_FMOD */
        }
        k_math_next(rank, dims, sa, sb, idx, &oa, &ob);
    }
}

static inline void k_math_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, int rank,
                                     const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t x = a[oa], z = b[ob];
        switch (op) {
        case K_MATH_ADD: y[k] = (int64_t)((uint64_t)x + (uint64_t)z); break;
        case K_MATH_MIN: y[k] = z < x ? z : x; break;
        case K_MATH_MAX: y[k] = z > x ? z : x; break;
        case K_MATH_PRELU: y[k] = x < 0 ? (int64_t)((uint64_t)x * (uint64_t)z) : x; break;
        case K_MATH_BITWISE_AND: y[k] = x & z; break;
        case K_MATH_BITWISE_OR: y[k] = x | z; break;
        case K_MATH_BITWISE_XOR: y[k] = x ^ z; break;
        default: y[k] = k_math_imod(op, x, z); break;
        }
        k_math_next(rank, dims, sa, sb, idx, &oa, &ob);
    }
}

/* Comparisons to bool. */
static inline void k_math_cmp_f32(int op, unsigned char *y, const float *a, const float *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        float x = a[oa], z = b[ob];
        y[k] = op == K_MATH_EQ ? x == z : op == K_MATH_LT ? x < z : op == K_MATH_LE ? x <= z
             : op == K_MATH_GT ? x > z : x >= z;
        k_math_next(rank, dims, sa, sb, idx, &oa, &ob);
    }
}

static inline void k_math_cmp_i64(int op, unsigned char *y, const int64_t *a, const int64_t *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t x = a[oa], z = b[ob];
        y[k] = op == K_MATH_EQ ? x == z : op == K_MATH_LT ? x < z : op == K_MATH_LE ? x <= z
             : op == K_MATH_GT ? x > z : x >= z;
        k_math_next(rank, dims, sa, sb, idx, &oa, &ob);
    }
}

/* And, Or, Xor, and Equal on bool (XNOR). */
static inline void k_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, int rank,
                                const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        int x = a[oa] != 0, z = b[ob] != 0;
        y[k] = op == K_MATH_AND ? x && z : op == K_MATH_OR ? x || z : op == K_MATH_XOR ? x != z : x == z;
        k_math_next(rank, dims, sa, sb, idx, &oa, &ob);
    }
}
