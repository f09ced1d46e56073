#!/usr/bin/env python3
"""compare.py GOLDEN.npy OUT.npy [ATOL RTOL]: elementwise check
|out - golden| <= atol + rtol * |golden|. Defaults by type: float32 and
float64 1e-5, 1e-4 (float64 is computed in float32, see ir.h); float16 1e-2, 1e-2 (about 10 ulp: each node's
result is rounded to float16, as ONNX Runtime's is); bfloat16 6e-2, 3e-2
(8 ulp of its 8-bit mantissa). A bfloat16 .npy ('V2', as ml_dtypes
writes it) is read through ml_dtypes.
Prints the max absolute and relative error; on a mismatch, the worst
element's index and both values. Exit 1 on mismatch."""
import sys

import numpy as np


def main():
    golden, out = np.load(sys.argv[1]), np.load(sys.argv[2])
    if golden.dtype.kind == "V" and golden.dtype.itemsize == 2 and out.dtype == golden.dtype:
        import ml_dtypes
        golden, out = golden.view(ml_dtypes.bfloat16), out.view(ml_dtypes.bfloat16)
    tol = {"float16": (1e-2, 1e-2), "bfloat16": (6e-2, 3e-2)}
    atol, rtol = tol.get(str(golden.dtype), (1e-5, 1e-4))
    if len(sys.argv) > 4:
        atol, rtol = float(sys.argv[3]), float(sys.argv[4])
    if golden.shape != out.shape or golden.dtype != out.dtype:
        print("MISMATCH %s: shape/dtype %s %s vs golden %s %s" % (sys.argv[2], out.shape, out.dtype,
                                                                  golden.shape, golden.dtype))
        return 1
    if golden.dtype == np.bool_ or golden.dtype.kind in "iu":
        bad = np.argwhere(golden != out)
        if len(bad):
            i = tuple(bad[0])
            print("MISMATCH %s at %s: got %s, golden %s" % (sys.argv[2], i, out[i], golden[i]))
            return 1
        print("ok %s: exact (%s)" % (sys.argv[2], golden.dtype))
        return 0
    g64, o64 = golden.astype(np.float64), out.astype(np.float64)
    err = np.abs(o64 - g64)
    excess = err - (atol + rtol * np.abs(g64))
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else ()
    rel = float(np.max(err / np.maximum(np.abs(g64), 1e-6))) if err.size else 0.0
    maxabs = float(err.max()) if err.size else 0.0
    if excess.size and (excess[worst] > 0 or not np.all(np.isfinite(o64))):
        print("MISMATCH %s at index %s: got %.9g, golden %.9g; max abs err %.3g, max rel err %.3g"
              % (sys.argv[2], tuple(int(x) for x in worst), o64[worst], g64[worst], maxabs, rel))
        return 1
    print("ok %s: max abs err %.3g, max rel err %.3g" % (sys.argv[2], maxabs, rel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
