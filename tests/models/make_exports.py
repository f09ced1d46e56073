#!/usr/bin/env python3
"""Writes real PyTorch exports of tiny GPT-2, BERT and Llama, and their goldens.

Unlike make_models.py (onnx helper API, no torch), these models come out of
`torch.onnx.export`, so they carry whatever the exporters really emit: the
attention-mask arithmetic, Shape/Gather/Concat chains, SDPA decompositions,
rotary embeddings, RMSNorm, and the exporters' weight names. They are
generated once and checked in; torch is far too heavy for `make deps`.

Models (random weights from torch.manual_seed(0), built from configs, no
downloads; HF_HUB_OFFLINE=1; use_cache=False; default attention
implementation, i.e. whatever transformers picks, normally sdpa):
  gpt2   GPT2LMHeadModel   2 layers, n_embd 64, 4 heads, n_positions 64,
                           vocab 512                      -> logits
  bert   BertModel         2 layers, hidden 64, 4 heads, intermediate 256,
                           vocab 512, max_position 64     -> last_hidden_state
  llama  LlamaForCausalLM  2 layers, hidden 64, 4 heads, 2 kv heads,
                           intermediate 176, vocab 512, RoPE, RMSNorm
                                                          -> logits
Each is exported twice, unsimplified, with fixed (static) shapes:
  <model>_ts.onnx      torch.onnx.export(..., dynamo=False, opset_version=17)
  <model>_dynamo.onnx  torch.onnx.export(..., dynamo=True, opset_version=18)
with every weight inside the .onnx file (no external data).
Inputs: input_ids int64 [2,16], attention_mask int64 [2,16], the second row
padded (its last 5 positions are 0).

Outputs (relative to the repository root):
  tests/models/exports/<model>_<ts|dynamo>.onnx
  tests/golden/<model>_<ts|dynamo>/{input,output}_<name>.npy
The goldens come from ONNX Runtime (one thread, graph optimisations off),
written like write_golden in make_models.py; the script also prints the max
abs difference between ORT and torch's own output.

Pinned versions (the ones these files were made with):
  torch==2.15.0 transformers==5.24.0 onnx==1.22.0 onnxscript==0.7.2
  onnxruntime==1.22.1 numpy==2.4.6 onnx-ir==1.1.0 protobuf==7.36.2
  (Python 3.11.7; the default PyPI torch wheel, +cu132, run on the CPU)

Run it from a separate virtual environment, outside the repository:
  python3 -m venv /tmp/torchenv
  /tmp/torchenv/bin/pip install torch==2.15.0 transformers==5.24.0 \\
      onnx==1.22.0 onnxscript==0.7.2 onnxruntime==1.22.1 numpy==2.4.6
  /tmp/torchenv/bin/python tests/models/make_exports.py
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTS = os.path.join(ROOT, "tests", "models", "exports")
GOLDEN = os.path.join(ROOT, "tests", "golden")

PINNED = {"torch": "2.15.0", "transformers": "5.24.0", "onnx": "1.22.0",
          "onnxruntime": "1.22.1"}
MAX_BYTES = 5 * 1024 * 1024
BATCH, SEQ, PAD, VOCAB = 2, 16, 5, 512


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "onnx": onnx.__version__, "onnxruntime": ort.__version__}
    for k, v in PINNED.items():
        if got[k] != v:
            print("warning: %s %s, pinned %s; the files will differ" % (k, got[k], v),
                  file=sys.stderr)


def write_golden(folder, feeds, names, outs):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    for k, v in feeds.items():
        np.save(os.path.join(folder, "input_%s.npy" % k), v)
    for k, v in zip(names, outs):
        np.save(os.path.join(folder, "output_%s.npy" % k), v)


def run_ort(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    in_names = [i.name for i in sess.get_inputs()]
    names = [o.name for o in sess.get_outputs()]
    return in_names, names, sess.run(names, {k: feeds[k] for k in in_names})


# ---- the models ------------------------------------------------------------

class Wrap(torch.nn.Module):
    """Calls the HF model with keyword inputs and returns one tensor."""

    def __init__(self, inner, field):
        super().__init__()
        self.inner = inner
        self.field = field

    def forward(self, input_ids, attention_mask):
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                         use_cache=False, return_dict=True)
        return getattr(out, self.field)


def make_gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64,
                                  vocab_size=VOCAB, bos_token_id=0, eos_token_id=0,
                                  use_cache=False)
    return transformers.GPT2LMHeadModel(cfg), "logits"


def make_bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=256, vocab_size=VOCAB,
                                  max_position_embeddings=64, use_cache=False)
    return transformers.BertModel(cfg, add_pooling_layer=False), "last_hidden_state"


def make_llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=176,
                                   vocab_size=VOCAB, max_position_embeddings=64,
                                   use_cache=False)
    return transformers.LlamaForCausalLM(cfg), "logits"


MODELS = [("gpt2", make_gpt2), ("bert", make_bert), ("llama", make_llama)]


def inputs():
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g, dtype=torch.int64)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[1, SEQ - PAD:] = 0
    return ids, mask


# ---- export ----------------------------------------------------------------

def export_ts(mod, args, out_name, path):
    torch.onnx.export(mod, args, path, dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=[out_name])


def export_dynamo(mod, args, out_name, path):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = os.path.join(tmp, "m.onnx")
        prog = torch.onnx.export(mod, args, dynamo=True, opset_version=18, verbose=False,
                                 input_names=["input_ids", "attention_mask"],
                                 output_names=[out_name])
        prog.save(tmp_path, external_data=False)
        m = onnx.load(tmp_path, load_external_data=True)
    onnx.save(m, path)


def main():
    check_versions()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    os.makedirs(EXPORTS, exist_ok=True)
    ids, mask = inputs()
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    for name, make in MODELS:
        torch.manual_seed(0)
        inner, field = make()
        inner.eval()
        mod = Wrap(inner, field).eval()
        with torch.no_grad():
            ref = mod(ids, mask).numpy()
        for kind, export in (("ts", export_ts), ("dynamo", export_dynamo)):
            tag = "%s_%s" % (name, kind)
            path = os.path.join(EXPORTS, tag + ".onnx")
            with torch.no_grad():
                export(mod, (ids, mask), field, path)
            onnx.checker.check_model(path)
            size = os.path.getsize(path)
            if size >= MAX_BYTES:
                raise SystemExit("%s: %d bytes, over the 5 MB limit" % (path, size))
            in_names, names, outs = run_ort(path, feeds)
            write_golden(os.path.join(GOLDEN, tag), {k: feeds[k] for k in in_names},
                         names, outs)
            diff = float(np.max(np.abs(outs[0].astype(np.float64) - ref)))
            print("%-13s %8d bytes  inputs %s  outputs %s %s  max|ort - torch| %.3g"
                  % (tag, size, in_names, names, list(outs[0].shape), diff))


if __name__ == "__main__":
    main()
