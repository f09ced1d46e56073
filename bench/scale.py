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

Usage: build/venv/bin/python bench/scale.py [--only SUBSTRING]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_transformer  # noqa: E402

BIN = os.path.join(ROOT, "build", "onnx2spmd")
OUT = os.path.join(ROOT, "build", "scale")
MiB = 1 << 20
LLAMA_7B = dict(layers=32, dim=4096, heads=32, ffn=11008, vocab=32000)
LLAMA_1B = dict(layers=22, dim=2048, heads=32, ffn=5632, vocab=32000)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    rows, failed = [], []
    for label, cfg, dtype, mesh in ROWS:
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
    print("%-16s %7s %-15s %9s %9s %10s %7s %7s %12s %10s %8s" % (
        "model", "params", "mesh", "weights", "plan RSS", "compile s", "copy s", "ratio", "compile RSS", "limit",
        "RSS/wts"))
    for label, params, mesh, wb, prss, cs, cps, rss, limit, miss in rows:
        print("%-16s %6.2fG %-15s %7.2fGB %6.0fMiB %10.1f %7.1f %7.2f %9.0fMiB %7.0fMiB %8.3f%s" % (
            label, params / 1e9, mesh, wb / 1e9, prss / MiB, cs, cps, cs / cps, rss / MiB, limit / MiB, rss / wb,
            "  MISS" if miss else ""))
    print("ratio: compile / copy (limit 1.5); limit: 2 x the largest tensor + 512 MiB; RSS/wts: compile RSS over "
          "the model's weight bytes")
    if failed:
        sys.exit("scale: " + "; ".join(failed))


if __name__ == "__main__":
    main()
