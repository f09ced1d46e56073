/* ---- onnx2spmd CUDA runtime and kernels (templates/cuda_kernels.cu) -------
 * The same kernel interface as the C target (k_* functions, same
 * arguments), so one emitter writes both; here each launches on the
 * compute stream g_stream. GEMMs go through cuBLAS in float32 (TF32 only
 * with --tf32). Collectives run on g_comm, a second stream, ordered against
 * compute by events (written inline in forward()). Every CUDA, cuBLAS and
 * NCCL call goes through a check macro; a failure prints rank, node, call
 * and file:line, aborts every NCCL communicator and then the MPI job, so
 * that no peer is left blocked in a collective.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

/* Each rank program uses some of these launchers; unused ones are fine. */
#pragma nv_diag_suppress 177

#define K_MAX_RANK 8
#define K_THREADS 256

static cudaStream_t g_stream; /* compute */
static cudaStream_t g_comm;   /* communication: NCCL only */
static cublasHandle_t g_blas;
static ncclComm_t g_nccl[64];
static int g_nnccl;

static void rt_abort_comms(void)
{
    for (int i = 0; i < g_nnccl; i++)
        ncclCommAbort(g_nccl[i]);
    g_nnccl = 0;
}

static inline void rt_check_cuda(cudaError_t e, const char *call, const char *file, int line)
{
    if (e != cudaSuccess)
        rt_die("%s failed in node \"%s\" at %s:%d: %s", call, rt_node, file, line, cudaGetErrorString(e));
}
static inline void rt_check_nccl(ncclResult_t e, const char *call, const char *file, int line)
{
    if (e != ncclSuccess)
        rt_die("%s failed in node \"%s\" at %s:%d: %s", call, rt_node, file, line, ncclGetErrorString(e));
}
static inline void rt_check_cublas(cublasStatus_t e, const char *call, const char *file, int line)
{
    if (e != CUBLAS_STATUS_SUCCESS)
        rt_die("%s failed in node \"%s\" at %s:%d: cuBLAS status %d", call, rt_node, file, line, (int)e);
}
#define CHECK_CUDA(call) rt_check_cuda((call), #call, __FILE__, __LINE__)
#define CHECK_NCCL(call) rt_check_nccl((call), #call, __FILE__, __LINE__)
#define CHECK_CUBLAS(call) rt_check_cublas((call), #call, __FILE__, __LINE__)
#define CHECK_LAUNCH() rt_check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* Waits for everything queued on a stream by polling, never blocking in
 * the driver: between polls it asks every NCCL communicator for an
 * asynchronous error (a peer gone, a network failure) and checks the
 * --timeout deadline, so a stuck job ends with a line saying what it
 * waited for (rt_die aborts the communicators, then the MPI job). */
static inline void rt_cuda_sync(cudaStream_t s, const char *what)
{
    double deadline = rt_now() + rt_timeout_s;
    for (unsigned spin = 1;; spin++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady)
            rt_check_cuda(e, "cudaStreamQuery", __FILE__, __LINE__);
        if (spin % 64)
            continue;
        for (int i = 0; i < g_nnccl; i++) {
            ncclResult_t ae = ncclSuccess;
            CHECK_NCCL(ncclCommGetAsyncError(g_nccl[i], &ae));
            if (ae != ncclSuccess && ae != ncclInProgress)
                rt_die("NCCL communicator %d failed while waiting for %s (node \"%s\"): %s", i, what, rt_node,
                       ncclGetErrorString(ae));
        }
        if (rt_timeout_s && rt_now() > deadline)
            rt_die("waited %d s for %s (node \"%s\"): a peer rank is stopped, dead or much slower; aborting the "
                   "job (--timeout)", rt_timeout_s, what, rt_node);
        struct timespec nap = {0, 20000}; /* 20 us: the GPU works, the host need not spin */
        nanosleep(&nap, NULL);
    }
}

