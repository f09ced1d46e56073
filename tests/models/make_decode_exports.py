#!/usr/bin/env python3
"""Writes real PyTorch exports of tiny GPT-2 and Llama with a key-value cache.

These are the decoding models of `compile --decode` (docs/decode.md): one
call of the model runs `seq` new tokens after `past` cached ones, the way
Optimum's and the exporters' "with past" models do. Like make_exports.py
they come out of torch.onnx.export (TorchScript exporter, opset 17) and are
checked in; torch is far too heavy for `make deps`.

Models (random weights from torch.manual_seed(0), built from configs, no
downloads; HF_HUB_OFFLINE=1; default attention implementation):
  gpt2   GPT2LMHeadModel   2 layers, n_embd 64, 4 heads, n_positions 64,
                           vocab 512
  llama  LlamaForCausalLM  2 layers, hidden 64, 4 heads, 2 kv heads,
                           intermediate 176, vocab 512, RoPE, RMSNorm
  mixtral MixtralForCausalLM  the same attention, and a mixture of experts
                           (top-2 of 4, intermediate 128) in transformers'
                           batched_mm form (docs/moe.md): decoding with
                           expert parallelism
Inputs (the symbolic dims are batch, seq, past and total = past + seq):
  input_ids int64 [batch, seq], attention_mask int64 [batch, total],
  position_ids int64 [batch, seq],
  past_key_values.N.key / .value float [batch, kv_heads, past, head_dim]
Outputs: logits [batch, seq, vocab], present.N.key / .value
  [batch, kv_heads, total, head_dim].

Outputs (relative to the repository root):
  tests/models/exports/<model>_kv.onnx
  tests/golden/decode/<model>_prompt.npy   the prompt both tests use
The decode tests (tests/e2e/decode.py) compute ONNX Runtime's reference
themselves, step by step with its own past/present loop.

Pinned versions, the environment and how to run it: as make_exports.py;
`make_decode_exports.py NAME...` writes only those models.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTS = os.path.join(ROOT, "tests", "models", "exports")
GOLDEN = os.path.join(ROOT, "tests", "golden", "decode")
MAX_BYTES = 5 * 1024 * 1024
BATCH, PROMPT, VOCAB, LAYERS = 2, 5, 512, 2


class WithPast(torch.nn.Module):
    """The HF model with its cache as flat tensors in and out."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, position_ids, *past):
        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
        cache = transformers.DynamicCache(pairs, config=self.inner.config)
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=cache, use_cache=True,
                         return_dict=True)
        flat = []
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def make_gpt2():
    cfg = transformers.GPT2Config(n_layer=LAYERS, n_embd=64, n_head=4, n_positions=64,
                                  vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg), 4, 16


def make_llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=64,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=176, vocab_size=VOCAB,
                                   max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg), 2, 16


def make_mixtral():
    cfg = transformers.MixtralConfig(num_hidden_layers=LAYERS, hidden_size=64,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=128, num_local_experts=4,
                                     num_experts_per_tok=2, vocab_size=VOCAB,
                                     max_position_embeddings=64)
    model = transformers.MixtralForCausalLM(cfg)
    model.set_experts_implementation("batched_mm")
    return model, 2, 16


MODELS = [("gpt2", make_gpt2), ("llama", make_llama), ("mixtral", make_mixtral)]


def names():
    ins = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            ins.append("past_key_values.%d.%s" % (i, kv))
            outs.append("present.%d.%s" % (i, kv))
            axes[ins[-1]] = {0: "batch", 2: "past"}
            axes[outs[-1]] = {0: "batch", 2: "total"}
    return ins, outs, axes


def ort_session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    os.makedirs(EXPORTS, exist_ok=True)
    os.makedirs(GOLDEN, exist_ok=True)
    only = sys.argv[1:]  # model names to write (default: all)
    for name, make in MODELS:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        inner, kv_heads, head_dim = make()
        inner.eval()
        mod = WithPast(inner).eval()
        # Trace with past 3 and seq 2, so no dim is 1 or 0 (a traced size 1
        # would be taken as a constant).
        g = torch.Generator().manual_seed(4321)
        past_len, seq = 3, 2
        ids = torch.randint(0, VOCAB, (BATCH, seq), generator=g)
        mask = torch.ones(BATCH, past_len + seq, dtype=torch.int64)
        pos = torch.arange(past_len, past_len + seq).unsqueeze(0).repeat(BATCH, 1)
        past = [torch.randn(BATCH, kv_heads, past_len, head_dim, generator=g)
                for _ in range(2 * LAYERS)]
        ins, outs, axes = names()
        path = os.path.join(EXPORTS, "%s_kv.onnx" % name)
        with torch.no_grad():
            ref = mod(ids, mask, pos, *past)
            torch.onnx.export(mod, (ids, mask, pos, *past), path, dynamo=False,
                              opset_version=17, input_names=ins, output_names=outs,
                              dynamic_axes=axes)
        onnx.checker.check_model(path)
        size = os.path.getsize(path)
        if size >= MAX_BYTES:
            raise SystemExit("%s: %d bytes, over the 5 MB limit" % (path, size))
        sess = ort_session(path)
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                 "position_ids": pos.numpy()}
        for i, t in enumerate(past):
            feeds[ins[3 + i]] = t.numpy()
        got = sess.run(outs, feeds)
        diff = max(float(np.max(np.abs(a - b.numpy()))) for a, b in zip(got, ref))
        prompt = np.random.default_rng(77).integers(0, VOCAB, (BATCH, PROMPT)).astype(np.int64)
        np.save(os.path.join(GOLDEN, "%s_prompt.npy" % name), prompt)
        print("%-9s %8d bytes  max|ort - torch| %.3g" % (name + "_kv", size, diff))


if __name__ == "__main__":
    sys.exit(main())
