#!/usr/bin/env python3
"""train_bench.py: training steps of the generated programs against
onnxruntime-training, and ZeRO's memory against the plan.

Part of `make bench` (which makes build/venv-train with tools/deps.sh
--train). Models: tiny_gpt_lm and gpt2_ts_lm (the PyTorch export of GPT-2,
tests/models/train) and gpt_512_lm, the
bench's gpt_512 (d512, 4 layers, vocabulary 1024) at seq 32, batch 16 (the
same 512 tokens per step as gpt_512's seq 128 x batch 4: ORT-training
crashes from seq 64 on) with a language-model loss (SoftmaxCrossEntropyLoss
of the logits against labels). --model, --plan and --part pick what runs.

1. Time per AdamW step (forward, backward, update; the step after a
   warm-up step, median of ROUNDS alternating rounds): the generated C
   program on 1 rank against ORT-training on 1 thread, and on dp=2 (the
   batch split over two ranks, gradients all-reduced in buckets) against
   ORT-training on 2 threads. Target: ratio <= 1.0.
2. Gradient all-reduce hidden behind backward, gpt_512_lm on dp=2
   (--device cpu, the plan's shared-memory links): the program run with
   --trace under --comms serial (each collective waited for as soon as it
   starts: all of its time exposed) and --comms overlap (the default),
   alternating, REPEATS times; hidden = 1 - exposed / exposed-when-serial
   for the all-reduces (tools/trace_report.py), of the transfer (waits
   after both ranks had started it) and of all the waits (imbalance too),
   beside the plan's estimate (plan.json's estimate.as_scheduled:
   overlapped / communication). Target: >= 80% of the transfer hidden
   where the plan's communication is under half of backward's compute
   (the plan's compute times backward's share of the traced compute).
3. Peak memory per rank (VmHWM of rank 0) of gpt_512_lm on dp=2 with
   --zero 0, 1, 2 and 3, beside the plan's figure for the program
   (arena + weights + optimizer state + inputs, from the memory plan).
4. Pipeline training: gpt_512_lm on pp=4 (4 CPU ranks), GPipe, 1F1B and
   interleaved (V = 2) with M = 4 and 8 microbatches per step (each the
   model's batch): time
   per step beside the plan's estimate (plan.json's pipeline step_s), and
   peak memory per stage (VmHWM of each rank) beside the program's own
   figure (arena + weights + stashes, slots and inputs). Target: 1F1B
   below GPipe on stage 0 for M > p.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_models  # noqa: E402
import trace_report  # noqa: E402

# TRAIN_BENCH_BIN: another compiler binary (an older commit's build), and
# TRAIN_BENCH_OUT a folder of build/bench for its outputs, to time its programs.
BIN = os.environ.get("TRAIN_BENCH_BIN", os.path.join(ROOT, "build", "onnx2spmd"))
OUT = os.path.join(ROOT, "build", "bench", os.environ.get("TRAIN_BENCH_OUT", "train"))
VENV_TRAIN = os.path.join(ROOT, "build", "venv-train", "bin", "python")
ROUNDS = int(os.environ.get("TRAIN_BENCH_ROUNDS", "3"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ENV.setdefault("OMPI_MCA_pml", "ob1")
ENV.setdefault("OMPI_MCA_btl", "self,vader")



def with_loss(m, name):
    """A tiny_gpt-shaped model with a mean cross-entropy over labels."""
    g = m.graph
    (logits,) = g.output
    B, S, V = (d.dim_value for d in logits.type.tensor_type.shape.dim)
    g.initializer.extend([numpy_helper.from_array(np.array([B * S, V], np.int64), "lm_logits_2d"),
                          numpy_helper.from_array(np.array([B * S], np.int64), "lm_labels_1d")])
    g.node.extend([
        helper.make_node("Reshape", [logits.name, "lm_logits_2d"], ["logits_2d"], name="lm_flatten_logits"),
        helper.make_node("Reshape", ["labels", "lm_labels_1d"], ["labels_1d"], name="lm_flatten_labels"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits_2d", "labels_1d"], ["loss"], reduction="mean",
                         name="lm_xent"),
    ])
    g.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [B, S]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    g.name = name
    return m, (B, S, V)


def models():
    os.makedirs(OUT, exist_ok=True)
    out = []
    rng = np.random.default_rng(3)
    tiny = os.path.join(ROOT, "tests", "models", "train", "tiny_gpt_lm")
    out.append(("tiny_gpt_lm", tiny + ".onnx", {"tokens": tiny + ".input_tokens.npy",
                                               "labels": tiny + ".input_labels.npy"}))
    # seq 32 x batch 16: the 512 tokens per step of codegen_bench's gpt_512 (seq 128 x batch 4), so
    # the GEMMs are the same; onnxruntime-training 1.19.2 corrupts its heap on this model from seq 64
    # on (double free, or BFCArena's "c->in_use()" check), at any width or depth tried.
    big, _ = make_models.make_tiny_gpt(rng, V=1024, D=512, H=8, S=32, B=16, F=2048, L=4, name="gpt_512")
    big, (B, S, V) = with_loss(big, "gpt_512_lm")
    path = os.path.join(OUT, "gpt_512_lm.onnx")
    onnx.save(big, path)
    feeds = {}
    for n in ("tokens", "labels"):
        feeds[n] = os.path.join(OUT, "gpt_512_lm.%s.npy" % n)
        np.save(feeds[n], rng.integers(0, V, (B, S), dtype=np.int64))
    out.append(("gpt_512_lm", path, feeds))
    # the PyTorch export of GPT-2 (TorchScript, tests/models/make_train_exports.py) with its LM loss
    gpt2 = os.path.join(ROOT, "tests", "models", "train", "gpt2_ts_lm")
    out.append(("gpt2_ts_lm", gpt2 + ".onnx", {n: "%s.input_%s.npy" % (gpt2, n)
                                              for n in ("input_ids", "attention_mask", "labels")}))
    return out


def compile_build(name, model, flags):
    d = os.path.join(OUT, name)
    subprocess.run(["rm", "-rf", d], check=True)
    train = ["--train", "--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "0.01"]
    r = subprocess.run([BIN, "compile", model] + train + ["-o", d] + flags, capture_output=True, text=True)
    if r.returncode:
        sys.exit("train_bench: compile %s: %s" % (name, r.stderr))
    subprocess.run(["make", "-s", "-C", d], check=True)
    # The programs' own memory plan is printed by `plan` (compile's plan.txt
    # has the estimate only).
    r = subprocess.run([BIN, "plan", model] + train + flags, capture_output=True, text=True)
    m = re.search(r"programs\s+(\d+) bytes per rank", r.stdout)
    return d, int(m.group(1)) if m else -1


def run_program(d, feeds, steps, extra=()):
    """The program's stdout after steps timed steps (and one warm-up)."""
    args = [os.path.join(d, "run.sh"), "--steps", str(steps + 1), "--log-every", str(10 ** 9)] + list(extra)
    for n, p in feeds.items():
        args += ["--in", "%s=%s" % (n, p)]
    tmp = tempfile.mkdtemp(prefix="o2s.", dir="/tmp")  # a private OpenMPI session folder (a shared one races)
    try:
        r = subprocess.run(args, capture_output=True, text=True, env=dict(ENV, TMPDIR=tmp), timeout=900)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode:
        sys.exit("train_bench: %s: %s" % (d, r.stderr[-2000:]))
    return r.stdout


