/* ---- onnx2spmd CUDA kernels: math family (templates/cuda_math.cu) -------
 * CUDA kernels for the ops of ir/ops_math.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_math.c.
 */

/* Unary float ops, exactly as k_math_f32 of the C target. */
__device__ static inline float k_math_f32(int op, float v, float a, float b)
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
    case K_MATH_ROUND: return rintf(v); /* halves to even */
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

__global__ void kk_math_unary_f32(int op, float *y, const float *x, int64_t n, float a, float b)
{
    GRID_LOOP(i, n) y[i] = k_math_f32(op, x[i], a, b);
}

static inline void k_math_unary_f32(int op, float *y, const float *x, int64_t n, float a, float b)
{
    kk_math_unary_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(op, y, x, n, a, b);
    CHECK_LAUNCH();
}

/* Neg, Abs, Sign, BitwiseNot on int64 (wrapping: -INT64_MIN is
 * INT64_MIN; ~x of a widened uint8 x narrows back to 255 - x). */
__global__ void kk_math_unary_i64(int op, int64_t *y, const int64_t *x, int64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t v = x[i], neg = (int64_t)(0 - (uint64_t)v);
        switch (op) {
        case K_MATH_NEG: y[i] = neg; break;
        case K_MATH_ABS: y[i] = v < 0 ? neg : v; break;
        case K_MATH_BITWISE_NOT: y[i] = (int64_t)~(uint64_t)v; break;
        default: y[i] = v > 0 ? 1 : v < 0 ? -1 : 0; break; /* K_MATH_SIGN */
        }
    }
}

static inline void k_math_unary_i64(int op, int64_t *y, const int64_t *x, int64_t n)
{
    kk_math_unary_i64<<<k_blocks(n), K_THREADS, 0, g_stream>>>(op, y, x, n);
    CHECK_LAUNCH();
}

/* Clip with one-element bounds in device memory (NULL: that side open),
 * read by every thread: min(max(x, lo), hi). */
template <typename T> __global__ void kk_math_clip(T *y, const T *x, int64_t n, const T *lo, const T *hi, T a, T b)
{
    if (lo)
        a = *lo;
    if (hi)
        b = *hi;
    GRID_LOOP(i, n)
    {
        T v = x[i] < a ? a : x[i];
        y[i] = v > b ? b : v;
    }
}

static inline void k_math_clip_f32(float *y, const float *x, int64_t n, const float *lo, const float *hi)
{
    kk_math_clip<float><<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, n, lo, hi, -INFINITY, INFINITY);
    CHECK_LAUNCH();
}

static inline void k_math_clip_i64(int64_t *y, const int64_t *x, int64_t n, const int64_t *lo, const int64_t *hi)
{
    kk_math_clip<int64_t><<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, n, lo, hi, INT64_MIN, INT64_MAX);
    CHECK_LAUNCH();
}

/* IsNaN, IsInf (pos / neg: which infinities count). */
__global__ void kk_math_test_f32(int op, unsigned char *y, const float *x, int64_t n, int pos, int neg)
{
    GRID_LOOP(i, n) y[i] = op == K_MATH_ISNAN ? isnan(x[i]) != 0 : isinf(x[i]) && (x[i] > 0 ? pos : neg);
}

static inline void k_math_test_f32(int op, unsigned char *y, const float *x, int64_t n, int pos, int neg)
{
    kk_math_test_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(op, y, x, n, pos, neg);
    CHECK_LAUNCH();
}

__global__ void kk_math_not(unsigned char *y, const unsigned char *x, int64_t n)
{
    GRID_LOOP(i, n) y[i] = !x[i];
}

static inline void k_math_not(unsigned char *y, const unsigned char *x, int64_t n)
{
    kk_math_not<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, n);
    CHECK_LAUNCH();
}

/* Integer Mod as k_math_imod of the C target (x mod 0 and x mod -1 are 0). */
__device__ static inline int64_t k_math_imod(int op, int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (op == K_MATH_MOD && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* Broadcasting binary ops; y may be a itself (each thread reads its
 * element before writing it). */
__global__ void kk_math_binary_f32(int op, float *y, const float *a, const float *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        float x = a[oa], z = b[ob];
        switch (op) {
        case K_MATH_ADD: y[i] = x + z; break;
        case K_MATH_MIN: y[i] = isnan(x) || isnan(z) ? NAN : z < x ? z : x; break;
        case K_MATH_MAX: y[i] = isnan(x) || isnan(z) ? NAN : z > x ? z : x; break;
        case K_MATH_PRELU: y[i] = x < 0 ? x * z : x; break;
        default: y[i] = fmodf(x, z); break; /* K_MATH_FMOD */
        }
    }
}

static inline void k_math_binary_f32(int op, float *y, const float *a, const float *b, int rank, const int64_t *dims,
                                     const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_binary_f32<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

__global__ void kk_math_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        int64_t x = a[oa], z = b[ob];
        switch (op) {
        case K_MATH_ADD: y[i] = (int64_t)((uint64_t)x + (uint64_t)z); break;
        case K_MATH_MIN: y[i] = z < x ? z : x; break;
        case K_MATH_MAX: y[i] = z > x ? z : x; break;
        case K_MATH_PRELU: y[i] = x < 0 ? (int64_t)((uint64_t)x * (uint64_t)z) : x; break;
        case K_MATH_BITWISE_AND: y[i] = x & z; break;
        case K_MATH_BITWISE_OR: y[i] = x | z; break;
        case K_MATH_BITWISE_XOR: y[i] = x ^ z; break;
        default: y[i] = k_math_imod(op, x, z); break;
        }
    }
}

static inline void k_math_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, int rank,
                                     const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_binary_i64<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

/* Comparisons to bool. */
template <typename T> __global__ void kk_math_cmp(int op, unsigned char *y, const T *a, const T *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        T x = a[oa], z = b[ob];
        y[i] = op == K_MATH_EQ ? x == z : op == K_MATH_LT ? x < z : op == K_MATH_LE ? x <= z
             : op == K_MATH_GT ? x > z : x >= z;
    }
}

static inline void k_math_cmp_f32(int op, unsigned char *y, const float *a, const float *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_cmp<float><<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

static inline void k_math_cmp_i64(int op, unsigned char *y, const int64_t *a, const int64_t *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_cmp<int64_t><<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

/* And, Or, Xor, and Equal on bool (XNOR). */
__global__ void kk_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        int x = a[oa] != 0, z = b[ob] != 0;
        y[i] = op == K_MATH_AND ? x && z : op == K_MATH_OR ? x || z : op == K_MATH_XOR ? x != z : x == z;
    }
}

static inline void k_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, int rank,
                                const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_logic<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}
