#!/usr/bin/env python3
"""Compile time against graph size: `compile` must stay linear in nodes.

A chain x -> Add(W) -> Mul(W) -> Add(W) ... of N nodes (float32 [4, 8],
one shared weight W, so the graph has an initializer and, on dp=2 with x
split over rows, every node reads a sliced W) is compiled at N = 10^4,
10^5 and 10^6 on mesh dp=2 with --shard x=[dp,_] (two rank programs plus
the plan files). `plan` on the same model and flags is the reference
column: it loads, infers shapes and propagates, so compile/plan says what
the per-rank programs and the written files cost on top. Targets: 10^5
nodes under 5 s, 10^6 under 60 s; compile's peak memory is shown too. Models are cached in build/bench/ by
size; the NodeProto list is built with add() in a loop (the helper API
is far too slow at 10^6 nodes).

Usage: build/venv/bin/python bench/compile_scale.py [N ...]
"""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "bench")
BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))
SIZES = (10**4, 10**5, 10**6)
TARGET_S = {10**5: 5.0, 10**6: 60.0}
MESH = ["--mesh", "dp=2", "--shard", "x=[dp,_]"]


def chain_model(n):
    """N nodes alternating Add and Mul with the weight W, written directly."""
    m = onnx.ModelProto()
    m.ir_version = 8
    m.producer_name = "onnx2spmd bench/compile_scale.py"
    op = m.opset_import.add()
    op.domain = ""
    op.version = 17
    g = m.graph
    g.name = "chain_%d" % n
    for vi, name in ((g.input.add(), "x"), (g.output.add(), "y")):
        vi.name = name
        tt = vi.type.tensor_type
        tt.elem_type = TensorProto.FLOAT
        for d in (4, 8):
            tt.shape.dim.add().dim_value = d
    w = g.initializer.add()
    w.name = "W"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([4, 8])
    # Near 1, so that a product of a million of them stays finite.
    w.raw_data = (1.0 + np.arange(32, dtype=np.float32) * 1e-7).tobytes()
    prev = "x"
    nodes = g.node
    for i in range(n):
        nd = nodes.add()
        nd.op_type = "Add" if i % 2 == 0 else "Mul"
        nd.name = "n%d" % i
        out = "y" if i == n - 1 else "t%d" % i
        nd.input.append(prev)
        nd.input.append("W")
        nd.output.append(out)
        prev = out
    return m


def model_path(n):
    path = os.path.join(OUT, "chain_%d.onnx" % n)
    if not os.path.exists(path):
        data = chain_model(n).SerializeToString()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def timed(args):
    """Wall seconds and peak RSS (MiB) of one run; wait4 gives this child's own."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    t1 = time.perf_counter()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit("bench: %s failed (exit %d): %s" % (" ".join(args[:2]), proc.returncode,
                                                   err[-500:].decode(errors="replace")))
    return t1 - t0, usage.ru_maxrss / 1024


def main():
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    os.makedirs(OUT, exist_ok=True)
    print("\n%-10s %12s %14s %10s %8s %10s %8s %16s" % ("nodes", "compile (s)", "s per 1k nodes", "target",
                                                          "result", "plan (s)", "ratio", "compile peak MiB"))
    ok = True
    for n in sizes:
        path = model_path(n)
        d = os.path.join(OUT, "chain_%d_out" % n)
        shutil.rmtree(d, ignore_errors=True)
        plan_s, _ = timed([BIN, "plan", path] + MESH)
        comp_s, comp_mib = timed([BIN, "compile", path] + MESH + ["-o", d])
        shutil.rmtree(d, ignore_errors=True)
        target = TARGET_S.get(n)
        passed = target is None or comp_s < target
        ok &= passed
        print("%-10d %12.3f %14.4f %10s %8s %10.3f %8.2f %16.0f" % (
            n, comp_s, comp_s / n * 1000, "< %g s" % target if target else "-",
            "pass" if passed else "FAIL", plan_s, comp_s / plan_s, comp_mib))
    print("compile scale target (10^5 nodes < 5 s, 10^6 < 60 s): %s" % ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