def run_ours(d, feeds, steps, extra=()):
    out = run_program(d, feeds, steps, extra)
    ms = float(re.search(r"time per step: ([\d.]+) ms", out).group(1))
    mib = float(re.search(r"peak memory: ([\d.]+) MiB", out).group(1))
    return ms, mib


def run_ort(model, feeds, threads, steps):
    args = [VENV_TRAIN, os.path.join(ROOT, "tests", "train", "ort_oracle.py"), model, "--loss", "loss",
            "--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "0.01", "--steps", str(steps + 1),
            "--threads", str(threads), "--time", "--out", os.path.join(OUT, "ort_run")]
    for n, p in feeds.items():
        args += ["--input", "%s=%s" % (n, p)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    m = re.search(r"time per step: ([\d.]+) ms", r.stdout)
    if not m:
        sys.exit("train_bench: onnxruntime-training: %s" % (r.stdout + r.stderr)[-2000:])
    return float(m.group(1)), float(re.search(r"peak memory: ([\d.]+) MiB", r.stdout).group(1))


def bench_steps(args, missed):
    print("\ntraining steps: generated C vs onnxruntime-training 1.19.2 (AdamW, one step after a warm-up; "
          "median of %d alternating rounds)" % ROUNDS)
    print("%-14s %-6s %12s %12s %7s %9s %9s" % ("model", "plan", "C ms/step", "ORT ms/step", "ratio", "C MiB",
                                               "ORT MiB"))
    for name, model, feeds in models():
        if args.model and name != args.model:
            continue
        steps = 3 if name == "gpt_512_lm" else 20
        for label, flags, ranks in (("1 rank", ["--mesh", "r=1"], 1),
                                    ("dp=2", ["--mesh", "dp=2", "--shard", "tokens=[dp,_]",
                                              "--shard", "labels=[dp,_]"], 2)):
            if args.plan and args.plan != ("1" if ranks == 1 else "dp2"):
                continue
            if ranks == 2:  # every input's batch dim over dp
                flags = ["--mesh", "dp=2"] + [a for n in feeds for a in ("--shard", "%s=[dp,_]" % n)]
            d, _ = compile_build("%s_%s" % (name, ranks), model, flags)
            ours, theirs, c_mib, o_mib = [], [], 0, 0
            for _ in range(ROUNDS):
                ms, c_mib = run_ours(d, feeds, steps)
                ours.append(ms)
                ms, o_mib = run_ort(model, feeds, ranks, steps)
                theirs.append(ms)
            ratio = statistics.median([a / b for a, b in zip(ours, theirs)])
            print("%-14s %-6s %12.3f %12.3f %7.2f %9.1f %9.1f" % (name, label, statistics.median(ours),
                                                                 statistics.median(theirs), ratio, c_mib, o_mib))
            if ratio > 1.0:
                missed.append("%s %s: %.2f" % (name, label, ratio))


def bench_overlap():
    reps = int(os.environ.get("TRAIN_BENCH_REPEATS", "3"))
    _, model, feeds = models()[1]
    d, _ = compile_build("gpt_512_lm_overlap", model, ["--mesh", "dp=2", "--shard", "tokens=[dp,_]", "--shard",
                                                       "labels=[dp,_]", "--device", "cpu"])
    est = json.load(open(os.path.join(d, "plan.json")))["estimate"]["as_scheduled"]
    runs = {"serial": [], "overlap": []}
    for _ in range(reps):  # alternating, so a slow spell of the shared machine hits both
        for mode in runs:
            tr = os.path.join(d, "trace_%s.json" % mode)
            run_ours(d, feeds, 3, ["--trace", tr, "--comms", mode])
            runs[mode].append(trace_report.summarise(tr))
    med = statistics.median
    ar = lambda r: r["kinds"].get("all-reduce", {"transfer_exposed_ms": 0.0, "exposed_ms": 0.0})  # noqa: E731
    hid = {key: med([trace_report.hidden(ar(o), ar(s), key) or 0.0 for o, s in zip(runs["overlap"], runs["serial"])])
           for key in ("transfer_exposed_ms", "exposed_ms")}
    bwd = med([backward_ms(os.path.join(d, "trace_overlap.json"))])
    compute = med([r["compute_ms"] for r in runs["overlap"]])
    share = bwd / compute if compute > 0 else 0.0
    plan_bwd = est["compute_s"] * share
    plan_hidden = est["overlapped_s"] / est["communication_s"] if est["communication_s"] > 0 else 0.0
    applies = est["communication_s"] < 0.5 * plan_bwd
    verdict = ("met" if hid["transfer_exposed_ms"] >= 0.8 else "MISSED") if applies else "n/a (comm >= backward/2)"
    print("\ngradient all-reduce hidden behind backward: gpt_512_lm, dp=2, --device cpu, medians of %d runs per mode, "
          "%d cores" % (reps, os.cpu_count()))
    print("%9s %9s %9s | %9s %9s %9s %9s | %9s %9s | %6s | %s"
          % ("plan comm", "plan bwd", "comm/bwd", "bwd", "ms/step", "ms/step", "all-red.", "transfer", "all waits",
             "plan", "target (>= 80% of the"))
    print("%9s %9s %9s | %9s %9s %9s %9s | %9s %9s | %6s | %s"
          % ("ms", "ms", "", "ms/step", "serial", "overlap", "ser. ms", "hidden", "hidden", "hidden",
             "transfer where comm < bwd/2)"))
    print("%9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f %9.3f | %8.0f%% %8.0f%% | %5.0f%% | %s"
          % (est["communication_s"] * 1e3, plan_bwd * 1e3, est["communication_s"] / plan_bwd if plan_bwd else 0.0,
             bwd, med([r["step_ms"] for r in runs["serial"]]), med([r["step_ms"] for r in runs["overlap"]]),
             med([ar(r)["exposed_ms"] for r in runs["serial"]]), 100 * hid["transfer_exposed_ms"],
             100 * hid["exposed_ms"], 100 * plan_hidden, verdict))
    print("(bwd: the traced time of backward's nodes, those named <node>/grad<k>; plan bwd: the plan's compute "
          "times that share of the traced compute)")
    return verdict


def backward_ms(path):
    """Backward's compute per step in a trace: its nodes' spans (named
    <forward node>/grad<k> by ir/autodiff.c), the warm-up step left out,
    averaged over steps and ranks."""
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "node"]
    iters = sorted({e["args"]["iteration"] for e in events})
    keep = set(iters[1:] if len(iters) > 1 else iters)
    ranks = {e["pid"] for e in events}
    total = sum(e["dur"] for e in events if e["args"]["iteration"] in keep and re.search(r"/grad\d+$", e["name"]))
    return total / 1e3 / max(1, len(keep) * len(ranks))


