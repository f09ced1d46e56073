/* ---- onnx2spmd CUDA kernels: math family (templates/cuda_math.cu) -------
 * CUDA kernels for the ops of ir/ops_math.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_math.c.
 */
