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
#if WORLD > 1
#include <nccl.h> /* one rank needs no NCCL at all */
#endif

/* Each rank program uses some of these launchers; unused ones are fine. */
#pragma nv_diag_suppress 177

#define K_THREADS 256

static cudaStream_t g_stream; /* compute */
static cudaStream_t g_comm;   /* communication: NCCL only */
static cublasHandle_t g_blas;
#if WORLD > 1
static ncclComm_t g_nccl[64];
static int g_nnccl;
#endif

static void rt_abort_comms(void)
{
#if WORLD > 1
    for (int i = 0; i < g_nnccl; i++)
        ncclCommAbort(g_nccl[i]);
    g_nnccl = 0;
#endif
}

static inline void rt_check_cuda(cudaError_t e, const char *call, const char *file, int line)
{
    if (e != cudaSuccess)
        rt_die("%s failed in node \"%s\" at %s:%d: %s", call, rt_node, file, line, cudaGetErrorString(e));
}
#if WORLD > 1
static inline void rt_check_nccl(ncclResult_t e, const char *call, const char *file, int line)
{
    if (e != ncclSuccess)
        rt_die("%s failed in node \"%s\" at %s:%d: %s", call, rt_node, file, line, ncclGetErrorString(e));
}
#define CHECK_NCCL(call) rt_check_nccl((call), #call, __FILE__, __LINE__)
#endif
static inline void rt_check_cublas(cublasStatus_t e, const char *call, const char *file, int line)
{
    if (e != CUBLAS_STATUS_SUCCESS)
        rt_die("%s failed in node \"%s\" at %s:%d: cuBLAS status %d", call, rt_node, file, line, (int)e);
}
#define CHECK_CUDA(call) rt_check_cuda((call), #call, __FILE__, __LINE__)
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
#if WORLD > 1
        for (int i = 0; i < g_nnccl; i++) {
            ncclResult_t ae = ncclSuccess;
            CHECK_NCCL(ncclCommGetAsyncError(g_nccl[i], &ae));
            if (ae != ncclSuccess && ae != ncclInProgress)
                rt_die("NCCL communicator %d failed while waiting for %s (node \"%s\"): %s", i, what, rt_node,
                       ncclGetErrorString(ae));
        }
#endif
        if (rt_timeout_s && rt_now() > deadline)
            rt_die("waited %d s for %s (node \"%s\"): a peer rank is stopped, dead or much slower; aborting the "
                   "job (--timeout)", rt_timeout_s, what, rt_node);
        struct timespec nap = {0, 20000}; /* 20 us: the GPU works, the host need not spin */
        nanosleep(&nap, NULL);
    }
}

/* The weight blob in host memory for a checkpoint, once the stream has
 * finished the step (one host buffer, reused). */