static inline unsigned k_blocks(int64_t n)
{
    int64_t b = (n + K_THREADS - 1) / K_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

/* Shapes and strides travel by value to the kernels. */
typedef struct KShape {
    int rank;
    int64_t n;
    int64_t d[K_MAX_RANK], s0[K_MAX_RANK], s1[K_MAX_RANK], s2[K_MAX_RANK];
} KShape;

static inline KShape k_shape(int rank, const int64_t *dims, const int64_t *s0, const int64_t *s1, const int64_t *s2)
{
    KShape k;
    memset(&k, 0, sizeof k);
    k.rank = rank;
    k.n = 1;
    for (int i = 0; i < rank; i++) {
        k.d[i] = dims[i];
        k.n *= dims[i];
        k.s0[i] = s0 ? s0[i] : 0;
        k.s1[i] = s1 ? s1[i] : 0;
        k.s2[i] = s2 ? s2[i] : 0;
    }
    return k;
}

/* Flat element i of the output -> offsets into up to three operands. */
__device__ static inline void k_offsets(const KShape &s, int64_t i, int64_t *o0, int64_t *o1, int64_t *o2)
{
    int64_t a = 0, b = 0, c = 0;
    for (int k = s.rank - 1; k >= 0; k--) {
        int64_t x = i % s.d[k];
        i /= s.d[k];
        a += x * s.s0[k];
        b += x * s.s1[k];
        c += x * s.s2[k];
    }
    *o0 = a;
    *o1 = b;
    *o2 = c;
}

#define GRID_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

template <typename T> __device__ static inline T k_op(int op, T x, T z)
{
    switch (op) {
    case 0: return x + z;
    case 1: return x - z;
    case 2: return x * z;
    case 3: return z ? x / z : (T)0;
    default: return (T)pow((double)x, (double)z);
    }
}

template <typename T> __global__ void kk_binary(int op, T *y, const T *a, const T *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = op == 3 ? (T)(a[oa] / b[ob]) : k_op<T>(op, a[oa], b[ob]);
    }
}

static inline void k_binary_f32(int op, float *y, const float *a, const float *b, int rank, const int64_t *dims,
                                const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_binary<float><<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

static inline void k_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, int rank, const int64_t *dims,
                                const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_binary<int64_t><<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(op, y, a, b, s);
    CHECK_LAUNCH();
}

__global__ void kk_arith(int op, float *y, const float *a, const float *b, int64_t rows, int64_t cols, int64_t a_rs,
                         int64_t b_rs, int64_t b_cs)
{
    GRID_LOOP(i, rows * cols)
    {
        int64_t r = i / cols, c = i % cols;
        float x = a[r * a_rs + c], z = b[r * b_rs + c * b_cs];
        y[i] = op == 0 ? x + z : op == 1 ? x - z : op == 2 ? x * z : x / z;
    }
}

static inline void k_arith_f32(int op, float *y, const float *a, const float *b, int64_t rows, int64_t cols,
                               int64_t a_rs, int64_t b_rs, int64_t b_cs)
{
    kk_arith<<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(op, y, a, b, rows, cols, a_rs, b_rs, b_cs);
    CHECK_LAUNCH();
}

__global__ void kk_pow_mixed(void *y, const void *a, int adt, const void *b, int bdt, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        double x = adt == 1 ? (double)((const float *)a)[oa] : (double)((const int64_t *)a)[oa];
        double z = bdt == 1 ? (double)((const float *)b)[ob] : (double)((const int64_t *)b)[ob];
        if (adt == 1)
            ((float *)y)[i] = (float)pow(x, z);
        else
            ((int64_t *)y)[i] = (int64_t)pow(x, z);
    }
}

static inline void k_pow_mixed(void *y, const void *a, int adt, const void *b, int bdt, int rank, const int64_t *dims,
                               const int64_t *sa, const int64_t *sb)
{
    KShape s = k_shape(rank, dims, sa, sb, NULL);
    kk_pow_mixed<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(y, a, adt, b, bdt, s);
    CHECK_LAUNCH();
}

