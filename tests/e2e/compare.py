#!/usr/bin/env python3
"""compare.py GOLDEN.npy OUT.npy [ATOL RTOL]: elementwise check
|out - golden| <= atol + rtol * |golden|. Defaults by type: float32 and
float64 1e-5, 1e-4 (float64 is computed in float32, see ir.h); float16 1e-2, 1e-2 (about 10 ulp: each node's
result is rounded to float16, as ONNX Runtime's is); bfloat16 6e-2, 3e-2
(8 ulp of its 8-bit mantissa). A bfloat16 .npy ('V2', as ml_dtypes
writes it) is read through ml_dtypes.
Prints the max absolute and relative error; on a mismatch, the worst
element's index and both values. Exit 1 on mismatch.

compare.py --batch LIST: one comparison per line of LIST, "NAME GOLDEN.npy
OUT.npy" (default tolerances), printed as "NAME RESULT"; exit 1 if any
mismatch. One process for a suite's thousand outputs: starting Python and
numpy per output was an eighth of run_ops_sharded.sh's time."""
import sys

import numpy as np


def check(golden_path, out_path, atol=None, rtol=None):
    """(ok, message) for OUT against GOLDEN."""
    golden, out = np.load(golden_path), np.load(out_path)
    if golden.dtype.kind == "V" and golden.dtype.itemsize == 2 and out.dtype == golden.dtype:
        import ml_dtypes
        golden, out = golden.view(ml_dtypes.bfloat16), out.view(ml_dtypes.bfloat16)
    tol = {"float16": (1e-2, 1e-2), "bfloat16": (6e-2, 3e-2)}
    if atol is None:
        atol, rtol = tol.get(str(golden.dtype), (1e-5, 1e-4))
    if golden.shape != out.shape or golden.dtype != out.dtype:
        return False, "MISMATCH %s: shape/dtype %s %s vs golden %s %s" % (out_path, out.shape, out.dtype,
                                                                         golden.shape, golden.dtype)
    if golden.dtype == np.bool_ or golden.dtype.kind in "iu":
        bad = np.argwhere(golden != out)
        if len(bad):
            i = tuple(bad[0])
            return False, "MISMATCH %s at %s: got %s, golden %s" % (out_path, i, out[i], golden[i])
        return True, "ok %s: exact (%s)" % (out_path, golden.dtype)
    g64, o64 = golden.astype(np.float64), out.astype(np.float64)
    err = np.abs(o64 - g64)
    excess = err - (atol + rtol * np.abs(g64))
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else ()
    rel = float(np.max(err / np.maximum(np.abs(g64), 1e-6))) if err.size else 0.0
    maxabs = float(err.max()) if err.size else 0.0
    if excess.size and (excess[worst] > 0 or not np.all(np.isfinite(o64))):
        return False, ("MISMATCH %s at index %s: got %.9g, golden %.9g; max abs err %.3g, max rel err %.3g"
                       % (out_path, tuple(int(x) for x in worst), o64[worst], g64[worst], maxabs, rel))
    return True, "ok %s: max abs err %.3g, max rel err %.3g" % (out_path, maxabs, rel)


def main():
    if sys.argv[1] == "--batch":
        bad = 0
        with open(sys.argv[2]) as f:
            for line in f:
                if not line.strip():
                    continue
                name, golden, out = line.split()
                try:
                    ok, msg = check(golden, out)
                except (OSError, ValueError) as e:
                    ok, msg = False, "MISMATCH %s: %s" % (out, e)
                bad += not ok
                print(name, msg)
        return 1 if bad else 0
    tols = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (None, None)
    ok, msg = check(sys.argv[1], sys.argv[2], *tols)
    print(msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
