#!/usr/bin/env python3
"""Appends a loss to the convnet and the exported GPT-2, BERT and Llama test
models, so that `compile --train` can train them (issue 26), and writes two
small models whose losses reach every option of the nn family's gradients
and the index family's.

The inference models are read, never rebuilt: tests/models/convnet.onnx
(make_models.py) and tests/models/exports/*.onnx (make_exports.py, real
torch.onnx.export output). Each gets one loss node after its output:

  convnet_sce        y [2,10] -> SoftmaxCrossEntropyLoss(mean) against
                     labels int64 [2]
  <gpt2|llama>_<ts|dynamo>_lm
                     logits [2,16,512] -> Reshape [32,512] ->
                     SoftmaxCrossEntropyLoss(mean) against labels int64 [2,16]
                     (reshaped to [32]), as a language-model loss with the
                     labels chosen by the test
  bert_<ts|dynamo>_mse
                     last_hidden_state [2,16,64] ->
                     ReduceMean((h - target)^2) against a fixed random
                     target: the mean square of h alone would hardly depend
                     on anything before the final LayerNorm, whose output
                     has a fixed mean square per row
  conv_ops_mse       x [2,4,9,9] -> Conv (stride 2, dilation 2, groups 2,
                     asymmetric pads) -> BatchNormalization -> MaxPool
                     (3x3 stride 2, overlapping windows, pads) -> Conv
                     (1x1) -> AveragePool (count_include_pad 0, pads,
                     ceil_mode) -> GlobalAveragePool, and a Conv (stride 3,
                     ragged: its last input row and column are never read)
                     into an AveragePool (count_include_pad 1) beside it;
                     loss = ReduceMean((y - target)^2)
  index_ops_mse      Sin, Cos, Sum, Mean, GatherElements, GatherND, Trilu,
                     Pad and Tile of one weight, concatenated; mean squared
                     error against a fixed target
  attn_fused_mse     x [2,6,16] -> Q/K/V projections -> RotaryEmbedding
                     (Q and K, position ids) -> Attention (opset 23: 4 query
                     heads on 2 kv heads, causal, a float mask shorter than
                     the keys) -> output projection; mean squared error

The exports' scalar float initializers (literals of the model's code, as
the dynamo exporter writes them) become Constant nodes first, so that
--train trains what PyTorch would: see literals_as_constants().

Fixed inputs are written beside each model as <model>.input_<name>.npy:
the exports' own golden inputs (tests/golden/<export>/input_*.npy, whose
second row is padded), and labels/targets from a fixed seed per model.
Running it twice gives byte-identical files. Run with build/venv/bin/python;
it checks that every model runs in ONNX Runtime (onnx.reference for opset
23) and gives a finite scalar.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_train_models import IR_VERSION, check_inference, init, model, scalar_loss  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
GOLDEN = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(MODELS, "train")
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def dims(vi):
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def golden_inputs(name):
    d = os.path.join(GOLDEN, name)
    return {f[6:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))
            if f.startswith("input_") and f.endswith(".npy")}


def keep_opset(m, g):
    """The loss model keeps the export's opsets and IR version: the loss
    ops exist in every opset from 13."""
    out = helper.make_model(g, opset_imports=list(m.opset_import), producer_name=m.producer_name)
    out.ir_version = m.ir_version
    onnx.checker.check_model(out, full_check=True)
    return out


def with_sce(m, name, rng):
    """Logits [..., V] flattened to [N, V] against int64 labels of the
    leading shape, mean cross-entropy."""
    g = m.graph
    (logits,) = g.output
    shape = dims(logits)
    lead, V = shape[:-1], shape[-1]
    N = int(np.prod(lead))
    g.initializer.extend([
        init("loss_logits_2d", np.array([N, V], dtype=np.int64)),
        init("loss_labels_1d", np.array([N], dtype=np.int64)),
    ])
    g.node.extend([
        helper.make_node("Reshape", [logits.name, "loss_logits_2d"], ["loss_logits"], name="loss_flatten_logits"),
        helper.make_node("Reshape", ["labels", "loss_labels_1d"], ["loss_labels"], name="loss_flatten_labels"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["loss_logits", "loss_labels"], ["loss"],
                         reduction="mean", name="loss_xent"),
    ])
    g.input.append(helper.make_tensor_value_info("labels", I64, lead))
    del g.output[:]
    g.output.append(scalar_loss())
    g.name = name
    return keep_opset(m, g), {"labels": rng.integers(0, V, lead, dtype=np.int64)}


def with_mse(m, name, rng):
    """Mean squared difference of the only output against a fixed target."""
    g = m.graph
    (y,) = g.output
    g.node.extend([
        helper.make_node("Sub", [y.name, "target"], ["loss_diff"], name="loss_err"),
        helper.make_node("Mul", ["loss_diff", "loss_diff"], ["loss_sq"], name="loss_err_sq"),
        helper.make_node("ReduceMean", ["loss_sq"], ["loss"], keepdims=0, name="loss_mse"),
    ])
    g.input.append(helper.make_tensor_value_info("target", F32, dims(y)))
    del g.output[:]
    g.output.append(scalar_loss())
    g.name = name
    return keep_opset(m, g), {"target": rng.standard_normal(dims(y), dtype=np.float32)}


def make_convnet(rng):
    m, feeds = with_sce(onnx.load(os.path.join(MODELS, "convnet.onnx")), "convnet_sce", rng)
    return m, dict(golden_inputs("convnet"), **feeds)


def literals_as_constants(m):
    """The dynamo exporter writes the literals of the model's code (the
    0.5 and 1.0 of Gelu, RMSNorm's epsilon, Pow's exponent 2, the mask's
    -3.4e38) as scalar initializers, which --train trains like weights:
    SGD then moves the epsilon below zero, and the exponent's gradient
    y ln(x) is NaN for a negative base. They become Constant nodes, as the
    TorchScript exporter writes them, so that what trains is what PyTorch
    trains (parameters) and the buffers (rotary tables)."""
    g = m.graph
    keep, consts = [], []
    for t in g.initializer:
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16) and not t.dims:
            consts.append(helper.make_node("Constant", [], [t.name], value=t, name="literal_" + t.name))
        else:
            keep.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return m


def make_export(base, loss):
    def make(rng):
        m = literals_as_constants(onnx.load(os.path.join(MODELS, "exports", base + ".onnx")))
        m, feeds = (with_sce if loss == "lm" else with_mse)(m, "%s_%s" % (base, loss), rng)
        return m, dict(golden_inputs(base), **feeds)
    return make


def make_conv_ops(rng):
    """Every geometry option the nn gradients handle, small enough for
    finite differences of every weight."""
    N, C = 2, 4
    nodes = [
        # 9x9 -> pads (1,0,2,1), dilation 2, stride 2: (9+1+2-5)//2+1 = 4 by (9+0+1-5)//2+1 = 3
        helper.make_node("Conv", ["x", "Wg", "bg"], ["cg"], group=2, strides=[2, 2], dilations=[2, 2],
                         pads=[1, 0, 2, 1], name="conv_grouped"),
        helper.make_node("BatchNormalization", ["cg", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], epsilon=1e-3,
                         name="bn"),
        # overlapping 3x3 windows, stride 2, pads: 4x3 -> 2x2
        helper.make_node("MaxPool", ["bn"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         name="maxpool"),
        helper.make_node("Conv", ["mp", "W1"], ["c1"], kernel_shape=[1, 1], name="conv_1x1"),
        helper.make_node("AveragePool", ["c1"], ["ap"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                         count_include_pad=0, name="avgpool_excl"),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["y1"], axis=1, name="flat1"),
        # stride 3 over 9 columns with a 2-wide kernel: column 8 is never read
        helper.make_node("Conv", ["x", "Ws"], ["cs"], strides=[3, 3], name="conv_strided"),
        # symmetric pads: ONNX Runtime 1.22 counts a lone end pad along H
        # wrongly with count_include_pad (it reads W's begin pad), and it
        # is the finite differences' oracle
        helper.make_node("AveragePool", ["cs"], ["aps"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1, name="avgpool_incl"),
        helper.make_node("Flatten", ["aps"], ["y2"], axis=1, name="flat2"),
        helper.make_node("Concat", ["y1", "y2"], ["y"], axis=1, name="cat"),
        helper.make_node("Sub", ["y", "target"], ["diff"], name="err"),
        helper.make_node("Mul", ["diff", "diff"], ["sq"], name="err_sq"),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="mse"),
    ]
    inits = [
        init("Wg", rng.standard_normal((6, C // 2, 3, 3)) * 0.4),
        init("bg", rng.standard_normal((6,)) * 0.1),
        init("bn_s", 1 + 0.2 * rng.standard_normal((6,))),
        init("bn_b", 0.1 * rng.standard_normal((6,))),
        init("bn_m", 0.1 * rng.standard_normal((6,))),
        init("bn_v", 0.5 + rng.random((6,))),
        init("W1", rng.standard_normal((5, 6, 1, 1)) * 0.4),
        init("Ws", rng.standard_normal((3, C, 2, 2)) * 0.4),
    ]
    # y1: [N, 5]; y2: cs is [N,3,3,3] -> aps [N,3,2,2] -> 12
    g = helper.make_graph(nodes, "conv_ops_mse",
                          [helper.make_tensor_value_info("x", F32, [N, C, 9, 9]),
                           helper.make_tensor_value_info("target", F32, [N, 5 + 12])],
                          [scalar_loss()], inits)
    feeds = {"x": rng.standard_normal((N, C, 9, 9), dtype=np.float32),
             "target": rng.standard_normal((N, 5 + 12), dtype=np.float32)}
    return model(g), feeds


def make_index_ops(rng):
    """The index-family and elementwise gradients beyond the core set:
    Sin, Cos, Sum, Mean (broadcast), GatherElements and GatherND (negative
    and repeated indices), Trilu, Pad (a negative pad crops; its constant
    value is a weight) and Tile."""
    I64 = TensorProto.INT64
    nodes = [
        helper.make_node("Sin", ["W"], ["sin"], name="sin"),
        helper.make_node("Cos", ["W"], ["cos"], name="cos"),
        helper.make_node("Sum", ["sin", "B", "cos"], ["s"], name="sum"),
        helper.make_node("Mean", ["W", "B"], ["m"], name="mean"),
        helper.make_node("GatherElements", ["W", "ge_idx"], ["ge"], axis=1, name="gather_elements"),
        helper.make_node("GatherND", ["s", "gn_idx"], ["gn"], name="gather_nd"),
        helper.make_node("Trilu", ["m", "k"], ["tri"], upper=0, name="trilu"),
        helper.make_node("Pad", ["tri", "pads", "pad_value"], ["pad"], name="pad"),
        helper.make_node("Tile", ["ge", "repeats"], ["tile"], name="tile"),
        helper.make_node("Flatten", ["gn"], ["f1"], axis=0, name="flat_gn"),
        helper.make_node("Flatten", ["pad"], ["f2"], axis=0, name="flat_pad"),
        helper.make_node("Flatten", ["tile"], ["f3"], axis=0, name="flat_tile"),
        helper.make_node("Concat", ["f1", "f2", "f3"], ["y"], axis=1, name="cat"),
        helper.make_node("Sub", ["y", "target"], ["diff"], name="err"),
        helper.make_node("Mul", ["diff", "diff"], ["sq"], name="err_sq"),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="mse"),
    ]
    inits = [
        init("W", rng.standard_normal((3, 4, 5))),
        init("B", rng.standard_normal((5,))),
        init("pad_value", np.array(0.5, dtype=np.float32)),
        numpy_helper.from_array(np.array([[[0, -1, 2, 2, 0], [3, 3, -4, 1, 0]]] * 3, dtype=np.int64), "ge_idx"),
        numpy_helper.from_array(np.array([[0, 1], [-1, 3], [0, 1], [2, -2]], dtype=np.int64), "gn_idx"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "k"),
        numpy_helper.from_array(np.array([1, -1, 2, 0, 2, -1], dtype=np.int64), "pads"),
        numpy_helper.from_array(np.array([2, 1, 3], dtype=np.int64), "repeats"),
    ]
    # gn [4, 5]: 20; pad [4, 5, 6]: 120; tile [6, 2, 15]: 180
    total = 20 + 120 + 180
    g = helper.make_graph(nodes, "index_ops_mse", [helper.make_tensor_value_info("target", F32, [1, total])],
                          [scalar_loss()], inits)
    return model(g), {"target": rng.standard_normal((1, total), dtype=np.float32)}


def make_attn_fused(rng):
    """The fused opset-23 ops: RotaryEmbedding on Q and K (3-D, num_heads,
    position ids; the caches are Constant nodes, tables rather than
    weights) and Attention with grouped-query heads, causal masking and a
    trainable float mask shorter than the keys."""
    B, S, E, HQ, HKV, D = 2, 6, 16, 4, 2, 4
    ang = np.arange(8)[:, None] * (1.0 / 10000 ** (np.arange(D // 2) / (D // 2)))[None, :]
    nodes = [
        helper.make_node("Constant", [], ["cos"], value=numpy_helper.from_array(np.cos(ang).astype(np.float32)),
                         name="cos_cache"),
        helper.make_node("Constant", [], ["sin"], value=numpy_helper.from_array(np.sin(ang).astype(np.float32)),
                         name="sin_cache"),
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="v_proj"),
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["q_rot"], num_heads=HQ, name="rope_q"),
        helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["k_rot"], num_heads=HKV, name="rope_k"),
        helper.make_node("Attention", ["q_rot", "k_rot", "v", "bias"], ["ctx"], q_num_heads=HQ, kv_num_heads=HKV,
                         is_causal=1, name="attn"),
        helper.make_node("MatMul", ["ctx", "Wo"], ["y"], name="o_proj"),
        helper.make_node("Sub", ["y", "target"], ["diff"], name="err"),
        helper.make_node("Mul", ["diff", "diff"], ["sq"], name="err_sq"),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="mse"),
    ]
    inits = [
        init("Wq", rng.standard_normal((E, HQ * D)) / 4),
        init("Wk", rng.standard_normal((E, HKV * D)) / 4),
        init("Wv", rng.standard_normal((E, HKV * D)) / 4),
        init("Wo", rng.standard_normal((HQ * D, E)) / 4),
        init("bias", rng.standard_normal((S, S - 1)) * 0.3),
        numpy_helper.from_array(np.array([[0, 1, 2, 3, 4, 5], [2, 3, 4, 5, 6, 7]], dtype=np.int64), "pos"),
    ]
    g = helper.make_graph(nodes, "attn_fused_mse",
                          [helper.make_tensor_value_info("x", F32, [B, S, E]),
                           helper.make_tensor_value_info("target", F32, [B, S, E])],
                          [scalar_loss()], inits)
    m = helper.make_model(g, producer_name="onnx2spmd-tests", opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m, {"x": rng.standard_normal((B, S, E), dtype=np.float32),
               "target": rng.standard_normal((B, S, E), dtype=np.float32)}


def check_any(path, feeds):
    """check_inference, through onnx.reference where ONNX Runtime 1.22
    refuses the opset (23: Attention, RotaryEmbedding)."""
    m = onnx.load(path)
    if max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) <= 22:
        return check_inference(path, feeds)
    from onnx.reference import ReferenceEvaluator
    (loss,) = ReferenceEvaluator(m).run(["loss"], feeds)
    if loss.shape != () or not np.isfinite(loss):
        sys.exit("make_train_exports: %s: loss %r is not a finite scalar" % (path, loss))
    return float(loss)


MAKERS = [
    ("convnet_sce", make_convnet),
    ("conv_ops_mse", make_conv_ops),
    ("gpt2_ts_lm", make_export("gpt2_ts", "lm")),
    ("gpt2_dynamo_lm", make_export("gpt2_dynamo", "lm")),
    ("bert_ts_mse", make_export("bert_ts", "mse")),
    ("bert_dynamo_mse", make_export("bert_dynamo", "mse")),
    ("llama_ts_lm", make_export("llama_ts", "lm")),
    ("llama_dynamo_lm", make_export("llama_dynamo", "lm")),
    ("index_ops_mse", make_index_ops),
    ("attn_fused_mse", make_attn_fused),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    assert IR_VERSION  # the conv model is written like make_train_models.py's
    # One generator per model, so adding a model never changes another's bytes.
    for seed, (name, fn) in enumerate(MAKERS):
        m, feeds = fn(np.random.default_rng(2650 + seed))
        path = os.path.join(OUT, name + ".onnx")
        with open(path, "wb") as fh:
            fh.write(m.SerializeToString())
        for k, v in feeds.items():
            np.save(os.path.join(OUT, "%s.input_%s.npy" % (name, k)), v)
        print("%-16s loss %.6f" % (name, check_any(path, feeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