__global__ void kk_where(char *y, const unsigned char *c, const char *x, const char *z, int elsize, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oc, ox, oz;
        k_offsets(s, i, &oc, &ox, &oz);
        const char *src = c[oc] ? x + ox * elsize : z + oz * elsize;
        for (int b = 0; b < elsize; b++)
            y[i * elsize + b] = src[b];
    }
}

static inline void k_where(void *y, const unsigned char *c, const void *x, const void *z, size_t elsize, int rank,
                           const int64_t *dims, const int64_t *sc, const int64_t *sx, const int64_t *sz)
{
    KShape s = k_shape(rank, dims, sc, sx, sz);
    kk_where<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, c, (const char *)x, (const char *)z, (int)elsize, s);
    CHECK_LAUNCH();
}

__device__ static inline float k_act(int op, float v)
{
    switch (op) {
    case 0: return v > 0 ? v : 0;
    case 1: return sqrtf(v);
    case 2: return erff(v);
    case 3: return tanhf(v);
    case 4: return 1.0f / (1.0f + expf(-v));
    case 5: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    default: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

/* Bias + activation in one pass: y = act(a + b[col]). */
__global__ void kk_bias_act(int op, float *y, const float *a, const float *b, int64_t rows, int64_t cols)
{
    GRID_LOOP(i, rows * cols) y[i] = k_act(op, a[i] + b[i % cols]);
}

static inline void k_bias_act_f32(int act, float *y, const float *a, const float *b, int64_t rows, int64_t cols)
{
    kk_bias_act<<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(act, y, a, b, rows, cols);
    CHECK_LAUNCH();
}

/* Bias + residual in one pass: y = r + (a + b[col]). */
__global__ void kk_bias_residual(float *y, const float *a, const float *b, const float *r, int64_t rows, int64_t cols)
{
    GRID_LOOP(i, rows * cols) y[i] = r[i] + (a[i] + b[i % cols]);
}

static inline void k_bias_residual_f32(float *y, const float *a, const float *b, const float *r, int64_t rows,
                                       int64_t cols)
{
    kk_bias_residual<<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(y, a, b, r, rows, cols);
    CHECK_LAUNCH();
}

__global__ void kk_unary(int op, float *y, const float *x, int64_t n)
{
    GRID_LOOP(i, n)
    {
        float v = x[i];
        switch (op) {
        case 0: y[i] = v > 0 ? v : 0; break;
        case 1: y[i] = sqrtf(v); break;
        case 2: y[i] = erff(v); break;
        case 3: y[i] = tanhf(v); break;
        case 4: y[i] = 1.0f / (1.0f + expf(-v)); break;
        case 5: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
        default: y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))); break;
        }
    }
}

static inline void k_unary_f32(int op, float *y, const float *x, int64_t n)
{
    kk_unary<<<k_blocks(n), K_THREADS, 0, g_stream>>>(op, y, x, n);
    CHECK_LAUNCH();
}

__global__ void kk_relu_i64(int64_t *y, const int64_t *x, int64_t n)
{
    GRID_LOOP(i, n) y[i] = x[i] > 0 ? x[i] : 0;
}

static inline void k_relu_i64(int64_t *y, const int64_t *x, int64_t n)
{
    kk_relu_i64<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, n);
    CHECK_LAUNCH();
}