static inline void *rt_cuda_to_host(cudaStream_t s, const void *dev, size_t bytes)
{
    static void *host;
    if (!host)
        host = rt_alloc(bytes);
    rt_cuda_sync(s, "the step before a checkpoint");
    CHECK_CUDA(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return host;
}

/* One float32 of device memory, read once the stream has finished (the
 * training loop's loss). */
static inline double rt_cuda_read_f32(cudaStream_t s, const float *dev)
{
    float h = 0;
    rt_cuda_sync(s, "the training step");
    CHECK_CUDA(cudaMemcpy(&h, dev, sizeof h, cudaMemcpyDeviceToHost));
    return h;
}

/* ---- traces on the GPU (--trace FILE) and NVTX ranges ----
 * Every node is an NVTX range named after its ONNX node, so Nsight
 * Systems shows the model's names over the kernels. With --trace, spans
 * are CUDA events: a node's on the compute stream from its first kernel
 * to the next node's, a collective's on the communication stream around
 * its NCCL call, a wait's on the compute stream around the
 * cudaStreamWaitEvent. At the end of each pass the rank synchronises
 * both streams (so a traced run does not overlap one pass with the next)
 * and turns the events into times on the host clock, anchored at the
 * pass's last event, which has just completed. */
#ifndef O2S_NO_TRACE
#include <nvtx3/nvToolsExt.h>
#endif

typedef struct RtCudaSpan {
    cudaEvent_t a, b;
    cudaStream_t s;
    int type, id;
} RtCudaSpan;

static struct {
    RtCudaSpan *span;
    int n, cap, open; /* open: the node span waiting for its end, -1 none */
    int comm;         /* the collective between rt_comm_begin and rt_comm_end */
    cudaEvent_t ref, end, serial;
    int nvtx;         /* an NVTX range is pushed */
} rt_cu = {NULL, 0, 0, -1, -1, NULL, NULL, NULL, 0};

/* Records a span's start on stream s; returns its index. */
static inline int rt_cuda_span(int type, int id, cudaStream_t s)
{
    if (rt_cu.n == rt_cu.cap) {
        int cap = rt_cu.cap ? 2 * rt_cu.cap : 256;
        RtCudaSpan *p = (RtCudaSpan *)realloc(rt_cu.span, (size_t)cap * sizeof *p);
        if (!p)
            rt_die("--trace: out of memory for %d CUDA events", 2 * cap);
        for (int i = rt_cu.cap; i < cap; i++) {
            CHECK_CUDA(cudaEventCreate(&p[i].a));
            CHECK_CUDA(cudaEventCreate(&p[i].b));
        }
        rt_cu.span = p;
        rt_cu.cap = cap;
    }
    RtCudaSpan *sp = &rt_cu.span[rt_cu.n];
    sp->s = s;
    sp->type = type;
    sp->id = id;
    CHECK_CUDA(cudaEventRecord(sp->a, s));
    return rt_cu.n++;
}

static inline void rt_cuda_span_end(int i)
{
    if (i >= 0)
        CHECK_CUDA(cudaEventRecord(rt_cu.span[i].b, rt_cu.span[i].s));
}

/* Before each node: names it for errors and for NVTX; with --trace, ends
 * the last node's span and starts this one's. */
static inline void rt_enter(int node)
{
    rt_node = rt_tr.nodes[node].name;
#ifndef O2S_NO_TRACE
    if (rt_cu.nvtx)
        nvtxRangePop();
    nvtxRangePushA(rt_node);
    rt_cu.nvtx = 1;
#endif
    if (RT_TRACING) {
        rt_cuda_span_end(rt_cu.open);
        rt_cu.open = rt_cuda_span(RT_EV_NODE, node, g_stream);
    }
}

/* Around a collective's NCCL call(s) on the communication stream (the
 * host enqueues one collective at a time: no nesting). */
static inline void rt_comm_begin(int comm)
{
    rt_cu.comm = RT_TRACING ? rt_cuda_span(RT_EV_COMM, comm, g_comm) : -1;
}

static inline void rt_comm_end(void)
{
    rt_cuda_span_end(rt_cu.comm);
    rt_cu.comm = -1;
    if (rt_comms_mode == RT_COMMS_SERIAL) { /* --comms serial: compute waits for it at once */
        if (!rt_cu.serial)
            CHECK_CUDA(cudaEventCreateWithFlags(&rt_cu.serial, cudaEventDisableTiming));
        CHECK_CUDA(cudaEventRecord(rt_cu.serial, g_comm));
        CHECK_CUDA(cudaStreamWaitEvent(g_stream, rt_cu.serial, 0));
    }
}

/* The compute stream waits for a collective's event `done`. */
static inline void rt_cuda_wait(cudaEvent_t done, int comm)
{
    int w = -1;
    if (RT_TRACING) {
        rt_cuda_span_end(rt_cu.open);
        rt_cu.open = -1;
        w = rt_cuda_span(RT_EV_WAIT, comm, g_stream);
    }
    CHECK_CUDA(cudaStreamWaitEvent(g_stream, done, 0));
    rt_cuda_span_end(w);
}

static inline void rt_step_begin(void)
{
    if (!RT_TRACING)
        return;
    if (!rt_cu.ref) {
        CHECK_CUDA(cudaEventCreate(&rt_cu.ref));
        CHECK_CUDA(cudaEventCreate(&rt_cu.end));
    }
    rt_cu.n = 0;
    rt_cu.open = -1;
    CHECK_CUDA(cudaEventRecord(rt_cu.ref, g_stream));
}

static inline void rt_step_end(void)
{
#ifndef O2S_NO_TRACE
    if (rt_cu.nvtx)
        nvtxRangePop();
    rt_cu.nvtx = 0;
#endif
    if (!RT_TRACING)
        return;
    rt_cuda_span_end(rt_cu.open);
    rt_cu.open = -1;
    /* The pass ends when both streams have drained. */
    CHECK_CUDA(cudaEventRecord(rt_cu.end, g_comm));
    CHECK_CUDA(cudaStreamWaitEvent(g_stream, rt_cu.end, 0));
    CHECK_CUDA(cudaEventRecord(rt_cu.end, g_stream));
    rt_cuda_sync(g_stream, "the traced pass");
    rt_cuda_sync(g_comm, "the traced pass's collectives");
    float total = 0, a = 0, b = 0;
    CHECK_CUDA(cudaEventElapsedTime(&total, rt_cu.ref, rt_cu.end));
    double anchor = rt_now() - 1e-3 * total; /* host time of the pass's first event */
    for (int i = 0; i < rt_cu.n; i++) {
        const RtCudaSpan *sp = &rt_cu.span[i];
        CHECK_CUDA(cudaEventElapsedTime(&a, rt_cu.ref, sp->a));
        CHECK_CUDA(cudaEventElapsedTime(&b, rt_cu.ref, sp->b));
        rt_trace_add(sp->type, sp->id, anchor + 1e-3 * a, anchor + 1e-3 * b);
    }
    rt_trace_add(RT_EV_STEP, 0, anchor, anchor + 1e-3 * total);
    rt_tr.iter++;
}

/* ---- launch: under mpirun, or from the environment --------------------
 * With MPI (the default when mpicc is found) the ranks come from mpirun
 * and the NCCL id is broadcast over MPI. Built with MPI=0 there is no MPI
 * at all: each rank reads its place from the environment (O2S_RANK,
 * O2S_WORLD_SIZE, O2S_LOCAL_RANK, or the names torchrun and Slurm set) and
 * rank 0 hands the NCCL id to the others through O2S_BOOTSTRAP_FILE, a
 * path on a file system they share (launch.sh sets all of these). A rank
 * that fails exits; the launcher stops the rest. */
static inline int rt_env_int(const char *const *names, int fallback)
{
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) {
            char *end;
            errno = 0;
            long x = strtol(v, &end, 10);
            if (*end || errno || x < 0 || x > 1 << 20)
                rt_die("%s=%s: expected a small non-negative integer", *names, v);
            return (int)x;
        }
    }
    return fallback;
}

