#!/usr/bin/env python3
"""Writes a Llama-shaped ONNX graph for the plan benchmark.

32 layers, d_model 4096, ffn 11008 (SwiGLU), 32 heads, vocab 32000: 6.7 B
float32 parameters whose external data file is sparse (truncate, never
written), so the benchmark measures the compiler, not the disk: `plan` maps
the file and must never read it. Also writes the Megatron annotations.

usage: make_llama.py OUTDIR [LAYERS]
"""
import os
import sys

import onnx
from onnx import TensorProto, helper

D, F, H, V, B, S = 4096, 11008, 32, 32000, 4, 128


def main():
    out = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    global B
    B = int(sys.argv[3]) if len(sys.argv) > 3 else B  # batch: 8 or more for dp=8
    os.makedirs(out, exist_ok=True)
    data_name = "llama.weights"
    inits, nodes, ann = [], [], ["tokens=[dp,_]"]
    offset = [0]

    def weight(name, shape):
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        n = 4
        for s in shape:
            n *= s
        for k, v in (("location", data_name), ("offset", str(offset[0])), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset[0] += n
        inits.append(t)
        return name

    def const(name, values):
        inits.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return name

    N = helper.make_node
    const("heads_shape", [B, S, H, D // H])
    const("merge_shape", [B, S, D])
    inits.append(helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0 / (D // H) ** 0.5]))
    nodes.append(N("Gather", [weight("tok_emb", [V, D]), "tokens"], ["h_0"], name="embed"))
    x = "h_0"
    for l in range(layers):
        p = "l%d_" % l
        nodes.append(N("LayerNormalization", [x, weight(p + "ln1_g", [D]), weight(p + "ln1_b", [D])],
                       [p + "ln1"], axis=-1, name=p + "ln1"))
        for w in "qkv":
            nodes += [
                N("MatMul", [p + "ln1", weight(p + "W" + w, [D, D])], [p + w], name=p + w + "_proj"),
                N("Reshape", [p + w, "heads_shape"], [p + w + "_h"], name=p + w + "_heads"),
            ]
            ann.append("%sW%s=[_,tp]" % (p, w))
        nodes += [
            N("Transpose", [p + "q_h"], [p + "q_t"], perm=[0, 2, 1, 3], name=p + "q_perm"),
            N("Transpose", [p + "k_h"], [p + "k_t"], perm=[0, 2, 3, 1], name=p + "k_perm"),
            N("Transpose", [p + "v_h"], [p + "v_t"], perm=[0, 2, 1, 3], name=p + "v_perm"),
            N("MatMul", [p + "q_t", p + "k_t"], [p + "s_raw"], name=p + "qk"),
            N("Mul", [p + "s_raw", "scale"], [p + "s"], name=p + "qk_scale"),
            N("Softmax", [p + "s"], [p + "probs"], axis=-1, name=p + "softmax"),
            N("MatMul", [p + "probs", p + "v_t"], [p + "ctx"], name=p + "pv"),
            N("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3], name=p + "ctx_perm"),
            N("Reshape", [p + "ctx_t", "merge_shape"], [p + "ctx_m"], name=p + "merge"),
            N("MatMul", [p + "ctx_m", weight(p + "Wo", [D, D])], [p + "attn"], name=p + "o_proj"),
            N("Add", [x, p + "attn"], [p + "res1"], name=p + "residual1"),
            N("LayerNormalization", [p + "res1", weight(p + "ln2_g", [D]), weight(p + "ln2_b", [D])],
              [p + "ln2"], axis=-1, name=p + "ln2"),
            N("MatMul", [p + "ln2", weight(p + "Wg", [D, F])], [p + "gate"], name=p + "gate_proj"),
            N("MatMul", [p + "ln2", weight(p + "Wu", [D, F])], [p + "up"], name=p + "up_proj"),
            N("Sigmoid", [p + "gate"], [p + "gate_sig"], name=p + "silu_sigmoid"),
            N("Mul", [p + "gate", p + "gate_sig"], [p + "silu"], name=p + "silu"),
            N("Mul", [p + "silu", p + "up"], [p + "glu"], name=p + "glu"),
            N("MatMul", [p + "glu", weight(p + "Wd", [F, D])], [p + "down"], name=p + "down_proj"),
            N("Add", [p + "res1", p + "down"], [p + "out"], name=p + "residual2"),
        ]
        ann += ["%sWo=[tp,_]" % p, "%sWg=[_,tp]" % p, "%sWu=[_,tp]" % p, "%sWd=[tp,_]" % p]
        x = p + "out"
    nodes += [
        N("LayerNormalization", [x, weight("lnf_g", [D]), weight("lnf_b", [D])], ["lnf"], axis=-1,
          name="ln_f"),
        N("MatMul", ["lnf", weight("lm_head", [D, V])], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(nodes, "llama", [helper.make_tensor_value_info("tokens", TensorProto.INT64, [B, S])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, V])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    with open(os.path.join(out, "llama.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    with open(os.path.join(out, data_name), "wb") as f:
        f.truncate(offset[0])  # sparse: no block is ever written
    with open(os.path.join(out, "llama_megatron.txt"), "w") as f:
        f.write("\n".join(ann) + "\n")
    print("llama: %d layers, %d nodes, %.2f G parameters, sparse weights %.1f GB"
          % (layers, len(nodes), offset[0] / 4e9, offset[0] / 1e9))


if __name__ == "__main__":
    main()