__global__ void kk_cast(void *y, int to, const void *x, int from, int64_t n)
{
    GRID_LOOP(i, n)
    {
        if (to == 1)
            ((float *)y)[i] = from == 1 ? ((const float *)x)[i] : from == 7 ? (float)((const int64_t *)x)[i]
                                                                             : (float)((const unsigned char *)x)[i];
        else if (to == 7)
            ((int64_t *)y)[i] = from == 1 ? (int64_t)((const float *)x)[i] : from == 7 ? ((const int64_t *)x)[i]
                                                                                        : (int64_t)((const unsigned char *)x)[i];
        else
            ((unsigned char *)y)[i] = from == 1 ? ((const float *)x)[i] != 0 : from == 7 ? ((const int64_t *)x)[i] != 0
                                                                                          : ((const unsigned char *)x)[i] != 0;
    }
}

static inline void k_cast(void *y, int to, const void *x, int from, int64_t n)
{
    kk_cast<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, to, x, from, n);
    CHECK_LAUNCH();
}

/* Row-major Y[m,n] = A[m,k] W[k,n] is column-major Y^T = W^T A^T. */
static inline void k_matmul_f32(float *y, const float *a, const float *w, int64_t batch, int64_t m, int64_t k,
                                int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    const float one = 1.0f, zero = 0.0f;
    CHECK_CUBLAS(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, w, (int)n,
                                           w_bstride, a, (int)k, a_bstride, &zero, y, (int)n, m * n, (int)batch));
}

__global__ void kk_matmul_i64(int64_t *y, const int64_t *a, const int64_t *w, int64_t batch, int64_t m, int64_t k,
                              int64_t n, int64_t a_bs, int64_t w_bs)
{
    GRID_LOOP(i, batch * m * n)
    {
        int64_t b = i / (m * n), r = (i / n) % m, c = i % n, s = 0;
        for (int64_t q = 0; q < k; q++)
            s += a[b * a_bs + r * k + q] * w[b * w_bs + q * n + c];
        y[i] = s;
    }
}

static inline void k_matmul_i64(int64_t *y, const int64_t *a, const int64_t *w, int64_t batch, int64_t m, int64_t k,
                                int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    kk_matmul_i64<<<k_blocks(batch * m * n), K_THREADS, 0, g_stream>>>(y, a, w, batch, m, k, n, a_bstride, w_bstride);
    CHECK_LAUNCH();
}

__global__ void kk_gemm_init(float *y, const float *c, int64_t m, int64_t n, float beta, int64_t c_rs, int64_t c_cs)
{
    GRID_LOOP(i, m * n) y[i] = c ? beta * c[(i / n) * c_rs + (i % n) * c_cs] : 0.0f;
}

static inline void k_gemm_f32(float *y, const float *a, const float *b, const float *c, int64_t m, int64_t n, int64_t k,
                              int ta, int tb, float alpha, float beta, int64_t c_rs, int64_t c_cs)
{
    const float one = 1.0f;
    kk_gemm_init<<<k_blocks(m * n), K_THREADS, 0, g_stream>>>(y, c, m, n, beta, c_rs, c_cs);
    CHECK_LAUNCH();
    CHECK_CUBLAS(cublasSgemm(g_blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
                             (int)k, &alpha, b, tb ? (int)k : (int)n, a, ta ? (int)m : (int)k, &one, y, (int)n));
}

/* One block per row: max, sum of exp, normalise (shared-memory reductions). */
__global__ void kk_softmax(float *y, const float *x, int64_t n, int64_t inner)
{
    __shared__ float red[K_THREADS];
    int64_t row = blockIdx.x, o = row / inner, in = row % inner;
    const float *xp = x + o * n * inner + in;
    float *yp = y + o * n * inner + in;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        mx = fmaxf(mx, xp[j * inner]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(xp[j * inner] - mx);
        yp[j * inner] = e;
        sum += e;
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        yp[j * inner] *= inv;
}

static inline void k_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    kk_softmax<<<(unsigned)(outer * inner), K_THREADS, 0, g_stream>>>(y, x, n, inner);
    CHECK_LAUNCH();
}

