/* ---- onnx2spmd kernels: index family (templates/kernels_index.c) ----------
 * C kernels for the ops of ir/ops_index.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_index.cu.
 */
