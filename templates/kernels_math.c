/* ---- onnx2spmd kernels: math family (templates/kernels_math.c) ----------
 * C kernels for the ops of ir/ops_math.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_math.cu.
 */

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

static inline void k_math_unary_i64(int op, int64_t *y, const int64_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = k_math_i64(op, x[i]);
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

static inline int64_t k_math_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

/* Broadcasting binary ops; y may be a itself (the variadic ops
 * accumulate into y), each element is read before it is written. */
static inline void k_math_binary_f32(int op, float *y, const float *a, const float *b, int rank, const int64_t *dims,
                                     const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        y[k] = k_math_bin_f32(op, a[oa], b[ob]);
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

static inline void k_math_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, int rank,
                                     const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        y[k] = k_math_bin_i64(op, a[oa], b[ob]);
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

/* Comparisons to bool. */
static inline void k_math_cmp_f32(int op, unsigned char *y, const float *a, const float *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        y[k] = k_math_cmp_one_f32(op, a[oa], b[ob]);
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

static inline void k_math_cmp_i64(int op, unsigned char *y, const int64_t *a, const int64_t *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        y[k] = k_math_cmp_one_i64(op, a[oa], b[ob]);
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

/* And, Or, Xor, and Equal on bool (XNOR). */
static inline void k_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, int rank,
                                const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = k_math_count(rank, dims), idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        y[k] = k_math_logic_one(op, a[oa] != 0, b[ob] != 0);
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}
