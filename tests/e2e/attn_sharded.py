#!/usr/bin/env python3
"""attn_sharded.py [REGEX]: the sharded check of the attn family
(Attention, RotaryEmbedding; ir/ops_attn.def), as run_ops_sharded.sh is for
the others. ONNX Runtime 1.22 cannot load opset 23, so the models are built
here and their goldens come from onnx.reference.ReferenceEvaluator. Each is
compiled on 1 rank and on 2 ranks with every input split on every even dim
(and a few multi-input splits: heads with batch, GQA), on 3 ranks with each
input split unevenly on its first dim 3 does not divide, run under mpirun and
compared. Masked scores of -inf are compared as equal, and a NaN golden
(the reference's 0 * -inf) is not held against the output."""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mpi_isolated  # noqa: E402 (tests/mpi_isolated.py)

import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "build", "attn_sharded")
BIN = os.path.join(ROOT, "build", "onnx2spmd")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# Built as run_ops_sharded.sh builds (OPS_CFLAGS): -O0, linked by gold where
# there is one. These cases check plans and numbers, not speed.
CFLAGS = os.environ.get("OPS_CFLAGS", "-O0 -std=c11" + (" -fuse-ld=gold" if shutil.which("ld.gold") else ""))
N = helper.make_node
F, F16, I64, B = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, F16: np.float16, I64: np.int64, B: np.bool_}
r = np.random.default_rng(20261201)


def rnd(shape, t=F):
    if t == B:
        return r.random(shape) > 0.3
    return r.standard_normal(shape).astype(NP[t])


CASES = []


def add(name, opset, nodes, inputs, outputs, extra=()):
    """inputs: {name: (elem_type, array)}; outputs: names. extra: more
    shard flag sets to try, besides one input dim at a time."""
    CASES.append((name, opset, nodes, inputs, outputs, list(extra)))


def attn(ins, outs=("Y",), **attrs):
    return N("Attention", list(ins), list(outs), **attrs)


def rope(ins, out, **attrs):
    return N("RotaryEmbedding", list(ins), [out], **attrs)


