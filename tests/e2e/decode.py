#!/usr/bin/env python3
"""compile --decode against ONNX Runtime's own past/present loop.

For each KV-cache export (tests/models/make_decode_exports.py) and mesh,
compiles a decoding program (--max-seq, --generate), runs it on the
checked-in prompt, and compares its generated tokens and the logits each
was chosen from with ONNX Runtime running the same model the way its users
do: the whole prompt with an empty past, then one token per call, each
call's present fed back as the next call's past, greedy argmax. Tokens must
be equal and logits within --tol (1e-4). ORT's tokens and logits are also
kept in tests/golden/decode/ for tests/gpu/run.sh (which has no MPI to run
this script); each run checks they still are ORT's (--write-golden).

  build/venv/bin/python tests/e2e/decode.py [--only NAME] [--keep]

Prints one line per case and exits non-zero when any fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "onnx2spmd")
EXPORTS = os.path.join(ROOT, "tests", "models", "exports")
PROMPTS = os.path.join(ROOT, "tests", "golden", "decode")
MAX_SEQ, GENERATE = 24, 8

# (name, model, mesh, extra compile flags)
TP = {m: ["--shardings", os.path.join(ROOT, "tests", "e2e", "exports", "%s_kv_tp.txt" % m)]
      for m in ("gpt2", "llama")}
DP = ["--shard", "input_ids=[dp,_]"]
CASES = [
    ("gpt2_1rank", "gpt2", "tp=1", []),
    ("gpt2_tp2", "gpt2", "tp=2", TP["gpt2"]),
    ("gpt2_dp2", "gpt2", "dp=2", DP),
    ("gpt2_dp2_tp2", "gpt2", "dp=2,tp=2", DP + TP["gpt2"]),
    ("llama_1rank", "llama", "tp=1", []),
    ("llama_tp2", "llama", "tp=2", TP["llama"]),
    ("llama_dp2_tp2", "llama", "dp=2,tp=2", DP + TP["llama"]),
    ("llama_tp4_gqa", "llama", "tp=4",
     ["--shardings", os.path.join(ROOT, "tests", "e2e", "exports", "llama_kv_tp4.txt")]),
    # --sample: the same draws as the program's splitmix64 sampler on ORT's logits
    ("gpt2_sample_tp2", "gpt2", "tp=2", TP["gpt2"] + ["--sample", "1.5", "--seed", "7"]),
    ("llama_sample_1rank", "llama", "tp=1", ["--sample", "0.8", "--seed", "12345"]),
    # Mixtral's experts (batched_mm export): each step's tokens are the
    # batch rows, sent to their experts by all-to-all when both are over ep;
    # with the tokens replicated the experts' partial sums are all-reduced
    ("mixtral_1rank", "mixtral", "ep=1", []),
    ("mixtral_ep2", "mixtral", "ep=2", ["--shard", "experts=ep", "--shard", "input_ids=[ep,_]"]),
    ("mixtral_ep2_experts", "mixtral", "ep=2", ["--shard", "experts=ep"]),
    ("mixtral_dp2_ep2", "mixtral", "dp=2,ep=2", ["--shard", "experts=ep", "--shard", "input_ids=[dp,_]"]),
]

# plan.txt lines a case must have: (case, regex)
PLAN_HAS = {"mixtral_ep2": r"all-to-all\s+\S+moe_buffer ep",
            "mixtral_ep2_experts": r"all-reduce .*ep"}

MPIRUN_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader",
              "OMPI_MCA_rmaps_base_oversubscribe": "1"}


class SplitMix64:
    """The generated program's sampler (--sample), bit for bit."""
    M = (1 << 64) - 1

    def __init__(self, seed):
        self.s = seed & self.M

    def uniform(self):
        self.s = (self.s + 0x9e3779b97f4a7c15) & self.M
        z = self.s
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & self.M
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & self.M
        return ((z ^ (z >> 31)) >> 11) * 2.0 ** -53


def choose(last, sampler, temperature):
    """Greedy argmax, or the program's draw from softmax(last / T)."""
    if sampler is None:
        return np.argmax(last, axis=-1).astype(np.int64)
    out = []
    for row in last:
        p = np.exp((row.astype(np.float64) - float(row.max())) / temperature)
        acc = np.cumsum(p)
        u = sampler.uniform() * acc[-1]
        past = np.nonzero(acc > u)[0]
        out.append(int(past[0]) if len(past) else len(row) - 1)
    return np.array(out, np.int64)


