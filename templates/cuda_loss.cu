/* ---- onnx2spmd CUDA kernels: the loss family (templates/cuda_loss.cu) ---- */
