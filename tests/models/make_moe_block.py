#!/usr/bin/env python3
"""Writes single mixture-of-experts blocks in the batched_mm export's pattern.

The node chain HF transformers' batched_mm experts export to (see
make_moe_exports.py), built with onnx.helper alone so tests can vary N, D,
F, E, k and the top-k normalisation without torch:

  router   logits = MatMul(x, Wr [D, E]); probs = Softmax(logits, -1);
           topv, topi = TopK(probs, k); w = topv / ReduceSum(topv) (norm_topk) or topv
  tokens   xf = Flatten(Tile(Unsqueeze(x, 1), [1, k, 1]), 2)            [N*k, D]
           wf = Reshape(w, [-1]); idf = Reshape(topi, [-1])              [N*k]
  experts  s1 = Squeeze(MatMul(Gather(W1 [E, 2F, D], idf), Unsqueeze(xf, 2)), 2)
           h = SiLU(s1[:, :F]) * s1[:, F:]                              [N*k, F]
           s2 = Squeeze(MatMul(Gather(W2 [E, D, F], idf), Unsqueeze(h, 2)), 2)
  combine  y = ReduceSum(Reshape(s2 * Unsqueeze(wf, 1), [N, k, D]), axes=[1])

Input x float32 [N, D], output y float32 [N, D]; weights Wr, W1, W2 are
initializers (names in WEIGHTS), constants are Constant nodes (opset 17).

  build/venv/bin/python tests/models/make_moe_block.py [OUT.onnx]
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHTS = ("Wr", "W1", "W2")  # router [D, E], gate_up [E, 2F, D], down [E, D, F]


def weights(d, f, e, seed):
    """Wr, W1, W2: O(1) activations for x ~ N(0, 1), router logits spread
    enough (std about 1.5) that the routing is far from uniform and ties."""
    rng = np.random.default_rng(seed)
    wr = rng.standard_normal((d, e)) * 1.5 / np.sqrt(d)
    w1 = rng.standard_normal((e, 2 * f, d)) / np.sqrt(d)
    w2 = rng.standard_normal((e, d, f)) / np.sqrt(f)
    return [a.astype(np.float32) for a in (wr, w1, w2)]


def make_block(path, n, d, f, e, k, norm_topk, seed):
    """Writes the block to path; returns (Wr, W1, W2)."""
    wr, w1, w2 = weights(d, f, e, seed)
    nodes = []

    def const(name, vals):
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.array(vals, np.int64), name)))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name="/moe/" + outs[0], **attrs))

    # router
    node("MatMul", ["x", "Wr"], ["logits"])
    node("Softmax", ["logits"], ["probs"], axis=-1)
    node("TopK", ["probs", const("k", [k])], ["topv", "topi"], axis=-1, largest=1, sorted=1)
    w = "topv"
    if norm_topk:
        node("ReduceSum", ["topv", const("axes_last", [-1])], ["topsum"], keepdims=1)
        node("Div", ["topv", "topsum"], ["w"])
        w = "w"
    # every token repeated k times, one row per (token, choice)
    node("Unsqueeze", ["x", const("axes_1", [1])], ["xu"])
    node("Tile", ["xu", const("repeats", [1, k, 1])], ["xt"])
    node("Flatten", ["xt"], ["xf"], axis=2)
    node("Reshape", [w, const("flat", [-1])], ["wf"])
    node("Reshape", ["topi", const("flat_i", [-1])], ["idf"])
    # gate_up projection of each row by its expert, SiLU-gated
    node("Gather", ["W1", "idf"], ["g1"], axis=0)
    node("Unsqueeze", ["xf", const("axes_2", [2])], ["xc"])
    node("MatMul", ["g1", "xc"], ["m1"])
    node("Squeeze", ["m1", const("axes_2s", [2])], ["s1"])
    node("Slice", ["s1", const("a_start", [0]), const("a_end", [f]), const("a_axes", [1])], ["a"])
    node("Slice", ["s1", const("b_start", [f]), const("b_end", [2 * f]), const("b_axes", [1])], ["b"])
    node("Sigmoid", ["a"], ["sg"])
    node("Mul", ["a", "sg"], ["act"])
    node("Mul", ["act", "b"], ["h"])
    # down projection
    node("Gather", ["W2", "idf"], ["g2"], axis=0)
    node("Unsqueeze", ["h", const("axes_2h", [2])], ["hc"])
    node("MatMul", ["g2", "hc"], ["m2"])
    node("Squeeze", ["m2", const("axes_2m", [2])], ["s2"])
    # weighted sum over each token's k choices
    node("Unsqueeze", ["wf", const("axes_1w", [1])], ["wc"])
    node("Mul", ["s2", "wc"], ["p"])
    node("Reshape", ["p", const("nkd", [n, k, d])], ["r"])
    node("ReduceSum", ["r", const("axes_k", [1])], ["y"], keepdims=0)

    graph = helper.make_graph(
        nodes, "moe_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, d])],
        [numpy_helper.from_array(a, name) for a, name in zip((wr, w1, w2), WEIGHTS)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_moe_block")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return wr, w1, w2


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "moe_block.onnx"
    make_block(out, n=16, d=16, f=32, e=4, k=2, norm_topk=True, seed=0)
    print("wrote", out)
