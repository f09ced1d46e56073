/* ---- onnx2spmd kernel bodies: the attn family (templates/bodies_attn.h) ----
 * Empty for now: what kernels_attn.c and cuda_attn.cu have in common is
 * a few lines here and there. Kept so that every family has a bodies
 * header, written before its kernels.
 */
