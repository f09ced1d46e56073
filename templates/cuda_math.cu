/* ---- onnx2spmd CUDA kernels: math family (templates/cuda_math.cu) -------
 * CUDA kernels for the ops of ir/ops_math.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_math.c.
 */

__global__ void kk_math_unary_f32(int op, float *y, const float *x, int64_t n, float a, float b)
{
    GRID_LOOP(i, n) y[i] = k_math_f32(op, x[i], a, b);
}

static inline void k_math_unary_f32(int op, float *y, const float *x, int64_t n, float a, float b)
{
    kk_math_unary_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(op, y, x, n, a, b);
    CHECK_LAUNCH();
}

__global__ void kk_math_unary_i64(int op, int64_t *y, const int64_t *x, int64_t n)
{
    GRID_LOOP(i, n) y[i] = k_math_i64(op, x[i]);
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

/* Broadcasting binary ops; y may be a itself (each thread reads its
 * element before writing it). */
__global__ void kk_math_binary_f32(int op, float *y, const float *a, const float *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = k_math_bin_f32(op, a[oa], b[ob]);
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
        y[i] = k_math_bin_i64(op, a[oa], b[ob]);
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
__global__ void kk_math_cmp_f32(int op, unsigned char *y, const float *a, const float *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = k_math_cmp_one_f32(op, a[oa], b[ob]);
    }
}

__global__ void kk_math_cmp_i64(int op, unsigned char *y, const int64_t *a, const int64_t *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = k_math_cmp_one_i64(op, a[oa], b[ob]);
    }
}

static inline void k_math_cmp_f32(int op, unsigned char *y, const float *a, const float *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_cmp_f32<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

static inline void k_math_cmp_i64(int op, unsigned char *y, const int64_t *a, const int64_t *b, int rank,
                                  const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_cmp_i64<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

/* And, Or, Xor, and Equal on bool (XNOR). */
__global__ void kk_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = k_math_logic_one(op, a[oa] != 0, b[ob] != 0);
    }
}

static inline void k_math_logic(int op, unsigned char *y, const unsigned char *a, const unsigned char *b, int rank,
                                const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_math_logic<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}
