"""make_transformer.py: transformer-shaped graphs for the planning benchmarks.

usage: make_transformer.py FAMILY OUTDIR [--layers L] [--batch B] [--seq S]
                           [--dim D] [--heads H] [--ffn F] [--vocab V]

FAMILY is gpt2 (pre-norm, learned positions, causal mask, biased GELU MLP,
tied-shape LM head), bert (post-norm, GELU MLP, returns the last hidden
state) or llama (pre-norm, SwiGLU MLP, LM head). Weights are external data
in a sparse file that is never written, so a 7 G-parameter model costs no
disk; the planner only reads shapes. Also writes FAMILY_megatron.txt, the
Megatron-LM hand plan on the graph's names: batch over dp, Q/K/V and the MLP
up projections column-split over tp, the attention output and MLP down
projections row-split, embedding and LM head vocab-parallel.
"""
import argparse
import os

from onnx import TensorProto, helper

DEFAULTS = {  # GPT-2 medium, BERT-large, Llama-7B (vocabularies padded to a multiple of 64, as Megatron does)
    "gpt2": dict(layers=24, dim=1024, heads=16, ffn=4096, vocab=50304),
    "bert": dict(layers=24, dim=1024, heads=16, ffn=4096, vocab=30528),
    "llama": dict(layers=32, dim=4096, heads=32, ffn=11008, vocab=32000),
}