/* One block per row: mean and variance in one pass of shared reductions. */
__global__ void kk_layernorm(float *y, float *mean_out, float *istd_out, const float *x, const float *scale,
                             const float *bias, int64_t n, int64_t sn, int64_t bn, float eps)
{
    __shared__ float rs[K_THREADS], rq[K_THREADS];
    int64_t row = blockIdx.x;
    const float *xp = x + row * n;
    float s = 0, q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        s += xp[j];
        q += xp[j] * xp[j];
    }
    rs[threadIdx.x] = s;
    rq[threadIdx.x] = q;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            rs[threadIdx.x] += rs[threadIdx.x + k];
            rq[threadIdx.x] += rq[threadIdx.x + k];
        }
        __syncthreads();
    }
    float mean = rs[0] / n, var = fmaxf(rq[0] / n - mean * mean, 0.0f), istd = rsqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = (xp[j] - mean) * istd * scale[j % sn];
        y[row * n + j] = bias ? v + bias[j % bn] : v;
    }
    if (threadIdx.x == 0) {
        if (mean_out)
            mean_out[row] = mean;
        if (istd_out)
            istd_out[row] = istd;
    }
}

static inline void k_layernorm_f32(float *y, float *mean_out, float *istd_out, const float *x, const float *scale,
                                   const float *bias, int64_t outer, int64_t n, int64_t sn, int64_t bn, float eps)
{
    kk_layernorm<<<(unsigned)outer, K_THREADS, 0, g_stream>>>(y, mean_out, istd_out, x, scale, bias, n, sn, bn, eps);
    CHECK_LAUNCH();
}

/* Reductions: one thread per input element adding into its output. */
__global__ void kk_reduce_f32(float *y, const float *x, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oy, u1, u2;
        k_offsets(s, i, &oy, &u1, &u2);
        atomicAdd(&y[oy], x[i]);
    }
}

__global__ void kk_scale(float *y, int64_t n, float scale)
{
    GRID_LOOP(i, n) y[i] *= scale;
}

static inline void k_reduce_f32(float *y, int64_t ny, const float *x, int rank, const int64_t *dims, const int64_t *sy,
                                float scale)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    CHECK_CUDA(cudaMemsetAsync(y, 0, (size_t)ny * sizeof(float), g_stream));
    kk_reduce_f32<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>(y, x, s);
    CHECK_LAUNCH();
    kk_scale<<<k_blocks(ny), K_THREADS, 0, g_stream>>>(y, ny, scale);
    CHECK_LAUNCH();
}

__global__ void kk_reduce_i64(unsigned long long *y, const int64_t *x, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oy, u1, u2;
        k_offsets(s, i, &oy, &u1, &u2);
        atomicAdd(&y[oy], (unsigned long long)x[i]);
    }
}

static inline void k_reduce_i64(int64_t *y, int64_t ny, const int64_t *x, int rank, const int64_t *dims,
                                const int64_t *sy)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    CHECK_CUDA(cudaMemsetAsync(y, 0, (size_t)ny * sizeof(int64_t), g_stream));
    kk_reduce_i64<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((unsigned long long *)y, x, s);
    CHECK_LAUNCH();
}

/* Strided copies: transpose, slice, and packing around collectives. */
__global__ void kk_strided(char *y, const char *x, int elsize, KShape s, int64_t off, int store)
{
    GRID_LOOP(i, s.n)
    {
        int64_t o, u1, u2;
        k_offsets(s, i, &o, &u1, &u2);
        char *dst = store ? y + (off + o) * elsize : y + i * elsize;
        const char *src = store ? x + i * elsize : x + (off + o) * elsize;
        for (int b = 0; b < elsize; b++)
            dst[b] = src[b];
    }
}

static inline void k_strided_copy(void *y, const void *x, size_t elsize, int rank, const int64_t *dims,
                                  const int64_t *sx, int64_t x_offset)
{
    KShape s = k_shape(rank, dims, sx, NULL, NULL);
    if (s.n)
        kk_strided<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, (int)elsize, s, x_offset, 0);
    CHECK_LAUNCH();
}