static inline void rt_launch_init(int *argc, char ***argv)
{
#ifdef O2S_HAVE_MPI
    rt_init_mpi(argc, argv);
#else
    (void)argc;
    (void)argv;
    static const char *const rank_vars[] = {"O2S_RANK", "RANK", "SLURM_PROCID", NULL};
    static const char *const size_vars[] = {"O2S_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", NULL};
    int me = rt_env_int(rank_vars, WORLD == 1 ? 0 : -1), world = rt_env_int(size_vars, WORLD == 1 ? 1 : -1);
    if (me != RANK || world != WORLD)
        rt_die("launched as rank %d of %d (O2S_RANK, O2S_WORLD_SIZE), but this binary is rank %d of %d: use "
               "launch.sh", me, world, RANK, WORLD);
    rt_job_up = 1;
#endif
}

/* This rank's index among the ranks on its node: it picks the GPU. */
static inline int rt_local_rank(void)
{
#ifdef O2S_HAVE_MPI
    MPI_Comm node;
    int local = 0;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, RANK, MPI_INFO_NULL, &node));
    CHECK_MPI(MPI_Comm_rank(node, &local));
    return local;
#else
    static const char *const vars[] = {"O2S_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", NULL};
    return rt_env_int(vars, RANK);
#endif
}

#if WORLD > 1
static inline void rt_share_nccl_id(ncclUniqueId *id)
{
#ifdef O2S_HAVE_MPI
    CHECK_MPI_WATCHED(MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast of the NCCL id");
#else
    const char *path = getenv("O2S_BOOTSTRAP_FILE");
    if (!path || !*path)
        rt_die("O2S_BOOTSTRAP_FILE is not set: without MPI the ranks share the NCCL id through a file on a "
               "file system they all see (launch.sh sets it)");
    if (RANK == 0) { /* written whole under a temporary name, then renamed: never read half-written */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, id, sizeof *id) != (ssize_t)sizeof *id || close(fd) != 0 || rename(tmp, path) != 0)
            rt_die("O2S_BOOTSTRAP_FILE=%s: cannot write the NCCL id: %s", path, strerror(errno));
        return;
    }
    double deadline = rt_now() + (rt_timeout_s ? rt_timeout_s : 1e9);
    for (;;) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)sizeof *id &&
            read(fd, id, sizeof *id) == (ssize_t)sizeof *id) {
            close(fd);
            return;
        }
        if (fd >= 0)
            close(fd);
        if (rt_now() > deadline)
            rt_die("waited %d s for rank 0's NCCL id in O2S_BOOTSTRAP_FILE=%s (--timeout)", rt_timeout_s, path);
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
#endif
}
#endif

