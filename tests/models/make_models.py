#!/usr/bin/env python3
"""Writes the test models, per-op test models, malformed inputs and goldens.

Everything is built with the onnx helper API from fixed seeds, and every
expected output comes from ONNX Runtime (one thread, graph optimisations
off, so the golden is the reference semantics and not a fused variant).
Running it twice gives byte-identical files; `make models` must leave
`git status` clean.

Outputs (relative to the repository root):
  tests/models/{mlp,attention,tiny_gpt,convnet}.onnx
  tests/golden/<model>/{input,output}_<name>.npy
  tests/models/ops/<case>.onnx, tests/models/ops/expected.txt
      one line per output: case, output name, dtype, shape from ORT
  tests/golden/ops/<case>/{input,output}_<name>.npy
  tests/models/bad/*.onnx (+ data files): the malformed-input corpus
"""
import importlib
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
GOLDEN = os.path.join(ROOT, "tests", "golden")

# What the pinned ONNX Runtime (1.22) accepts: IR 10, default opset 21.
IR_VERSION = 10
OPSET = 21

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def init(name, arr):
    arr = np.asarray(arr)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def const_i64(name, values):
    return init(name, np.array(values, dtype=np.int64))


def model(graph, opset=OPSET, ir_version=IR_VERSION):
    m = helper.make_model(graph, producer_name="onnx2spmd-tests",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


def save(m, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def run_ort(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


def write_golden(folder, feeds, names, outs):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    for k, v in feeds.items():
        np.save(os.path.join(folder, "input_%s.npy" % k), v)
    for k, v in zip(names, outs):
        np.save(os.path.join(folder, "output_%s.npy" % k), v)


# ---- the four golden models ------------------------------------------------

def make_mlp(rng):
    d, f, b = 64, 256, 8
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
        helper.make_node("Gelu", ["h"], ["a"], name="gelu"),
        helper.make_node("MatMul", ["a", "W2"], ["o"], name="fc2"),
        helper.make_node("Add", ["o", "b2"], ["y"], name="bias2"),
    ]
    inits = [
        init("W1", rng.standard_normal((d, f), dtype=np.float32) / np.sqrt(d)),
        init("W2", rng.standard_normal((f, d), dtype=np.float32) / np.sqrt(f)),
        init("b2", rng.standard_normal((d,), dtype=np.float32) * 0.1),
    ]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", F32, [b, d])],
                          [helper.make_tensor_value_info("y", F32, [b, d])], inits)
    feeds = {"x": rng.standard_normal((b, d), dtype=np.float32)}
    return model(g), feeds


def attention_block(p, x, nodes, inits, rng, B, S, D, H, mask=None):
    """Multi-head self-attention on x [B,S,D]; returns the output name."""
    dh = D // H
    sc = 1.0 / np.sqrt(D)
    for w in ("q", "k", "v"):
        inits.append(init(p + "W" + w, rng.standard_normal((D, D), dtype=np.float32) * sc))
        inits.append(init(p + "b" + w, rng.standard_normal((D,), dtype=np.float32) * 0.02))
        nodes += [
            helper.make_node("MatMul", [x, p + "W" + w], [p + w + "_mm"], name=p + w + "_proj"),
            helper.make_node("Add", [p + w + "_mm", p + "b" + w], [p + w], name=p + w + "_bias"),
            helper.make_node("Reshape", [p + w, p + "heads_shape"], [p + w + "_h"],
                             name=p + w + "_split_heads"),
        ]
    inits.append(const_i64(p + "heads_shape", [B, S, H, dh]))
    inits.append(const_i64(p + "merge_shape", [0, 0, -1]))
    inits.append(init(p + "scale", np.array(1.0 / np.sqrt(dh), dtype=np.float32)))
    nodes += [
        helper.make_node("Transpose", [p + "q_h"], [p + "q_t"], perm=[0, 2, 1, 3], name=p + "q_perm"),
        helper.make_node("Transpose", [p + "k_h"], [p + "k_t"], perm=[0, 2, 3, 1], name=p + "k_perm"),
        helper.make_node("Transpose", [p + "v_h"], [p + "v_t"], perm=[0, 2, 1, 3], name=p + "v_perm"),
        helper.make_node("MatMul", [p + "q_t", p + "k_t"], [p + "scores_raw"], name=p + "qk"),
        helper.make_node("Mul", [p + "scores_raw", p + "scale"], [p + "scores"], name=p + "qk_scale"),
    ]
    scores = p + "scores"
    if mask is not None:
        nodes.append(helper.make_node("Where", [mask, scores, "neg_inf"], [p + "scores_m"],
                                      name=p + "causal_mask"))
        scores = p + "scores_m"
    nodes += [
        helper.make_node("Softmax", [scores], [p + "probs"], axis=-1, name=p + "softmax"),
        helper.make_node("MatMul", [p + "probs", p + "v_t"], [p + "ctx"], name=p + "pv"),
        helper.make_node("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3], name=p + "ctx_perm"),
        helper.make_node("Reshape", [p + "ctx_t", p + "merge_shape"], [p + "ctx_m"], name=p + "merge_heads"),
        helper.make_node("MatMul", [p + "ctx_m", p + "Wo"], [p + "o_mm"], name=p + "o_proj"),
        helper.make_node("Add", [p + "o_mm", p + "bo"], [p + "attn_out"], name=p + "o_bias"),
    ]
    inits.append(init(p + "Wo", rng.standard_normal((D, D), dtype=np.float32) * sc))
    inits.append(init(p + "bo", rng.standard_normal((D,), dtype=np.float32) * 0.02))
    return p + "attn_out"


def make_attention(rng):
    B, S, D, H = 2, 8, 32, 4
    nodes, inits = [], []
    out = attention_block("", "x", nodes, inits, rng, B, S, D, H)
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out"))
    g = helper.make_graph(nodes, "attention",
                          [helper.make_tensor_value_info("x", F32, [B, S, D])],
                          [helper.make_tensor_value_info("y", F32, [B, S, D])], inits)
    return model(g), {"x": rng.standard_normal((B, S, D), dtype=np.float32)}


def make_tiny_gpt(rng, V=256, D=64, H=4, S=16, B=2, F=256, L=2, name="tiny_gpt"):
    nodes, inits = [], []
    inits += [
        init("tok_emb", rng.standard_normal((V, D), dtype=np.float32) * 0.1),
        init("pos_emb", rng.standard_normal((S, D), dtype=np.float32) * 0.1),
        const_i64("pos_ids", list(range(S))),
        init("causal", np.tril(np.ones((S, S), dtype=bool))),
        init("neg_inf", np.array(-1e9, dtype=np.float32)),
    ]
    nodes += [
        helper.make_node("Gather", ["tok_emb", "tokens"], ["tok"], name="embed_tokens"),
        helper.make_node("Gather", ["pos_emb", "pos_ids"], ["pos"], name="embed_positions"),
        helper.make_node("Add", ["tok", "pos"], ["h0"], name="embed_sum"),
    ]
    x = "h0"
    for l in range(L):
        p = "l%d_" % l
        for ln in ("ln1", "ln2"):
            inits.append(init(p + ln + "_g", 1 + 0.1 * rng.standard_normal((D,), dtype=np.float32)))
            inits.append(init(p + ln + "_b", 0.1 * rng.standard_normal((D,), dtype=np.float32)))
        nodes.append(helper.make_node("LayerNormalization", [x, p + "ln1_g", p + "ln1_b"],
                                      [p + "ln1"], axis=-1, epsilon=1e-5, name=p + "ln1"))
        a = attention_block(p, p + "ln1", nodes, inits, rng, B, S, D, H, mask="causal")
        nodes.append(helper.make_node("Add", [x, a], [p + "res1"], name=p + "residual1"))
        nodes.append(helper.make_node("LayerNormalization", [p + "res1", p + "ln2_g", p + "ln2_b"],
                                      [p + "ln2"], axis=-1, epsilon=1e-5, name=p + "ln2"))
        inits += [
            init(p + "W1", rng.standard_normal((D, F), dtype=np.float32) / np.sqrt(D)),
            init(p + "b1", rng.standard_normal((F,), dtype=np.float32) * 0.02),
            init(p + "W2", rng.standard_normal((F, D), dtype=np.float32) / np.sqrt(F)),
            init(p + "b2", rng.standard_normal((D,), dtype=np.float32) * 0.02),
        ]
        nodes += [
            helper.make_node("MatMul", [p + "ln2", p + "W1"], [p + "fc1"], name=p + "fc1"),
            helper.make_node("Add", [p + "fc1", p + "b1"], [p + "fc1_b"], name=p + "fc1_bias"),
            helper.make_node("Gelu", [p + "fc1_b"], [p + "act"], name=p + "gelu"),
            helper.make_node("MatMul", [p + "act", p + "W2"], [p + "fc2"], name=p + "fc2"),
            helper.make_node("Add", [p + "fc2", p + "b2"], [p + "fc2_b"], name=p + "fc2_bias"),
            helper.make_node("Add", [p + "res1", p + "fc2_b"], [p + "out"], name=p + "residual2"),
        ]
        x = p + "out"
    inits += [
        init("lnf_g", 1 + 0.1 * rng.standard_normal((D,), dtype=np.float32)),
        init("lnf_b", 0.1 * rng.standard_normal((D,), dtype=np.float32)),
        init("lm_head", rng.standard_normal((D, V), dtype=np.float32) / np.sqrt(D)),
    ]
    nodes += [
        helper.make_node("LayerNormalization", [x, "lnf_g", "lnf_b"], ["lnf"], axis=-1,
                         epsilon=1e-5, name="ln_f"),
        helper.make_node("MatMul", ["lnf", "lm_head"], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("tokens", I64, [B, S])],
                          [helper.make_tensor_value_info("logits", F32, [B, S, V])], inits)
    return model(g), {"tokens": rng.integers(0, V, (B, S), dtype=np.int64)}


def make_convnet(rng):
    B, C, HW = 2, 3, 16
    nodes, inits = [], []
    cin = C
    x = "x"
    for i, cout in enumerate((8, 16)):
        p = "c%d_" % i
        inits += [
            init(p + "W", rng.standard_normal((cout, cin, 3, 3), dtype=np.float32) / np.sqrt(9 * cin)),
            init(p + "B", rng.standard_normal((cout,), dtype=np.float32) * 0.1),
            init(p + "bn_scale", 1 + 0.1 * rng.standard_normal((cout,), dtype=np.float32)),
            init(p + "bn_bias", 0.1 * rng.standard_normal((cout,), dtype=np.float32)),
            init(p + "bn_mean", 0.1 * rng.standard_normal((cout,), dtype=np.float32)),
            init(p + "bn_var", (0.5 + rng.random((cout,))).astype(np.float32)),
        ]
        nodes += [
            helper.make_node("Conv", [x, p + "W", p + "B"], [p + "conv"], kernel_shape=[3, 3],
                             pads=[1, 1, 1, 1], name=p + "conv"),
            helper.make_node("BatchNormalization", [p + "conv", p + "bn_scale", p + "bn_bias",
                                                    p + "bn_mean", p + "bn_var"], [p + "bn"],
                             epsilon=1e-5, name=p + "bn"),
            helper.make_node("Relu", [p + "bn"], [p + "relu"], name=p + "relu"),
            helper.make_node("MaxPool", [p + "relu"], [p + "pool"], kernel_shape=[2, 2],
                             strides=[2, 2], name=p + "pool"),
        ]
        x, cin = p + "pool", cout
    inits += [
        init("fc_W", rng.standard_normal((10, 16 * 4 * 4), dtype=np.float32) / 16),
        init("fc_B", rng.standard_normal((10,), dtype=np.float32) * 0.1),
    ]
    nodes += [
        helper.make_node("Flatten", [x], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["y"], transB=1, name="fc"),
    ]
    g = helper.make_graph(nodes, "convnet",
                          [helper.make_tensor_value_info("x", F32, [B, C, HW, HW])],
                          [helper.make_tensor_value_info("y", F32, [B, 10])], inits)
    return model(g), {"x": rng.standard_normal((B, C, HW, HW), dtype=np.float32)}


def make_mlp_sharded(mlp):
    """mlp.onnx carrying ONNX's own sharding spec (onnx 1.18+): W1 split by
    columns over two devices, as `--shard W1=[_,tp]` on a tp=2 mesh says."""
    m = onnx.ModelProto()
    m.CopyFrom(mlp)
    cfg = m.configuration.add()
    cfg.name = "tp2"
    cfg.num_devices = 2
    cfg.device.extend(["0", "1"])
    fc1 = [n for n in m.graph.node if n.name == "fc1"][0]
    dc = fc1.device_configurations.add()
    dc.configuration_id = "tp2"
    spec = dc.sharding_spec.add()
    spec.tensor_name = "W1"
    spec.device.extend([0, 1])
    sd = spec.sharded_dim.add()
    sd.axis = 1
    ss = sd.simple_sharding.add()
    ss.dim_value = 256
    ss.num_shards = 2
    return m


def make_branches(rng):
    """Three parallel projections, each followed by a Relu: on tp with x's
    columns split, each projection is a partial sum needing its own
    all-reduce, all in flight together (the fused-collective case)."""
    d, n, b = 64, 32, 8
    nodes, inits, outs = [], [], []
    for k in "abc":
        inits.append(init("W" + k, rng.standard_normal((d, n), dtype=np.float32) / np.sqrt(d)))
        nodes.append(helper.make_node("MatMul", ["x", "W" + k], ["m" + k], name="proj_" + k))
    for k in "abc":
        nodes.append(helper.make_node("Relu", ["m" + k], ["y" + k], name="relu_" + k))
        outs.append(helper.make_tensor_value_info("y" + k, F32, [b, n]))
    g = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", F32, [b, d])], outs, inits)
    return model(g), {"x": rng.standard_normal((b, d), dtype=np.float32)}


# ---- per-op models: shapes from ORT are the expected shape inference ------

FAMILIES = ("math", "reduce", "index", "shape", "nn", "loss", "attn")


def op_cases():
    """(case, opset, nodes, inputs {name: array}, initializers {name: array}, outputs)"""
    r = np.random.default_rng(7)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    N = helper.make_node
    c = []

    def add(case, opset, nodes, inputs, inits, outputs):
        c.append((case, opset, nodes, inputs, inits, outputs))

    add("add_broadcast", 13, [N("Add", ["a", "b"], ["y"])], {"a": f(2, 1, 4), "b": f(3, 1)}, {}, ["y"])
    add("sub_scalar", 14, [N("Sub", ["a", "b"], ["y"])], {"a": f(3, 4)}, {"b": np.array(2.0, np.float32)}, ["y"])
    add("mul_int64", 14, [N("Mul", ["a", "b"], ["y"])],
        {"a": r.integers(-5, 5, (2, 3), dtype=np.int64), "b": r.integers(-5, 5, (3,), dtype=np.int64)}, {}, ["y"])
    add("div_broadcast", 14, [N("Div", ["a", "b"], ["y"])], {"a": f(4, 1, 5), "b": pos(1, 3, 1)}, {}, ["y"])
    add("pow_scalar", 15, [N("Pow", ["a", "b"], ["y"])], {"a": pos(2, 5)}, {"b": np.array(3.0, np.float32)}, ["y"])
    for op in ("Identity", "Sqrt", "Erf", "Tanh", "Relu", "Sigmoid"):
        inp = pos(2, 3, 4) if op == "Sqrt" else f(2, 3, 4)
        add(op.lower(), 13, [N(op, ["x"], ["y"])], {"x": inp}, {}, ["y"])
    add("gelu", 20, [N("Gelu", ["x"], ["y"])], {"x": f(3, 7)}, {}, ["y"])
    add("gelu_tanh", 20, [N("Gelu", ["x"], ["y"], approximate="tanh")], {"x": f(3, 7)}, {}, ["y"])
    add("cast_f32_i64", 13, [N("Cast", ["x"], ["y"], to=I64)], {"x": f(4, 3) * 10}, {}, ["y"])
    add("cast_i64_f32", 19, [N("Cast", ["x"], ["y"], to=F32)],
        {"x": r.integers(-9, 9, (5,), dtype=np.int64)}, {}, ["y"])
    add("matmul_1d_2d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": f(4), "b": f(4, 6)}, {}, ["y"])
    add("matmul_2d_1d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": f(3, 4), "b": f(4)}, {}, ["y"])
    add("matmul_3d_2d", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": f(2, 3, 4), "b": f(4, 5)}, {}, ["y"])
    add("matmul_batch_bcast", 13, [N("MatMul", ["a", "b"], ["y"])], {"a": f(2, 1, 3, 4), "b": f(5, 4, 6)}, {}, ["y"])
    add("gemm_trans", 13, [N("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        {"a": f(4, 3), "b": f(5, 4)}, {"c": f(1, 5)}, ["y"])
    add("gemm_noc", 13, [N("Gemm", ["a", "b"], ["y"])], {"a": f(3, 4), "b": f(4, 2)}, {}, ["y"])
    add("softmax_axis1", 13, [N("Softmax", ["x"], ["y"], axis=1)], {"x": f(2, 3, 4)}, {}, ["y"])
    add("softmax_default", 13, [N("Softmax", ["x"], ["y"])], {"x": f(2, 3, 4)}, {}, ["y"])
    add("layernorm_last", 17, [N("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)],
        {"x": f(2, 3, 8)}, {"s": f(8), "b": f(8)}, ["y"])
    add("layernorm_axis1_stats", 17, [N("LayerNormalization", ["x", "s"], ["y", "mean", "istd"], axis=1)],
        {"x": f(2, 3, 4)}, {"s": f(3, 4)}, ["y", "mean", "istd"])
    add("reducemean_attr", 13, [N("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)], {"x": f(2, 3, 4)}, {}, ["y"])
    add("reducemean_input", 18, [N("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
        {"x": f(2, 3, 4)}, {"axes": np.array([0, -1], np.int64)}, ["y"])
    add("reducesum_input", 13, [N("ReduceSum", ["x", "axes"], ["y"])],
        {"x": f(2, 3, 4)}, {"axes": np.array([1], np.int64)}, ["y"])
    add("reducesum_all", 13, [N("ReduceSum", ["x"], ["y"], keepdims=0)], {"x": f(2, 3, 4)}, {}, ["y"])
    add("transpose_default", 13, [N("Transpose", ["x"], ["y"])], {"x": f(2, 3, 4)}, {}, ["y"])
    add("transpose_perm", 13, [N("Transpose", ["x"], ["y"], perm=[1, 0, 3, 2])], {"x": f(2, 3, 4, 5)}, {}, ["y"])
    add("reshape_zero_neg", 14, [N("Reshape", ["x", "s"], ["y"])],
        {"x": f(2, 3, 4)}, {"s": np.array([0, -1], np.int64)}, ["y"])
    add("reshape_expand", 21, [N("Reshape", ["x", "s"], ["y"])],
        {"x": f(2, 12)}, {"s": np.array([2, 3, -1, 2], np.int64)}, ["y"])
    add("unsqueeze_input", 13, [N("Unsqueeze", ["x", "axes"], ["y"])],
        {"x": f(3, 4)}, {"axes": np.array([0, -1], np.int64)}, ["y"])
    add("squeeze_input", 13, [N("Squeeze", ["x", "axes"], ["y"])],
        {"x": f(1, 3, 1, 4)}, {"axes": np.array([-2], np.int64)}, ["y"])
    add("squeeze_all", 13, [N("Squeeze", ["x"], ["y"])], {"x": f(1, 3, 1, 4)}, {}, ["y"])
    add("concat_neg_axis", 13, [N("Concat", ["a", "b", "c"], ["y"], axis=-1)],
        {"a": f(2, 3), "b": f(2, 1), "c": f(2, 4)}, {}, ["y"])
    add("split_input", 13, [N("Split", ["x", "s"], ["y0", "y1"], axis=1)],
        {"x": f(2, 5)}, {"s": np.array([2, 3], np.int64)}, ["y0", "y1"])
    add("split_equal", 13, [N("Split", ["x"], ["y0", "y1", "y2"], axis=-1)], {"x": f(2, 6)}, {}, ["y0", "y1", "y2"])
    add("split_num_outputs", 18, [N("Split", ["x"], ["y0", "y1", "y2"], axis=0, num_outputs=3)],
        {"x": f(7, 2)}, {}, ["y0", "y1", "y2"])
    add("slice_basic", 13, [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
        {"x": f(4, 10)}, {"st": np.array([1, -8], np.int64), "en": np.array([1000, -1], np.int64),
                          "ax": np.array([0, 1], np.int64), "sp": np.array([1, 2], np.int64)}, ["y"])
    add("slice_reverse", 13, [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
        {"x": f(3, 6)}, {"st": np.array([-1], np.int64), "en": np.array([-1000], np.int64),
                         "ax": np.array([-1], np.int64), "sp": np.array([-2], np.int64)}, ["y"])
    add("slice_no_axes", 13, [N("Slice", ["x", "st", "en"], ["y"])],
        {"x": f(5, 4)}, {"st": np.array([1, 0], np.int64), "en": np.array([3, 2], np.int64)}, ["y"])
    add("gather_axis0", 13, [N("Gather", ["x", "i"], ["y"])],
        {"x": f(5, 3)}, {"i": np.array([[0, 4], [-1, 2]], np.int64)}, ["y"])
    add("gather_axis1_scalar", 13, [N("Gather", ["x", "i"], ["y"], axis=-1)],
        {"x": f(2, 5, 3)}, {"i": np.array(1, np.int64)}, ["y"])
    add("where_broadcast", 16, [N("Where", ["c", "a", "b"], ["y"])],
        {"c": r.random((3, 1)) > 0.5, "a": f(1, 4), "b": f(3, 4)}, {}, ["y"])
    add("conv_pads_strides", 13, [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1],
                                    dilations=[1, 2])],
        {"x": f(1, 2, 7, 8)}, {"w": f(4, 2, 3, 3), "b": f(4)}, ["y"])
    add("conv_group_same", 13, [N("Conv", ["x", "w"], ["y"], group=2, auto_pad="SAME_UPPER", strides=[2, 2])],
        {"x": f(2, 4, 5, 5)}, {"w": f(6, 2, 3, 3)}, ["y"])
    add("conv_1d", 13, [N("Conv", ["x", "w"], ["y"])], {"x": f(2, 3, 9)}, {"w": f(5, 3, 4)}, ["y"])
    add("maxpool_ceil", 13, [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
        {"x": f(1, 2, 6, 6)}, {}, ["y"])
    add("maxpool_pads_indices", 13, [N("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])],
        {"x": f(1, 1, 4, 5)}, {}, ["y", "idx"])
    add("globalavgpool", 13, [N("GlobalAveragePool", ["x"], ["y"])], {"x": f(2, 3, 4, 5)}, {}, ["y"])
    add("flatten_axis0", 13, [N("Flatten", ["x"], ["y"], axis=0)], {"x": f(2, 3, 4)}, {}, ["y"])
    add("flatten_neg", 13, [N("Flatten", ["x"], ["y"], axis=-1)], {"x": f(2, 3, 4)}, {}, ["y"])
    add("batchnorm", 15, [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        {"x": f(2, 3, 4, 4)}, {"s": f(3), "b": f(3), "m": f(3), "v": pos(3)}, ["y"])
    add("constant_ints", 13, [N("Constant", [], ["k"], value_ints=[3, 1, 4]),
                              N("Add", ["x", "k"], ["y"])],
        {"x": r.integers(0, 9, (2, 3), dtype=np.int64)}, {}, ["y"])
    # Einsum: its own generator, so these never shift the cases above.
    e = np.random.default_rng(1212)
    ef = lambda *s: e.standard_normal(s, dtype=np.float32)
    for name, eq, shapes in (("bmm", "bij,bjk->bik", [(2, 4, 6), (2, 6, 4)]),
                             ("transpose", "ij->ji", [(4, 6)]),
                             ("sum_rows", "ij->i", [(4, 6)]),
                             ("inner", "i,i", [(6,), (6,)]),
                             ("diagonal", "ii->i", [(4, 4)]),
                             ("implicit", "ij,jk", [(2, 4), (4, 6)]),
                             ("ellipsis", "...ij,...jk->...ik", [(2, 2, 4), (2, 4, 2)]),
                             ("three", "ab,bc,cd->ad", [(2, 4), (4, 2), (2, 6)])):
        ins = {"x%d" % i: ef(*s) for i, s in enumerate(shapes)}
        add("einsum_" + name, 12, [N("Einsum", list(ins), ["y"], equation=eq)], ins, {}, ["y"])
    # Quantize -> dequantize (the QDQ pattern of quantized exports): per
    # tensor (int8), per axis (uint8) and per block along dim 1.
    sc = lambda *s: (e.random(s, dtype=np.float32) * 0.05 + 0.01)
    add("qdq_tensor", 21, [N("QuantizeLinear", ["x", "s", "z"], ["q"]), N("DequantizeLinear", ["q", "s", "z"], ["y"])],
        {"x": ef(4, 6)}, {"s": np.array(0.02, np.float32), "z": np.array(3, np.int8)}, ["q", "y"])
    add("qdq_axis", 21, [N("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                         N("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
        {"x": ef(4, 6)}, {"s": sc(6), "z": e.integers(100, 150, 6).astype(np.uint8)}, ["q", "y"])
    add("qdq_blocked", 21, [N("QuantizeLinear", ["x", "s"], ["q"], axis=1, block_size=2),
                            N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2)],
        {"x": ef(4, 6)}, {"s": sc(4, 3)}, ["y"])
    # NonZero of a constant (a mask stored in the model) folds; its indices
    # then gather from a run-time input.
    mask = np.array([[1, 0, 3], [0, 5, 0]], np.float32)
    add("nonzero_const", 13, [N("NonZero", ["m"], ["nz"]), N("Gather", ["x", "nz"], ["y"], axis=1)],
        {"x": ef(4, 3)}, {"m": mask}, ["y"])
    return c


def family_cases(fam):
    """The cases of one op family, from tests/models/op_cases_<family>.py
    (each with its own seeded generator, so families never disturb each
    other or the core cases)."""
    c = []
    importlib.import_module("op_cases_" + fam).cases(lambda *case: c.append(case))
    return c


def write_op_models(cases, expected):
    folder = os.path.join(MODELS, "ops")
    lines = []
    for case, opset, nodes, inputs, inits, outputs in cases:
        np_to_onnx = {np.dtype(np.float32): F32, np.dtype(np.int64): I64, np.dtype(bool): BOOL}
        vis = [helper.make_tensor_value_info(k, np_to_onnx[v.dtype], list(v.shape))
               for k, v in inputs.items()]
        for i, n in enumerate(nodes):
            n.name = n.name or "%s_%d" % (case, i)
        outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
        g = helper.make_graph(nodes, case, vis, outs, [init(k, v) for k, v in inits.items()])
        m = model(g, opset=opset)
        path = os.path.join(folder, case + ".onnx")
        save(m, path)
        names, res = run_ort(path, inputs)
        for nm, v in zip(names, res):
            dt = str(v.dtype)  # float32, int64, bool, int8, uint8 ... as dtype_name() spells them
            lines.append("%s %s %s [%s]" % (case, nm, dt, ", ".join(str(s) for s in v.shape)))
        write_golden(os.path.join(GOLDEN, "ops", case), inputs, names, res)
    with open(os.path.join(folder, expected), "w") as fh:
        fh.write("# case output dtype shape -- written by make_models.py from ONNX Runtime\n")
        fh.write("\n".join(lines) + "\n")


def make_op_models(family=None):
    """All per-op models (core cases -> ops/expected.txt, each family's ->
    ops/expected_<family>.txt), or with `family` only that family's, so
    the families can be worked on independently."""
    folder = os.path.join(MODELS, "ops")
    if family is None:
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        write_op_models(op_cases(), "expected.txt")
    for fam in FAMILIES if family is None else (family,):
        write_op_models(family_cases(fam), "expected_%s.txt" % fam)


# ---- malformed inputs ------------------------------------------------------

def make_bad_models(mlp_bytes):
    folder = os.path.join(MODELS, "bad")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    N = helper.make_node
    x = helper.make_tensor_value_info("x", F32, [2, 3])
    y = helper.make_tensor_value_info("y", F32, [2, 3])

    def bad(name, nodes, inputs=(x,), outputs=(y,), inits=(), opset=OPSET):
        g = helper.make_graph(nodes, name, list(inputs), list(outputs), list(inits))
        save(model(g, opset=opset), os.path.join(folder, name + ".onnx"))

    with open(os.path.join(folder, "truncated.onnx"), "wb") as fh:
        fh.write(mlp_bytes[: len(mlp_bytes) // 2])
    with open(os.path.join(folder, "random_bytes.onnx"), "wb") as fh:
        fh.write(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    bad("dangling_input", [N("Add", ["x", "ghost"], ["y"], name="add_ghost")])
    bad("cycle", [N("Relu", ["x"], ["a"], name="entry"),
                  N("Add", ["a", "c"], ["b"], name="cyc_add"),
                  N("Relu", ["b"], ["c"], name="cyc_relu"),
                  N("Identity", ["c"], ["y"], name="exit")])
    bad("negative_dim", [N("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", F32, [2, -3])])
    bad("dims_overflow", [N("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", F32, [1 << 40, 1 << 40])])
    bad("unknown_op", [N("FooBar", ["x"], ["y"], name="mystery")])
    loop_body = helper.make_graph([], "body", [], [])
    bad("loop", [N("Loop", ["", ""], ["y"], body=loop_body, name="the_loop")])
    bad("unsupported_dtype", [N("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", TensorProto.COMPLEX64, [2, 3])])
    bad("symbolic_dim", [N("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", F32, ["batch", 3])],
        outputs=[helper.make_tensor_value_info("y", F32, ["batch", 3])])
    bad("shape_mismatch", [N("Add", ["x", "w"], ["y"], name="bad_add")],
        inits=[init("w", np.zeros((4,), np.float32))])

    def external(name, location, offset, length, where=folder):
        t = TensorProto()
        t.name = "w"
        t.data_type = F32
        t.dims.extend([2, 3])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        g = helper.make_graph([N("Add", ["x", "w"], ["y"], name="add_w")], name, [x], [y], [t])
        save(model(g), os.path.join(where, name + ".onnx"))

    good = os.path.join(MODELS, "external")
    if os.path.isdir(good):
        shutil.rmtree(good)
    os.makedirs(good)
    for d in (folder, good):
        with open(os.path.join(d, "weights.bin"), "wb") as fh:
            fh.write(np.arange(16, dtype=np.float32).tobytes())
    external("external_escape", "../outside.bin", 0, 24)
    external("external_absolute", "/etc/passwd", 0, 24)
    external("external_past_end", "weights.bin", 1024, 24)
    external("external_ok", "weights.bin", 8, 24, where=good)


# ---- partial sums through linear reshaping ops -------------------------------
# Regression models for a wrong-result bug: a value partial over a mesh axis
# (a Gather from a table split on the gathered axis, or a MatMul contracting
# a split dim) passes through Reshape / Unsqueeze / Flatten into a consumer
# that wants it split over that same axis. Slicing the partial value and
# reducing later sums different rows on each rank; the plan must
# reduce-scatter instead. Cases in tests/e2e/cases.txt shard them.

def make_partial_models():
    rng = np.random.default_rng(909)
    idx = const_i64("idx", [3, 0, 2, 1])
    cases = {
        # a [4,8] split [dp,_] -> Gather rows -> op -> Add(s split on dim 0)
        "partial_gather_reshape": ([4, 8], [4, 1, 8], "Reshape", [const_i64("shape", [4, 1, 8])], {}),
        "partial_gather_unsqueeze": ([4, 8], [4, 1, 8], "Unsqueeze", [const_i64("axes", [1])], {}),
        "partial_gather_flatten": ([4, 2, 4], [4, 8], "Flatten", [], {"axis": 1}),
    }
    for name, (ashape, sshape, op, extra, attrs) in cases.items():
        nodes = [helper.make_node("Gather", ["a", "idx"], ["g"], axis=0, name="gather"),
                 helper.make_node(op, ["g"] + [e.name for e in extra], ["r"], name="reshape", **attrs),
                 helper.make_node("Add", ["r", "s"], ["out"], name="add")]
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("a", F32, ashape),
                                                helper.make_tensor_value_info("s", F32, sshape)],
                                  [helper.make_tensor_value_info("out", F32, sshape)], [idx] + extra)
        feeds = {"a": rng.standard_normal(ashape).astype(np.float32),
                 "s": rng.standard_normal(sshape).astype(np.float32)}
        path = os.path.join(MODELS, name + ".onnx")
        save(model(graph), path)
        write_golden(os.path.join(GOLDEN, name), feeds, *run_ort(path, feeds))
    # x [4,8] split [_,tp] @ W -> partial over tp -> Reshape / Flatten -> Add(s split [tp,...])
    for name, op, extra, attrs, sshape in (
            ("partial_matmul_reshape", "Reshape", [const_i64("shape", [2, 2, 8])], {}, [2, 2, 8]),
            ("partial_matmul_flatten", "Flatten", [], {"axis": 1}, [4, 16])):
        xshape = [4, 8] if op == "Reshape" else [4, 2, 8]
        nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
                 helper.make_node(op, ["h"] + [e.name for e in extra], ["r"], name="reshape", **attrs),
                 helper.make_node("Add", ["r", "s"], ["out"], name="add")]
        W = init("W", rng.standard_normal((8, 8)) * 0.3)
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F32, xshape),
                                                helper.make_tensor_value_info("s", F32, sshape)],
                                  [helper.make_tensor_value_info("out", F32, sshape)], [W] + extra)
        feeds = {"x": rng.standard_normal(xshape).astype(np.float32),
                 "s": rng.standard_normal(sshape).astype(np.float32)}
        path = os.path.join(MODELS, name + ".onnx")
        save(model(graph), path)
        write_golden(os.path.join(GOLDEN, name), feeds, *run_ort(path, feeds))


# ---- an exporter-style model ------------------------------------------------
# What torch.onnx.export writes for a GPT-2-like block, unsimplified: the
# reshape targets, position ids and the causal and padding masks are
# computed from the input's shape at run time (Shape, Gather, Range,
# Unsqueeze, Concat, LessOrEqual, Cast, And, Where), which the compiler
# folds at import. The padding mask under data parallelism is the path
# where partial sums once went wrong.

def make_exported_gpt():
    rng = np.random.default_rng(777)
    B, S, D, H, V = 2, 8, 32, 4, 64
    hd = D // H
    N = helper.make_node
    w = lambda *sh: init  # placeholder to keep the names below short
    del w
    inits = [init("wte", rng.standard_normal((V, D)) * 0.3), init("wpe", rng.standard_normal((S, D)) * 0.3),
             init("ln_g", 1 + 0.1 * rng.standard_normal(D)), init("ln_b", 0.1 * rng.standard_normal(D)),
             init("lnf_g", 1 + 0.1 * rng.standard_normal(D)), init("lnf_b", 0.1 * rng.standard_normal(D)),
             init("lm_head", rng.standard_normal((D, V)) * 0.3)]
    for nm in ("q", "k", "v", "o"):
        inits += [init("W" + nm, rng.standard_normal((D, D)) / np.sqrt(D)), init("b" + nm, 0.1 * rng.standard_normal(D))]
    consts = {"c0": 0, "c1": 1, "cH": H, "chd": hd, "cD": D}
    nodes = [N("Constant", [], [k], value=helper.make_tensor(k + "_v", I64, [], [v])) for k, v in consts.items()]
    nodes += [
        N("Shape", ["input_ids"], ["shp"]), N("Gather", ["shp", "c0"], ["bsz"], axis=0),
        N("Gather", ["shp", "c1"], ["seq"], axis=0),
        N("Range", ["c0", "seq", "c1"], ["pos"]), N("Unsqueeze", ["pos", "ax0"], ["pos_ids"]),
        N("Gather", ["wte", "input_ids"], ["tok"]), N("Gather", ["wpe", "pos_ids"], ["pe"]),
        N("Add", ["tok", "pe"], ["h0"]),
        N("LayerNormalization", ["h0", "ln_g", "ln_b"], ["x"], axis=-1),
        N("Unsqueeze", ["bsz", "ax0"], ["b1"]), N("Unsqueeze", ["seq", "ax0"], ["s1"]),
        N("Unsqueeze", ["cH", "ax0"], ["h1"]), N("Unsqueeze", ["chd", "ax0"], ["d1"]),
        N("Unsqueeze", ["cD", "ax0"], ["D1"]),
        N("Concat", ["b1", "s1", "h1", "d1"], ["heads_shape"], axis=0),
        N("Concat", ["b1", "s1", "D1"], ["merge_shape"], axis=0),
        # causal mask: key position <= query position, and the padding mask
        N("Unsqueeze", ["pos", "ax0"], ["kpos"]), N("Unsqueeze", ["pos", "ax1"], ["qpos"]),
        N("LessOrEqual", ["kpos", "qpos"], ["causal"]),
        N("Cast", ["attention_mask"], ["am_b"], to=BOOL), N("Unsqueeze", ["am_b", "ax12"], ["am4"]),
        N("And", ["causal", "am4"], ["mask"]),
    ]
    for nm in ("q", "k", "v"):
        nodes += [N("MatMul", ["x", "W" + nm], [nm + "_mm"]), N("Add", [nm + "_mm", "b" + nm], [nm + "_b"]),
                  N("Reshape", [nm + "_b", "heads_shape"], [nm + "_h"])]
    nodes += [
        N("Transpose", ["q_h"], ["qt"], perm=[0, 2, 1, 3]), N("Transpose", ["k_h"], ["kt"], perm=[0, 2, 3, 1]),
        N("Transpose", ["v_h"], ["vt"], perm=[0, 2, 1, 3]),
        N("MatMul", ["qt", "kt"], ["sc0"]), N("Mul", ["sc0", "scale"], ["sc"]),
        N("Where", ["mask", "sc", "neg"], ["scm"]), N("Softmax", ["scm"], ["pr"], axis=-1),
        N("MatMul", ["pr", "vt"], ["ctx"]), N("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        N("Reshape", ["ctxt", "merge_shape"], ["ctxm"]),
        N("MatMul", ["ctxm", "Wo"], ["o_mm"]), N("Add", ["o_mm", "bo"], ["attn"]),
        N("Add", ["h0", "attn"], ["h1r"]),
        N("LayerNormalization", ["h1r", "lnf_g", "lnf_b"], ["hf"], axis=-1),
        N("MatMul", ["hf", "lm_head"], ["logits"]),
    ]
    inits += [const_i64("ax0", [0]), const_i64("ax1", [1]), const_i64("ax12", [1, 2]),
              init("scale", np.array(1 / np.sqrt(hd), np.float32)), init("neg", np.array(-1e9, np.float32))]
    graph = helper.make_graph(nodes, "exported_gpt",
                              [helper.make_tensor_value_info("input_ids", I64, [B, S]),
                               helper.make_tensor_value_info("attention_mask", I64, [B, S])],
                              [helper.make_tensor_value_info("logits", F32, [B, S, V])], inits)
    mask = np.ones((B, S), np.int64)
    mask[1, 5:] = 0  # the second sequence is padded
    feeds = {"input_ids": rng.integers(0, V, (B, S), dtype=np.int64), "attention_mask": mask}
    path = os.path.join(MODELS, "exported_gpt.onnx")
    save(model(graph), path)
    write_golden(os.path.join(GOLDEN, "exported_gpt"), feeds, *run_ort(path, feeds))


# ---- numerically hard cases: where the C and CUDA kernels must agree -------
# LayerNorm of rows whose mean is ~100x their spread (a one-pass variance
# E[x^2] - E[x]^2 loses every digit there), and int64 Div / Pow with
# negative operands and negative exponents (truncating, as ONNX Runtime).

def make_stress_models():
    rng = np.random.default_rng(4242)
    x = (1000.0 + 10.0 * rng.standard_normal((4, 256))).astype(np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5, name="ln")]
    graph = helper.make_graph(nodes, "layernorm_offset", [helper.make_tensor_value_info("x", F32, [4, 256])],
                              [helper.make_tensor_value_info("y", F32, [4, 256])],
                              [init("g", rng.standard_normal(256)), init("b", rng.standard_normal(256))])
    path = os.path.join(MODELS, "layernorm_offset.onnx")
    save(model(graph), path)
    # ONNX Runtime 1.22's CPU LayerNormalization itself uses the one-pass
    # variance and is off by 2.5e-2 here, so this golden is the float64
    # reference instead (ORT's output is kept beside it for comparison).
    g, b = (numpy_helper.to_array(t).astype(np.float64) for t in graph.initializer)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    write_golden(os.path.join(GOLDEN, "layernorm_offset"), {"x": x}, ["y"], [ref.astype(np.float32)])
    np.save(os.path.join(GOLDEN, "layernorm_offset", "ort_y.npy"), run_ort(path, {"x": x})[1][0])

    a = rng.integers(-50, 50, (4, 16)).astype(np.int64)
    b = rng.choice([-7, -3, -2, -1, 1, 2, 5], (4, 16)).astype(np.int64)
    base = rng.integers(-3, 4, (4, 16)).astype(np.int64)
    base[base == 0] = 2  # 0 to a negative power is undefined in ONNX Runtime too
    expo = rng.integers(-2, 5, (4, 16)).astype(np.int64)
    nodes = [helper.make_node("Div", ["a", "b"], ["q"], name="div"),
             helper.make_node("Pow", ["base", "expo"], ["p"], name="pow")]
    graph = helper.make_graph(nodes, "int_ops", [helper.make_tensor_value_info(n, I64, [4, 16])
                                                 for n in ("a", "b", "base", "expo")],
                              [helper.make_tensor_value_info("q", I64, [4, 16]),
                               helper.make_tensor_value_info("p", I64, [4, 16])])
    feeds = {"a": a, "b": b, "base": base, "expo": expo}
    path = os.path.join(MODELS, "int_ops.onnx")
    save(model(graph), path)
    write_golden(os.path.join(GOLDEN, "int_ops"), feeds, *run_ort(path, feeds))


# ---- float16 and bfloat16 variants ------------------------------------------

def low_precision(m, elem):
    """m with every float32 tensor stored as `elem` (FLOAT16 or BFLOAT16):
    initializers rounded (and clipped to the type's finite range), graph
    inputs and outputs retyped. Nodes are unchanged; types flow from the
    weights."""
    import ml_dtypes
    np_t = np.float16 if elem == TensorProto.FLOAT16 else ml_dtypes.bfloat16
    top = float(np.finfo(np.float16).max) if elem == TensorProto.FLOAT16 else 3e38
    m = onnx.ModelProto.FromString(m.SerializeToString())
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == F32:
            a = np.clip(numpy_helper.to_array(t), -top, top).astype(np_t)
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == F32:
            vi.type.tensor_type.elem_type = elem
    return m


def as_float32(m):
    """The same model computed in float32 on the low-precision weights
    (exact in float32): the reference where ONNX Runtime has no CPU kernel
    for the type."""
    import ml_dtypes
    m = onnx.ModelProto.FromString(m.SerializeToString())
    for i, t in enumerate(m.graph.initializer):
        if t.data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            a = numpy_helper.to_array(t)
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float32), t.name))
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            vi.type.tensor_type.elem_type = F32
    return m


def make_low_precision_gpt(gpt, feeds):
    """tiny_gpt stored in float16 and in bfloat16. The golden is ONNX
    Runtime's own float16 run where its CPU kernels cover the model, else
    ONNX Runtime on the float32 graph over the same rounded weights, its
    logits rounded to the type (compare.py's per-type tolerance covers the
    rounding of every intermediate)."""
    import ml_dtypes
    for suffix, elem, np_t in (("f16", TensorProto.FLOAT16, np.float16),
                               ("bf16", TensorProto.BFLOAT16, ml_dtypes.bfloat16)):
        name = "tiny_gpt_" + suffix
        m = low_precision(gpt, elem)
        path = os.path.join(MODELS, name + ".onnx")
        save(m, path)
        try:
            names, outs = run_ort(path, feeds)
        except Exception:  # no CPU kernel for this type: the float32 reference
            ref = os.path.join(MODELS, name + ".ref.onnx")
            save(as_float32(m), ref)
            names, outs = run_ort(ref, feeds)
            os.unlink(ref)
            outs = [o.astype(np_t) for o in outs]
        write_golden(os.path.join(GOLDEN, name), feeds, names, outs)


def main():
    rng = np.random.default_rng(2026)
    for name, fn in (("mlp", make_mlp), ("attention", make_attention),
                     ("tiny_gpt", make_tiny_gpt), ("convnet", make_convnet), ("branches", make_branches)):
        m, feeds = fn(rng)
        path = os.path.join(MODELS, name + ".onnx")
        save(m, path)
        names, outs = run_ort(path, feeds)
        write_golden(os.path.join(GOLDEN, name), feeds, names, outs)
        if name == "mlp":
            save(make_mlp_sharded(m), os.path.join(MODELS, "mlp_sharded.onnx"))
        if name == "tiny_gpt":
            gpt, gpt_feeds = m, feeds
    make_op_models()
    make_partial_models()
    make_stress_models()
    make_exported_gpt()
    make_low_precision_gpt(gpt, gpt_feeds)
    with open(os.path.join(MODELS, "mlp.onnx"), "rb") as fh:
        make_bad_models(fh.read())
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--ops-family":
        make_op_models(sys.argv[2])  # e.g. make_models.py --ops-family math
        sys.exit(0)
    sys.exit(main())
