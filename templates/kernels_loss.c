/* ---- onnx2spmd kernels: the loss family (templates/kernels_loss.c) ---- */
