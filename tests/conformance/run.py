#!/usr/bin/env python3
"""make conformance: the ONNX backend node test suite against onnx2spmd.

For every test under onnx/backend/test/data/node of the installed onnx
package: compile the model for one rank (--target c), build it, run it on
each shipped test data set, and compare with the shipped outputs using the
suite's own tolerances (rtol 1e-3, atol 1e-7). A test whose model the
compiler refuses (an op, dtype, opset or feature outside the supported
set) is skipped with the compiler's own reason. A shape-deciding graph input the
compiler asks for (axes, pads, scales, k) is fixed with --const to the
test's value when every data set agrees on it. Prints passed, failed and
skipped counts, the reason for each skip (grouped), and every failure.
Exit 1 when fewer than 95% of attempted tests pass.
"""
import collections
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mpi_isolated  # noqa: E402 (tests/mpi_isolated.py)

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "onnx2spmd")
WORK = os.path.join(ROOT, "build", "conformance")
RTOL, ATOL = 1e-3, 1e-7
# -O1, linked by gold where there is one: the suite checks numbers, and
# -O3 -march=native (the Makefile's default, kept by run_golden.sh) compiles
# 3.5x slower; gold links in a third of ld's time. -O1, not -O0, so that
# the kernels run here as optimised code (run_ops_sharded.sh builds at -O0).
CFLAGS = os.environ.get("CONFORMANCE_CFLAGS", "-O1 -std=c11" + (" -fuse-ld=gold" if shutil.which("ld.gold") else ""))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")


def reason_of(msg):
    """Groups compiler refusals: the message without its file and names."""
    msg = msg.strip().splitlines()[0] if msg.strip() else "unknown"
    msg = re.sub(r"^onnx2spmd: error: [^:]*: ", "", msg)
    msg = re.sub(r'"[^"]*"', '"…"', msg)
    msg = re.sub(r"\[[^\]]*\]", "[…]", msg)
    msg = re.sub(r"\b\d+\b", "N", msg)
    return msg


def same_in_all_sets(sets, k):
    """Whether input k holds the same bytes in every test data set."""
    blobs = {open(os.path.join(ds, "input_%d.pb" % k), "rb").read() for ds in sets}
    return len(blobs) == 1


def run_test(test_dir):
    name = os.path.basename(test_dir)
    out = os.path.join(WORK, name)
    model = os.path.join(test_dir, "model.onnx")
    m = onnx.load(model, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    inputs = [i.name for i in m.graph.input if i.name not in inits]
    # A shape-deciding input (axes, pads, scales, k...) given as a graph
    # input is fixed to the test's value with --const, as a user would do;
    # the compiler names each one it needs. Only when every data set holds
    # the same value: otherwise it is data, and the test stays skipped.
    sets = sorted(glob.glob(os.path.join(test_dir, "test_data_set_*")))
    consts = []
    while True:
        shutil.rmtree(out, ignore_errors=True)
        flags = sum((["--const", "%s=%s" % (nm, os.path.join(sets[0], "input_%d.pb" % inputs.index(nm)))]
                     for nm in consts), [])
        r = subprocess.run([BIN, "compile", model, "--mesh", "r=1", "-o", out] + flags, capture_output=True, text=True)
        if r.returncode == 0:
            break
        hit = re.search(r'input "([^"]*)"[^:]*must be a constant.*--const', r.stderr)
        nm = hit.group(1) if hit else None
        if not sets or nm not in inputs or nm in consts or not same_in_all_sets(sets, inputs.index(nm)):
            return name, "skip", reason_of(r.stderr)
        consts.append(nm)
    b = subprocess.run(["make", "-s", "-C", out, "CFLAGS=" + CFLAGS, "WARN=-Wall -Wextra -Werror"],
                       capture_output=True, text=True)
    if b.returncode != 0:
        return name, "fail", "build: " + (b.stderr or b.stdout).strip().splitlines()[0][:300]
    outputs = [o.name for o in m.graph.output]
    for ds in sets:
        args = [os.path.join(out, "run.sh")]
        for k, nm in enumerate(inputs):
            if nm not in consts:
                args += ["--in", "%s=%s" % (nm, os.path.join(ds, "input_%d.pb" % k))]
        for k, nm in enumerate(outputs):
            args += ["--out", "%s=%s" % (nm, os.path.join(out, "out_%d.npy" % k))]
        try:
            e = mpi_isolated.run(args, capture_output=True, text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return name, "fail", "run: timeout"
        if e.returncode != 0:
            lines = [l for l in (e.stderr + e.stdout).splitlines() if "error" in l] or ["exit %d" % e.returncode]
            return name, "fail", "run: " + lines[0][:300]
        for k, nm in enumerate(outputs):
            exp = numpy_helper.to_array(onnx.load_tensor(os.path.join(ds, "output_%d.pb" % k)))
            got = np.load(os.path.join(out, "out_%d.npy" % k))
            if got.dtype.kind == "V" and got.dtype.itemsize == exp.dtype.itemsize:
                got = got.view(exp.dtype)  # bfloat16 ('V2' in .npy, as ml_dtypes writes it)
            if got.shape != exp.shape:
                return name, "fail", "output %s: shape %s, expected %s" % (nm, got.shape, exp.shape)
            if exp.dtype.kind == "f" or str(exp.dtype) == "bfloat16":
                ok = np.allclose(got.astype(np.float64), exp.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True)
            else:
                ok = np.array_equal(got.astype(exp.dtype), exp)
            if not ok:
                diff = np.abs(got.astype(np.float64) - exp.astype(np.float64))
                i = np.unravel_index(np.argmax(diff), diff.shape) if diff.size else ()
                return name, "fail", "output %s: max abs err %.3g at %s (got %s, expected %s)" % (
                    nm, float(diff.max()), tuple(int(x) for x in i), got[i], exp[i])
    shutil.rmtree(out, ignore_errors=True)
    return name, "pass", ""


def main():
    node_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    tests = sorted(d for d in glob.glob(os.path.join(node_dir, "test_*")) if os.path.isdir(d))
    if len(sys.argv) > 1:
        tests = [t for t in tests if re.search(sys.argv[1], os.path.basename(t))]
    os.makedirs(WORK, exist_ok=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for res in ex.map(run_test, tests):
            results.append(res)
    passed = [r for r in results if r[1] == "pass"]
    failed = [r for r in results if r[1] == "fail"]
    skipped = [r for r in results if r[1] == "skip"]
    reasons = collections.Counter(r[2] for r in skipped)
    print("\nskipped, by the compiler's reason:")
    for why, n in reasons.most_common():
        print("  %4d  %s" % (n, why))
    if failed:
        print("\nfailed:")
        for name, _, why in failed:
            print("  %-50s %s" % (name, why))
    attempted = len(passed) + len(failed)
    rate = 100.0 * len(passed) / attempted if attempted else 0.0
    print("\nconformance: %d passed, %d failed, %d skipped of %d node tests; %.1f%% of attempted pass"
          % (len(passed), len(failed), len(skipped), len(results), rate))
    return 0 if attempted and rate >= 95.0 else 1


if __name__ == "__main__":
    sys.exit(main())