def build():
    add("at_mha4d", 23, [attn("QKV")], {"Q": (F, rnd([2, 4, 4, 8])), "K": (F, rnd([2, 4, 6, 8])),
                                        "V": (F, rnd([2, 4, 6, 8]))}, ["Y"],
        [["--shard", "Q=[s,_,_,_]", "--shard", "K=[s,_,_,_]"], ["--shard", "Q=[_,s,_,_]", "--shard", "V=[_,s,_,_]"]])
    add("at_gqa4d_mask_causal", 23, [attn(["Q", "K", "V", "M"], is_causal=1)],
        {"Q": (F, rnd([2, 4, 4, 8])), "K": (F, rnd([2, 2, 6, 8])), "V": (F, rnd([2, 2, 6, 10])),
         "M": (F, rnd([2, 1, 4, 6]))}, ["Y"])
    add("at_gqa3d_past_qk", 23,
        [attn(["Q", "K", "V", "M", "PK", "PV"], ["Y", "PKo", "PVo", "QK"], q_num_heads=4, kv_num_heads=2,
              softcap=2.0, qk_matmul_output_mode=2)],
        {"Q": (F, rnd([2, 4, 32])), "K": (F, rnd([2, 4, 16])), "V": (F, rnd([2, 4, 20])), "M": (B, rnd([4, 10], B)),
         "PK": (F, rnd([2, 2, 6, 8])), "PV": (F, rnd([2, 2, 6, 10]))}, ["Y", "PKo", "PVo", "QK"],
        [["--shard", "Q=[_,_,s]", "--shard", "K=[_,_,s]"]])
    add("at_mha3d_past_causal", 23,
        [attn(["Q", "K", "V", "", "PK", "PV"], ["Y", "PKo", "PVo"], q_num_heads=2, kv_num_heads=2, is_causal=1)],
        {"Q": (F, rnd([2, 4, 16])), "K": (F, rnd([2, 4, 16])), "V": (F, rnd([2, 4, 16])),
         "PK": (F, rnd([2, 2, 2, 8])), "PV": (F, rnd([2, 2, 2, 8]))}, ["Y", "PKo", "PVo"],
        [["--shard", "Q=[_,_,s]", "--shard", "PK=[_,s,_,_]"]])
    add("at_mqa_softmax_pad", 23,
        [attn(["Q", "K", "V", "M"], ["Y", "", "", "QK"], scale=0.1, qk_matmul_output_mode=3)],
        {"Q": (F, rnd([2, 4, 4, 8])), "K": (F, rnd([2, 1, 6, 8])), "V": (F, rnd([2, 1, 6, 8])),
         "M": (F, rnd([2, 4, 4, 4]))}, ["Y", "QK"])
    add("at_softcap_mode1", 23, [attn("QKV", ["Y", "", "", "QK"], softcap=3.0, qk_matmul_output_mode=1)],
        {"Q": (F, rnd([2, 2, 4, 8]) * 3), "K": (F, rnd([2, 2, 4, 8])), "V": (F, rnd([2, 2, 4, 8]))}, ["Y", "QK"])
    add("at_mode0", 23, [attn("QKV", ["Y", "", "", "QK"])],
        {"Q": (F, rnd([2, 2, 4, 8])), "K": (F, rnd([2, 2, 4, 8])), "V": (F, rnd([2, 2, 4, 8]))}, ["Y", "QK"])
    # (the reference cannot add the padding mask to a 2-D bias: give it a 4-D mask)
    add("at_nonpad", 24, [attn(["Q", "K", "V", "M", "", "", "L"])],
        {"Q": (F, rnd([2, 2, 4, 8])), "K": (F, rnd([2, 2, 6, 8])), "V": (F, rnd([2, 2, 6, 8])),
         "M": (F, rnd([2, 1, 4, 6])),
         "L": (I64, np.array([3, 6], np.int64))}, ["Y"])
    # (no is_causal with a bool mask: the reference turns True into 0 * -inf = NaN there)
    add("at_fp16_gqa", 23, [attn(["Q", "K", "V", "M"])],
        {"Q": (F16, rnd([2, 4, 4, 8], F16)), "K": (F16, rnd([2, 2, 4, 8], F16)), "V": (F16, rnd([2, 2, 4, 8], F16)),
         "M": (B, rnd([4, 4], B) | np.eye(4, dtype=bool))}, ["Y"])
    pos = r.integers(0, 16, [2, 6]).astype(np.int64)
    ang = r.random([16, 4]).astype(np.float32) * 6
    add("at_rope4d", 23, [rope(["X", "C", "S", "P"], "Y")],
        {"X": (F, rnd([2, 4, 6, 8])), "C": (F, np.cos(ang)), "S": (F, np.sin(ang)), "P": (I64, pos)}, ["Y"])
    ang2 = r.random([2, 6, 2]).astype(np.float32) * 6
    add("at_rope3d_inter_partial", 23, [rope(["X", "C", "S"], "Y", num_heads=4, interleaved=1, rotary_embedding_dim=4)],
        {"X": (F, rnd([2, 6, 32])), "C": (F, np.cos(ang2)), "S": (F, np.sin(ang2))}, ["Y"])
    ang3 = r.random([16, 2]).astype(np.float32) * 6
    add("at_rope4d_partial", 23, [rope(["X", "C", "S", "P"], "Y", rotary_embedding_dim=4)],
        {"X": (F, rnd([2, 2, 6, 8])), "C": (F, np.cos(ang3)), "S": (F, np.sin(ang3)), "P": (I64, pos)}, ["Y"])
    ang4 = r.random([8, 4]).astype(np.float32) * 6
    pos4 = np.tile(np.arange(4, dtype=np.int64), (2, 1)) + np.array([[0], [4]], np.int64)
    add("at_rope_attn", 23,
        [rope(["Q", "C", "S", "P"], "Qr"), rope(["K", "C", "S", "P"], "Kr"), attn(["Qr", "Kr", "V"], is_causal=1)],
        {"Q": (F, rnd([2, 4, 4, 8])), "K": (F, rnd([2, 2, 4, 8])), "V": (F, rnd([2, 2, 4, 8])), "C": (F, np.cos(ang4)),
         "S": (F, np.sin(ang4)), "P": (I64, pos4)}, ["Y"],
        [["--shard", "Q=[s,_,_,_]"], ["--shard", "Q=[_,s,_,_]"], ["--shard", "K=[_,s,_,_]", "--shard", "Q=[_,s,_,_]"]])


def make(case):
    name, opset, nodes, inputs, outputs, _ = case
    d = os.path.join(WORK, "models", name)
    os.makedirs(d, exist_ok=True)
    vin = [helper.make_tensor_value_info(k, t, list(a.shape)) for k, (t, a) in inputs.items()]
    vout = [helper.make_tensor_value_info(o, 0, None) for o in outputs]
    g = helper.make_graph(nodes, name, vin, vout)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    feeds = {k: a for k, (t, a) in inputs.items()}
    res = ReferenceEvaluator(m).run(None, feeds)
    for k, a in feeds.items():
        np.save(os.path.join(d, "in_%s.npy" % k), a)
    for o, a in zip(outputs, res):
        np.save(os.path.join(d, "gold_%s.npy" % o), a)
    return path


