/* ---- onnx2spmd CUDA kernels: the attn family (templates/cuda_attn.cu) ---- */
