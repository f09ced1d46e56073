/* ---- onnx2spmd kernels: the train family (templates/kernels_train.c) ----
 * The optimizer updates of --train (ir/ops_train.def), in place on this
 * rank's shard of a weight and its state; the step count arrives from
 * optimizer_step(). Also GeluGrad, Gelu's backward in one pass. */

/* Both updates test the collectives in flight every K_POLL_ELEMS elements
 * (k_poll_rows): the gradient buckets still moving when optimizer_step
 * starts (the last ones backward filled) are what the updates of the
 * earlier buckets' weights hide, and MPI moves them only inside its calls;
 * a weight of millions of elements is milliseconds of update. */
static inline void k_sgd_f32(float *w, const float *g, float *m, int64_t n, float lr, float mu, float wd)
{
    int64_t run = k_poll_rows(1);
    for (int64_t i0 = 0; i0 < n; i0 += run) {
        int64_t i1 = n - i0 < run ? n : i0 + run;
        for (int64_t i = i0; i < i1; i++)
            k_sgd_elem(&w[i], g[i], m ? &m[i] : NULL, lr, mu, wd);
        if (i1 < n)
            rt_poll();
    }
}

static inline void k_adamw_f32(float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                               float eps, float wd, int64_t step)
{
    float bc1 = 1.0f - powf(b1, (float)step), sqrt_bc2 = sqrtf(1.0f - powf(b2, (float)step));
    int64_t run = k_poll_rows(1);
    for (int64_t i0 = 0; i0 < n; i0 += run) {
        int64_t i1 = n - i0 < run ? n : i0 + run;
        for (int64_t i = i0; i < i1; i++)
            k_adamw_elem(&w[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, bc1, sqrt_bc2);
        if (i1 < n)
            rt_poll();
    }
}

/* GeluGrad, in runs of K_POLL_ELEMS between tests of the collectives in
 * flight; one plain loop per form, so each vectorises. */
K_VECTOR_MATH static void k_gelu_grad_run_f32(float *dx, const float *dy, const float *x, int64_t n, int tanh_form)
{
    if (tanh_form)
        K_IVDEP for (int64_t i = 0; i < n; i++) dx[i] = k_gelu_grad_elem(dy[i], x[i], 1);
    else
        K_IVDEP for (int64_t i = 0; i < n; i++) dx[i] = k_gelu_grad_elem(dy[i], x[i], 0);
}

static inline void k_gelu_grad_f32(float *dx, const float *dy, const float *x, int64_t n, int tanh_form)
{
    int64_t run = k_poll_rows(1);
    for (int64_t i0 = 0; i0 < n; i0 += run) {
        int64_t len = n - i0 < run ? n - i0 : run;
        k_gelu_grad_run_f32(dx + i0, dy + i0, x + i0, len, tanh_form);
        if (i0 + len < n)
            rt_poll();
    }
}

static inline void k_accumulate_f32(float *g, float *acc, int64_t n, int micro, int k)
{
    for (int64_t i = 0; k > 1 && i < n; i++)
        k_accum_elem(&g[i], &acc[i], micro, k);
}

static inline int k_loss_scale_step(float *state, const float *factor, int64_t *skipped, int verbose)
{
    return k_loss_scale_rule(state, *factor, skipped, verbose);
}

/* ZeRO's write-back: every rank's block_bytes at its place in buf (its
 * index in comm), gathered so every rank holds them all. */
static inline void rt_allgather_inplace(void *buf, int64_t block_bytes, MPI_Comm comm, const char *what)
{
    if (block_bytes > INT32_MAX)
        rt_die("%s: a block of %lld bytes is past MPI's int count", what, (long long)block_bytes);
    CHECK_MPI_WATCHED(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)block_bytes, MPI_BYTE, comm), what);
}
