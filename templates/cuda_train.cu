/* ---- onnx2spmd kernels: the train family (templates/cuda_train.cu) ----
 * The optimizer updates of --train and GeluGrad on the compute stream, one
 * thread per element, with the bodies of templates/bodies_train.h. */

__global__ void kk_sgd_f32(float *w, const float *g, float *m, int64_t n, float lr, float mu, float wd)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        k_sgd_elem(&w[i], g[i], m ? &m[i] : NULL, lr, mu, wd);
}

static inline void k_sgd_f32(float *w, const float *g, float *m, int64_t n, float lr, float mu, float wd)
{
    if (n > 0)
        kk_sgd_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(w, g, m, n, lr, mu, wd);
}

__global__ void kk_adamw_f32(float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                             float eps, float wd, float bc1, float sqrt_bc2)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        k_adamw_elem(&w[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, bc1, sqrt_bc2);
}

static inline void k_adamw_f32(float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                               float eps, float wd, int64_t step)
{
    float bc1 = 1.0f - powf(b1, (float)step), sqrt_bc2 = sqrtf(1.0f - powf(b2, (float)step));
    if (n > 0)
        kk_adamw_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(w, g, m, v, n, lr, b1, b2, eps, wd, bc1, sqrt_bc2);
}

__global__ void kk_gelu_grad_f32(float *dx, const float *dy, const float *x, int64_t n, int tanh_form)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dx[i] = k_gelu_grad_elem(dy[i], x[i], tanh_form);
}

static inline void k_gelu_grad_f32(float *dx, const float *dy, const float *x, int64_t n, int tanh_form)
{
    if (n > 0)
        kk_gelu_grad_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(dx, dy, x, n, tanh_form);
}

__global__ void kk_accumulate_f32(float *g, float *acc, int64_t n, int micro, int k)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        k_accum_elem(&g[i], &acc[i], micro, k);
}

static inline void k_accumulate_f32(float *g, float *acc, int64_t n, int micro, int k)
{
    if (n > 0 && k > 1)
        kk_accumulate_f32<<<k_blocks(n), K_THREADS, 0, g_stream>>>(g, acc, n, micro, k);
}

/* The rule runs on the host (GradScaler's step reads found_inf too): the
 * state comes over and goes back, 12 bytes a step. */
static inline int k_loss_scale_step(float *state, const float *factor, int64_t *skipped, int verbose)
{
    float h[3], f = (float)rt_cuda_read_f32(g_stream, factor);
    CHECK_CUDA(cudaMemcpy(h, state, sizeof h, cudaMemcpyDeviceToHost));
    int ok = k_loss_scale_rule(h, f, skipped, verbose);
    CHECK_CUDA(cudaMemcpy(state, h, sizeof h, cudaMemcpyHostToDevice));
    return ok;
}

/* ZeRO's write-back: every rank's block_bytes at its place in buf (its
 * rank in comm), gathered in place on the compute stream, after the
 * update that wrote the block. */
#if WORLD > 1
static inline void rt_allgather_inplace(void *buf, int64_t block_bytes, ncclComm_t comm, const char *what)
{
    (void)what;
    int me = 0;
    CHECK_NCCL(ncclCommUserRank(comm, &me));
    CHECK_NCCL(ncclAllGather((char *)buf + (int64_t)me * block_bytes, buf, (size_t)block_bytes, ncclChar, comm,
                             g_stream));
}
#endif