def bench_zero():
    print("\nZeRO on gpt_512_lm, dp=2: peak memory of rank 0 against the plan's figure for its program")
    print("%-8s %14s %14s %12s" % ("--zero", "plan MiB/rank", "measured MiB", "ms/step"))
    _, model, feeds = models()[1]
    for z in (0, 1, 2, 3):
        d, planned = compile_build("gpt_512_lm_zero%d" % z, model,
                                   ["--mesh", "dp=2", "--shard", "tokens=[dp,_]", "--shard", "labels=[dp,_]",
                                    "--zero", str(z)])
        ms, mib = run_ours(d, feeds, 3)
        print("%-8d %14.1f %14.1f %12.3f" % (z, planned / 2 ** 20, mib, ms))
    print("(measured: VmHWM, which also holds the MPI library and the inputs read; the plan counts the arena, "
          "weights, optimizer state and inputs)")


def bench_pipeline():
    print("\npipeline training: gpt_512_lm on pp=4 (4 CPU ranks), AdamW; time per step (median of %d runs) beside "
          "the plan's estimate, peak memory per stage beside the program's figure" % ROUNDS)
    print("%-11s %3s %10s %10s %7s   %-27s %-27s" % ("schedule", "M", "ms/step", "plan ms", "ratio",
                                                  "measured MiB per stage", "program MiB per stage"))
    _, model, feeds = models()[1]
    peak0 = {}
    for m in (4, 8):
        for sched in ("gpipe", "1f1b", "interleaved"):
            name = "gpt_512_lm_pp4_%s_m%d" % (sched, m)
            d = os.path.join(OUT, name)
            subprocess.run(["rm", "-rf", d], check=True)
            train = ["--train", "--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "0.01"]
            r = subprocess.run([BIN, "compile", model] + train + ["-o", d, "--mesh", "pp=4", "--device", "cpu",
                                                                  "--microbatches", str(m), "--schedule", sched],
                               capture_output=True, text=True)
            if r.returncode:
                sys.exit("train_bench: compile %s: %s" % (name, r.stderr))
            subprocess.run(["make", "-s", "-C", d], check=True)
            program = [float(x) for x in re.findall(r"; ([\d.]+) MiB at its peak", r.stdout)]
            with open(os.path.join(d, "plan.json")) as fh:
                plan_ms = json.load(fh)["pipeline"]["step_s"] * 1e3
            times, per_rank = [], None
            for _ in range(ROUNDS):
                out = run_program(d, feeds, 2)
                times.append(float(re.search(r"time per step: ([\d.]+) ms", out).group(1)))
                pairs = re.search(r"peak memory per rank \(MiB, VmHWM / planned\):((?: [\d.]+ / [\d.]+)+)",
                                  out).group(1).split()
                per_rank = [float(x) for x in pairs[0::3]]
            ms = statistics.median(times)
            peak0[(sched, m)] = per_rank[0]
            print("%-11s %3d %10.1f %10.1f %7.2f   %-27s %-27s" % (
                sched, m, ms, plan_ms, ms / plan_ms if plan_ms > 0 else float("nan"),
                " ".join("%6.1f" % x for x in per_rank), " ".join("%6.1f" % x for x in program)))
    for m in (4, 8):
        print("stage 0 at M=%d: 1F1B %.1f MiB, GPipe %.1f MiB (%s)" % (
            m, peak0[("1f1b", m)], peak0[("gpipe", m)],
            "1F1B below" if peak0[("1f1b", m)] < peak0[("gpipe", m)] else "1F1B NOT below"))
    print("(measured: VmHWM of each rank; the program's figure, as compile prints it: its arena, weights and "
          "optimizer state, the stashes, slots and inputs its schedule holds, start-up packs and the runtime. The plan's time is the cost "
          "model's run of the schedule at the CPU preset; 4 ranks share this machine's cores)")
    return "MISSED" if not peak0[("1f1b", 8)] < peak0[("gpipe", 8)] else None


def parse_args():
    ap = argparse.ArgumentParser(description="training steps against onnxruntime-training")
    ap.add_argument("--model", choices=("tiny_gpt_lm", "gpt_512_lm", "gpt2_ts_lm"), help="time this model only")
    ap.add_argument("--plan", choices=("1", "dp2"), help="time this plan only (1 rank or dp=2)")
    ap.add_argument("--part", choices=("steps", "overlap", "zero", "pipeline"), action="append",
                    help="run this part only (repeatable; default all)")
    return ap.parse_args()


def main():
    args = parse_args()
    parts = args.part or ("steps", "overlap", "zero", "pipeline")
    if not os.path.exists(VENV_TRAIN):
        sys.exit("train_bench: no %s (tools/deps.sh --train)" % VENV_TRAIN)
    missed = []
    if "steps" in parts:
        bench_steps(args, missed)
    if "overlap" in parts and bench_overlap() == "MISSED":
        missed.append("gradient all-reduce hidden behind backward")
    if "zero" in parts:
        bench_zero()
    if "pipeline" in parts and bench_pipeline() == "MISSED":
        missed.append("1F1B's stage 0 memory below GPipe's at M=8")
    if missed:
        print("\ntrain_bench: above the 1.0 target: " + "; ".join(missed))


if __name__ == "__main__":
    main()
