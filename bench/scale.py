#!/usr/bin/env python3
"""scale.py (make scale): the compiler at real size, on models built from
configs (no downloads).

Each model is a Llama-shaped graph from bench/make_transformer.py (random
shapes of the real configs, weights as external data in a sparse file that
costs no disk): Llama-2-7B (32 layers, d 4096, SwiGLU 11008, vocabulary
32000) in float32 and float16, and a 1.1 G-parameter Llama (TinyLlama's
22 layers, d 2048, 5632, 32000). Each row plans and compiles one model on
one mesh with the Megatron hand plan (make_transformer's *_megatron.txt),
and measures:

  plan RSS       peak resident memory of `plan` (it reads no weight bytes)
  compile s      wall time of `compile`, its files synced to disk
  copy s         a plain copy of the same bytes: dd of the weight file
                 (read and written in 4 MiB blocks, synced), scaled by the
                 shards' bytes over the model's where replication writes more
  compile RSS    peak resident memory of `compile`
  limit          2 x the largest tensor + 512 MiB

and fails (exit 1) when compile RSS passes its limit, compile takes more
than 1.5 x the copy, or plan's RSS passes 256 MiB. Outputs are removed
after each row (a 7B float32 compile writes 27 GB); models are cached in
build/scale/.

Then the ranks: GPT-2 124M's shapes (12 layers, d 768, vocabulary 50304,
batch 4 x 128) and the 1.1B Llama (batch 2 x 128), compiled, built and
run on 1 and 2 ranks, inference and training (AdamW for GPT-2, SGD for
the Llama, whose AdamW state would not fit 2 ranks here; the models end
in the causal-LM loss, labels split over dp). Per row:

  rank peak      each rank's VmHWM against the figure compile printed for
                 it (weights mapped once, arena, inputs, start-up packs,
                 the runtime); the row fails past 5%
  start-up       mapping and checking the rank's weight file, against
                 reading the same file (dd to /dev/null) + 1 s
  ms/step        time per iteration or step, and ONNX Runtime's on the same
                 model, inputs and cores (intra-op threads = ranks) for
                 inference; training has no peer here (PyTorch is not in
                 build/venv)

Usage: build/venv/bin/python bench/scale.py [--only SUBSTRING] [--ranks-only | --compile-only]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import codegen_bench  # noqa: E402
import make_transformer  # noqa: E402

BIN = os.path.join(ROOT, "build", "onnx2spmd")
OUT = os.path.join(ROOT, "build", "scale")
MiB = 1 << 20
LLAMA_7B = dict(layers=32, dim=4096, heads=32, ffn=11008, vocab=32000)
LLAMA_1B = dict(layers=22, dim=2048, heads=32, ffn=5632, vocab=32000)
GPT2_124M = dict(layers=12, dim=768, heads=12, ffn=3072, vocab=50304)
# (label, family, config, batch, mesh, training optimizer or None)
RANK_ROWS = [
    ("GPT-2 124M", "gpt2", GPT2_124M, 4, "dp=1,tp=1", None),
    ("GPT-2 124M", "gpt2", GPT2_124M, 4, "dp=1,tp=2", None),
    ("GPT-2 124M", "gpt2", GPT2_124M, 4, "dp=1,tp=1", "adamw"),
    ("GPT-2 124M", "gpt2", GPT2_124M, 4, "dp=2,tp=1", "adamw"),
    ("Llama-1.1B", "llama", LLAMA_1B, 2, "dp=1,tp=1", None),
    ("Llama-1.1B", "llama", LLAMA_1B, 2, "dp=1,tp=2", None),
    ("Llama-1.1B", "llama", LLAMA_1B, 2, "dp=1,tp=2", "sgd"),
]
# (label, config, dtype, mesh)
ROWS = [
    ("Llama-7B fp32", LLAMA_7B, "float32", "dp=1,tp=8"),
    ("Llama-7B fp32", LLAMA_7B, "float32", "pp=2,dp=1,tp=4"),
    ("Llama-7B fp16", LLAMA_7B, "float16", "dp=1,tp=8"),
    ("Llama-7B fp16", LLAMA_7B, "float16", "pp=2,dp=1,tp=4"),
    ("Llama-1.1B fp32", LLAMA_1B, "float32", "dp=1,tp=2"),
    ("Llama-1.1B fp32", LLAMA_1B, "float32", "dp=1,tp=1"),
]


def model(label, cfg, dtype):
    """The cached model's folder, its parameters and largest tensor's bytes."""
    d = os.path.join(OUT, label.replace(" ", "_").replace(".", "_"))
    path = os.path.join(d, "llama.onnx")
    if not os.path.exists(path):
        make_transformer.build("llama", d, cfg["layers"], 2, 128, cfg["dim"], cfg["heads"], cfg["ffn"],
                               cfg["vocab"], dtype)
    m = onnx.load(path, load_external_data=False)
    esize = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2}
    largest, params = 0, 0
    for t in m.graph.initializer:
        n = 1
        for s in t.dims:
            n *= s
        if t.data_location == onnx.TensorProto.EXTERNAL:
            params += n
        largest = max(largest, n * esize.get(t.data_type, 8))
    return d, params, largest


def measured(cmd):
    """Wall seconds and peak RSS (bytes) of one command, by GNU time (a child
    forked from this Python would count the interpreter's pages in its own
    peak); exits on failure."""
    rss_file = os.path.join(OUT, "rss.txt")
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit("scale: %s failed: %s" % (" ".join(cmd), p.stderr.strip()))
    with open(rss_file) as f:
        kib = int(f.read().split()[-1])
    os.remove(rss_file)
    return wall, kib * 1024


def synced(f, *args):
    t0 = time.perf_counter()
    f(*args)
    os.sync()
    return time.perf_counter() - t0


ORT_RUN = codegen_bench.ORT_RUNNER  # model, threads, iters, NAME=FILE...: prints "ms" and "rss_kb"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_pml="ob1",
           OMPI_MCA_btl="self,vader")


def rank_model(label, family, cfg, batch, train):
    """A cached model for the rank rows (with the loss when training), its
    tokens and labels."""
    import numpy as np
    d = os.path.join(OUT, "ranks", label.replace(" ", "_").replace(".", "_") + ("_lm" if train else ""))
    path = os.path.join(d, family + ".onnx")
    if not os.path.exists(path):
        make_transformer.build(family, d, cfg["layers"], batch, 128, cfg["dim"], cfg["heads"], cfg["ffn"],
                               cfg["vocab"], loss=bool(train))
    rng = np.random.RandomState(0)
    feeds = [("tokens", os.path.join(d, "tokens.npy"))]
    np.save(feeds[0][1], rng.randint(0, cfg["vocab"], (batch, 128)).astype(np.int64))
    if train:
        feeds.append(("labels", os.path.join(d, "labels.npy")))
        np.save(feeds[1][1], rng.randint(0, cfg["vocab"], (batch, 128)).astype(np.int64))
    return d, path, feeds


def rank_rows(only):
    """The rank table; returns its misses."""
    rows, failed = [], []
    for label, family, cfg, batch, mesh, opt in RANK_ROWS:
        name = "%s %s %s" % (label, mesh, "train " + opt if opt else "infer")
        if only not in name:
            continue
        d, path, feeds = rank_model(label, family, cfg, batch, opt)
        ann = os.path.join(d, family + "_megatron.txt")
        out = os.path.join(OUT, "out")
        shutil.rmtree(out, ignore_errors=True)
        flags = ["--mesh", mesh, "--shardings", ann]
        if opt:
            flags += ["--train", "--optimizer", opt] + (["--frozen", "causal"] if family == "gpt2" else [])
        t0 = time.perf_counter()
        c = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", os.path.join(OUT, "rss.txt"), BIN, "compile", path,
                            "-o", out] + flags, capture_output=True, text=True)
        compile_s = time.perf_counter() - t0
        if c.returncode:
            sys.exit("scale: compile %s: %s" % (name, c.stderr.strip()))
        with open(os.path.join(OUT, "rss.txt")) as f:
            compile_rss = int(f.read().split()[-1]) * 1024
        planned = [float(x) for x in re.findall(r"; ([\d.]+) MiB at its peak", c.stdout)]
        subprocess.run(["make", "-s", "-C", out], check=True)
        read_s = synced(subprocess.run, ["dd", "if=" + os.path.join(out, "weights.rank0.bin"), "of=/dev/null",
                                         "bs=4M", "status=none"])
        args = []
        for k, v in feeds:
            args += ["--in", "%s=%s" % (k, v)]
        args += ["--steps", "3"] if opt else ["--iters", "2"]
        r = subprocess.run([os.path.join(out, "run.sh")] + args, capture_output=True, text=True, env=ENV,
                           stdin=subprocess.DEVNULL)
        if r.returncode:
            sys.exit("scale: run %s: %s" % (name, (r.stdout + r.stderr)[-800:]))
        ms = float(re.search(r"time per (?:iteration|step): ([\d.]+) ms", r.stdout).group(1))
        pairs = re.search(r"peak memory per rank \(MiB, VmHWM / planned\):((?: [\d.]+ / [\d.]+)+)",
                          r.stdout).group(1).split()
        hwm = [float(x) for x in pairs[0::3]]
        startup = max(float(x) for x in re.search(r"weights mapped and checked per rank \(s\):((?: [\d.]+)+)",
                                                  r.stdout).group(1).split())
        ranks = len(hwm)
        peer_ms = peer_mib = None
        if not opt:
            o = subprocess.run([sys.executable, "-c", ORT_RUN, path, str(ranks), "2"] +
                               ["%s=%s" % kv for kv in feeds], capture_output=True, text=True, env=ENV)
            if o.returncode:
                sys.exit("scale: ONNX Runtime on %s: %s" % (name, o.stderr[-800:]))
            peer_ms = float(re.search(r"ms ([\d.]+)", o.stdout).group(1))
            peer_mib = int(re.search(r"rss_kb (\d+)", o.stdout).group(1)) / 1024
        shutil.rmtree(out)
        worst = max(abs(h - p) / p for h, p in zip(hwm, planned))
        miss = []
        if worst > 0.05:
            miss.append("a rank's VmHWM is %.1f%% off its planned figure" % (100 * worst))
        if startup > read_s + 1:
            miss.append("start-up %.2f s > reading the file %.2f s + 1 s" % (startup, read_s))
        rows.append((name, compile_s, compile_rss, hwm, planned, startup, read_s, ms, peer_ms, peer_mib, miss))
        failed += ["%s: %s" % (name, m) for m in miss]
        print("  %s done" % name, file=sys.stderr)
    if not rows:
        return failed
    print("\n%-34s %9s %11s %-30s %9s %10s %10s %7s %10s" % (
        "ranks", "compile s", "compile RSS", "rank peak MiB (VmHWM / plan)", "start-up", "ms/step", "ORT ms",
        "ratio", "ORT MiB"))
    for name, cs, crss, hwm, planned, su, rd, ms, pms, pmib, miss in rows:
        peaks = " ".join("%.0f/%.0f" % hp for hp in zip(hwm, planned))
        print("%-34s %9.1f %8.0fMiB %-30s %4.2f/%4.2f %10.1f %10s %7s %10s%s" % (
            name, cs, crss / MiB, peaks, su, rd, ms, "%.1f" % pms if pms else "-",
            "%.2f" % (ms / pms) if pms else "-", "%.0f" % pmib if pmib else "-", "  MISS" if miss else ""))
    print("rank peak: each rank's VmHWM over the figure compile printed for it (limit 5%); start-up: mapping and "
          "checking the weights over reading the file (limit + 1 s); ratio: ms/step over ONNX Runtime's with as "
          "many threads as ranks")
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--ranks-only", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    rows, failed = [], []
    for label, cfg, dtype, mesh in ([] if a.ranks_only else ROWS):
        if a.only not in label + " " + mesh:
            continue
        d, params, largest = model(label, cfg, dtype)
        onnx_path, ann = os.path.join(d, "llama.onnx"), os.path.join(d, "llama_megatron.txt")
        weights = os.path.join(d, "llama.weights")
        out = os.path.join(OUT, "out")
        shutil.rmtree(out, ignore_errors=True)
        plan_s, plan_rss = measured([BIN, "plan", onnx_path, "--mesh", mesh, "--shardings", ann])
        os.sync()
        t0 = time.perf_counter()
        _, rss = measured([BIN, "compile", onnx_path, "--mesh", mesh, "--shardings", ann, "-o", out])
        os.sync()
        compile_s = time.perf_counter() - t0
        shard_bytes = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.startswith("weights."))
        shutil.rmtree(out)
        os.sync()
        copy = os.path.join(OUT, "copy.bin")
        copy_s = synced(subprocess.run, ["dd", "if=" + weights, "of=" + copy, "bs=4M", "status=none"])
        os.remove(copy)
        model_bytes = os.path.getsize(weights)
        copy_s *= max(1.0, shard_bytes / model_bytes)
        limit = 2 * largest + 512 * MiB
        miss = []
        if rss > limit:
            miss.append("compile RSS %.0f MiB > %.0f" % (rss / MiB, limit / MiB))
        if compile_s > 1.5 * copy_s:
            miss.append("compile %.1f s > 1.5 x copy %.1f s" % (compile_s, copy_s))
        if plan_rss > 256 * MiB:
            miss.append("plan RSS %.0f MiB > 256" % (plan_rss / MiB))
        rows.append((label, params, mesh, model_bytes, plan_rss, compile_s, copy_s, rss, limit, miss))
        failed += ["%s %s: %s" % (label, mesh, m) for m in miss]
        print("  %s %s done" % (label, mesh), file=sys.stderr)
    if rows:
        print("%-16s %7s %-15s %9s %9s %10s %7s %7s %12s %10s %8s" % (
            "model", "params", "mesh", "weights", "plan RSS", "compile s", "copy s", "ratio", "compile RSS", "limit",
            "RSS/wts"))
        for label, params, mesh, wb, prss, cs, cps, rss, limit, miss in rows:
            print("%-16s %6.2fG %-15s %7.2fGB %6.0fMiB %10.1f %7.1f %7.2f %9.0fMiB %7.0fMiB %8.3f%s" % (
                label, params / 1e9, mesh, wb / 1e9, prss / MiB, cs, cps, cs / cps, rss / MiB, limit / MiB, rss / wb,
                "  MISS" if miss else ""))
        print("ratio: compile / copy (limit 1.5); limit: 2 x the largest tensor + 512 MiB; RSS/wts: compile RSS over "
              "the model's weight bytes")
    if not a.compile_only:
        failed += rank_rows(a.only)
    if failed:
        sys.exit("scale: " + "; ".join(failed))


if __name__ == "__main__":
    main()
