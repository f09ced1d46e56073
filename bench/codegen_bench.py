#!/usr/bin/env python3
"""Generated 1-rank C program vs ONNX Runtime (one thread), same inputs.

For tiny_gpt and a larger GPT (d_model 512, 4 layers, 8 heads, seq 128,
batch 4, vocab 1024): compile with onnx2spmd for one rank, build, run with
--iters; run ONNX Runtime with intra/inter-op threads 1 and its default
graph optimisations on the same inputs. Each side runs in its own process
so its peak RSS is its own. Prints both times, the ratio and peak memory.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import make_models  # noqa: E402

OUT = os.path.join(ROOT, "build", "bench")
PY = os.path.join(ROOT, "build", "venv", "bin", "python")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

ORT_RUNNER = r"""
import sys, time, resource, numpy as np, onnxruntime as ort
model, inp, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feed = {"tokens": np.load(inp)}
s.run(None, feed)
t0 = time.perf_counter()
for _ in range(iters):
    s.run(None, feed)
t1 = time.perf_counter()
print("ms %.4f" % ((t1 - t0) * 1e3 / iters))
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print("rss_kb %d" % int(hwm.split()[1]))
"""


def bench(name, model, tokens, iters):
    path = os.path.join(OUT, name + ".onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    inp = os.path.join(OUT, name + "_tokens.npy")
    np.save(inp, tokens)
    d = os.path.join(OUT, name + "_c")
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([os.path.join(ROOT, "build", "onnx2spmd"), "compile", path, "--mesh", "r=1", "-o", d],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-s", "-C", d, "CFLAGS=-O3 -march=native -std=c11"], check=True)
    # ONNX Runtime in its own process, so its memory is its own.
    out = subprocess.run([PY, "-c", ORT_RUNNER, path, inp, str(iters)], capture_output=True, text=True,
                         env=ENV, check=True).stdout
    ort_ms = float(re.search(r"ms ([\d.]+)", out).group(1))
    ort_rss = int(re.search(r"rss_kb (\d+)", out).group(1))
    # The generated program runs as an MPI singleton (no mpirun needed for one rank).
    # Peak memory is each process's own VmHWM (ru_maxrss of a child would
    # include what this Python process held when it forked).
    r = subprocess.run([os.path.join(d, "rank0"), "--in", "tokens=" + inp, "--iters", str(iters)],
                       capture_output=True, env=ENV, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit("bench: generated program failed: " + r.stderr[-500:])
    gen_ms = float(re.search(r"time per iteration: ([\d.]+) ms", r.stdout).group(1))
    gen_rss = float(re.search(r"peak memory: ([\d.]+) MiB", r.stdout).group(1)) * 1024
    return gen_ms, gen_rss, ort_ms, ort_rss


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(3)
    cases = []
    m, feeds = make_models.make_tiny_gpt(np.random.default_rng(2026))
    cases.append(("tiny_gpt", m, feeds["tokens"], 200))
    big, _ = make_models.make_tiny_gpt(rng, V=1024, D=512, H=8, S=128, B=4, F=2048, L=4, name="gpt_512")
    cases.append(("gpt_512 (d512, 4 layers, seq 128, batch 4)", big,
                  rng.integers(0, 1024, (4, 128), dtype=np.int64), 10))
    print("\n%-44s %12s %12s %8s %14s %14s" % ("generated C (1 rank) vs ONNX Runtime (1 thread)",
                                              "C ms/iter", "ORT ms/iter", "ratio", "C peak RSS MiB",
                                              "ORT peak RSS MiB"))
    ratios = []
    for name, model, tokens, iters in cases:
        gen_ms, gen_rss, ort_ms, ort_rss = bench(name.split()[0], model, tokens, iters)
        ratios.append(gen_ms / ort_ms)
        print("%-44s %12.3f %12.3f %8.2f %14.1f %14.1f" % (name, gen_ms, ort_ms, gen_ms / ort_ms,
                                                            gen_rss / 1024, ort_rss / 1024))
    target = ratios[-1] <= 1.5
    print("target (ratio <= 1.5 on gpt_512): %s" % ("met" if target else "MISSED"))
    return 0 if target else 1


if __name__ == "__main__":
    sys.exit(main())
