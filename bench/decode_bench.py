#!/usr/bin/env python3
"""decode_bench.py: compile --decode against ONNX Runtime's step loop.

The KV-cache exports of tests/models/make_decode_exports.py (GPT-2 and
Llama, 2 layers, width 64, batch 2) generate GENERATE tokens after their
5-token prompt, greedily. The reference is what an ONNX Runtime user runs:
one InferenceSession call per token, the present caches fed back as the
next call's past (numpy in, numpy out), graph optimisations on (ORT's
default), in this process. The compiled program runs the same model with
its caches in place (--iters: timed runs after a warm-up); its time per
token is the decode phase's (every token after the first). Printed: ms per
token and tokens/s (over the batch's rows) for

  1 rank            vs ORT with 1 intra-op thread
  tp=2 (2 ranks)    vs ORT with 2 intra-op threads

and the ratio (ours / ORT: below 1 is faster). Both are checked to choose
the same tokens. On a 2-core machine the two ranks of tp=2 take both cores.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import mpi_isolated  # noqa: E402

OUT = os.path.join(ROOT, "build", "bench_decode")
BIN = os.path.join(ROOT, "build", "onnx2spmd")
EXPORTS = os.path.join(ROOT, "tests", "models", "exports")
PROMPTS = os.path.join(ROOT, "tests", "golden", "decode")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
GENERATE, MAX_SEQ, ITERS, ORT_REPS = 48, 56, 5, 5


def ort_loop(path, prompt, threads):
    """Tokens and the best per-token decode time (s) over ORT_REPS runs."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    batch = prompt.shape[0]
    best = None
    for _ in range(ORT_REPS):
        cache = {i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32) for i in pasts}
        ids, pos0, tokens = prompt, 0, []
        for k in range(GENERATE):
            if k == 1:
                t0 = time.perf_counter()
            n = ids.shape[1]
            feeds = {"input_ids": ids, "attention_mask": np.ones((batch, pos0 + n), np.int64),
                     "position_ids": np.tile(np.arange(pos0, pos0 + n, dtype=np.int64), (batch, 1))}
            feeds.update(cache)
            got = dict(zip(outs, sess.run(outs, feeds)))
            nxt = np.argmax(got["logits"][:, -1, :], axis=-1).astype(np.int64)
            tokens.append(nxt)
            for name in cache:
                cache[name] = got[name.replace("past_key_values.", "present.")]
            pos0 += n
            ids = nxt[:, None]
        per = (time.perf_counter() - t0) / (GENERATE - 1)
        best = per if best is None else min(best, per)
    return np.stack(tokens, 1), best


def ours(model, prompt_path, name, mesh, flags):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([BIN, "compile", os.path.join(EXPORTS, model + "_kv.onnx"), "--mesh", mesh, "--decode",
                    "--max-seq", str(MAX_SEQ), "--generate", str(GENERATE), "--dim", "batch=2",
                    "--device", "cpu", "-o", d] + flags, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-s", "-C", d, "CFLAGS=-O3 -march=native -std=c11"], check=True)
    tok = os.path.join(d, "tokens.npy")
    r = mpi_isolated.run([os.path.join(d, "run.sh"), "--in", "input_ids=" + prompt_path, "--out", "tokens=" + tok,
                          "--iters", str(ITERS)], capture_output=True, text=True, env=ENV, timeout=600,
                         stdin=subprocess.DEVNULL)
    if r.returncode:
        sys.exit("decode_bench: %s failed: %s" % (name, (r.stderr + r.stdout)[-400:]))
    ms = float(re.search(r"([\d.]+) ms per token after it", r.stdout).group(1))
    return np.load(tok), ms / 1e3


def main():
    os.makedirs(OUT, exist_ok=True)
    print("decode: %d tokens after a 5-token prompt, batch 2, greedy; ms per token of the decode phase" % GENERATE)
    print("%-6s %-12s %10s %10s %12s %12s %8s" % ("model", "program", "ours ms", "ORT ms", "ours tok/s",
                                                  "ORT tok/s", "ratio"))
    for model in ("gpt2", "llama"):
        prompt_path = os.path.join(PROMPTS, model + "_prompt.npy")
        prompt = np.load(prompt_path)
        tp = ["--shardings", os.path.join(ROOT, "tests", "e2e", "exports", model + "_kv_tp.txt")]
        for name, mesh, flags, threads in (("1 rank", "tp=1", [], 1), ("tp=2", "tp=2", tp, 2)):
            ref_tok, ref_s = ort_loop(os.path.join(EXPORTS, model + "_kv.onnx"), prompt, threads)
            tok, s = ours(model, prompt_path, "%s_%s" % (model, mesh.replace("=", "")), mesh, flags)
            if not np.array_equal(tok, ref_tok):
                sys.exit("decode_bench: %s %s chose other tokens than ONNX Runtime" % (model, name))
            b = prompt.shape[0]
            print("%-6s %-12s %10.4f %10.4f %12.0f %12.0f %8.2f" % (model, name + " / %dT" % threads, s * 1e3,
                                                                     ref_s * 1e3, b / s, b / ref_s, s / ref_s))


if __name__ == "__main__":
    main()
