/* ---- onnx2spmd kernels: math family (templates/kernels_math.c) ----------
 * C kernels for the ops of ir/ops_math.def, on this rank's local blocks,
 * with the same k_* names and arguments as templates/cuda_math.cu.
 */