def variants(case):
    name, _, _, inputs, _, extra = case
    yield "1", ["--mesh", "r=1"]
    for k, (t, a) in inputs.items():
        for dim, size in enumerate(a.shape):
            if size % 2 == 0:
                spec = ",".join("s" if j == dim else "_" for j in range(a.ndim))
                yield "%s%d" % (k, dim), ["--mesh", "s=2", "--shard", "%s=[%s]" % (k, spec)]
    for k, (t, a) in inputs.items():  # an uneven split: blocks of ceil(n/3), the last padded (or empty)
        dims = [d for d, size in enumerate(a.shape) if size >= 2 and size % 3]
        if dims:
            spec = ",".join("s" if j == dims[0] else "_" for j in range(a.ndim))
            yield "%s%du" % (k, dims[0]), ["--mesh", "s=3", "--shard", "%s=[%s]" % (k, spec)]
    for i, flags in enumerate(extra):
        yield "x%d" % i, ["--mesh", "s=2"] + flags


def run(case, tag, flags):
    name, _, _, inputs, outputs, _ = case
    md = os.path.join(WORK, "models", name)
    out = os.path.join(WORK, "runs", name + "_" + tag)
    shutil.rmtree(out, ignore_errors=True)
    c = subprocess.run([BIN, "compile", os.path.join(md, "model.onnx"), "-o", out] + flags, capture_output=True,
                       text=True)
    if c.returncode:
        return "FAIL", "compile: " + c.stderr.strip()
    b = subprocess.run(["make", "-s", "-C", out, "CFLAGS=" + CFLAGS, "WARN=-Wall -Wextra -Werror"],
                       capture_output=True, text=True)
    if b.returncode:
        return "FAIL", "build: " + (b.stderr + b.stdout)[:400]
    args = [os.path.join(out, "run.sh")]
    for k in inputs:
        args += ["--in", "%s=%s" % (k, os.path.join(md, "in_%s.npy" % k))]
    for o in outputs:
        args += ["--out", "%s=%s" % (o, os.path.join(out, "out_%s.npy" % o))]
    e = mpi_isolated.run(args, capture_output=True, text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL)
    if e.returncode:
        return "FAIL", "run: " + (e.stderr + e.stdout)[-400:]
    for o in outputs:
        # Not tests/e2e/compare.py: the scores hold -inf (masked), which it
        # reads as a NaN error, and a NaN golden would pass there.
        g, got = np.load(os.path.join(md, "gold_%s.npy" % o)), np.load(os.path.join(out, "out_%s.npy" % o))
        atol, rtol = (1e-2, 1e-2) if g.dtype == np.float16 else (1e-5, 1e-4)
        if np.isnan(g).any():
            return "FAIL", "golden %s holds NaN" % o
        if got.shape != g.shape or got.dtype != g.dtype:
            return "FAIL", "%s: %s %s vs golden %s %s" % (o, got.shape, got.dtype, g.shape, g.dtype)
        if not np.allclose(got.astype(np.float64), g.astype(np.float64), rtol=rtol, atol=atol):
            fin = np.isfinite(g)
            err = np.abs(got.astype(np.float64) - g)[fin].max() if fin.any() else float("nan")
            return "FAIL", "%s: max abs err %.3g (inf positions equal: %s)" % (
                o, err, bool(np.array_equal(np.isinf(got), np.isinf(g))))
    plan = open(os.path.join(out, "plan.txt")).read()
    ncoll = len(re.findall(r"all-gather|all-reduce|all-to-all|reduce-scatter", plan))
    shutil.rmtree(out, ignore_errors=True)
    return "ok", "%d collective mentions in plan" % ncoll


def main():
    build()
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    cases = [c for c in CASES if re.search(flt, c[0])]
    os.makedirs(WORK, exist_ok=True)
    for c in cases:
        make(c)
    jobs = [(c, tag, fl) for c in cases for tag, fl in variants(c)]
    counts = {"ok": 0, "FAIL": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for (c, tag, fl), (st, msg) in zip(jobs, ex.map(lambda j: run(*j), jobs)):
            counts[st] += 1
            if st != "ok" or os.environ.get("VERBOSE"):
                print("%s %s_%s %s: %s" % (st, c[0], tag, " ".join(fl), msg))
    nuneven = sum(tag.endswith("u") for _, tag, _ in jobs)
    print("attn sharded: %d passed, %d failed of %d runs (%d split unevenly over 3 ranks)" % (
        counts["ok"], counts["FAIL"], len(jobs), nuneven))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
