#!/usr/bin/env python3
"""pipeline.py [REGEX]: pipeline stages and microbatches, end to end.

Three models with a batch of 8, built here from fixed seeds into
build/pipeline/ with their goldens from ONNX Runtime (not committed):
tests/models/make_models.py's tiny_gpt with four layers, and a GPT-2- and
a Llama-shaped graph from bench/make_transformer.py (four layers, 64 wide),
their weight files filled with seeded random values. Each case compiles
a pipeline (pp=2, pp=4, pp=2 x tp=2, pp=2 x dp=2, the pipeline axis first
or last, boundaries by hand or by the search, --auto inside the stages)
with M = 1, 2 or 4 microbatches, builds it with -Werror, runs it under
mpirun and compares the logits with ONNX Runtime's; it also checks that
plan.json has the stages and microbatches asked for, and that each stage's
weight file holds only its stage's weights (less than the whole model's).
The stage search is checked on a 32-layer Llama-shaped graph (plan only):
8 layers per stage on pp=4, and fewer on the last one when it carries a
heavy LM head. The checked-in exports (batch 2) run pipelined in
tests/e2e/cases.txt."""
import json
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
import onnxruntime as ort  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
WORK = os.path.join(ROOT, "build", "pipeline")
BIN = os.path.join(ROOT, "build", "onnx2spmd")
PY = sys.executable
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")

# Megatron's split of tiny_gpt's four layers over tp (the batch over dp where the mesh has it).
TINY_TP = []
for _l in range(4):
    for _w, _spec in (("q", "[_,tp]"), ("k", "[_,tp]"), ("v", "[_,tp]"), ("1", "[_,tp]"), ("o", "[tp,_]"),
                      ("2", "[tp,_]")):
        TINY_TP += ["--shard", "l%d_W%s=%s" % (_l, _w, _spec)]
DP = ["--shard", "tokens=[dp,_]"]
CPU = ["--device", "cpu"]  # compute-bound costs: the search balances the stages' work


def cases():
    c = []
    for m in (1, 2, 4):
        c.append(("tiny_pp2_m%d" % m, "tiny", "pp=2", ["--microbatches", str(m)]))
        c.append(("tiny_pp4_m%d" % m, "tiny", "pp=4", ["--microbatches", str(m)]))
    c += [
        ("tiny_pp2_tp2_m2", "tiny", "pp=2,tp=2", ["--microbatches", "2"] + TINY_TP),
        ("tiny_pp2_tp2_m4", "tiny", "pp=2,tp=2", ["--microbatches", "4"] + TINY_TP),
        ("tiny_tp2_pp2_m2", "tiny", "tp=2,pp=2", ["--microbatches", "2"] + TINY_TP),  # pipeline axis last
        ("tiny_pp2_dp2_m1", "tiny", "pp=2,dp=2", ["--microbatches", "1"] + DP),
        ("tiny_pp2_dp2_m2", "tiny", "pp=2,dp=2", ["--microbatches", "2"] + DP),
        ("tiny_pp2_dp2_m4", "tiny", "pp=2,dp=2", ["--microbatches", "4"] + DP),
        ("tiny_pp4_hand_m4", "tiny", "pp=4", ["--microbatches", "4", "--stage-boundaries", "l0_out,l1_out,l2_out"]),
        ("tiny_stages_axis_m2", "tiny", "stages=2,tp=2", ["--pipeline-axis", "stages", "--microbatches", "2"] + TINY_TP),
        ("tiny_pp2_tp2_auto_m2", "tiny", "pp=2,tp=2", ["--microbatches", "2", "--auto", "--mem-limit", "1500K"]),
        ("tiny_pp1_m4", "tiny", "pp=1", ["--microbatches", "4"]),
    ]
    for fam in ("gpt2", "llama"):
        meg = ["--shardings", os.path.join(WORK, fam, fam + "_megatron.txt")]
        for m in (1, 2, 4):
            c.append(("%s_pp2_m%d" % (fam, m), fam, "pp=2", ["--microbatches", str(m)]))
        c += [
            ("%s_pp4_m4" % fam, fam, "pp=4", ["--microbatches", "4"]),
            ("%s_pp2_tp2_m2" % fam, fam, "pp=2,dp=1,tp=2", ["--microbatches", "2"] + meg),
            ("%s_pp2_dp2_m2" % fam, fam, "pp=2,dp=2", ["--microbatches", "2"] + DP),
        ]
    return c


def build():
    os.makedirs(WORK, exist_ok=True)
    models = {}
    path = os.path.join(WORK, "tiny", "tiny.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(11)
    m, feeds = make_models.make_tiny_gpt(rng, B=8, L=4, name="pipe_gpt")
    make_models.save(m, path)
    names, outs = make_models.run_ort(path, feeds)
    models["tiny"] = (path, feeds["tokens"], outs[names.index("logits")])
    for fam in ("gpt2", "llama"):
        d = os.path.join(WORK, fam)
        subprocess.run([PY, os.path.join(ROOT, "bench", "make_transformer.py"), fam, d, "--layers", "4", "--batch", "8",
                        "--seq", "16", "--dim", "64", "--heads", "4", "--ffn", "128", "--vocab", "256"], check=True,
                       stdout=subprocess.DEVNULL)
        wpath = os.path.join(d, fam + ".weights")
        n = os.path.getsize(wpath) // 4
        np.random.default_rng(7).standard_normal(n, dtype=np.float32).__mul__(np.float32(0.08)).tofile(wpath)
        model = os.path.join(d, fam + ".onnx")
        tokens = np.random.default_rng(3).integers(0, 256, (8, 16)).astype(np.int64)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        out = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"tokens": tokens})[0]
        models[fam] = (model, tokens, out)
    return models