static inline void k_strided_store(void *y, const void *x, size_t elsize, int rank, const int64_t *dims,
                                   const int64_t *sy, int64_t y_offset)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    if (s.n)
        kk_strided<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, (int)elsize, s, y_offset, 1);
    CHECK_LAUNCH();
}

static inline void k_copy(void *dst, const void *src, int64_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, g_stream));
}

static inline void k_zero(void *dst, int64_t bytes)
{
    CHECK_CUDA(cudaMemsetAsync(dst, 0, (size_t)bytes, g_stream));
}

static inline void k_copy_axis(void *dst, int64_t dst_len, int64_t dst_off, const void *src, int64_t src_len,
                               int64_t src_off, int64_t outer, int64_t n, int64_t inner, size_t elsize)
{
    size_t row = (size_t)(inner)*elsize;
    CHECK_CUDA(cudaMemcpy2DAsync((char *)dst + (size_t)dst_off * row, (size_t)dst_len * row,
                                 (const char *)src + (size_t)src_off * row, (size_t)src_len * row, (size_t)n * row,
                                 (size_t)outer, cudaMemcpyDeviceToDevice, g_stream));
}

/* Masked gather over a split table (rows outside this rank's block are 0;
 * an index outside the table also reads as 0: a device cannot abort). */
__global__ void kk_gather(char *y, const char *x, const int64_t *idx, int64_t nidx, int elsize, int64_t len, int64_t inner,
                          int64_t offset, int64_t global_len, int64_t total)
{
    GRID_LOOP(i, total)
    {
        int64_t e = i % inner, t = i / inner, j = t % nidx, o = t / nidx;
        int64_t g = idx[j] < 0 ? idx[j] + global_len : idx[j], l = g - offset;
        for (int b = 0; b < elsize; b++)
            y[i * elsize + b] = (l >= 0 && l < len) ? x[((o * len + l) * inner + e) * elsize + b] : 0;
    }
}

static inline void k_gather(void *y, const void *x, const int64_t *idx, int64_t nidx, size_t elsize, int64_t outer,
                            int64_t len, int64_t inner, int64_t offset, int64_t global_len)
{
    int64_t total = outer * nidx * inner;
    kk_gather<<<k_blocks(total), K_THREADS, 0, g_stream>>>((char *)y, (const char *)x, idx, nidx, (int)elsize, len,
                                                            inner, offset, global_len, total);
    CHECK_LAUNCH();
}

__global__ void kk_im2col(float *col, const float *x, int64_t C, int64_t H, int64_t W, int64_t cg, int64_t g, int64_t n,
                          int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh,
                          int64_t dw, int64_t ph, int64_t pw)
{
    GRID_LOOP(i, cg * kh * kw * oh * ow)
    {
        int64_t ox = i % ow, oy = (i / ow) % oh, r = i / (ow * oh), j = r % kw, q = (r / kw) % kh, c = r / (kw * kh);
        int64_t iy = oy * sh - ph + q * dh, ix = ox * sw - pw + j * dw;
        const float *xp = x + ((n * C + g * cg + c) * H) * W;
        col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xp[iy * W + ix] : 0.0f;
    }
}

__global__ void kk_bias_rows(float *y, const float *bias, int64_t rows, int64_t cols)
{
    GRID_LOOP(i, rows * cols) y[i] = bias ? bias[i / cols] : 0.0f;
}

