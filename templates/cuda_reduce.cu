/* ---- onnx2spmd CUDA kernels: reduce family (templates/cuda_reduce.cu) -------
 * CUDA kernels for the ops of ir/ops_reduce.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_reduce.c.
 */
