#!/usr/bin/env python3
"""compile_memory.py: the compiler streams weights, in little.

A Llama-shaped graph (bench/make_transformer.py: 48 layers, d 512, SwiGLU
1408, vocabulary 8000; 650 MB of float32 weights as external data in a
sparse file that costs no disk) is planned and compiled for tp=2. `plan`
must read no weight bytes (peak RSS under a quarter of the weights), and
`compile` must hold at most 2 x the largest tensor + 512 MiB (569 MiB),
less than the model itself: it reads each tensor once and writes every
rank's blocks of it before the next (codegen/weights.c). Each weight file
must hold the bytes compile reported.

The two rank programs are then built and run once: each maps its weight
file (its GEMM weights stored as the kernel's panels alone) instead of
reading and repacking it, so its peak (VmHWM) must be within 5% of the
figure compile printed for it; a rank that copied its weights would hold
them twice. `make scale` runs the same at 124M, 1.1B and 7B.

Usage: build/venv/bin/python tests/cli/compile_memory.py BIN
"""
import os
import re
import numpy as np
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_transformer  # noqa: E402

MiB = 1 << 20


def peak_rss(cmd):
    """stdout and peak RSS (bytes) of cmd, by GNU time (Debian's time,
    installed by make deps): a child forked from this Python would count
    the interpreter's pages in its own peak."""
    rss_file = os.path.join(ROOT, "build", "compile_memory.rss")
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("compile_memory: %s failed: %s" % (" ".join(cmd), p.stderr.strip()))
    with open(rss_file) as f:
        kib = int(f.read().split()[-1])
    os.remove(rss_file)
    return p.stdout, kib * 1024


def main():
    bin_ = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "onnx2spmd")
    work = os.path.join(ROOT, "build", "compile_memory")
    shutil.rmtree(work, ignore_errors=True)
    nodes, params = make_transformer.build("llama", work, 48, 1, 16, 512, 8, 1408, 8000)
    model, ann = os.path.join(work, "llama.onnx"), os.path.join(work, "llama_megatron.txt")
    weights = params * 4
    largest = 8000 * 512 * 4
    limit = 2 * largest + 512 * MiB
    assert limit < weights, "the model must be larger than the bound it tests"
    fail = []
    _, plan_rss = peak_rss([bin_, "plan", model, "--mesh", "dp=1,tp=2", "--shardings", ann])
    if plan_rss > weights // 4:
        fail.append("plan: peak RSS %.0f MiB, over a quarter of the %.0f MiB of weights"
                    % (plan_rss / MiB, weights / MiB))
    out_dir = os.path.join(work, "out")
    out, rss = peak_rss([bin_, "compile", model, "--mesh", "dp=1,tp=2", "--shardings", ann, "-o", out_dir])
    if rss > limit:
        fail.append("compile: peak RSS %.0f MiB, over 2 x the largest tensor + 512 MiB = %.0f MiB (weights %.0f MiB)"
                    % (rss / MiB, limit / MiB, weights / MiB))
    said = {int(r): int(b) for r, b in re.findall(r"rank (\d+): peak arena \d+ bytes, weights (\d+) bytes", out)}
    if sorted(said) != [0, 1]:
        fail.append("compile did not report both ranks' weights: %s" % out)
    for r, b in said.items():
        size = os.path.getsize(os.path.join(out_dir, "weights.rank%d.bin" % r))
        if size != b + 4096:
            fail.append("weights.rank%d.bin holds %d bytes, not the %d reported + its 4096-byte header" % (r, size, b))
    planned = [float(x) for x in re.findall(r"; ([\d.]+) MiB at its peak", out)]
    hwm = []
    b = subprocess.run(["make", "-s", "-C", out_dir, "CFLAGS=-O1 -march=native -std=c11"], capture_output=True,
                       text=True)
    if b.returncode:
        fail.append("building the rank programs: %s" % b.stderr[-600:])
    else:
        tokens = os.path.join(work, "tokens.npy")
        np.save(tokens, np.arange(16, dtype=np.int64).reshape(1, 16))
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,vader")
        r = subprocess.run([os.path.join(out_dir, "run.sh"), "--in", "tokens=" + tokens, "--iters", "1"],
                           capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        m = re.search(r"peak memory per rank \(MiB, VmHWM / planned\):((?: [\d.]+ / [\d.]+)+)", r.stdout)
        if r.returncode or not m:
            fail.append("running the rank programs: %s" % (r.stdout + r.stderr)[-600:])
        else:
            hwm = [float(x) for x in m.group(1).split()[0::3]]
            for k, (h, p) in enumerate(zip(hwm, planned)):
                if abs(h - p) > 0.05 * p:
                    fail.append("rank %d: VmHWM %.1f MiB, not within 5%% of the %.1f MiB compile planned" % (k, h, p))
    shutil.rmtree(work)
    for f in fail:
        print("FAIL " + f)
    print("compile_memory: %d nodes, %.0f MiB of weights: plan peak %.0f MiB, compile peak %.0f MiB (limit %.0f); "
          "ranks' VmHWM / planned: %s MiB%s"
          % (nodes, weights / MiB, plan_rss / MiB, rss / MiB, limit / MiB,
             ", ".join("%.1f / %.1f" % hp for hp in zip(hwm, planned)) or "-", "" if not fail else ": FAILED"))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
