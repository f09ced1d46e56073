/* ---- onnx2spmd CUDA kernels: index family (templates/cuda_index.cu) -------
 * CUDA kernels for the ops of ir/ops_index.def, launched on g_stream, with
 * the same k_* names and arguments as templates/kernels_index.c.
 */
