/* ---- onnx2spmd CUDA kernels: the nn family (templates/cuda_nn.cu) ---- */
