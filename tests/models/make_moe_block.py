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

style="eager" writes the same block as transformers' eager export does
(make_moe_exports.py): a one-hot routing mask, the experts hit found with
NonZero and cut by a Split into E pieces (as if the traced input hit all
E), then one unrolled body per piece that picks its (choice, token) pairs
with NonZero, runs its expert on them (Slice bounds from Shape, as
exported) and adds them into the output with ScatterElements. ONNX Runtime
runs it only on inputs that hit every expert. broken= makes near misses
that must not be rewritten: "missing_body" leaves the last expert's body
out, "row_mean" subtracts the mean over rows in the middle (not row-wise).

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


def make_block(path, n, d, f, e, k, norm_topk, seed, style="batched", broken=None):
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
    if style == "eager":
        eager_experts(nodes, const, node, w, n, d, f, e, k, broken)
    else:
        batched_experts(const, node, w, n, d, f, k)

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


def batched_experts(const, node, w, n, d, f, k):
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


def eager_experts(nodes, const, node, w, n, d, f, e, k, broken):
    def scalar(name, v):
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.array(v, np.int64), name)))
        return name

    zeros = "zeros"
    nodes.append(helper.make_node("Constant", [], [zeros], name=zeros,
                                  value=numpy_helper.from_array(np.zeros((n, d), np.float32), zeros)))
    # the routing mask [E+1, k, N] and the experts it hits, cut into E pieces
    node("OneHot", ["topi", scalar("depth", e + 1), const("onoff", [0, 1])], ["onehot"], axis=-1)
    node("Transpose", ["onehot"], ["mask"], perm=[2, 1, 0])
    node("ReduceSum", ["mask", const("axes_nk", [-1, -2])], ["hits"], keepdims=0)
    node("Greater", ["hits", scalar("zero_i", 0)], ["hit"])
    node("NonZero", ["hit"], ["hit_nz"])
    node("Transpose", ["hit_nz"], ["hit_t"], perm=[1, 0])
    node("Split", ["hit_t", const("ones", [1] * e)], ["piece%d" % i for i in range(e)], axis=0)
    node("Unsqueeze", [w, const("axes_w2", [2])], ["wu"])
    node("Flatten", ["wu"], ["wflat"], axis=2)
    node("Shape", ["wu"], ["wu_shape"])
    node("Gather", ["wu_shape", const("one", [1])], ["kk"], axis=0)
    acc = zeros
    for i in range(e - 1 if broken == "missing_body" else e):
        def t(name):
            return "%s_%d" % (name, i)
        node("Squeeze", ["piece%d" % i, const(t("axes0"), [0])], [t("sq")])
        node("Gather", [t("sq"), scalar(t("first"), 0)], [t("e")], axis=0)
        node("Gather", ["mask", t("e")], [t("me")], axis=0)
        node("Cast", [t("me")], [t("mb")], to=TensorProto.BOOL)
        node("NonZero", [t("mb")], [t("nz")])
        node("Transpose", [t("nz")], [t("nzt")], perm=[1, 0])
        node("Split", [t("nzt"), const(t("pt"), [1, 1])], [t("p"), t("t")], axis=1)
        node("Squeeze", [t("p"), const(t("axes1p"), [1])], [t("pos")])
        node("Squeeze", [t("t"), const(t("axes1t"), [1])], [t("tok")])
        node("Gather", ["x", t("tok")], [t("rows")], axis=0)
        node("Gather", ["W1", t("e")], [t("w1e")], axis=0)
        node("Transpose", [t("w1e")], [t("w1t")], perm=[1, 0])
        node("MatMul", [t("rows"), t("w1t")], [t("a")])
        # the halves' bounds from a's shape, as exported: (last + 1) / 2
        node("Shape", [t("a")], [t("ash")])
        node("Gather", [t("ash"), const(t("m1"), [-1])], [t("last")], axis=0)
        node("Add", [t("last"), const(t("c1"), [1])], [t("lp")])
        node("Div", [t("lp"), const(t("c2"), [2])], [t("half")])
        node("Mul", [t("half"), const(t("c2b"), [2])], [t("full")])
        a = t("a")
        if broken == "row_mean":
            node("ReduceMean", [a], [t("amean")], axes=[0], keepdims=1)
            node("Sub", [a, t("amean")], [t("ac")])
            a = t("ac")
        node("Slice", [a, const(t("s0"), [0]), t("half"), const(t("ax"), [-1])], [t("ga")])
        node("Slice", [a, t("half"), t("full"), const(t("axb"), [-1])], [t("up")])
        node("Sigmoid", [t("ga")], [t("sg")])
        node("Mul", [t("ga"), t("sg")], [t("act")])
        node("Mul", [t("act"), t("up")], [t("h")])
        node("Gather", ["W2", t("e")], [t("w2e")], axis=0)
        node("Transpose", [t("w2e")], [t("w2t")], perm=[1, 0])
        node("MatMul", [t("h"), t("w2t")], [t("yo")])
        # each pair's routing weight: w.flat[pos + tok * k]
        node("Mul", [t("tok"), "kk"], [t("tk")])
        node("Add", [t("pos"), t("tk")], [t("flat")])
        node("Gather", ["wflat", t("flat")], [t("wg")], axis=0)
        node("Reshape", [t("wg"), const(t("col"), [-1, 1])], [t("wr")])
        node("Mul", [t("yo"), t("wr")], [t("c")])
        node("Unsqueeze", [t("tok"), const(t("axes1u"), [1])], [t("tu")])
        node("Shape", [t("c")], [t("csh")])
        node("Expand", [t("tu"), t("csh")], [t("ix")])
        node("ScatterElements", [zeros, t("ix"), t("c")], [t("sc")], axis=0)
        out = "y" if i == (e - 2 if broken == "missing_body" else e - 1) else t("acc")
        node("Add", [acc, t("sc")], [out])
        acc = out


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "moe_block.onnx"
    make_block(out, n=16, d=16, f=32, e=4, k=2, norm_topk=True, seed=0)
    print("wrote", out)
