/* ---- onnx2spmd kernels: the attn family (templates/kernels_attn.c) ---- */