def build(family, out, layers, batch, seq, dim, heads, ffn, vocab, dtype="float32", loss=False):
    """dtype: float32 or float16, the weights' and the computation's. loss
    (gpt2, llama): the graph ends in transformers' causal-LM loss instead of
    the logits: labels [batch, seq] (-100: not counted), cross-entropy over
    every position, mean over the counted ones, for --train."""
    os.makedirs(out, exist_ok=True)
    elem, esize = {"float32": (TensorProto.FLOAT, 4), "float16": (TensorProto.FLOAT16, 2)}[dtype]
    data_name = family + ".weights"
    inits, nodes, ann = [], [], ["tokens=[dp,_]"]
    offset = [0]
    B, S, D, H, F, V = batch, seq, dim, heads, ffn, vocab

    def weight(name, shape, spec=None):
        t = TensorProto()
        t.name = name
        t.data_type = elem
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        n = esize
        for s in shape:
            n *= s
        for k, v in (("location", data_name), ("offset", str(offset[0])), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset[0] += n
        inits.append(t)
        if spec:
            ann.append("%s=%s" % (name, spec))
        return name

    N = helper.make_node
    inits.append(helper.make_tensor("heads_shape", TensorProto.INT64, [4], [B, S, H, D // H]))
    inits.append(helper.make_tensor("merge_shape", TensorProto.INT64, [3], [B, S, D]))
    inits.append(helper.make_tensor("scale", elem, [], [1.0 / (D // H) ** 0.5]))
    nodes.append(N("Gather", [weight("tok_emb", [V, D], "[tp,_]"), "tokens"], ["emb"], name="embed"))
    x = "emb"
    if family != "llama":
        nodes.append(N("Add", [x, weight("pos_emb", [S, D])], ["h_0"], name="add_pos"))
        x = "h_0"
    if family == "gpt2":
        mask = [[0.0 if j <= i else -1e9 for j in range(S)] for i in range(S)]
        inits.append(helper.make_tensor("causal", elem, [S, S], sum(mask, [])))

    def norm(inp, name):
        nodes.append(N("LayerNormalization", [inp, weight(name + "_g", [D]), weight(name + "_b", [D])], [name],
                       axis=-1, name=name))
        return name

    def linear(inp, name, k, n, spec, bias_spec):
        nodes.append(N("MatMul", [inp, weight(name + "_W", [k, n], spec)], [name + "_mm"], name=name))
        if family == "llama":
            return name + "_mm"
        nodes.append(N("Add", [name + "_mm", weight(name + "_b", [n], bias_spec)], [name + "_out"],
                       name=name + "_bias"))
        return name + "_out"

    for l in range(layers):
        p = "l%d_" % l
        a_in = norm(x, p + "ln1") if family != "bert" else x
        heads = {}
        for w in "qkv":
            y = linear(a_in, p + w, D, D, "[_,tp]", "[tp]")
            nodes.append(N("Reshape", [y, "heads_shape"], [p + w + "_h"], name=p + w + "_heads"))
            heads[w] = p + w + "_h"
        nodes += [
            N("Transpose", [heads["q"]], [p + "q_t"], perm=[0, 2, 1, 3], name=p + "q_perm"),
            N("Transpose", [heads["k"]], [p + "k_t"], perm=[0, 2, 3, 1], name=p + "k_perm"),
            N("Transpose", [heads["v"]], [p + "v_t"], perm=[0, 2, 1, 3], name=p + "v_perm"),
            N("MatMul", [p + "q_t", p + "k_t"], [p + "s_raw"], name=p + "qk"),
            N("Mul", [p + "s_raw", "scale"], [p + "s"], name=p + "qk_scale"),
        ]
        s = p + "s"
        if family == "gpt2":
            nodes.append(N("Add", [s, "causal"], [p + "s_masked"], name=p + "mask"))
            s = p + "s_masked"
        nodes += [
            N("Softmax", [s], [p + "probs"], axis=-1, name=p + "softmax"),
            N("MatMul", [p + "probs", p + "v_t"], [p + "ctx"], name=p + "pv"),
            N("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3], name=p + "ctx_perm"),
            N("Reshape", [p + "ctx_t", "merge_shape"], [p + "ctx_m"], name=p + "merge"),
        ]
        attn = linear(p + "ctx_m", p + "o", D, D, "[tp,_]", None)
        nodes.append(N("Add", [x, attn], [p + "res1"], name=p + "residual1"))
        r1 = norm(p + "res1", p + "ln1") if family == "bert" else p + "res1"
        m_in = norm(r1, p + "ln2") if family != "bert" else r1
        if family == "llama":
            g = linear(m_in, p + "gate", D, F, "[_,tp]", None)
            u = linear(m_in, p + "up", D, F, "[_,tp]", None)
            nodes += [
                N("Sigmoid", [g], [p + "gate_sig"], name=p + "silu_sigmoid"),
                N("Mul", [g, p + "gate_sig"], [p + "silu"], name=p + "silu"),
                N("Mul", [p + "silu", u], [p + "act"], name=p + "glu"),
            ]
        else:
            u = linear(m_in, p + "fc1", D, F, "[_,tp]", "[tp]")
            nodes.append(N("Gelu", [u], [p + "act"], name=p + "gelu"))
        down = linear(p + "act", p + "fc2", F, D, "[tp,_]", None)
        nodes.append(N("Add", [r1, down], [p + "out"], name=p + "residual2"))
        x = norm(p + "out", p + "ln2") if family == "bert" else p + "out"
    if family == "bert":
        out_name, out_shape = x, [B, S, D]
        nodes.append(N("Identity", [x], ["hidden"], name="output"))
        out_name = "hidden"
    else:
        lnf = norm(x, "lnf")
        nodes.append(N("MatMul", [lnf, weight("lm_head", [D, V], "[_,tp]")], ["logits"], name="lm_head"))
        out_name, out_shape = "logits", [B, S, V]
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64, [B, S])]
    if loss:
        inputs.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [B, S]))
        ann.append("labels=[dp,_]")
        inits.append(helper.make_tensor("rows_shape", TensorProto.INT64, [2], [B * S, V]))
        inits.append(helper.make_tensor("labels_shape", TensorProto.INT64, [1], [B * S]))
        nodes.append(N("Reshape", ["logits", "rows_shape"], ["logit_rows"], name="loss_rows"))
        nodes.append(N("Reshape", ["labels", "labels_shape"], ["label_rows"], name="loss_labels"))
        nodes.append(N("SoftmaxCrossEntropyLoss", ["logit_rows", "label_rows"], ["loss"], reduction="mean",
                       ignore_index=-100, name="loss"))
        out_name, out_shape = "loss", []
    g = helper.make_graph(nodes, family, inputs, [helper.make_tensor_value_info(out_name, elem, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    with open(os.path.join(out, family + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())
    with open(os.path.join(out, data_name), "wb") as f:
        f.truncate(offset[0])  # sparse: no block is ever written
    with open(os.path.join(out, family + "_megatron.txt"), "w") as f:
        f.write("\n".join(ann) + "\n")
    return len(nodes), offset[0] // esize


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(DEFAULTS))
    ap.add_argument("out")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    for k in ("dim", "heads", "ffn", "vocab"):
        ap.add_argument("--" + k, type=int)
    a = ap.parse_args()
    cfg = dict(DEFAULTS[a.family])
    for k in ("layers", "dim", "heads", "ffn", "vocab"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    n, params = build(a.family, a.out, cfg["layers"], a.batch, a.seq, cfg["dim"], cfg["heads"], cfg["ffn"],
                      cfg["vocab"])
    print("%s: %d layers, %d nodes, %.2f G parameters" % (a.family, cfg["layers"], n, params / 1e9))


if __name__ == "__main__":
    main()
