#!/usr/bin/env python3
"""Writes the small training models and their fixed inputs (issue 26).

Each model's graph ends in a scalar loss, which is what `compile --train`
takes and what the onnxruntime-training oracle (tests/train/ort_oracle.py)
differentiates. The weights are initializers drawn from fixed seeds, and the
inputs (data and labels) are .npy files beside the models, so that the
compiler's training runs and the oracle's goldens start from the same bytes.
Running it twice gives byte-identical files.

Outputs (relative to the repository root), in tests/models/train/:
  mlp_mse.onnx      x[8,64] -> MatMul W1 + b1 -> Gelu -> MatMul W2 + b2 = y[8,16];
                    loss = ReduceMean((y - target)^2) over all elements
  mlp_sce.onnx      x[8,64] -> Gemm -> Relu -> Gemm = logits[8,10];
                    loss = SoftmaxCrossEntropyLoss(logits, labels int64[8], mean)
  mlp_sce_ignore.onnx  mlp_sce with ignore_index=-100 and 3 of 8 labels ignored
  tiny_gpt_lm.onnx  tests/models/tiny_gpt.onnx (read, not rebuilt, so it stays
                    the model the inference tests use) with its logits [B,S,V]
                    reshaped to [B*S,V] and fed, with labels [B,S] reshaped to
                    [B*S], to SoftmaxCrossEntropyLoss(mean); only output `loss`
  <model>.input_<name>.npy  one fixed batch per model input

The models use opset 21 and IR 10, as tests/models/make_models.py does: both
build/venv's onnxruntime (1.22) and onnxruntime-training 1.19 accept them.
Run with build/venv/bin/python; it checks that each model runs in ONNX
Runtime (inference) and that the loss is a finite scalar.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
OUT = os.path.join(MODELS, "train")

IR_VERSION = 10
OPSET = 21
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def init(name, arr):
    arr = np.asarray(arr)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def model(graph):
    m = helper.make_model(graph, producer_name="onnx2spmd-tests",
                          opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m


def scalar_loss():
    # Rank 0: a scalar, which is what SoftmaxCrossEntropyLoss(mean) and
    # ReduceMean(keepdims=0) over every axis produce.
    return helper.make_tensor_value_info("loss", F32, [])


def make_mlp_mse(rng):
    """Regression: the MLP of tests/models/mlp.onnx, smaller, with a bias
    after each MatMul, and a mean squared error against a target."""
    b, d, f, o = 8, 64, 32, 16
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h_mm"], name="fc1"),
        helper.make_node("Add", ["h_mm", "b1"], ["h"], name="fc1_bias"),
        helper.make_node("Gelu", ["h"], ["a"], name="gelu"),
        helper.make_node("MatMul", ["a", "W2"], ["y_mm"], name="fc2"),
        helper.make_node("Add", ["y_mm", "b2"], ["y"], name="fc2_bias"),
        helper.make_node("Sub", ["y", "target"], ["diff"], name="err"),
        helper.make_node("Mul", ["diff", "diff"], ["sq"], name="err_sq"),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="mse"),
    ]
    inits = [
        init("W1", rng.standard_normal((d, f), dtype=np.float32) / np.sqrt(d)),
        init("b1", rng.standard_normal((f,), dtype=np.float32) * 0.1),
        init("W2", rng.standard_normal((f, o), dtype=np.float32) / np.sqrt(f)),
        init("b2", rng.standard_normal((o,), dtype=np.float32) * 0.1),
    ]
    g = helper.make_graph(nodes, "mlp_mse",
                          [helper.make_tensor_value_info("x", F32, [b, d]),
                           helper.make_tensor_value_info("target", F32, [b, o])],
                          [scalar_loss()], inits)
    feeds = {"x": rng.standard_normal((b, d), dtype=np.float32),
             "target": rng.standard_normal((b, o), dtype=np.float32)}
    return model(g), feeds


def make_mlp_sce(rng):
    """Classification: Gemm (with transB, as exporters write nn.Linear),
    Relu, Gemm, and a mean cross-entropy over integer labels."""
    b, d, f, c = 8, 64, 32, 10
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "W2", "b2"], ["logits"], transB=1, name="fc2"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                         reduction="mean", name="xent"),
    ]
    inits = [
        init("W1", rng.standard_normal((f, d), dtype=np.float32) / np.sqrt(d)),
        init("b1", rng.standard_normal((f,), dtype=np.float32) * 0.1),
        init("W2", rng.standard_normal((c, f), dtype=np.float32) / np.sqrt(f)),
        init("b2", rng.standard_normal((c,), dtype=np.float32) * 0.1),
    ]
    g = helper.make_graph(nodes, "mlp_sce",
                          [helper.make_tensor_value_info("x", F32, [b, d]),
                           helper.make_tensor_value_info("labels", I64, [b])],
                          [scalar_loss()], inits)
    feeds = {"x": rng.standard_normal((b, d), dtype=np.float32),
             "labels": rng.integers(0, c, (b,), dtype=np.int64)}
    return model(g), feeds


def make_mlp_sce_ignore(rng):
    """mlp_sce with ignore_index=-100 (transformers' padding label) and 3
    of its 8 labels ignored, all in the first half: under dp=2 the ranks'
    counts differ (1 and 4 counted), so a mean of per-rank means would
    differ from the mean over the counted labels."""
    m, feeds = make_mlp_sce(rng)
    xent = m.graph.node[-1]
    xent.attribute.extend([helper.make_attribute("ignore_index", -100)])
    m.graph.name = "mlp_sce_ignore"
    feeds["labels"][[0, 1, 3]] = -100
    return m, feeds


def make_tiny_gpt_lm(rng):
    """tiny_gpt with a language-model loss. The labels are an input rather
    than the tokens shifted inside the graph, so the test chooses them (here:
    random, like the tokens)."""
    gpt = onnx.load(os.path.join(MODELS, "tiny_gpt.onnx"))
    g = gpt.graph
    (tokens,) = g.input
    (logits,) = g.output
    B, S, V = (d.dim_value for d in logits.type.tensor_type.shape.dim)
    g.initializer.extend([
        init("lm_logits_2d", np.array([B * S, V], dtype=np.int64)),
        init("lm_labels_1d", np.array([B * S], dtype=np.int64)),
    ])
    g.node.extend([
        helper.make_node("Reshape", ["logits", "lm_logits_2d"], ["logits_2d"], name="lm_flatten_logits"),
        helper.make_node("Reshape", ["labels", "lm_labels_1d"], ["labels_1d"], name="lm_flatten_labels"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits_2d", "labels_1d"], ["loss"],
                         reduction="mean", name="lm_xent"),
    ])
    g.input.append(helper.make_tensor_value_info("labels", I64, [B, S]))
    del g.output[:]
    g.output.append(scalar_loss())
    g.name = "tiny_gpt_lm"
    m = model(g)
    feeds = {"tokens": rng.integers(0, V, (B, S), dtype=np.int64),
             "labels": rng.integers(0, V, (B, S), dtype=np.int64)}
    return m, feeds


def check_inference(path, feeds):
    """The model must run in plain ONNX Runtime and give a finite scalar."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    (loss,) = sess.run(["loss"], feeds)
    if loss.shape != () or not np.isfinite(loss):
        sys.exit("make_train_models: %s: loss %r is not a finite scalar" % (path, loss))
    return float(loss)


def main():
    os.makedirs(OUT, exist_ok=True)
    # One generator per model, so adding a model never changes another's bytes.
    for seed, (name, fn) in enumerate((("mlp_mse", make_mlp_mse), ("mlp_sce", make_mlp_sce),
                                       ("tiny_gpt_lm", make_tiny_gpt_lm), ("mlp_sce_ignore", make_mlp_sce_ignore))):
        m, feeds = fn(np.random.default_rng(2600 + seed))
        path = os.path.join(OUT, name + ".onnx")
        with open(path, "wb") as fh:
            fh.write(m.SerializeToString())
        for k, v in feeds.items():
            np.save(os.path.join(OUT, "%s.input_%s.npy" % (name, k)), v)
        print("%-12s loss %.6f" % (name, check_inference(path, feeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
