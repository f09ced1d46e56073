#!/usr/bin/env python3
"""gpt2_vocab.py [REGEX]: uneven splits on a GPT-2-shaped model.

GPT-2's vocabulary (50257 = 29 * 1733) is divisible by none of 2, 4 or 8,
and its 12 heads not by 8. The model is tests/models/make_models.py's
tiny_gpt with GPT-2's vocabulary and head count (one layer, 48 wide, so
it stays small), built here from a fixed seed into build/gpt2_vocab/ with
its golden from ONNX Runtime; it is not committed (20 MB of weights).
Each case is planned vocab-parallel (Megatron's embedding and LM head
split by rows and columns of the vocabulary, in blocks of ceil(50257/tp),
the last padded) and some with the heads split too (Q, K and V by
columns: blocks of whole heads, 2 of the 12 per rank over tp=8, the last
two ranks padding), compiled, run under mpirun and compared with ONNX
Runtime's logits."""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import mpi_isolated  # noqa: E402 (tests/mpi_isolated.py)
import make_models  # noqa: E402 (tests/models/make_models.py)

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
WORK = os.path.join(ROOT, "build", "gpt2_vocab")
BIN = os.path.join(ROOT, "build", "onnx2spmd")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
V, D, H = 50257, 48, 12

VOCAB = ["--shard", "tok_emb=[tp,_]", "--shard", "lm_head=[_,tp]"]
MLP = ["--shard", "l0_W1=[_,tp]"]
HEADS = ["--shard", "l0_Wq=[_,tp]", "--shard", "l0_Wk=[_,tp]", "--shard", "l0_Wv=[_,tp]"]
CASES = [
    ("vocab_tp2", "tp=2", VOCAB),
    ("vocab_tp4", "tp=4", VOCAB + MLP),
    ("vocab_tp8", "tp=8", VOCAB + MLP + HEADS),
    ("heads_tp8", "tp=8", HEADS + ["--shard", "l0_Wo=[tp,_]"]),
    ("vocab_tp8_out", "tp=8", VOCAB + ["--shard", "logits=[_,_,tp]"]),
    ("vocab_dp2_tp4", "dp=2,tp=4", VOCAB + MLP + ["--shard", "tokens=[dp,_]"]),
    ("auto_tp8", "tp=8", ["--auto", "--mem-limit", "6M"]),  # 20 MB of weights do not fit replicated
]


def build():
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, "gpt2_vocab.onnx")
    rng = np.random.default_rng(50257)
    m, feeds = make_models.make_tiny_gpt(rng, V=V, D=D, H=H, S=8, B=2, F=96, L=1, name="gpt2_vocab")
    make_models.save(m, path)
    names, outs = make_models.run_ort(path, feeds)
    np.save(os.path.join(WORK, "tokens.npy"), feeds["tokens"])
    np.save(os.path.join(WORK, "gold_logits.npy"), outs[names.index("logits")])
    return path


def run(model, name, mesh, flags):
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    c = subprocess.run([BIN, "compile", model, "--mesh", mesh, "-o", out] + flags, capture_output=True, text=True)
    if c.returncode:
        return False, "compile: " + c.stderr.strip()
    b = subprocess.run(["make", "-s", "-j%d" % (os.cpu_count() or 2), "-C", out, "WARN=-Wall -Wextra -Werror"], capture_output=True, text=True)
    if b.returncode:
        return False, "build: " + (b.stderr + b.stdout)[:400]
    got_path = os.path.join(out, "logits.npy")
    e = mpi_isolated.run([os.path.join(out, "run.sh"), "--in", "tokens=" + os.path.join(WORK, "tokens.npy"),
                          "--out", "logits=" + got_path], capture_output=True, text=True, env=ENV, timeout=300,
                         stdin=subprocess.DEVNULL)
    if e.returncode:
        return False, "run: " + (e.stderr + e.stdout)[-400:]
    gold, got = np.load(os.path.join(WORK, "gold_logits.npy")), np.load(got_path)
    if got.shape != gold.shape:
        return False, "logits %s, golden %s" % (got.shape, gold.shape)
    err = np.abs(got.astype(np.float64) - gold)
    if not (err <= 1e-5 + 1e-4 * np.abs(gold)).all():
        return False, "max abs err %.3g" % err.max()
    plan = open(os.path.join(out, "plan.txt")).read()
    what = "logits"
    if "--auto" in flags:
        emb = re.search(r"^\s*tok_emb\s+\S+\s+\S+\s+(\[[^\]]*\])\s+(\[[^\]]*\])", plan, re.M)
        what = "--auto: tok_emb %s local %s" % (emb.group(1), emb.group(2)) if emb else "--auto"
    if "lm_head=[_,tp]" in flags:
        lm = re.search(r"^\s*lm_head\s+\S+\s+\S+\s+(\[[^\]]*\])\s+(\[[^\]]*\])", plan, re.M)
        if not lm or lm.group(1) != "[_,tp]":
            return False, "lm_head is not vocab-parallel in the plan"
        block = -(-V // int(re.search(r"tp=(\d+)", mesh).group(1)))
        if lm.group(2) != "[%d, %d*]" % (D, block):  # "*": padded
            return False, "lm_head's local block is %s, want [%d, %d*]" % (lm.group(2), D, block)
        what = "lm_head local %s" % lm.group(2)
    if "l0_Wq=[_,tp]" in flags:  # 12 heads split over tp, whole heads per rank (units.c), the last ranks padding
        qh = re.search(r"^\s*l0_q_h\s+\S+\s+\S+\s+\S+\s+\S+\s+(\[[^\]]*\])\s+(\[[^\]]*\])", plan, re.M)
        tp = int(re.search(r"tp=(\d+)", mesh).group(1))
        want = "[2, 8, %d%s, %d]" % (-(-H // tp), "*" if H % tp else "", D // H)
        if not qh or qh.group(1) != "[_,_,tp,_]" or qh.group(2) != want:
            return False, "the heads are not split over tp: l0_q_h is %s" % (qh.group(0).strip() if qh else "missing")
        what += ", l0_q_h local %s" % qh.group(2)
    shutil.rmtree(out, ignore_errors=True)
    return True, "max abs err %.2g, %s" % (err.max(), what)


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    model = build()
    fails = 0
    for name, mesh, flags in CASES:
        if not re.search(flt, name):
            continue
        ok, msg = run(model, name, mesh, flags)
        fails += not ok
        print("%-4s gpt2_vocab %-14s %-10s %s" % ("ok" if ok else "FAIL", name, mesh, msg), flush=True)
    print("gpt2_vocab: %s" % ("all cases match ONNX Runtime" if not fails else "%d FAILED" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