/* All ranks reach this point before any goes on (timing starts here). */
static inline void rt_barrier(const char *what)
{
#ifdef O2S_HAVE_MPI
    CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), what);
#elif WORLD > 1
    static float *one;
    if (!one)
        CHECK_CUDA(cudaMalloc((void **)&one, sizeof(float)));
    CHECK_NCCL(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, g_nccl[0], g_stream));
    rt_cuda_sync(g_stream, what);
#else
    (void)what;
#endif
}

/* compile --decode: rank 0's n values (the next tokens) to every rank,
 * over NCCL on the world communicator (built with MPI=0 too). */
#if WORLD > 1
/* n int64 of device memory for the host-side collectives below, kept and
 * grown from one call to the next. */
static inline int64_t *rt_dev_i64(int n)
{
    static int64_t *dev;
    static int cap;
    if (n > cap) {
        if (dev)
            CHECK_CUDA(cudaFree(dev));
        CHECK_CUDA(cudaMalloc((void **)&dev, (size_t)n * sizeof(int64_t)));
        cap = n;
    }
    return dev;
}
#endif

static inline void rt_bcast_i64(int64_t *v, int n, const char *what)
{
#if WORLD > 1
    int64_t *dev = rt_dev_i64(n);
    CHECK_CUDA(cudaMemcpy(dev, v, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice));
    CHECK_NCCL(ncclBroadcast(dev, dev, (size_t)n, ncclInt64, 0, g_nccl[0], g_comm));
    rt_cuda_sync(g_comm, what);
    CHECK_CUDA(cudaMemcpy(v, dev, (size_t)n * sizeof(int64_t), cudaMemcpyDeviceToHost));
#else
    (void)v;
    (void)n;
    (void)what;
#endif
}

/* n counters a kernel sets (the MoE dispatch's dropped pairs), zeroed, in
 * device memory. */
static inline int64_t *rt_counters(int n)
{
    int64_t *c;
    CHECK_CUDA(cudaMalloc((void **)&c, (size_t)n * sizeof *c));
    CHECK_CUDA(cudaMemset(c, 0, (size_t)n * sizeof *c));
    return c;
}

/* Every rank's device counters summed into host v on each, over NCCL on
 * the world communicator. */
static inline void rt_sum_counters(const int64_t *c, int64_t *v, int n, const char *what)
{
#if WORLD > 1
    int64_t *dev = rt_dev_i64(n);
    CHECK_NCCL(ncclAllReduce(c, dev, (size_t)n, ncclInt64, ncclSum, g_nccl[0], g_comm));
    rt_cuda_sync(g_comm, what);
    CHECK_CUDA(cudaMemcpy(v, dev, (size_t)n * sizeof(int64_t), cudaMemcpyDeviceToHost));
#else
    (void)what;
    CHECK_CUDA(cudaMemcpy(v, c, (size_t)n * sizeof(int64_t), cudaMemcpyDeviceToHost));
#endif
}

/* --out of an output that stays split over the ranks (see the C target's
 * rt_gather_output, with its nmb blocks per rank and its root): the root
 * receives one copy of every block from the
 * device of the rank holding it, over NCCL on the world communicator (so
 * it works built with MPI=0 too), and assembles the whole tensor on the
 * host. `local` is a device pointer. Returns the tensor on the root (the
 * caller frees it), NULL elsewhere. */
