/* ---- onnx2spmd kernels: reduce family (templates/kernels_reduce.c) ----------
 * C kernels for the ops of ir/ops_reduce.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_reduce.cu.
 */
