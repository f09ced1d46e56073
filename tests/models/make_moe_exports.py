#!/usr/bin/env python3
"""Writes real PyTorch exports of tiny mixture-of-experts language models.

The models expert parallelism starts from (issue 28): Mixtral (top-2 of 4
experts, SwiGLU experts), Qwen2-MoE (top-2 of 4, plus a gated shared
expert), OLMoE (top-2 of 4) and a Switch-style OLMoE (top-1 of 8, the
router's probability as weight), 2 layers, hidden 64, vocab 512, from
configs with random weights (torch.manual_seed(0); no downloads). Like
make_exports.py they come out of torch.onnx.export (TorchScript exporter,
opset 17, static shapes) and are checked in; torch is far too heavy for
`make deps`.

Transformers 5 has two ways to run the experts, and they export
differently:
  batched_mm  every (token, chosen expert) pair gathers its expert's
              weights (Gather of the stacked [experts, out, in] weights by
              the TopK indices) and runs one batched MatMul: static shapes,
              the form written here (<model>_moe.onnx);
  eager       a loop over the experts that were hit, NonZero and index_add:
              shapes that depend on the routing, which the frontend
              rewrites into the batched form before shape inference
              (frontend/moe_eager.c; <model>_moe_eager.onnx). The export
              runs in ONNX Runtime only on inputs that hit as many experts
              as the traced one did (its Split sizes are fixed); the
              golden input is the traced one.
Inputs: input_ids int64 [2, 16], attention_mask int64 [2, 16] (the second
row's last 5 positions padded). Output: logits [2, 16, 512].

Outputs (relative to the repository root):
  tests/models/exports/<model>_moe{,_eager}.onnx
  tests/golden/<model>_moe{,_eager}/{input,output}_<name>.npy   (ONNX Runtime's)

Pinned versions, the environment and how to run it: as make_exports.py;
`make_moe_exports.py NAME...` writes only those (a model's name for both
styles, or one file's tag such as qwen2moe_moe_eager).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_exports import (EXPORTS, GOLDEN, MAX_BYTES, Wrap, inputs,  # noqa: E402
                          run_ort, write_golden)

VOCAB = 512


def make_mixtral():
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, use_cache=False))


def make_qwen2moe():
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, moe_intermediate_size=64, shared_expert_intermediate_size=128,
        vocab_size=VOCAB, num_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        use_cache=False))


def make_olmoe():
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=64, vocab_size=VOCAB, num_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0,
        use_cache=False))


def make_olmoe_top1():
    # Switch-style routing: top-1 of 8 experts, the router's probability
    # as the weight (OLMoE does not renormalise the top-k).
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=64, vocab_size=VOCAB, num_experts=8, num_experts_per_tok=1,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0,
        use_cache=False))


MODELS = [("mixtral", make_mixtral), ("qwen2moe", make_qwen2moe), ("olmoe", make_olmoe),
          ("olmoe_top1", make_olmoe_top1)]


def export(mod, args, path):
    with torch.no_grad():
        torch.onnx.export(mod, args, path, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["logits"])
    onnx.checker.check_model(path)
    size = os.path.getsize(path)
    if size >= MAX_BYTES:
        raise SystemExit("%s: %d bytes, over the 5 MB limit" % (path, size))
    return size


def main():
    only = sys.argv[1:]  # model names to write (default: all)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    ids, mask = inputs()
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    for name, make in MODELS:
        for impl in ("batched_mm", "eager"):
            tag = "%s_moe%s" % (name, "" if impl == "batched_mm" else "_eager")
            if only and name not in only and tag not in only:
                continue
            torch.manual_seed(0)
            inner = make().eval()
            inner.set_experts_implementation(impl)
            mod = Wrap(inner, "logits").eval()
            path = os.path.join(EXPORTS, tag + ".onnx")
            size = export(mod, (ids, mask), path)
            with torch.no_grad():
                ref = mod(ids, mask).numpy()
            in_names, names, outs = run_ort(path, feeds)
            write_golden(os.path.join(GOLDEN, tag), {k: feeds[k] for k in in_names}, names, outs)
            diff = float(np.max(np.abs(outs[0].astype(np.float64) - ref)))
            print("%-22s %8d bytes  max|ort - torch| %.3g" % (tag, size, diff))


if __name__ == "__main__":
    main()