static inline void *rt_gather_output(const void *local, int nmb, int rank, const int64_t *gdims,
                                     const int64_t *blocks, const int64_t *index, const unsigned char *sender,
                                     size_t elsize, const char *name, int root)
{
    const size_t block = rt_block_bytes(rank, blocks, elsize), all = block * (size_t)nmb;
    (void)root; /* one rank: itself */
    char what[320];
    snprintf(what, sizeof what, "the blocks of output \"%.256s\" (--out)", name); /* a long name is cut */
#if WORLD > 1
    if (RANK != root) {
        if (sender[RANK]) {
            CHECK_NCCL(ncclSend(local, all, ncclChar, root, g_nccl[0], g_comm));
            rt_cuda_sync(g_comm, what);
        }
        return NULL;
    }
#endif
    unsigned char *out = (unsigned char *)rt_alloc(rt_whole_bytes(rank, gdims, elsize)), *host = (unsigned char *)rt_alloc(all);
    void *stage = NULL;
#if WORLD > 1
    CHECK_CUDA(cudaMalloc(&stage, all ? all : 64));
#endif
    for (int r = 0; r < WORLD; r++) {
        if (!sender[r])
            continue;
        const void *src = local;
#if WORLD > 1
        if (r != root) {
            CHECK_NCCL(ncclRecv(stage, all, ncclChar, r, g_nccl[0], g_comm));
            rt_cuda_sync(g_comm, what);
            src = stage;
        }
#endif
        CHECK_CUDA(cudaMemcpy(host, src, all, cudaMemcpyDeviceToHost));
        for (int m = 0; m < nmb; m++)
            rt_put_block(out, host + (size_t)m * block, rank, gdims, blocks,
                         &index[((size_t)r * (size_t)nmb + (size_t)m) * (size_t)rank], elsize);
    }
    if (stage)
        CHECK_CUDA(cudaFree(stage));
    free(host);
    return out;
}

static inline void rt_launch_finish(void)
{
#ifdef O2S_HAVE_MPI
    CHECK_MPI_WATCHED(MPI_Finalize(), "MPI_Finalize (the other ranks to finish)");
#endif
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

template <typename T> __device__ static inline T k_op(int op, T x, T z);
template <> __device__ inline float k_op<float>(int op, float x, float z)
{
    switch (op) {
    case K_ARITH_ADD: return x + z;
    case K_ARITH_SUB: return x - z;
    case K_ARITH_MUL: return x * z;
    case K_ARITH_DIV: return x / z; /* IEEE: x / 0 is +-inf or NaN, as on the CPU */
    default: return (float)pow((double)x, (double)z);
    }
}
template <> __device__ inline int64_t k_op<int64_t>(int op, int64_t x, int64_t z)
{
    switch (op) {
    case K_ARITH_ADD: return (int64_t)((uint64_t)x + (uint64_t)z);
    case K_ARITH_SUB: return (int64_t)((uint64_t)x - (uint64_t)z);
    case K_ARITH_MUL: return (int64_t)((uint64_t)x * (uint64_t)z);
    case K_ARITH_DIV: return k_idiv(x, z);
    default: return k_ipow(x, z);
    }
}

template <typename T> __global__ void kk_binary(int op, T *y, const T *a, const T *b, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oa, ob, unused;
        k_offsets(s, i, &oa, &ob, &unused);
        y[i] = k_op<T>(op, a[oa], b[ob]);
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
        y[i] = op == K_ARITH_ADD ? x + z : op == K_ARITH_SUB ? x - z : op == K_ARITH_MUL ? x * z : x / z;
    }
}

static inline void k_arith_f32(int op, float *y, const float *a, const float *b, int64_t rows, int64_t cols,
                               int64_t a_rs, int64_t b_rs, int64_t b_cs)
{
    kk_arith<<<k_blocks(rows * cols), K_THREADS, 0, g_stream>>>(op, y, a, b, rows, cols, a_rs, b_rs, b_cs);
    CHECK_LAUNCH();
}

/* Pow by one exponent (a scalar operand, in device memory): the small
 * integer and half powers as multiplies, any other through powf. */
__global__ void kk_pow_scalar(float *y, const float *x, const float *e, int64_t n)
{
    float p = *e;
    GRID_LOOP(i, n)
    {
        float v = x[i];
        y[i] = p == 2.0f ? v * v : p == 3.0f ? v * v * v : p == 1.0f ? v : p == 0.5f ? sqrtf(v) : powf(v, p);
    }
}