static inline void k_conv2d_f32(float *y, const float *x, const float *w, const float *bias, int64_t N, int64_t C,
                                int64_t H, int64_t W, int64_t M, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t group,
                                float *col)
{
    int64_t cg = C / group, mg = M / group, kk = cg * kh * kw, npix = oh * ow;
    const float one = 1.0f;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < group; g++) {
            kk_im2col<<<k_blocks(kk * npix), K_THREADS, 0, g_stream>>>(col, x, C, H, W, cg, g, n, kh, kw, oh, ow, sh,
                                                                      sw, dh, dw, ph, pw);
            CHECK_LAUNCH();
            float *yp = y + (n * M + g * mg) * npix;
            kk_bias_rows<<<k_blocks(mg * npix), K_THREADS, 0, g_stream>>>(yp, bias ? bias + g * mg : NULL, mg, npix);
            CHECK_LAUNCH();
            /* yp[mg, npix] += w_g[mg, kk] @ col[kk, npix] (row-major). */
            CHECK_CUBLAS(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)npix, (int)mg, (int)kk, &one, col, (int)npix,
                                     w + g * mg * kk, (int)kk, &one, yp, (int)npix));
        }
}

__global__ void kk_maxpool(float *y, int64_t *ind, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                           int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph,
                           int64_t pw, int64_t n_off, int64_t c_off, int64_t Cg)
{
    GRID_LOOP(o, N * C * oh * ow)
    {
        int64_t ox = o % ow, oy = (o / ow) % oh, c = (o / (ow * oh)) % C, n = o / (ow * oh * C);
        const float *xp = x + (n * C + c) * H * W;
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t i = 0; i < kh; i++) {
            int64_t iy = oy * sh - ph + i * dh;
            if (iy < 0 || iy >= H)
                continue;
            for (int64_t j = 0; j < kw; j++) {
                int64_t ix = ox * sw - pw + j * dw;
                if (ix < 0 || ix >= W)
                    continue;
                if (xp[iy * W + ix] > best || at < 0) {
                    best = xp[iy * W + ix];
                    at = iy * W + ix;
                }
            }
        }
        y[o] = best;
        if (ind)
            ind[o] = ((n + n_off) * Cg + (c + c_off)) * H * W + at;
    }
}

static inline void k_maxpool2d_f32(float *y, int64_t *ind, const float *x, int64_t N, int64_t C, int64_t H, int64_t W,
                                   int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh,
                                   int64_t dw, int64_t ph, int64_t pw, int64_t n_off, int64_t c_off, int64_t C_global)
{
    kk_maxpool<<<k_blocks(N * C * oh * ow), K_THREADS, 0, g_stream>>>(y, ind, x, N, C, H, W, kh, kw, oh, ow, sh, sw, dh,
                                                                     dw, ph, pw, n_off, c_off, C_global);
    CHECK_LAUNCH();
}

__global__ void kk_gap(float *y, const float *x, int64_t nc, int64_t spatial)
{
    GRID_LOOP(i, nc)
    {
        float s = 0;
        for (int64_t j = 0; j < spatial; j++)
            s += x[i * spatial + j];
        y[i] = s / (float)spatial;
    }
}

static inline void k_global_avgpool_f32(float *y, const float *x, int64_t nc, int64_t spatial)
{
    kk_gap<<<k_blocks(nc), K_THREADS, 0, g_stream>>>(y, x, nc, spatial);
    CHECK_LAUNCH();
}

__global__ void kk_batchnorm(float *y, const float *x, const float *scale, const float *bias, const float *mean,
                             const float *var, int64_t C, int64_t spatial, int64_t total, float eps)
{
    GRID_LOOP(i, total)
    {
        int64_t c = (i / spatial) % C;
        float a = scale[c] * rsqrtf(var[c] + eps);
        y[i] = (x[i] - mean[c]) * a + bias[c];
    }
}

static inline void k_batchnorm_f32(float *y, const float *x, const float *scale, const float *bias, const float *mean,
                                   const float *var, int64_t N, int64_t C, int64_t spatial, float eps)
{
    kk_batchnorm<<<k_blocks(N * C * spatial), K_THREADS, 0, g_stream>>>(y, x, scale, bias, mean, var, C, spatial,
                                                                        N * C * spatial, eps);
    CHECK_LAUNCH();
}
