/* ---- onnx2spmd kernels: the train family (templates/kernels_train.c) ----
 * The optimizer updates of --train (ir/ops_train.def), in place on this
 * rank's shard of a weight and its state; the step count arrives from
 * optimizer_step(). */

static inline void k_sgd_f32(float *w, const float *g, float *m, int64_t n, float lr, float mu, float wd)
{
    for (int64_t i = 0; i < n; i++)
        k_sgd_elem(&w[i], g[i], m ? &m[i] : NULL, lr, mu, wd);
}

static inline void k_adamw_f32(float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                               float eps, float wd, int64_t step)
{
    float bc1 = 1.0f - powf(b1, (float)step), sqrt_bc2 = sqrtf(1.0f - powf(b2, (float)step));
    for (int64_t i = 0; i < n; i++)
        k_adamw_elem(&w[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, bc1, sqrt_bc2);
}