static inline void k_pow_scalar_f32(float *y, const float *x, const float *e, int64_t n)
{
    kk_pow_scalar<<<k_blocks(n), K_THREADS, 0, g_stream>>>(y, x, e, n);
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
    case K_UNARY_RELU: return v > 0 ? v : 0;
    case K_UNARY_SQRT: return sqrtf(v);
    case K_UNARY_ERF: return erff(v);
    case K_UNARY_TANH: return tanhf(v);
    case K_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case K_UNARY_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
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
        case K_UNARY_RELU: y[i] = v > 0 ? v : 0; break;
        case K_UNARY_SQRT: y[i] = sqrtf(v); break;
        case K_UNARY_ERF: y[i] = erff(v); break;
        case K_UNARY_TANH: y[i] = tanhf(v); break;
        case K_UNARY_SIGMOID: y[i] = 1.0f / (1.0f + expf(-v)); break;
        case K_UNARY_GELU: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
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
        if (from == RT_I64 && to == RT_F32)
            ((float *)y)[i] = (float)((const int64_t *)x)[i];
        else
            rt_convert(y, to, x, from, i); /* runtime.c: every pair of element types */
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

/* float16 / bfloat16 MatMul as such: cuBLAS reads the 16-bit operands,
 * accumulates in float32 and rounds the result once (cublasGemmEx). */
static inline void k_matmul_16(void *y, const void *a, const void *w, cudaDataType_t t, int64_t batch, int64_t m,
                               int64_t k, int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    const float one = 1.0f, zero = 0.0f;
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, w, t, (int)n,
                                            w_bstride, a, t, (int)k, a_bstride, &zero, y, t, (int)n, m * n, (int)batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static inline void k_matmul_f16(uint16_t *y, const uint16_t *a, const uint16_t *w, int64_t batch, int64_t m, int64_t k,
                                int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    k_matmul_16(y, a, w, CUDA_R_16F, batch, m, k, n, a_bstride, w_bstride);
}

static inline void k_matmul_bf16(uint16_t *y, const uint16_t *a, const uint16_t *w, int64_t batch, int64_t m, int64_t k,
                                 int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    k_matmul_16(y, a, w, CUDA_R_16BF, batch, m, k, n, a_bstride, w_bstride);
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

/* One block per row, two passes: the mean first, then the mean of squared
 * deviations from it. The one-pass E[x^2] - E[x]^2 cancels catastrophically
 * when |mean| >> std (at |mean|/std ~ 100 it misses the tolerance), which
 * the C target never did. The tree reductions run in a fixed order, so the
 * result is the same on every run. */
__device__ static inline float k_block_sum(float v, float *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k)
            sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    float total = sh[0];
    __syncthreads(); /* sh is reused by the next sum */
    return total;
}

__global__ void kk_layernorm(float *y, float *mean_out, float *istd_out, const float *x, const float *scale,
                             const float *bias, int64_t n, int64_t sn, int64_t bn, float eps)
{
    __shared__ float sh[K_THREADS];
    int64_t row = blockIdx.x;
    const float *xp = x + row * n;
    float s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        s += xp[j];
    float mean = k_block_sum(s, sh) / n;
    float q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        q += (xp[j] - mean) * (xp[j] - mean);
    float var = k_block_sum(q, sh) / n, istd = rsqrtf(var + eps);
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

/* Zeros a strided region of y (the padding of an uneven split), and moves
 * a strided region of x to a strided region of y (a block cut short by
 * padding). */
__global__ void kk_strided_zero(char *y, int elsize, KShape s, int64_t off)
{
    GRID_LOOP(i, s.n)
    {
        int64_t o, u1, u2;
        k_offsets(s, i, &o, &u1, &u2);
        for (int b = 0; b < elsize; b++)
            y[(off + o) * elsize + b] = 0;
    }
}

static inline void k_strided_zero(void *y, size_t elsize, int rank, const int64_t *dims, const int64_t *sy,
                                  int64_t y_offset)
{
    KShape s = k_shape(rank, dims, sy, NULL, NULL);
    if (s.n)
        kk_strided_zero<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, (int)elsize, s, y_offset);
    CHECK_LAUNCH();
}

__global__ void kk_strided_move(char *y, int64_t yoff, const char *x, int64_t xoff, int elsize, KShape s)
{
    GRID_LOOP(i, s.n)
    {
        int64_t oy, ox, u;
        k_offsets(s, i, &oy, &ox, &u);
        for (int b = 0; b < elsize; b++)
            y[(yoff + oy) * elsize + b] = x[(xoff + ox) * elsize + b];
    }
}

static inline void k_strided_move(void *y, const int64_t *sy, int64_t y_offset, const void *x, const int64_t *sx,
                                  int64_t x_offset, size_t elsize, int rank, const int64_t *dims)
{
    KShape s = k_shape(rank, dims, sy, sx, NULL);
    if (s.n)
        kk_strided_move<<<k_blocks(s.n), K_THREADS, 0, g_stream>>>((char *)y, y_offset, (const char *)x, x_offset,
                                                                   (int)elsize, s);
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
