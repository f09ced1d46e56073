/* ---- onnx2spmd kernel bodies: the train family (templates/bodies_train.h) ----
 * One element of each optimizer update, shared by templates/kernels_train.c
 * and templates/cuda_train.cu, in PyTorch's forms (torch.optim.SGD with
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