def run(models, name, key, mesh, flags):
    model, tokens, gold = models[key]
    out = os.path.join(WORK, "out_" + name)
    shutil.rmtree(out, ignore_errors=True)
    c = subprocess.run([BIN, "compile", model, "--mesh", mesh, "-o", out] + CPU + flags, capture_output=True, text=True)
    if c.returncode:
        return False, "compile: " + c.stderr.strip()[-400:]
    b = subprocess.run(["make", "-s", "-j%d" % (os.cpu_count() or 2), "-C", out, "WARN=-Wall -Wextra -Werror"], capture_output=True, text=True)
    if b.returncode:
        return False, "build: " + (b.stderr + b.stdout)[:400]
    tok_path, got_path = os.path.join(out, "tokens.npy"), os.path.join(out, "logits.npy")
    np.save(tok_path, tokens)
    e = mpi_isolated.run([os.path.join(out, "run.sh"), "--in", "tokens=" + tok_path, "--out", "logits=" + got_path],
                         capture_output=True, text=True, env=ENV, timeout=300, stdin=subprocess.DEVNULL)
    if e.returncode:
        return False, "run: " + (e.stderr + e.stdout)[-400:]
    got = np.load(got_path)
    if got.shape != gold.shape:
        return False, "logits %s, golden %s" % (got.shape, gold.shape)
    err = np.abs(got.astype(np.float64) - gold)
    if not (err <= 1e-4 + 1e-3 * np.abs(gold)).all():
        return False, "max abs err %.3g" % err.max()
    plan = json.load(open(os.path.join(out, "plan.json")))
    pipe = plan.get("pipeline")
    stages = int(re.search(r"(?:pp|stages)=(\d+)", mesh).group(1))
    mb = int(flags[flags.index("--microbatches") + 1])
    if not pipe or pipe["stages"] != stages or pipe["microbatches"] != mb:
        return False, "plan.json: pipeline %s, want %d stages, %d microbatches" % (pipe, stages, mb)
    if ("--stage-boundaries" in flags) == pipe["automatic"]:
        return False, "plan.json: automatic is %s" % pipe["automatic"]
    # Each stage's weight file holds its stage's weights only.
    ranks = len([f for f in os.listdir(out) if re.fullmatch(r"weights\.rank\d+\.bin", f)])
    sizes = [os.path.getsize(os.path.join(out, "weights.rank%d.bin" % r)) for r in range(ranks)]
    total = sum(os.path.getsize(os.path.join(os.path.dirname(model), f)) for f in os.listdir(os.path.dirname(model))
                if f.endswith(".weights")) or os.path.getsize(model)
    if stages > 1 and "tp=" not in mesh and max(sizes) >= total:
        return False, "a stage's weight file (%d bytes) is not smaller than the model's weights (%d)" % (max(sizes),
                                                                                                       total)
    shutil.rmtree(out, ignore_errors=True)
    per = " ".join("%d" % (s["nodes"]) for s in pipe["per_stage"])
    return True, "max abs err %.2g; nodes per stage %s; bubble %.0f%%" % (err.max(), per, 100 * pipe["bubble"])


def search_checks():
    """The stage search on a 32-layer Llama-shaped graph (64 wide, plan
    only): with uniform layers and a small head, 8 layers per stage on
    pp=4, each stage ending at a layer boundary; with a heavy LM head
    (vocabulary 4096) the last stage takes fewer layers."""
    out = []
    for vocab, want in ((256, "8 8 8 8"), (4096, None)):
        d = os.path.join(WORK, "llama32_v%d" % vocab)
        subprocess.run([PY, os.path.join(ROOT, "bench", "make_transformer.py"), "llama", d, "--layers", "32",
                        "--batch", "8", "--seq", "16", "--dim", "64", "--heads", "4", "--ffn", "128", "--vocab",
                        str(vocab)], check=True, stdout=subprocess.DEVNULL)
        p = subprocess.run([BIN, "plan", os.path.join(d, "llama.onnx"), "--mesh", "pp=4", "--json"] + CPU,
                           capture_output=True, text=True)
        name = "search_llama32_v%d" % vocab
        if p.returncode:
            out.append((name, False, p.stderr.strip()[-300:]))
            continue
        stages = json.loads(p.stdout)["pipeline"]["per_stage"]
        layers = []
        for s in stages:
            a = re.match(r"l(\d+)_", s["first_node"])
            b = re.match(r"l(\d+)_", s["last_node"])
            layers.append((int(a.group(1)) if a else 0, int(b.group(1)) if b else 31))
        counts = " ".join(str(b - a + 1) for a, b in layers)
        bounds_ok = all(re.fullmatch(r"l\d+_residual2", s["last_node"]) for s in stages[:-1])
        if want:
            ok = counts == want and bounds_ok
        else:
            ok = layers[-1][1] - layers[-1][0] + 1 < min(b - a + 1 for a, b in layers[:-1])
        out.append((name, ok, "layers per stage %s (stages end %s)" % (counts, ", ".join(s["last_node"] for s in stages))))
    return out


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    models = build()
    fails = n = 0
    if re.search(flt, "search_llama32"):
        for name, ok, msg in search_checks():
            fails += not ok
            n += 1
            print("%-4s pipeline %-22s %-16s %s" % ("ok" if ok else "FAIL", name, "pp=4", msg), flush=True)
    for name, key, mesh, flags in cases():
        if not re.search(flt, name):
            continue
        ok, msg = run(models, name, key, mesh, flags)
        fails += not ok
        n += 1
        print("%-4s pipeline %-22s %-16s %s" % ("ok" if ok else "FAIL", name, mesh, msg), flush=True)
    print("pipeline: %s" % ("all %d cases pass (runs match ONNX Runtime)" % n if not fails else "%d of %d FAILED" % (fails, n)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
