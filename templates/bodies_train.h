/* ---- onnx2spmd kernel bodies: the train family (templates/bodies_train.h) ----
 * One element of each optimizer update and of GeluGrad, shared by
 * templates/kernels_train.c and templates/cuda_train.cu, in PyTorch's forms (torch.optim.SGD with
 * dampening 0, torch.optim.AdamW), so both targets update alike. O2S_HD is
 * from templates/bodies.h.
 */

/* SGD: g += wd w; with momentum, m = mu m + g and the step follows m. */
O2S_HD static inline void k_sgd_elem(float *w, float g, float *m, float lr, float mu, float wd)
{
    g += wd * *w;
    if (m) {
        *m = mu * *m + g;
        g = *m;
    }
    *w -= lr * g;
}

/* AdamW: decoupled decay first, then the moments and the step
 * lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^step. */
O2S_HD static inline void k_adamw_elem(float *w, float g, float *m, float *v, float lr, float b1, float b2,
                                       float eps, float wd, float bc1, float sqrt_bc2)
{
    *w -= lr * wd * *w;
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
    *w -= (lr / bc1) * *m / (sqrtf(*v) / sqrt_bc2 + eps);
}

/* GeluGrad: dy times Gelu's slope at x, erf form
 *   0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi),
 * or with tanh_form, t = tanh(c (x + 0.044715 x^3)), c = sqrt(2 / pi):
 *   0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2),
 * the expressions ir/vjp.c writes as nodes for other dtypes. t and
 * 1 - t^2 come from e = exp(-2 |u|) (t = (1 - e) / (1 + e), 1 - t^2 =
 * 4 e / (1 + e)^2): 1 - t^2 from a t that rounds short of 1 is 1e-7 where
 * it should be 0, which the factor x (1 + 0.134 x^2) blows up to 1e-5 at
 * x = 12. In C, erf and exp are the vectorising k_erf and k_exp of
 * templates/kernels.c, and the loop calling this is built as they are
 * (K_VECTOR_MATH: GCC inlines a body only into a loop built alike). */
#ifdef __CUDACC__
#define K_GG_ERF erff
#define K_GG_EXP expf
#define K_GG_MATH
#else
#define K_GG_ERF k_erf
#define K_GG_EXP k_exp
#define K_GG_MATH K_VECTOR_MATH __attribute__((always_inline))
#endif
O2S_HD K_GG_MATH static inline float k_gelu_grad_elem(float dy, float x, int tanh_form)
{
    if (!tanh_form)
        return dy * (0.5f * (1.0f + K_GG_ERF(x * 0.70710678118654752f)) +
                     x * K_GG_EXP(-0.5f * x * x) * 0.39894228040143268f);
    const float c = 0.7978845608028654f, k = 0.044715f;
    float x2 = x * x, u = c * (x + k * x2 * x), e = K_GG_EXP(-2.0f * fabsf(u));
    float t = copysignf((1.0f - e) / (1.0f + e), u), sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));
    return dy * (0.5f * (1.0f + t) + 0.5f * x * sech2 * c * (1.0f + 3.0f * k * x2));
}

/* --accum: microbatch `micro` of k's value g into the accumulator; the
 * last microbatch leaves the mean of all k in g. */
O2S_HD static inline void k_accum_elem(float *g, float *acc, int micro, int k)
{
    if (micro < k)
        *acc = micro == 1 ? *g : *acc + *g;
    else
        *g = (*g + *acc) / (float)k;
}

/* --precision fp16, torch.cuda.amp.GradScaler's rule: `factor` is what the
 * gradients were multiplied by (1/scale, NaN when one overflowed). An
 * overflow skips the step and halves the scale; 2000 clean steps in a row
 * double it. state: {the scale, clean steps since it changed, steps
 * skipped in all}, kept beside the weights so a checkpoint holds it.
 * Returns 1 when the step's updates apply. */
static inline int k_loss_scale_rule(float *state, float factor, int64_t *skipped, int verbose)
{
    int ok = isfinite(factor);
    if (!ok) {
        state[0] *= 0.5f;
        state[1] = 0;
        state[2] += 1;
        if (verbose)
            printf("gradient overflow (float16): update skipped, loss scale now %.9g\n", (double)state[0]);
    } else if ((state[1] += 1) >= 2000) {
        state[0] *= 2.0f;
        state[1] = 0;
    }
    *skipped = (int64_t)state[2];
    return ok;
}