def ort_reference(path, prompt, generate, temperature=0.0, seed=0):
    """ONNX Runtime's loop: prefill with an empty past, then one token a call."""
    sampler = SplitMix64(seed) if temperature > 0 else None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ins = sess.get_inputs()
    outs = [o.name for o in sess.get_outputs()]
    pasts = [i for i in ins if i.name.startswith("past_key_values.")]
    batch, t = prompt.shape
    cache = {}
    for i in pasts:
        shape = [batch, i.shape[1], 0, i.shape[3]]
        cache[i.name] = np.zeros(shape, np.float32)
    ids, tokens, logits = prompt, [], []
    pos0 = 0
    for _ in range(generate):
        n = ids.shape[1]
        feeds = {"input_ids": ids,
                 "attention_mask": np.ones((batch, pos0 + n), np.int64),
                 "position_ids": np.tile(np.arange(pos0, pos0 + n, dtype=np.int64), (batch, 1))}
        feeds.update(cache)
        got = dict(zip(outs, sess.run(outs, feeds)))
        last = got["logits"][:, -1, :]
        nxt = choose(last, sampler, temperature)
        tokens.append(nxt)
        logits.append(last)
        for name in cache:
            cache[name] = got[name.replace("past_key_values.", "present.")]
        pos0 += n
        ids = nxt[:, None]
    return np.stack(tokens, 1), np.stack(logits, 1)


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError("%s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def reference(model):
    """ORT's tokens and logits, checked against the goldens the GPU run uses."""
    path = os.path.join(EXPORTS, "%s_kv.onnx" % model)
    prompt = np.load(os.path.join(PROMPTS, "%s_prompt.npy" % model))
    tokens, logits = ort_reference(path, prompt, GENERATE)
    golden_t = os.path.join(PROMPTS, "%s_tokens.npy" % model)
    golden_l = os.path.join(PROMPTS, "%s_logits.npy" % model)
    if not os.path.exists(golden_t) or not np.array_equal(np.load(golden_t), tokens) or \
            float(np.max(np.abs(np.load(golden_l) - logits))) > 1e-5:
        raise RuntimeError("tests/golden/decode/%s_{tokens,logits}.npy differ from ONNX Runtime's loop "
                           "(rewrite them with --write-golden)" % model)
    return prompt, tokens, logits


def write_golden():
    for model in ("gpt2", "llama", "mixtral"):
        prompt = np.load(os.path.join(PROMPTS, "%s_prompt.npy" % model))
        tokens, logits = ort_reference(os.path.join(EXPORTS, "%s_kv.onnx" % model), prompt, GENERATE)
        np.save(os.path.join(PROMPTS, "%s_tokens.npy" % model), tokens)
        np.save(os.path.join(PROMPTS, "%s_logits.npy" % model), logits.astype(np.float32))
        print("wrote tests/golden/decode/%s_{tokens,logits}.npy: tokens %s" % (model, tokens.tolist()))


def run_case(name, model, mesh, flags, work, tol):
    path = os.path.join(EXPORTS, "%s_kv.onnx" % model)
    prompt, ref_tokens, ref_logits = reference(model)
    if "--sample" in flags:
        t, seed = float(flags[flags.index("--sample") + 1]), int(flags[flags.index("--seed") + 1])
        ref_tokens, ref_logits = ort_reference(path, prompt, GENERATE, t, seed)
    out = os.path.join(work, name)
    run([BIN, "compile", path, "--mesh", mesh, "--decode", "--max-seq", str(MAX_SEQ),
         "--generate", str(GENERATE), "--dim", "batch=%d" % prompt.shape[0], "-o", out] + flags)
    run(["make", "-s", "-C", out])
    if name in PLAN_HAS and not re.search(PLAN_HAS[name], open(os.path.join(out, "plan.txt")).read()):
        print("FAIL  %s: plan.txt has no line matching %r" % (name, PLAN_HAS[name]))
        return False
    np.save(os.path.join(work, name + "_prompt.npy"), prompt)
    env = dict(os.environ, **MPIRUN_ENV)
    stdout = run([os.path.join(out, "run.sh"), "--in",
                  "input_ids=%s" % os.path.join(work, name + "_prompt.npy"),
                  "--out", "tokens=%s" % os.path.join(work, name + "_tokens.npy"),
                  "--out", "logits=%s" % os.path.join(work, name + "_logits.npy")], env=env)
    tokens = np.load(os.path.join(work, name + "_tokens.npy"))
    logits = np.load(os.path.join(work, name + "_logits.npy"))
    err = float(np.max(np.abs(logits - ref_logits)))
    ok = np.array_equal(tokens, ref_tokens) and err <= tol
    timing = " ".join(l.strip() for l in stdout.splitlines() if "per token" in l)
    print("%-5s %-12s %-6s tokens %s  max|logits - ORT| %.2e  %s"
          % ("ok" if ok else "FAIL", name, mesh, "equal" if np.array_equal(tokens, ref_tokens)
             else "DIFFER %s vs %s" % (tokens.tolist(), ref_tokens.tolist()), err, timing))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--write-golden", action="store_true",
                    help="write ORT's tokens and logits for tests/gpu/run.sh (max-seq 24, generate 8)")
    a = ap.parse_args()
    if a.write_golden:
        write_golden()
        return 0
    work = tempfile.mkdtemp(prefix="o2s_decode_")
    failed = 0
    try:
        for name, model, mesh, flags in CASES:
            if a.only and a.only != name:
                continue
            try:
                failed += not run_case(name, model, mesh, flags, work, a.tol)
            except RuntimeError as e:
                print("FAIL  %s: %s" % (name, e))
                failed += 1
    finally:
        if a.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("decode: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
