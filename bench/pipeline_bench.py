#!/usr/bin/env python3
"""pipeline_bench.py: pipeline stages on CPU ranks, measured beside the plan's estimate.

gpt_512 (d_model 512, 4 layers, 8 heads, seq 128, vocab 1024; batch 8 here,
so that 8 microbatches are possible) compiled for pp=4 (4 CPU ranks, one
stage each, the stages chosen by the search) with M = 1, 4 and 8
microbatches, built as codegen_bench.py builds (-O3 -march=native), run
under mpirun with --iters, and the time per batch printed beside the
plan's estimate ((M + p - 1) x the slowest stage, per microbatch; cpu
device preset, shm links) and the bubble (p - 1) / (M + p - 1). The same
model on one rank, in the same run, is the reference. On a machine with
fewer cores than ranks the ranks share cores (--oversubscribe), so the
measured times carry that too; the trend over M is the point.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import make_models  # noqa: E402
import mpi_isolated  # noqa: E402

OUT = os.path.join(ROOT, "build", "bench_pipeline")
BIN = os.path.join(ROOT, "build", "onnx2spmd")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
ITERS = 5


def compile_and_time(model, tokens, name, mesh, flags):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([BIN, "compile", model, "--mesh", mesh, "--device", "cpu", "--link", mesh.split("=")[0] + "=shm",
                    "-o", d] + flags, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-s", "-C", d, "CFLAGS=-O3 -march=native -std=c11"], check=True)
    r = mpi_isolated.run([os.path.join(d, "run.sh"), "--in", "tokens=" + tokens, "--iters", str(ITERS)],
                         capture_output=True, text=True, env=ENV, timeout=600, stdin=subprocess.DEVNULL)
    if r.returncode:
        sys.exit("pipeline_bench: %s failed: %s" % (name, (r.stderr + r.stdout)[-400:]))
    ms = float(re.search(r"time per iteration: ([\d.]+) ms", r.stdout).group(1))
    plan = json.load(open(os.path.join(d, "plan.json")))
    return ms, plan


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(3)
    m, _ = make_models.make_tiny_gpt(rng, V=1024, D=512, H=8, S=128, B=8, F=2048, L=4, name="gpt_512")
    model = os.path.join(OUT, "gpt_512.onnx")
    make_models.save(m, model)
    tokens = os.path.join(OUT, "tokens.npy")
    np.save(tokens, rng.integers(0, 1024, (8, 128), dtype=np.int64))
    one, plan1 = compile_and_time(model, tokens, "r1", "r=1", [])
    print("\ngpt_512 (d512, 4 layers, seq 128, batch 8): pipeline pp=4 on 4 CPU ranks (%d cores here), time per batch"
          % os.cpu_count())
    hdr = "%-24s %8s %14s %14s %12s %14s" % ("plan", "bubble", "estimate (ms)", "measured (ms)", "vs 1 rank",
                                             "stage nodes")
    print(hdr)
    print("-" * len(hdr))
    print("%-24s %8s %14.1f %14.1f %12.2f %14s" % ("1 rank, no pipeline", "-", plan1["estimate"]["step_s"] * 1e3,
                                                   one, 1.0, "-"))
    for mb in (1, 4, 8):
        ms, plan = compile_and_time(model, tokens, "pp4_m%d" % mb, "pp=4", ["--microbatches", str(mb)])
        pp = plan["pipeline"]
        print("%-24s %7.0f%% %14.1f %14.1f %12.2f %14s" % (
            "pp=4, M=%d" % mb, 100 * pp["bubble"], pp["batch_s"] * 1e3, ms, ms / one,
            "/".join(str(s["nodes"]) for s in pp["per_stage"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
