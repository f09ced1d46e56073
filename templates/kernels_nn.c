/* ---- onnx2spmd kernels: the nn family (templates/kernels_nn.c) ---- */
