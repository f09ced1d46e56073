#!/usr/bin/env python3
"""fuzz_plans.py: a randomized differential test of the whole compiler.

Each case is a small random ONNX graph (3-12 nodes over the op set the C
backend emits: elementwise with broadcasting, MatMul/Gemm with weight
initializers and biases, reshapes and transposes, reductions, Softmax/
LayerNorm, Gather from embedding tables, Concat/Split/Slice, Where, Conv/
MaxPool/GlobalAveragePool/BatchNormalization, Cast, Constant; --extended adds
the exporter ops of issue 9), a random mesh of 1-4 ranks as one or two named
axes, and a few random valid annotations (each dim split over an ordered
subset of the mesh axes whose product divides it, or for one tensor in four
is at most twice it: an uneven, padded split; each axis at most once per
tensor; sometimes none), given by --shard or a --shardings file, now and
then with --link classes, --shard-weights/--prefetch, --fuse-bytes or a
symbolic batch dim bound by --dim; with --pipeline, meshes of 1-2 ranks
get a pipeline axis "pp" of 1-3 stages in front and 1, 2 or 4 microbatches
that divide the batch (a refusal for a node that mixes microbatches counts
as refused). The case is compiled with `onnx2spmd
compile`, built with -Werror, run under mpirun and every output is compared
with ONNX Runtime (one thread, no graph optimisation).

A compile that exits 2 with an error is counted as "refused" and its
reason goes into a histogram (every annotation set generated here is
valid, so a refusal is worth a look). A crash, an internal error, a build
failure, a failed or hung run, or a wrong number is a FAIL, saved under
build/fuzz_plans/failures/<seed>_<case>/ with the model, inputs, goldens,
shardings.txt, case.txt (the graph as text), case.json and repro.sh
(compile + build + run + compare, from the repository root). With
--minimize, each failure is also shrunk (the graph cut to the smallest
failing output, annotations and flags dropped, the mesh reduced, same-shape
nodes bypassed, while it fails the same way) into min/ beside it.

With --train, the graphs keep to ops with a gradient rule (the op
table's vjp column, ir/*.def; TRAIN below), float paths from the weights
(float initializers) to the outputs, integer ones only as indices and
conditions; train_model() appends a scalar loss that reads every float
output (ReduceMean(o * o) or ReduceSum(o * R), R a fixed random Constant).
Each case is compiled with `--train --optimizer sgd --lr 1` (now and then
--frozen for one weight) on its random mesh, annotations and flags (with
--pipeline, a "pp" axis and 1, 2 or 4 microbatches per step under a random
--schedule, interleaved where the microbatches fill whole groups: each
microbatch reads the same batch, so the step's gradient is the batch's), runs one step, and
  * the loss it prints must match ORT's inference of the same model
    (1e-5 + 1e-4 relative, or within ORT's own rounding sensitivity);
  * each trained weight's gradient (before - after) must match central
    finite differences of ORT's loss along random directions (grad_check),
    in float64 (the model converted, Erf/Gelu as float64 formulas) where
    ORT runs it so, else in float32 with a looser tolerance;
  * a second run of 2 steps must print, for step 2, ORT's loss at the
    weights the first step wrote.
Every plan, one rank included, is checked against finite differences
rather than against the one-rank plan: a one-rank gradient bug would
otherwise pass on every mesh. A wrong loss or gradient is a FAIL (kinds
"loss", "gradient", "step2"), saved with body.onnx (the graph before its loss,
what --replay and --minimize work on) beside model.onnx; its repro.sh
compiles and runs the step, then reruns the check with --replay.

Usage:
  fuzz_plans.py --seed S --count N [--jobs J] [--minimize] [--extended] [--train] [-v]
  fuzz_plans.py --seconds T [--seed S] [--count N]   seeds S, S+1, ... (N cases
                                   each, default 25) until T seconds have passed;
                                   S defaults to one from the clock, printed
  fuzz_plans.py --replay DIR [--minimize]            rerun (and shrink) a saved failure
Deterministic for a given seed: case k of seed S is generated from
default_rng([S, k]) whatever --jobs is. BIN=path selects the compiler.
Exit 1 if any case failed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import math
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mpi_isolated  # noqa: E402 (tests/mpi_isolated.py)
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))
# Rank programs build at -O1, linked by gold where there is one: these small
# random graphs check plans and numbers, and compiling the kernel library at
# the generated Makefile's -O3 -march=native is most of a case's time
# (run_golden.sh keeps -O3); gold links in a third of ld's time.
BUILD_CFLAGS = os.environ.get("FUZZ_CFLAGS", "-O1 -std=c11" + (" -fuse-ld=gold" if shutil.which("ld.gold") else ""))
OUT = os.path.join(ROOT, "build", "fuzz_plans")

# The instruction set a case's kernels are built for, drawn per case: the
# packed-weight GEMM (and the bias Adds folded into it) reads the same
# panels as an AVX-512F tile, two AVX2 + FMA tiles or plain loops (a
# generic build), CBLAS serves the other GEMMs, and random shapes
# (n below one register tile, rows not a multiple of the kernel's) are what
# its edges need. name: (compiler flags, /proc/cpuinfo flags it needs).
ISAS = {"generic": ("", set()), "avx2": ("-mavx2 -mfma", {"avx2", "fma"}),
        "avx512": ("-mavx512f -mavx2 -mfma", {"avx512f", "avx2", "fma"})}


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


CPU_FLAGS = _cpu_flags()


def built_isa(isa):
    """The ISA a case drawn for isa is built for here: generic where this CPU
    lacks it."""
    return isa if ISAS[isa][1] <= CPU_FLAGS else "generic"


def isa_cflags(isa):
    return (BUILD_CFLAGS + " " + ISAS[built_isa(isa)][0]).strip()


# What the pinned ONNX Runtime (1.22) accepts: IR 10, opset 21 (as make_models.py).
IR_VERSION = 10
OPSET = 21
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

DIMS = (2, 4, 6, 8, 12, 16)          # small, and divisible by 2, 3 or 4 often
BATCH = (2, 4, 8)
MAX_ELEMS = 4096                     # no tensor larger than this
MAX_RANK = 4

# The project's tolerance, |out - golden| <= ATOL + RTOL |golden| (compare.py).
ATOL, RTOL = 1e-5, 1e-4
# Looser for graphs that normalise or reduce (Softmax, LayerNormalization,
# BatchNormalization, ReduceMean/ReduceSum, GlobalAveragePool) or divide/
# raise to a power: a sharded plan sums in a different order than ORT
# (partial sums over ranks, then an all-reduce), and 1/sigma, 1/x and x^p
# amplify the float32 rounding of their input by up to ~10x. A plan bug
# (wrong rows, a missing or doubled reduction) is off by O(1), far above this.
ATOL_LOOSE, RTOL_LOOSE = 1e-4, 1e-3
# A mismatch is forgiven where it stays within SENS_FACTOR times the change
# in ORT's own output under a ~1e-6 relative perturbation of every input and
# weight (see sensitivity()); such cases count as passed, "ill-conditioned".
SENS_FACTOR = 10.0
LOOSE_OPS = {"Softmax", "LayerNormalization", "BatchNormalization", "ReduceMean", "ReduceSum",
             "GlobalAveragePool", "Div", "Pow",
             # --extended: the same kinds of normalising, reducing and amplifying ops
             "LogSoftmax", "InstanceNormalization", "GroupNormalization", "ReduceSumSquare", "ReduceL1",
             "ReduceL2", "ReduceLogSumExp", "ReduceProd", "CumSum", "Reciprocal", "Log", "Exp"}

MESHES = (  # (weight, [(axis, size), ...]): 1-4 ranks, one or two axes
    (2, [("a", 1)]), (6, [("a", 2)]), (3, [("a", 3)]), (4, [("a", 4)]),
    (6, [("a", 2), ("b", 2)]), (2, [("a", 1), ("b", 2)]), (2, [("a", 2), ("b", 1)]),
    (1, [("a", 3), ("b", 1)]),
)

LINKS = ("nvlink", "pcie", "ib", "ethernet", "shm")

# Constructs that can be switched off while a known compiler bug makes most
# cases fail (all on by default; --exclude OP[,OP...] names builders below).
EXCLUDE = set()
USE_AUTO = [False]           # --auto: the search picks layouts (annotations kept as constraints)
USE_PIPELINE = [False]       # --pipeline: a "pp" axis of 1-3 stages and microbatches in front of small meshes
USE_EXTENDED = [False]       # --extended: the exporter op set too (EXTENDED below)
USE_TRAIN = [False]          # --train: differentiable graphs with a loss, gradients checked (TRAIN below)


# ---- graph builder -----------------------------------------------------------

class Builder:
    """Grows a random DAG; tracks every tensor's shape, dtype and tags
    ('pos': values >= 0.5 and bounded, safe under Sqrt, Pow and as a divisor;
    'param': an int64 operand the frontend folds into an attribute)."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = {}       # name -> array
        self.feeds = {}       # graph input name -> array
        self.shape = {}
        self.dtype = {}
        self.tags = {}
        self.produced = []    # node outputs, in order
        self.consumed = set()
        self.counter = 0

    # -- naming and registration
    def fresh(self, prefix):
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def reg(self, name, shape, dtype, tags=()):
        self.shape[name] = tuple(int(s) for s in shape)
        self.dtype[name] = dtype
        self.tags[name] = set(tags)
        return name

    def node(self, op, ins, outs_spec, **attrs):
        """outs_spec: [(shape, dtype, tags)]; returns the output names."""
        outs = [self.reg(self.fresh("t"), s, dt, tg) for s, dt, tg in outs_spec]
        for i in ins:
            if i:
                self.consumed.add(i)
        self.nodes.append(helper.make_node(op, list(ins), outs, name=self.fresh(op.lower() + "_"),
                                           **attrs))
        self.produced.extend(outs)
        return outs

    def node1(self, op, ins, shape, dtype=F32, tags=(), **attrs):
        return self.node(op, ins, [(shape, dtype, tags)], **attrs)[0]

    def init(self, arr, prefix="w", tags=()):
        arr = np.array(arr, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        name = self.fresh(prefix)
        self.inits[name] = arr
        dt = {np.dtype(np.float32): F32, np.dtype(np.int64): I64, np.dtype(bool): BOOL}[arr.dtype]
        return self.reg(name, arr.shape, dt, tags)

    def inp(self, arr, prefix="x", tags=()):
        arr = np.array(arr, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        name = self.fresh(prefix)
        self.feeds[name] = arr
        dt = {np.dtype(np.float32): F32, np.dtype(np.int64): I64, np.dtype(bool): BOOL}[arr.dtype]
        return self.reg(name, arr.shape, dt, tags)

    def const_i64(self, values):
        """An int64 operand (axes, shape, starts, split): an initializer, or
        now and then a Constant node (which the frontend must fold too)."""
        arr = np.array(values, dtype=np.int64)
        if self.rng.random() < 0.15:
            return self.node1("Constant", [], arr.shape, I64, ("param",),
                              value=numpy_helper.from_array(arr, "v"))
        return self.init(arr, "k", ("param",))

    # -- random data
    def randn(self, shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def randpos(self, shape):
        return (self.rng.random(shape) + 0.5).astype(np.float32)

    def float_operand(self, shape, scale=1.0, pos=False):
        """A new float tensor of this shape: mostly an initializer, sometimes a
        graph input, now and then a Constant node."""
        arr = self.randpos(shape) if pos else self.randn(shape, scale)
        tags = ("pos",) if pos else ()
        u = self.rng.random()
        if u < 0.25:
            return self.inp(arr, "x", tags)
        if u < 0.35:
            if arr.ndim == 0 and self.rng.random() < 0.5:
                return self.node1("Constant", [], (), F32, tags, value_float=float(arr))
            return self.node1("Constant", [], arr.shape, F32, tags, value=numpy_helper.from_array(arr, "v"))
        return self.init(arr, "w", tags)

    # -- picking
    def floats(self, pred=None):
        names = [n for n in list(self.feeds) + self.produced
                 if self.dtype[n] == F32 and "param" not in self.tags[n]
                 and self.nodes_made_by_constant(n) is False]
        if pred:
            names = [n for n in names if pred(n)]
        return names

    def nodes_made_by_constant(self, name):
        for n in self.nodes:
            if name in n.output:
                return n.op_type == "Constant"
        return False

    def pick(self, pred=None):
        """A float tensor, recent ones and unconsumed ones first (deep graphs
        rather than wide ones); None when nothing fits."""
        names = self.floats(pred)
        if not names:
            return None
        w = np.array([(1.0 + i) * (3.0 if n not in self.consumed else 1.0) for i, n in enumerate(names)])
        return names[self.rng.choice(len(names), p=w / w.sum())]

    def choice(self, seq):
        return seq[self.rng.integers(len(seq))]


def elems(shape):
    return int(np.prod(shape)) if len(shape) else 1


def broadcast(a, b):
    r = max(len(a), len(b))
    a = (1,) * (r - len(a)) + tuple(a)
    b = (1,) * (r - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y))
    return tuple(out)


def sub_shape(g, shape):
    """A shape that broadcasts to `shape`: leading dims dropped, some set to 1."""
    r = len(shape)
    drop = int(g.rng.integers(0, r)) if r > 1 and g.rng.random() < 0.5 else 0
    s = list(shape[drop:])
    for i in range(len(s)):
        if g.rng.random() < 0.3:
            s[i] = 1
    return tuple(s)


def new_input_shape(g, rank=None):
    rank = rank or int(g.rng.choice([2, 2, 3, 3, 3, 4]))
    while True:
        s = [g.choice(BATCH)] + [g.choice(DIMS) for _ in range(rank - 1)]
        if elems(s) <= 1024:
            return tuple(s)


def start_tensor(g, pred=None):
    """A float tensor of rank >= 1 to work on: one in the pool, or a fresh
    graph input."""
    x = g.pick(lambda n: len(g.shape[n]) >= 1 and (pred is None or pred(n)))
    if x is None:
        x = g.inp(g.randn(new_input_shape(g)))
        if pred and not pred(x):
            return None
    return x


# ---- op builders: each adds one or a few nodes, or returns False -------------

def make_pos(g, x):
    """A tensor >= 0.5 computed from x: Sigmoid(x)+0.5, Relu(x)+1 or x*x+0.5."""
    s = g.shape[x]
    k = int(g.rng.integers(3))
    if k == 0:
        y = g.node1("Sigmoid", [x], s)
        c = 0.5
    elif k == 1:
        y = g.node1("Relu", [x], s)
        c = 1.0
    else:
        y = g.node1("Mul", [x, x], s)
        c = 0.5
    cst = g.init(np.array(c, np.float32), "c")
    return g.node1("Add", [y, cst], s, tags=("pos",))


def b_unary(g):
    x = start_tensor(g)
    op = g.choice(["Relu", "Tanh", "Sigmoid", "Erf", "Gelu", "Identity", "Cast"])
    attrs = {}
    tags = set()
    if op == "Gelu" and g.rng.random() < 0.4:
        attrs["approximate"] = "tanh"
    if op == "Cast":
        attrs["to"] = F32
    if op in ("Identity", "Cast"):
        tags = g.tags[x] - {"param"}
    g.node1(op, [x], g.shape[x], tags=tags, **attrs)
    return True


def b_sqrt(g):
    x = g.pick(lambda n: "pos" in g.tags[n])
    if x is None or g.rng.random() < 0.5:
        x = make_pos(g, start_tensor(g))
    g.node1("Sqrt", [x], g.shape[x], tags=("pos",))
    return True


def b_pow(g):
    x = g.pick(lambda n: "pos" in g.tags[n])
    if x is None or g.rng.random() < 0.5:
        x = make_pos(g, start_tensor(g))
    s = g.shape[x]
    if g.rng.random() < 0.7:
        e = float(g.choice([2.0, 3.0, 0.5, -1.0, 1.5]))
        ex = g.init(np.array(e, np.float32), "e")
    else:
        ex = g.init((g.rng.random(sub_shape(g, s)) * 2.5 - 0.5).astype(np.float32), "e")
    g.node1("Pow", [x, ex], broadcast(s, g.shape[ex]))
    return True


def operand_for(g, a, pos=False):
    """A second operand broadcast-compatible with a: from the pool, or new."""
    sa = g.shape[a]

    def fits(n):
        out = broadcast(sa, g.shape[n])
        return out is not None and elems(out) <= MAX_ELEMS and len(out) <= MAX_RANK \
            and (not pos or "pos" in g.tags[n])
    u = g.rng.random()
    if u < 0.4:
        b = g.pick(fits)
        if b is not None:
            return b
    if pos and g.rng.random() < 0.4:
        src = g.pick(lambda n: broadcast(sa, g.shape[n]) == sa)
        if src is not None:
            return make_pos(g, src)
    if u > 0.9:
        return g.init(g.randpos(()) if pos else g.randn(()), "s", ("pos",) if pos else ())
    shape = sub_shape(g, sa)
    if g.rng.random() < 0.1 and len(sa) < MAX_RANK and elems(sa) * 2 <= MAX_ELEMS:
        shape = (2,) + tuple(sa)            # the second operand is the bigger one
    return g.float_operand(shape, pos=pos)


def b_binary(g):
    a = start_tensor(g)
    op = g.choice(["Add", "Sub", "Mul", "Add", "Mul"])
    b = operand_for(g, a)
    ins = [a, b] if g.rng.random() < 0.7 else [b, a]
    out = broadcast(g.shape[a], g.shape[b])
    tags = ("pos",) if op in ("Add", "Mul") and all("pos" in g.tags[i] for i in ins) else ()
    g.node1(op, ins, out, tags=tags)
    return True


def b_div(g):
    a = start_tensor(g)
    b = operand_for(g, a, pos=True)
    g.node1("Div", [a, b], broadcast(g.shape[a], g.shape[b]))
    return True


def b_matmul(g):
    u = g.rng.random()
    if u < 0.3:
        # activation @ activation^T, attention-like: a [..., M, K], b [..., N, K]
        pairs = [(a, b) for a in g.floats() for b in g.floats()
                 if len(g.shape[a]) >= 2 and len(g.shape[a]) == len(g.shape[b])
                 and g.shape[a][:-2] == g.shape[b][:-2] and g.shape[a][-1] == g.shape[b][-1]
                 and elems(g.shape[a][:-1] + (g.shape[b][-2],)) <= MAX_ELEMS]
        if pairs:
            a, b = pairs[int(g.rng.integers(len(pairs)))]
            r = len(g.shape[b])
            perm = list(range(r - 2)) + [r - 1, r - 2]
            sb = g.shape[b]
            bt = g.node1("Transpose", [b], tuple(sb[p] for p in perm), perm=perm)
            g.node1("MatMul", [a, bt], g.shape[a][:-1] + (sb[-2],))
            return True
    x = start_tensor(g, (lambda n: len(g.shape[n]) >= 2) if USE_TRAIN[0] else None)  # (1-D: no rule)
    if x is None:
        return False
    sx = g.shape[x]
    K = sx[-1]
    if u > 0.93:
        if USE_TRAIN[0]:                     # a 1-D operand has no gradient rule (refused)
            return False
        w = g.float_operand((K,), scale=1.0 / np.sqrt(K))                      # [..., K] @ [K]
        g.node1("MatMul", [x, w], sx[:-1])
        return True
    N = g.choice(DIMS)
    if elems(sx[:-1] + (N,)) > MAX_ELEMS:
        return False
    if u > 0.85 and len(sx) == 3:                                            # batched weight
        w = g.float_operand((g.choice([sx[0], 1]), K, N), scale=1.0 / np.sqrt(K))
    elif u > 0.8 and len(sx) == 2 and elems((2,) + sx[:-1] + (N,)) <= MAX_ELEMS:
        w = g.float_operand((2, K, N), scale=1.0 / np.sqrt(K))              # [M,K] @ [B,K,N]
        g.node1("MatMul", [x, w], (2, sx[0], N))
        return True
    else:
        w = g.float_operand((K, N), scale=1.0 / np.sqrt(K))
    y = g.node1("MatMul", [x, w], sx[:-1] + (N,))
    if g.rng.random() < 0.5:                 # a linear layer's bias (what partial sums meet most)
        b = g.float_operand((N,), scale=0.3)
        z = g.node1("Add", [y, b] if g.rng.random() < 0.8 else [b, y], g.shape[y])
        if g.rng.random() < 0.5:
            # A reader that takes no bias into its own pass (not an activation
            # or a residual Add): the bias is then folded into a packed GEMM.
            if g.rng.random() < 0.5:
                g.node1("Softmax", [z], g.shape[z], axis=-1)
            else:
                g.node1("Mul", [z, z], g.shape[z])
    return True


def b_mlp(g):
    """Linear, activation, linear (+ bias): the Megatron column/row pair."""
    x = start_tensor(g, (lambda n: len(g.shape[n]) >= 2) if USE_TRAIN[0] else None)
    if x is None:
        return False
    sx = g.shape[x]
    K, F = sx[-1], g.choice(DIMS)
    if elems(sx[:-1] + (F,)) > MAX_ELEMS:
        return False
    h = g.node1("MatMul", [x, g.float_operand((K, F), scale=1.0 / np.sqrt(K))], sx[:-1] + (F,))
    if g.rng.random() < 0.5:
        h = g.node1("Add", [h, g.float_operand((F,), scale=0.3)], g.shape[h])
    a = g.node1(g.choice(["Relu", "Gelu", "Tanh", "Sigmoid"]), [h], g.shape[h])
    y = g.node1("MatMul", [a, g.float_operand((F, K), scale=1.0 / np.sqrt(F))], sx)
    if g.rng.random() < 0.7:
        g.node1("Add", [y, g.float_operand((K,), scale=0.3)], sx)
    return True


def b_gemm(g):
    x = start_tensor(g, lambda n: len(g.shape[n]) >= 2)
    if x is None:
        return False
    if len(g.shape[x]) != 2:
        s = g.shape[x]
        x = g.node1("Flatten", [x], (s[0], elems(s[1:])), axis=1)
    ta, tb = int(g.rng.random() < 0.3), int(g.rng.random() < 0.4)
    s = g.shape[x]
    M, K = (s[1], s[0]) if ta else (s[0], s[1])
    N = g.choice(DIMS)
    if M * N > MAX_ELEMS or K > 256:
        return False
    w = g.float_operand((N, K) if tb else (K, N), scale=1.0 / np.sqrt(K))
    ins = [x, w]
    cu = g.rng.random()
    if cu < 0.75:
        cshape = g.choice([(N,), (1, N), (M, N), (M, 1), ()])
        ins.append(g.float_operand(cshape, scale=0.5))
    attrs = {}
    if ta:
        attrs["transA"] = 1
    if tb:
        attrs["transB"] = 1
    if g.rng.random() < 0.4:
        attrs["alpha"] = float(g.choice([0.5, 2.0, 1.5]))
    if len(ins) == 3 and g.rng.random() < 0.4:
        attrs["beta"] = float(g.choice([0.5, 2.0, -1.0]))
    g.node1("Gemm", ins, (M, N), **attrs)
    return True


def b_softmax(g):
    x = start_tensor(g)
    r = len(g.shape[x])
    axis = -1 if g.rng.random() < 0.5 else int(g.rng.integers(-r, r))
    g.node1("Softmax", [x], g.shape[x], axis=axis)
    return True


def b_layernorm(g):
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    axis = -1 if g.rng.random() < 0.6 else int(g.rng.integers(-r, r))
    a = axis % r
    norm = s[a:]
    if elems(norm) < 4:       # ORT wants > 1 value; fewer than 4 is too often ill-conditioned
        return False
    scale = g.float_operand(norm, scale=1.0)
    ins = [x, scale]
    if g.rng.random() < 0.7:
        ins.append(g.float_operand(norm, scale=0.5))
    attrs = {"axis": axis}
    if g.rng.random() < 0.3:
        attrs["epsilon"] = 1e-3
    outs = [(s, F32, ())]
    if g.rng.random() < 0.2 and elems(norm) >= 4 and not USE_TRAIN[0]:  # no gradient through mean/rstd
        stat = s[:a] + (1,) * (r - a)
        outs += [(stat, F32, ()), (stat, F32, ())]
    g.node("LayerNormalization", ins, outs, **attrs)
    return True


def b_reduce(g):
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    op = g.choice(["ReduceMean", "ReduceSum"])
    keep = int(g.rng.random() < 0.5)
    if g.rng.random() < 0.1:
        if not keep and g.rng.random() < 0.5:
            keep = 1
        g.node1(op, [x], (1,) * r if keep else (), keepdims=keep)
        return True
    k = int(g.rng.integers(1, r)) if r > 1 else 1
    axes = sorted(int(a) for a in g.rng.choice(r, size=k, replace=False))
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    given = [a - r if g.rng.random() < 0.3 else a for a in axes]
    g.node1(op, [x, g.const_i64(given)], out, keepdims=keep)
    return True


def b_transpose(g):
    x = start_tensor(g, lambda n: len(g.shape[n]) >= 2)
    if x is None:
        return False
    s = g.shape[x]
    r = len(s)
    if g.rng.random() < 0.15:
        g.node1("Transpose", [x], s[::-1])
        return True
    perm = list(range(r))
    while perm == list(range(r)):
        perm = [int(p) for p in g.rng.permutation(r)]
    g.node1("Transpose", [x], tuple(s[p] for p in perm), perm=perm)
    return True


def divisors(n):
    return [d for d in range(2, n) if n % d == 0]


def b_reshape(g):
    x = start_tensor(g)
    s = list(g.shape[x])
    r = len(s)
    u = g.rng.random()
    if u < 0.35 and r >= 2:                                  # merge two adjacent dims
        i = int(g.rng.integers(r - 1))
        new = s[:i] + [s[i] * s[i + 1]] + s[i + 2:]
    elif u < 0.7 and r < MAX_RANK:                           # split one dim in two
        cands = [i for i in range(r) if divisors(s[i])]
        if not cands:
            return False
        i = g.choice(cands)
        p = g.choice(divisors(s[i]))
        new = s[:i] + [p, s[i] // p] + s[i + 1:]
    elif u < 0.85:                                           # to 2-D
        k = int(g.rng.integers(1, r)) if r > 1 else 1
        new = [elems(s[:k]), elems(s[k:])]
    else:                                                    # to 1-D
        new = [elems(s)]
    spec = list(new)
    for i in range(min(len(new), r)):                        # 0 copies the input's dim
        if new[i] == s[i] and g.rng.random() < 0.3:
            spec[i] = 0
    if g.rng.random() < 0.3:
        spec[int(g.rng.integers(len(spec)))] = -1
    if spec.count(-1) > 1:
        return False
    g.node1("Reshape", [x, g.const_i64(spec)], tuple(new))
    return True


def b_flatten(g):
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    axis = int(g.rng.integers(-r, r + 1))
    a = axis % (r + 1) if axis < 0 else axis
    if axis < 0:
        a = axis + r
    g.node1("Flatten", [x], (elems(s[:a]), elems(s[a:])), axis=axis)
    return True


def b_unsqueeze(g):
    x = start_tensor(g, lambda n: len(g.shape[n]) < MAX_RANK)
    if x is None:
        return False
    s = list(g.shape[x])
    ro = len(s) + 1
    pos = int(g.rng.integers(ro))
    new = s[:pos] + [1] + s[pos:]
    given = pos - ro if g.rng.random() < 0.3 else pos
    g.node1("Unsqueeze", [x, g.const_i64([given])], tuple(new))
    return True


def b_squeeze(g):
    x = g.pick(lambda n: 1 in g.shape[n] and len(g.shape[n]) > 1)
    if x is None:
        return False
    s = g.shape[x]
    ones = [i for i, d in enumerate(s) if d == 1]
    if len(ones) == len(s):
        return False
    if g.rng.random() < 0.25:
        g.node1("Squeeze", [x], tuple(d for d in s if d != 1))
        return True
    k = int(g.rng.integers(1, len(ones) + 1))
    axes = sorted(int(a) for a in g.rng.choice(ones, size=k, replace=False))
    given = [a - len(s) if g.rng.random() < 0.3 else a for a in axes]
    g.node1("Squeeze", [x, g.const_i64(given)], tuple(d for i, d in enumerate(s) if i not in axes))
    return True


def b_concat(g):
    a = start_tensor(g)
    s = g.shape[a]
    r = len(s)
    axis = int(g.rng.integers(-r, r))
    ax = axis % r
    ins = [a]
    for _ in range(int(g.rng.integers(1, 3))):
        u = g.rng.random()
        other = None
        if u < 0.4:
            other = g.pick(lambda n: len(g.shape[n]) == r and all(
                g.shape[n][i] == s[i] for i in range(r) if i != ax))
        if other is None and u < 0.55:
            other = a
        if other is None:
            shape = list(s)
            shape[ax] = g.choice((1, 2, 4, 6))
            other = g.float_operand(tuple(shape))
        ins.append(other)
    out = list(s)
    out[ax] = sum(g.shape[i][ax] for i in ins)
    if elems(out) > MAX_ELEMS:
        return False
    if g.rng.random() < 0.5:
        g.rng.shuffle(ins)
    g.node1("Concat", ins, tuple(out), axis=axis)
    return True


def b_split(g):
    x = start_tensor(g, lambda n: max(g.shape[n]) >= 2)
    if x is None:
        return False
    s = g.shape[x]
    r = len(s)
    ax = g.choice([i for i in range(r) if s[i] >= 2])
    axis = ax - r if g.rng.random() < 0.3 else ax
    d = s[ax]
    u = g.rng.random()
    ins = [x]
    attrs = {"axis": axis}
    if u < 0.4:                                               # sizes given
        n = int(g.rng.integers(2, min(d, 3) + 1))
        cuts = sorted(int(c) for c in g.rng.choice(np.arange(1, d), size=n - 1, replace=False))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [d])]
        ins.append(g.const_i64(sizes))
    else:                                                     # num_outputs, last chunk smaller
        n = int(g.rng.integers(2, min(d, 4) + 1))
        c = -(-d // n)
        sizes = [c] * (n - 1) + [d - c * (n - 1)]
        if sizes[-1] <= 0:
            return False
        attrs["num_outputs"] = n
    outs = []
    for sz in sizes:
        o = list(s)
        o[ax] = sz
        outs.append((tuple(o), F32, ()))
    g.node("Split", ins, outs, **attrs)
    return True


def slice_len(start, end, step, d):
    return len(range(*slice(start, end, step).indices(d)))


def b_slice(g):
    x = start_tensor(g, lambda n: max(g.shape[n]) >= 2)
    if x is None:
        return False
    s = list(g.shape[x])
    r = len(s)
    cand = [i for i in range(r) if s[i] >= 2]
    k = 1 if len(cand) == 1 or g.rng.random() < 0.7 else 2
    axes = sorted(int(a) for a in g.rng.choice(cand, size=k, replace=False))
    starts, ends, steps = [], [], []
    out = list(s)
    for a in axes:
        d = s[a]
        for _ in range(20):
            step = 1 if USE_TRAIN[0] else int(g.choice([1, 1, 1, 2, -1, -2]))  # steps: no gradient rule
            st = int(g.rng.integers(-d, d))
            en = int(g.rng.integers(-d - 1, d + 1))
            if g.rng.random() < 0.15:
                en = 1000 if step > 0 else -1000
            n = slice_len(st, en, step, d)
            if n >= 1:
                break
        else:
            return False
        starts.append(st)
        ends.append(en)
        steps.append(step)
        out[a] = n
    ins = [x, g.const_i64(starts), g.const_i64(ends)]
    if axes != list(range(len(axes))) or g.rng.random() < 0.6 or any(st != 1 for st in steps):
        given = [a - r if g.rng.random() < 0.3 else a for a in axes]
        ins.append(g.const_i64(given))
        if any(st != 1 for st in steps) or g.rng.random() < 0.5:
            ins.append(g.const_i64(steps))
    g.node1("Slice", ins, tuple(out))
    return True


def b_gather(g):
    if g.rng.random() < 0.55:
        # Embedding lookup: table [V, D] (an initializer or an input), int64 ids.
        V, D = g.choice((4, 6, 8, 12, 16)), g.choice(DIMS)
        ids = [n for n in g.feeds if g.dtype[n] == I64]
        if ids and g.rng.random() < 0.5:
            idx = g.choice(ids)
            if elems(g.shape[idx]) * D > MAX_ELEMS or g.shape[idx] and \
                    np.max(np.abs(g.feeds[idx])) >= V:
                return False
        else:
            ishape = g.choice([(g.choice(BATCH),), (g.choice(BATCH), g.choice(DIMS))])
            lo = -V if g.rng.random() < 0.2 else 0
            idx = g.inp(g.rng.integers(lo, V, ishape).astype(np.int64), "ids")
        table = g.float_operand((V, D))
        g.node1("Gather", [table, idx], g.shape[idx] + (D,))
        return True
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    ax = 0 if USE_TRAIN[0] else int(g.rng.integers(r))       # the gradient rule: axis 0, index tensors
    d = s[ax]
    ishape = g.choice([(), (g.choice((1, 2, 3, 4)),), (2, g.choice((2, 3)))][int(USE_TRAIN[0]):])
    idx = g.init(g.rng.integers(-d, d, ishape).astype(np.int64), "i")
    out = s[:ax] + tuple(ishape) + s[ax + 1:]
    if len(out) == 0 or len(out) > MAX_RANK or elems(out) > MAX_ELEMS:
        return False
    axis = ax - r if g.rng.random() < 0.3 else ax
    g.node1("Gather", [x, idx], out, axis=axis)
    return True


def b_where(g):
    a = start_tensor(g)
    sa = g.shape[a]
    b = operand_for(g, a)
    cshape = sub_shape(g, sa)
    cond = g.rng.random(cshape) < 0.5
    c = g.inp(cond, "c") if g.rng.random() < 0.5 else g.init(cond, "m")
    ab = [a, b] if g.rng.random() < 0.5 else [b, a]
    out = broadcast(broadcast(cshape, g.shape[a]), g.shape[b])
    g.node1("Where", [c] + ab, out)
    return True


def b_cast(g):
    if g.rng.random() < 0.5:
        ids = [n for n in g.feeds if g.dtype[n] == I64]
        if ids:
            idx = g.choice(ids)
        else:
            idx = g.inp(g.rng.integers(-5, 5, new_input_shape(g)).astype(np.int64), "ids")
        g.node1("Cast", [idx], g.shape[idx], to=F32)
        return True
    # float -> int64 -> float on a graph input (never on a computed value,
    # whose rounding could differ in the last bit and flip the truncation).
    x = g.inp(g.randn(new_input_shape(g), 4.0))
    i = g.node1("Cast", [x], g.shape[x], I64, to=I64)
    g.node1("Cast", [i], g.shape[x], to=F32)
    return True


def spatial_input(g):
    x = g.pick(lambda n: len(g.shape[n]) in (3, 4) and min(g.shape[n][2:]) >= 3)
    if x is None or g.rng.random() < 0.3:
        r = 4 if g.rng.random() < 0.8 else 3
        shape = (g.choice((1, 2, 4)), g.choice((2, 4, 6, 8))) + tuple(g.choice((4, 6, 8)) for _ in range(r - 2))
        x = g.inp(g.randn(shape))
    return x


def pool_out(d, k, s, pb, pe, dil=1, ceil=False):
    num = d + pb + pe - dil * (k - 1) - 1
    if num < 0:
        return 0
    if ceil:
        o = -(-num // s) + 1
        if (o - 1) * s >= d + pb:           # a window starting in the end padding:
            return 0                        # ONNX's shape inference and ORT disagree there
        return o
    return num // s + 1


def b_conv(g):
    x = spatial_input(g)
    s = g.shape[x]
    nsp = len(s) - 2
    C = s[1]
    group = g.choice([gr for gr in (1, 1, 2) if C % gr == 0])
    cout = g.choice([c for c in (2, 4, 6, 8) if c % group == 0])
    k = [int(g.rng.integers(1, 4)) for _ in range(nsp)]
    strides = [int(g.choice([1, 1, 2])) for _ in range(nsp)]
    dil = [int(g.choice([1, 1, 2])) for _ in range(nsp)]
    pads = [int(g.rng.integers(0, 2)) for _ in range(2 * nsp)]
    attrs = {"kernel_shape": k}
    if g.rng.random() < 0.5:
        attrs["strides"] = strides
    else:
        strides = [1] * nsp
    if g.rng.random() < 0.3:
        attrs["dilations"] = dil
    else:
        dil = [1] * nsp
    if g.rng.random() < 0.5:
        attrs["pads"] = pads
    else:
        pads = [0] * (2 * nsp)
    out = [pool_out(s[2 + i], k[i], strides[i], pads[i], pads[nsp + i], dil[i]) for i in range(nsp)]
    if g.rng.random() < 0.1:                  # SAME_UPPER: the output is ceil(in / stride)
        attrs.pop("pads", None)
        attrs.pop("dilations", None)          # ORT: no dilations with SAME_*
        dil = [1] * nsp
        attrs["auto_pad"] = "SAME_UPPER"
        out = [-(-s[2 + i] // strides[i]) for i in range(nsp)]
    if min(out) < 1:
        return False
    if group > 1:
        attrs["group"] = group
    w = g.float_operand((cout, C // group) + tuple(k), scale=1.0 / np.sqrt(C // group * elems(k)))
    ins = [x, w]
    if g.rng.random() < 0.6:
        ins.append(g.float_operand((cout,), scale=0.3))
    g.node1("Conv", ins, (s[0], cout) + tuple(out), **attrs)
    return True


def b_maxpool(g):
    x = spatial_input(g)
    s = g.shape[x]
    nsp = len(s) - 2
    k = [int(g.choice([2, 2, 3])) for _ in range(nsp)]
    st = [int(g.choice([1, 2, 2])) for _ in range(nsp)]
    pads = [int(g.rng.integers(0, k[i % nsp])) if g.rng.random() < 0.3 else 0 for i in range(2 * nsp)]
    ceil = g.rng.random() < 0.25
    out = [pool_out(s[2 + i], k[i], st[i], pads[i], pads[nsp + i], 1, ceil) for i in range(nsp)]
    if min(out) < 1:
        return False
    attrs = {"kernel_shape": k, "strides": st}
    if any(pads):
        attrs["pads"] = pads
    if ceil:
        attrs["ceil_mode"] = 1
    outs = [(s[:2] + tuple(out), F32, ())]
    if g.rng.random() < 0.1:
        outs.append((s[:2] + tuple(out), I64, ()))
    g.node("MaxPool", [x], outs, **attrs)
    return True


def b_gap(g):
    x = spatial_input(g)
    s = g.shape[x]
    g.node1("GlobalAveragePool", [x], s[:2] + (1,) * (len(s) - 2))
    return True


def b_batchnorm(g):
    x = g.pick(lambda n: len(g.shape[n]) >= 2 and g.shape[n][1] > 1)
    if x is None:
        x = spatial_input(g)
    C = g.shape[x][1]
    ins = [x, g.float_operand((C,)), g.float_operand((C,), 0.5), g.float_operand((C,), 0.5),
           g.init(g.randpos((C,)), "var", ("pos",))]
    attrs = {"epsilon": 1e-3} if g.rng.random() < 0.3 else {}
    g.node1("BatchNormalization", ins, g.shape[x], **attrs)
    return True


BUILDERS = {  # name: (weight, function)
    "unary": (10, b_unary), "binary": (14, b_binary), "div": (4, b_div), "sqrt": (2, b_sqrt),
    "pow": (3, b_pow), "matmul": (12, b_matmul), "mlp": (3, b_mlp), "gemm": (4, b_gemm), "softmax": (5, b_softmax),
    "layernorm": (5, b_layernorm), "reduce": (6, b_reduce), "transpose": (6, b_transpose),
    "reshape": (7, b_reshape), "flatten": (2, b_flatten), "unsqueeze": (3, b_unsqueeze),
    "squeeze": (3, b_squeeze), "concat": (5, b_concat), "split": (4, b_split), "slice": (4, b_slice),
    "gather": (6, b_gather), "where": (3, b_where), "cast": (2, b_cast), "conv": (3, b_conv),
    "maxpool": (2, b_maxpool), "gap": (2, b_gap), "batchnorm": (2, b_batchnorm),
}


# ---- the exporter op set (issue 9): opt-in with --extended ---------------------
# Ops added after the original set: elementwise math, comparisons and logic,
# the other reductions, index ops, Pad/Expand/Tile, the channel norms and
# shape arithmetic that folds at import. Discontinuous functions (Floor,
# Ceil, Round, Sign) only ever see graph inputs, where no rounding precedes
# them; comparisons compare with a threshold, rarely met exactly.

def x_unary(g):
    op = g.choice(["Neg", "Abs", "Sin", "Cos", "Exp", "Log", "Reciprocal", "LeakyRelu", "Elu", "Selu",
                   "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Clip", "Clip", "Floor",
                   "Ceil", "Round", "Sign"] if not USE_TRAIN[0] else ["Neg", "Abs", "Exp", "Log", "Reciprocal"])
    if op in ("Floor", "Ceil", "Round", "Sign"):
        x = g.inp(g.randn(new_input_shape(g), 3.0))
    elif op in ("Log", "Reciprocal"):
        x = g.pick(lambda n: "pos" in g.tags[n]) or make_pos(g, start_tensor(g))
    elif op == "Exp":                                         # of Tanh: no overflow
        x = start_tensor(g)
        x = g.node1("Tanh", [x], g.shape[x])
    else:
        x = start_tensor(g)
    attrs, ins = {}, [x]
    if op == "LeakyRelu" and g.rng.random() < 0.5:
        attrs["alpha"] = 0.2
    if op == "Elu" and g.rng.random() < 0.5:
        attrs["alpha"] = 0.5
    if op == "HardSigmoid" and g.rng.random() < 0.5:
        attrs.update(alpha=0.3, beta=0.4)
    if op == "Clip":
        lo, hi = sorted(g.rng.standard_normal(2) * 0.7)
        k = int(g.rng.integers(4))
        if k & 1:
            ins.append(g.init(np.array(lo, np.float32), "lo"))
        if k & 2:
            if len(ins) == 1:
                ins.append("")
            ins.append(g.init(np.array(hi, np.float32), "hi"))
    g.node1(op, ins, g.shape[x])
    return True


def x_nary(g):
    op = g.choice(["Min", "Max", "Mean", "Sum", "PRelu"])
    a = start_tensor(g)
    if op == "PRelu":
        slope = g.float_operand(sub_shape(g, g.shape[a]), 0.3)
        out = broadcast(g.shape[a], g.shape[slope])
        if out != g.shape[a]:                 # PRelu's slope broadcasts to x only
            return False
        g.node1(op, [a, slope], out)
        return True
    ins = [a] + [operand_for(g, a) for _ in range(int(g.rng.integers(0, 3)))]
    out = ()
    for i in ins:
        out = broadcast(out, g.shape[i])
        if out is None:
            return False
    g.rng.shuffle(ins)
    g.node1(op, ins, out)
    return True


def x_compare(g):
    """Where(a CMP threshold [and/or/xor/not another], a, b)."""
    a = start_tensor(g)
    s = g.shape[a]
    op = g.choice(["Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
    t = g.float_operand(sub_shape(g, s), 0.5)
    cond = g.node1(op, [a, t], broadcast(s, g.shape[t]), BOOL)
    u = g.rng.random()
    if u < 0.3:
        c2 = g.inp(g.rng.random(sub_shape(g, s)) < 0.5, "c")
        cond = g.node1(g.choice(["And", "Or", "Xor"]), [cond, c2], broadcast(g.shape[cond], g.shape[c2]), BOOL)
    elif u < 0.45:
        cond = g.node1("Not", [cond], g.shape[cond], BOOL)
    b = operand_for(g, a)
    out = broadcast(broadcast(g.shape[cond], s), g.shape[b])
    if out is None:
        return False
    g.node1("Where", [cond, a, b], out)
    return True


def x_reduce(g):
    op = g.choice(["ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                   "ReduceLogSumExp", "ArgMax", "ArgMin"])
    x = start_tensor(g)
    if op == "ReduceProd":
        x = make_pos(g, x) if g.rng.random() < 0.5 else g.node1("Sigmoid", [x], g.shape[x])
    s = g.shape[x]
    r = len(s)
    keep = int(g.rng.random() < 0.5)
    if op in ("ArgMax", "ArgMin"):
        ax = int(g.rng.integers(r))
        attrs = {"axis": ax - r if g.rng.random() < 0.3 else ax, "keepdims": keep}
        if g.rng.random() < 0.3:
            attrs["select_last_index"] = 1
        out = tuple(1 if i == ax else d for i, d in enumerate(s)) if keep else s[:ax] + s[ax + 1:]
        g.node1(op, [x], out, I64, **attrs)
        return True
    k = int(g.rng.integers(1, r + 1))
    axes = sorted(int(a) for a in g.rng.choice(r, size=k, replace=False))
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    g.node1(op, [x, g.const_i64(axes)], out, keepdims=keep)
    return True


def x_along_axis(g):
    op = "LogSoftmax" if USE_TRAIN[0] else g.choice(["CumSum", "LogSoftmax", "TopK"])
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    ax = int(g.rng.integers(r))
    axis = ax - r if g.rng.random() < 0.3 else ax
    if op == "CumSum":
        attrs = {}
        if g.rng.random() < 0.3:
            attrs["exclusive"] = 1
        if g.rng.random() < 0.3:
            attrs["reverse"] = 1
        g.node1(op, [x, g.init(np.array(axis, np.int64), "k", ("param",))], s, **attrs)
    elif op == "LogSoftmax":
        g.node1(op, [x], s, axis=axis)
    else:
        k = int(g.rng.integers(1, s[ax] + 1))
        o = s[:ax] + (k,) + s[ax + 1:]
        attrs = {"axis": axis}
        if g.rng.random() < 0.3:
            attrs["largest"] = 0
        g.node(op, [x, g.const_i64([k])], [(o, F32, ()), (o, I64, ())], **attrs)
    return True


def x_chan_norm(g):
    x = g.pick(lambda n: len(g.shape[n]) >= 3 and g.shape[n][1] > 1 and elems(g.shape[n][2:]) >= 4)
    if x is None:
        x = spatial_input(g)
    C = g.shape[x][1]
    if g.rng.random() < 0.5:
        ins = [x, g.float_operand((C,)), g.float_operand((C,), 0.5)]
        g.node1("InstanceNormalization", ins, g.shape[x])
    else:
        G = g.choice([d for d in (1, 2, C) if C % d == 0])
        ins = [x, g.float_operand((C,)), g.float_operand((C,), 0.5)]
        g.node1("GroupNormalization", ins, g.shape[x], num_groups=G)
    return True


def x_expand_tile(g):
    x = start_tensor(g, lambda n: elems(g.shape[n]) * 2 <= MAX_ELEMS)
    if x is None:
        return False
    s = g.shape[x]
    if (g.rng.random() < 0.5 or USE_TRAIN[0]) and 1 in s:      # Tile has no gradient rule
        new = tuple(g.choice((2, 4)) if d == 1 else d for d in s)
        if g.rng.random() < 0.3 and len(s) < MAX_RANK:
            new = (2,) + new
        if elems(new) > MAX_ELEMS:
            return False
        spec = [1 if (g.rng.random() < 0.3 and i >= len(new) - len(s) and s[i - (len(new) - len(s))] == d) else d
                for i, d in enumerate(new)]
        g.node1("Expand", [x, g.const_i64(spec)], new)
        return True
    if USE_TRAIN[0]:
        return False
    reps = [int(g.choice((1, 1, 2))) for _ in s]
    new = tuple(d * k for d, k in zip(s, reps))
    if elems(new) > MAX_ELEMS:
        return False
    g.node1("Tile", [x, g.const_i64(reps)], new)
    return True


def x_trilu(g):
    x = start_tensor(g, lambda n: len(g.shape[n]) >= 2)
    if x is None:
        return False
    ins = [x]
    if g.rng.random() < 0.5:
        ins.append(g.init(np.array(int(g.rng.integers(-2, 3)), np.int64), "k", ("param",)))
    g.node1("Trilu", ins, g.shape[x], upper=int(g.rng.random() < 0.5))
    return True


def x_index(g):
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    op = g.choice(["GatherElements", "GatherND", "ScatterElements", "ScatterND"])
    if op == "GatherElements":
        ax = int(g.rng.integers(r))
        ishape = tuple(int(g.rng.integers(1, d + 1)) if i != ax else int(g.rng.integers(1, 2 * d + 1))
                       for i, d in enumerate(s))
        idx = g.init(g.rng.integers(-s[ax], s[ax], ishape).astype(np.int64), "i")
        g.node1(op, [x, idx], ishape, axis=ax - r if g.rng.random() < 0.3 else ax)
    elif op == "GatherND":
        q = int(g.rng.integers(1, r + 1))
        n = int(g.rng.integers(1, 5))
        idx = np.stack([g.rng.integers(-s[j], s[j], n) for j in range(q)], -1).astype(np.int64)
        g.node1(op, [x, g.init(idx, "i")], (n,) + s[q:])
    elif op == "ScatterElements":
        ax = int(g.rng.integers(r))
        m = int(g.rng.integers(1, s[ax] + 1))
        ushape = tuple(m if i == ax else d for i, d in enumerate(s))
        # Distinct targets along the axis at every position: no write order to depend on.
        perm = np.argsort(g.rng.random(s[:ax] + (s[ax],) + s[ax + 1:]), axis=ax)
        idx = np.take(perm, np.arange(m), axis=ax).astype(np.int64)
        attrs = {"axis": ax}
        if g.rng.random() < 0.3:
            attrs["reduction"] = g.choice(["add", "mul", "max", "min"])
        g.node1(op, [x, g.init(idx, "i"), g.float_operand(ushape)], s, **attrs)
    else:
        q = int(g.rng.integers(1, r + 1))
        cells = elems(s[:q])
        n = int(g.rng.integers(1, min(cells, 4) + 1))
        flat = g.rng.choice(cells, size=n, replace=False)
        idx = np.stack(np.unravel_index(flat, s[:q]), -1).astype(np.int64)
        g.node1(op, [x, g.init(idx, "i"), g.float_operand((n,) + s[q:])], s)
    return True


def x_pad(g):
    x = start_tensor(g)
    s = g.shape[x]
    r = len(s)
    mode = g.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for _ in range(2):
        for d in s:
            hi = d - 1 if mode == "reflect" else 2
            pads.append(int(g.rng.integers(0, min(hi, 2) + 1)))
    out = tuple(d + pads[i] + pads[r + i] for i, d in enumerate(s))
    if elems(out) > MAX_ELEMS:
        return False
    ins = [x, g.const_i64(pads)]
    if mode == "constant" and g.rng.random() < 0.5:
        ins.append(g.init(np.array(g.rng.standard_normal(), np.float32), "pv"))
    g.node1("Pad", ins, out, mode=mode)
    return True


def x_onehot(g):
    B, S, D = g.choice(BATCH), g.choice(DIMS), g.choice((4, 6, 8))
    ids = g.inp(g.rng.integers(-D, D, (B, S)).astype(np.int64), "ids")
    vals = g.init(np.array([g.rng.standard_normal(), 1.0 + g.rng.random()], np.float32), "oh")
    ax = int(g.choice([-1, 0, 1, 2]))
    a = ax % 3
    out = (B, S)[:a] + (D,) + (B, S)[a:]
    g.node1("OneHot", [ids, g.init(np.array(D, np.int64), "k", ("param",)), vals], out, axis=ax)
    return True


def x_depth_space(g):
    x = g.pick(lambda n: len(g.shape[n]) == 4)
    if x is None:
        x = spatial_input(g)
        if len(g.shape[x]) != 4:
            return False
    N, C, H, W = g.shape[x]
    b = 2
    if C % (b * b) == 0 and g.rng.random() < 0.5:
        attrs = {"blocksize": b}
        if g.rng.random() < 0.5:
            attrs["mode"] = "CRD"
        g.node1("DepthToSpace", [x], (N, C // 4, H * 2, W * 2), **attrs)
    elif H % b == 0 and W % b == 0:
        g.node1("SpaceToDepth", [x], (N, C * 4, H // 2, W // 2), blocksize=b)
    else:
        return False
    return True


def x_shape_math(g):
    """Shape arithmetic that must fold at import: Shape -> Gather/Slice ->
    Concat -> Reshape, ConstantOfShape(Shape(x)), Size, Range."""
    x = start_tensor(g, lambda n: len(g.shape[n]) >= 2)
    if x is None:
        return False
    s = g.shape[x]
    r = len(s)
    shp = g.node1("Shape", [x], (r,), I64, ("param",))
    u = g.rng.random()
    if u < 0.5:                                               # merge the last two dims
        head = g.node1("Slice", [shp, g.const_i64([0]), g.const_i64([r - 2])], (r - 2,), I64, ("param",))
        tail = g.const_i64([-1])
        new = g.node1("Concat", [head, tail], (r - 1,), I64, ("param",), axis=0)
        g.node1("Reshape", [x, new], s[:-2] + (s[-2] * s[-1],))
    elif u < 0.75:                                            # x + ConstantOfShape(shape(x))
        c = g.node1("ConstantOfShape", [shp], s, F32, value=numpy_helper.from_array(
            np.array([0.5], np.float32), "v"))
        g.node1("Add", [x, c], s)
    else:                                                     # x * Range(0, last dim) / Size(x)
        last = g.node1("Gather", [shp, g.init(np.array(r - 1, np.int64), "k", ("param",))], (), I64, ("param",))
        rg = g.node1("Range", [g.init(np.array(0, np.int64), "k", ("param",)), last,
                               g.init(np.array(1, np.int64), "k", ("param",))], (s[-1],), I64, ("param",))
        sz = g.node1("Size", [x], (), I64, ("param",))
        f = g.node1("Cast", [rg], (s[-1],), F32, ("param",), to=F32)
        n = g.node1("Cast", [sz], (), F32, ("param",), to=F32)
        g.node1("Div", [g.node1("Mul", [x, f], s), n], s)
    return True


EXTENDED = {
    "x_unary": (10, x_unary), "x_nary": (5, x_nary), "x_compare": (4, x_compare), "x_reduce": (6, x_reduce),
    "x_along_axis": (5, x_along_axis), "x_chan_norm": (3, x_chan_norm), "x_expand_tile": (3, x_expand_tile),
    "x_trilu": (2, x_trilu), "x_index": (5, x_index), "x_pad": (3, x_pad), "x_onehot": (2, x_onehot),
    "x_depth_space": (2, x_depth_space), "x_shape_math": (3, x_shape_math),
}


# ---- --train: the builders whose ops have gradient rules ------------------------

def ops_with_gradients():
    """The ONNX ops whose op-table row (ir/*.def) names a vector-Jacobian
    rule (its last column is not vjp_none)."""
    ops = set()
    d = os.path.join(ROOT, "ir")
    for f in sorted(os.listdir(d)):
        if f.endswith(".def"):
            with open(os.path.join(d, f)) as fh:
                for line in fh:
                    m = re.match(r'OP\(\w+,\s*"(\w+)",.*,\s*(\w+)\)\s*$', line)
                    if m and m.group(2) != "vjp_none":
                        ops.add(m.group(1))
    return ops


GRAD_OPS = ops_with_gradients()
# Builders --train draws from: every op they emit on a float path has a
# gradient rule (the builders above narrow their choices when USE_TRAIN is
# set: no 1-D MatMul weight, Slice steps of 1, Gather along axis 0 with an
# index tensor, no LayerNorm statistics outputs, Expand but not Tile). Conv,
# pooling and BatchNormalization have no rule yet. --extended adds the
# unary ops with rules, LogSoftmax, Expand, comparisons (conditions: integer
# paths that need no gradient) and shape arithmetic that folds at import.
TRAIN = [k for k in BUILDERS if k not in ("conv", "maxpool", "gap", "batchnorm")]
TRAIN_EXTENDED = ["x_unary", "x_along_axis", "x_expand_tile", "x_compare", "x_shape_math"]
# Ops a --train graph may hold without a rule: they only make conditions or
# shapes (no float output that a weight reaches), or fold at import.
NO_GRAD_OK = {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Shape", "Size",
              "Range", "ConstantOfShape"}


# ---- a case: graph, feeds, mesh, annotations -----------------------------------

class Case:
    def __init__(self, seed, index, model, feeds, mesh, shards, links=None, fsdp=None, prefetch=None,
                 fuse=None, shard_file=False, dims=None, auto=None, pipe=None, isa=None, train=False, frozen=None,
                 train_flags=None):
        self.seed, self.index = seed, index
        self.model = model        # onnx.ModelProto
        self.feeds = feeds        # name -> array
        self.mesh = mesh          # [(axis, size)]
        self.shards = shards      # [(tensor, spec)]
        self.links = links or {}  # axis -> link class (--link), changes the reshard costs
        self.fsdp = fsdp          # --shard-weights AXIS, or None
        self.prefetch = prefetch  # --prefetch K (with fsdp), or None
        self.fuse = fuse          # --fuse-bytes N, or None
        self.shard_file = shard_file  # annotations through --shardings FILE, not --shard
        self.dims = dims or {}    # symbolic input dims -> value (--dim)
        self.auto = auto          # --auto flags (device, memory limit), or None
        self.pipe = pipe          # --microbatches M with a "pp" axis in the mesh, or None
        self.isa = isa or "generic"  # what the kernels are built for (ISAS)
        self.train = bool(train)  # --train: model is the body; train_model() appends the loss
        self.frozen = list(frozen or [])  # --frozen weights (with train)
        # with train: --accum 2 (one batch twice: the same gradient), --zero
        # 1|2 over an axis, small --bucket-mb; none changes the numbers
        self.train_flags = list(train_flags or [])
        self._train_model = None

    FIELDS = ("seed", "index", "model", "feeds", "mesh", "shards", "links", "fsdp", "prefetch", "fuse",
              "shard_file", "dims", "auto", "pipe", "isa", "train", "frozen", "train_flags")

    def but(self, **kw):
        """A copy with some fields replaced."""
        c = Case(*[kw.get(f, getattr(self, f)) for f in self.FIELDS])
        return c

    def flags(self):
        f = []
        if self.links:
            f += ["--link", ",".join("%s=%s" % kv for kv in sorted(self.links.items()))]
        if self.fsdp:
            f += ["--shard-weights", self.fsdp]
            if self.prefetch is not None:
                f += ["--prefetch", str(self.prefetch)]
        if self.fuse is not None:
            f += ["--fuse-bytes", self.fuse]
        for k, v in sorted(self.dims.items()):
            f += ["--dim", "%s=%d" % (k, v)]
        if self.auto:
            f += list(self.auto)
        if self.pipe and any(a == "pp" for a, _ in self.mesh):
            f += ["--microbatches", str(self.pipe)]
        if self.train:
            f += TRAIN_FLAGS
            inits = set(t.name for t in self.model.graph.initializer)
            frozen = [w for w in self.frozen if w in inits]
            if frozen:
                f += ["--frozen", ",".join(frozen)]
            f += self.train_flags
        return f

    @property
    def tag(self):
        return "%s_%s" % (self.seed, self.index)

    def mesh_str(self):
        return ",".join("%s=%d" % a for a in self.mesh)

    def ranks(self):
        return int(np.prod([s for _, s in self.mesh]))

    def ops(self):
        return [n.op_type for n in self.model.graph.node]

    def weights(self):
        """The weights --train updates: the float initializers of the model
        compiled that are not --frozen and from which a float path leads to
        the loss (one that only feeds a comparison gets no gradient), by
        name; the others are no outputs of the rank program."""
        m = self.compiled_model()
        live = grad_reach(m, [LOSS])
        return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer
                if t.data_type == F32 and t.name not in self.frozen and t.name in live}

    def compiled_model(self):
        """What onnx2spmd compiles: the model, or with train the model with its loss."""
        if not self.train:
            return self.model
        if self._train_model is None:
            self._train_model = train_model(self)
        return self._train_model

    def tolerance(self):
        return (ATOL_LOOSE, RTOL_LOOSE) if LOOSE_OPS & set(self.ops()) else (ATOL, RTOL)


def random_spec(rng, shape, mesh):
    """Each dim gets an ordered subset of the mesh axes whose product divides
    it (or, one tensor in four, whose product is at most twice the dim: an
    uneven split, padded); every axis at most once per tensor."""
    sizes = dict(mesh)
    dims = [[] for _ in shape]
    uneven = rng.random() < 0.25
    for i in rng.permutation(len(mesh)):
        name, size = mesh[i]
        if rng.random() < 0.15:
            continue
        ok = [j for j, d in enumerate(shape)
              if (d % (k := size * int(np.prod([sizes[x] for x in dims[j]]))) == 0 or (uneven and k <= 2 * d))
              and (d > 1 or rng.random() < 0.2)]
        if ok:
            dims[int(ok[rng.integers(len(ok))])].append(name)
    return "[" + ",".join("+".join(d) if d else "_" for d in dims) + "]"


def check_shapes(m, shapes):
    """ONNX's own shape inference must agree with the generator's (a
    generator bug otherwise, not a compiler bug)."""
    onnx.checker.check_model(m)
    # ONNX cannot see through shape arithmetic (Shape -> ... -> Reshape) and
    # leaves those dims unknown; only known dims are compared then.
    folds = any(n.op_type in ("Shape", "Size", "ConstantOfShape", "Range", "GroupNormalization")
                for n in m.graph.node)        # (nor, in onnx 1.22, through GroupNormalization-21)
    inf = onnx.shape_inference.infer_shapes(m, strict_mode=not folds)
    for v in list(inf.graph.value_info) + list(inf.graph.output):
        if v.name not in shapes or not v.type.tensor_type.HasField("shape"):
            continue
        dims = v.type.tensor_type.shape.dim
        if len(dims) != len(shapes[v.name]) or any(
                d.HasField("dim_value") and d.dim_value != e for d, e in zip(dims, shapes[v.name])):
            raise ValueError("generator: %s is %s, ONNX infers %s" % (
                v.name, shapes[v.name], [d.dim_value if d.HasField("dim_value") else "?" for d in dims]))


def generate(seed, index):
    rng = np.random.default_rng([seed, index])
    g = Builder(rng)
    active = dict(BUILDERS, **(EXTENDED if USE_EXTENDED[0] else {}))
    if USE_TRAIN[0]:
        active = {k: v for k, v in active.items() if k in TRAIN or k in TRAIN_EXTENDED}
    names = [k for k in active if k not in EXCLUDE]
    w = np.array([active[k][0] for k in names], dtype=float)
    target = int(rng.integers(3, 13))
    # A first tensor: a plain input, token ids into an embedding, or an image.
    u = rng.random()
    if u < 0.15 and "gather" not in EXCLUDE:
        b_gather(g)
    elif u < 0.25 and "conv" not in EXCLUDE and not USE_TRAIN[0]:
        b_conv(g)
    else:
        g.inp(g.randn(new_input_shape(g)))
    tries = 0
    while len(g.nodes) < target and tries < 200:
        tries += 1
        k = names[rng.choice(len(names), p=w / w.sum())]
        snap = (len(g.nodes), dict(g.inits), dict(g.feeds), list(g.produced), set(g.consumed))
        ok = active[k][1](g)
        if not ok or len(g.nodes) > 12 or any(elems(g.shape[o]) > MAX_ELEMS or len(g.shape[o]) > MAX_RANK
                                              for n in g.nodes[snap[0]:] for o in n.output):
            del g.nodes[snap[0]:]
            g.inits, g.feeds, g.produced, g.consumed = snap[1], snap[2], snap[3], snap[4]
    # Graph outputs: every tensor nobody reads, and now and then one that is read.
    outs = [n for n in g.produced if n not in g.consumed]
    inner = [n for n in g.produced if n in g.consumed and "param" not in g.tags[n]]
    if USE_TRAIN[0]:                                   # the loss (train_model) reads float outputs only
        outs = [n for n in outs if g.dtype[n] == F32 and "param" not in g.tags[n]]
        inner = [n for n in inner if g.dtype[n] == F32]
        bad = [n.op_type for n in g.nodes if n.op_type not in GRAD_OPS and n.op_type not in NO_GRAD_OK]
        if bad:
            raise ValueError("generator: --train graph with %s, which has no gradient rule" % bad[0])
        if not outs:
            raise ValueError("generator: --train graph without a float output")
    if inner and rng.random() < 0.2:
        outs.append(inner[int(rng.integers(len(inner)))])
    if len(outs) > 1 and rng.random() < 0.05 and not USE_TRAIN[0]:   # a dead node: computed by nobody's need
        outs.pop(int(rng.integers(len(outs))))
    used = set(i for n in g.nodes for i in n.input)
    live = [k for k in g.feeds if k in used]
    if live and rng.random() < 0.05 and not USE_TRAIN[0]:             # a graph input that is also an output
        outs.append(live[int(rng.integers(len(live)))])
    feeds = {k: v for k, v in g.feeds.items() if k in used}
    inits = [numpy_helper.from_array(v, k) for k, v in g.inits.items() if k in used]
    graph = helper.make_graph(
        g.nodes, "fuzz_%d_%d" % (seed, index),
        [helper.make_tensor_value_info(k, g.dtype[k], list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, g.dtype[o], list(g.shape[o])) for o in outs], inits)
    m = helper.make_model(graph, producer_name="onnx2spmd-fuzz-plans",
                          opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    check_shapes(m, g.shape)
    # Mesh and annotations.
    mw = np.array([mw for mw, _ in MESHES], dtype=float)
    mesh = MESHES[rng.choice(len(MESHES), p=mw / mw.sum())][1]
    cands = list(feeds) + [k for k in g.inits if k in used and "param" not in g.tags[k]] + \
        [n for n in g.produced if "param" not in g.tags[n]]
    shards = []
    nann = 0 if rng.random() < 0.1 else int(rng.integers(1, 5))
    # Weights three times and inputs twice as likely as intermediates, as a user would annotate.
    cw = np.array([3.0 if c in g.inits else 2.0 if c in feeds else 1.0 for c in cands])
    pickd = rng.choice(len(cands), size=min(nann, len(cands)), replace=False, p=cw / cw.sum())
    for t in [cands[i] for i in pickd]:
        if not g.shape[t]:
            continue
        shards.append((t, random_spec(rng, g.shape[t], mesh)))
    links = {}
    if rng.random() < 0.3:
        links = {a: str(rng.choice(LINKS)) for a, _ in mesh}
    fsdp = prefetch = fuse = None
    # (--train: rarely, since the update of a weight --shard-weights gathers
    # is refused until ZeRO-3 training lands; the refusal stays in sight)
    if rng.random() < (0.04 if USE_TRAIN[0] else 0.15):
        fsdp = mesh[int(rng.integers(len(mesh)))][0]
        if rng.random() < 0.5:
            prefetch = int(rng.integers(0, 4))
    if rng.random() < 0.2:
        fuse = str(rng.choice(["0", "64", "1K", "1M"]))
    dims = {}
    if rng.random() < 0.15:                            # a symbolic batch dim, bound with --dim
        b = feeds[next(iter(feeds))].shape
        if b:
            dims["batch"] = int(b[0])
            for v in m.graph.input:
                d = v.type.tensor_type.shape.dim
                if len(d) and d[0].dim_value == b[0]:
                    d[0].dim_param = "batch"
    auto = None
    if USE_AUTO[0]:
        # --auto keeps the annotations as hard constraints and picks the rest:
        # the CPU preset (slow compute, so splits pay) or H100 (fast), and a
        # memory limit from generous to below the replicated weights.
        auto = ["--auto", "--device", str(rng.choice(["cpu", "H100"]))]
        wbytes = sum(v.nbytes for k, v in g.inits.items() if k in used)
        if rng.random() < 0.6 and wbytes:
            auto += ["--mem-limit", str(int(wbytes * rng.uniform(0.7, 3.0)) + 16384)]
        if rng.random() < 0.5:
            shards = shards[:1]  # few or no annotations: the search decides
    pipe = None
    if USE_PIPELINE[0] and int(np.prod([sz for _, sz in mesh])) <= 2:
        # Pipeline stages in front of the mesh (the annotations keep to its
        # other axes), with microbatches that divide the batch.
        mesh = [("pp", int(rng.choice([1, 2, 2, 3])))] + list(mesh)
        b = feeds[next(iter(feeds))].shape
        divs = [d for d in (1, 2, 4) if USE_TRAIN[0] or (b and b[0] % d == 0)]  # (training: whole batches)
        pipe = int(rng.choice(divs)) if divs else 1
    shard_file = rng.random() < 0.25
    isa = str(rng.choice(list(ISAS)))
    frozen = []
    if USE_TRAIN[0]:
        ws = [k for k, v in g.inits.items() if k in used and v.dtype == np.float32]
        if len(ws) >= 2 and rng.random() < 0.15:       # a frozen weight: no update, no gradient code
            frozen = [ws[int(rng.integers(len(ws)))]]
    train_flags = []
    if USE_TRAIN[0]:
        if rng.random() < 0.25 and not pipe:  # (a pipeline's microbatches are its accumulation)
            train_flags += ["--accum", "2"]
        if pipe:
            stages = dict(mesh).get("pp", 1)
            scheds = ["1f1b", "gpipe"] + (["interleaved"] if stages > 1 and pipe % stages == 0 else [])
            train_flags += ["--schedule", str(rng.choice(scheds))]
        axes = [a for a, _ in mesh if a != "pp"]
        if rng.random() < 0.2 and not fsdp and axes:
            train_flags += ["--zero", str(rng.choice(["1", "2"])), "--zero-axis", axes[int(rng.integers(len(axes)))]]
        if rng.random() < 0.2:
            train_flags += ["--bucket-mb", str(rng.choice(["0", "0.001"]))]
    return Case(seed, index, m, feeds, mesh, shards, links, fsdp, prefetch, fuse, shard_file, dims, auto, pipe,
                isa, USE_TRAIN[0], frozen, train_flags)


# ---- running a case ------------------------------------------------------------

def run_ort(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4             # errors come back as exceptions; no console noise
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])  # a path or model bytes
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


# ---- --train: the loss appended, gradients against finite differences -----------

TRAIN_FLAGS = ["--train", "--optimizer", "sgd", "--lr", "1"]   # one step: weight - after = gradient
LOSS = "loss"
# The printed loss against ORT's float32 inference of the same model.
LOSS_ATOL, LOSS_RTOL = 1e-5, 1e-4
# A gradient projection against its central difference, relative to the
# projection's own scale (see grad_check); float64 differences are exact to
# ~1e-9 here, so what remains is our float32 gradient's rounding.
GRAD_TOL_F64, GRAD_TOL_F32 = 1e-2, 3e-2
GRAD_EPS_F64, GRAD_EPS_F32 = 1e-5, 1e-2
GRAD_DIRECTIONS = 3


def grad_reach(m, roots):
    """The tensors of model m a gradient of roots reaches, as autodiff
    follows it: back through float tensors only."""
    inf = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output)}
    types.update((t.name, t.data_type) for t in m.graph.initializer)
    live = set(roots)
    for n in reversed(m.graph.node):
        if any(o in live and types.get(o, F32) == F32 for o in n.output):
            live.update(i for i in n.input if i and types.get(i, F32) == F32)
    return live


def train_model(case):
    """case.model (the body) with a scalar loss named LOSS appended that
    reads every float output: per output o, ReduceMean(o * o) or
    ReduceSum(o * R) for a fixed random R (a Constant node, so not a
    weight), now and then with keepdims=1 (a [1, 1] loss), the terms
    added. R and the choices come from the seed, the case and the output's
    name, so that a minimized case keeps the terms of the outputs it keeps.
    A body with no float weight gets a trainable gain on its first output."""
    body = case.model
    vals = run_ort(body.SerializeToString(), case.feeds)      # the outputs' shapes, symbolic dims bound
    nodes = list(body.graph.node)
    inits = list(body.graph.initializer)
    reach = grad_reach(body, [o.name for o in body.graph.output])
    has_weight = any(t.data_type == F32 and t.name in reach for t in inits)   # (not one that only feeds a comparison)
    terms, rank = [], -1
    for k, o in enumerate(body.graph.output):
        val = vals[o.name]
        if val.dtype != np.float32:
            continue
        r = np.random.default_rng([case.seed, case.index, zlib.crc32(o.name.encode())])
        x = o.name
        if not has_weight and not terms:
            gshape = tuple(1 if r.random() < 0.5 else d for d in val.shape)
            inits.append(numpy_helper.from_array((1 + 0.5 * r.standard_normal(gshape)).astype(np.float32),
                                                 "loss_gain"))
            nodes.append(helper.make_node("Mul", [x, "loss_gain"], ["loss_gained"], name="loss_gain"))
            x = "loss_gained"
        keep = int(r.random() < 0.2)
        p = "loss_p%d" % k
        if r.random() < 0.5:
            nodes.append(helper.make_node("Mul", [x, x], [p], name="loss_square%d" % k))
            red = "ReduceMean"
        else:
            rt = (r.standard_normal(val.shape) / np.sqrt(max(val.size, 1))).astype(np.float32)
            nodes.append(helper.make_node("Constant", [], ["loss_r%d" % k], name="loss_r%d" % k,
                                          value=numpy_helper.from_array(rt, "v")))
            nodes.append(helper.make_node("Mul", [x, "loss_r%d" % k], [p], name="loss_dot%d" % k))
            red = "ReduceSum"
        terms.append("loss_t%d" % k)
        nodes.append(helper.make_node(red, [p], [terms[-1]], name="loss_reduce%d" % k, keepdims=keep))
        rank = max(rank, val.ndim if keep else 0)
    if not terms:
        raise ValueError("generator: --train body without a float output")
    acc = terms[0]
    for k, t in enumerate(terms[1:]):
        nodes.append(helper.make_node("Add", [acc, t], ["loss_sum%d" % k], name="loss_add%d" % k))
        acc = "loss_sum%d" % k
    nodes[-1].output[0] = LOSS
    g = helper.make_graph(nodes, body.graph.name, list(body.graph.input),
                          [helper.make_tensor_value_info(LOSS, F32, [1] * rank)], inits)
    m = helper.make_model(g, producer_name=body.producer_name, opset_imports=list(body.opset_import))
    m.ir_version = body.ir_version
    return m


def erf_f64_nodes(x, y, tag):
    """Nodes computing y = erf(x) in float64 from ops ORT has float64
    kernels for (its Erf, and so Gelu, is float32 only): for |x| <= 4 the
    Taylor series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)) to n = 80
    in Horner form (rounding ~1e-11 at |x| = 4, ~1e-15 below 2), beyond it
    1 - erfc with erfc's asymptotic series (erfc(4) = 1.5e-8; its error
    there ~1e-13)."""
    nodes = []
    k = [0]

    def c(v):
        k[0] += 1
        name = "%s_c%d" % (tag, k[0])
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.float64), "v")))
        return name

    def op(o, *ins):
        k[0] += 1
        name = "%s_%d" % (tag, k[0])
        nodes.append(helper.make_node(o, list(ins), [name]))
        return name
    x2 = op("Mul", x, x)
    acc = c(float((-1) ** 80 / (math.factorial(80) * 161)))
    for n in range(79, -1, -1):
        acc = op("Add", op("Mul", acc, x2), c(float((-1) ** n / (math.factorial(n) * (2 * n + 1)))))
    taylor = op("Mul", op("Mul", acc, x), c(2 / math.sqrt(math.pi)))
    ax = op("Max", op("Abs", x), c(4.0))
    inv2 = op("Reciprocal", op("Mul", op("Mul", ax, ax), c(2.0)))          # 1 / (2 z^2)
    ser, term = c(1.0), c(1.0)
    for j in range(1, 8):                                                # (-1)^j (2j-1)!! / (2z^2)^j
        term = op("Mul", op("Mul", term, inv2), c(-(2.0 * j - 1)))
        ser = op("Add", ser, term)
    erfc = op("Div", op("Mul", op("Exp", op("Neg", op("Mul", ax, ax))), ser), op("Mul", ax, c(math.sqrt(math.pi))))
    tail = op("Mul", op("Sign", x), op("Sub", c(1.0), erfc))
    small = op("LessOrEqual", op("Abs", x), c(4.0))
    nodes.append(helper.make_node("Where", [small, taylor, tail], [y]))
    return nodes


def to_double(m):
    """The model in float64 where it was float32 (initializers, inputs and
    outputs, Constant values, Cast targets), in place; Erf and Gelu become
    float64 formulas (erf_f64_nodes)."""
    D = TensorProto.DOUBLE
    nodes = []
    for i, n in enumerate(m.graph.node):
        tag = "f64_%d" % i
        if n.op_type == "Erf":
            nodes += erf_f64_nodes(n.input[0], n.output[0], tag)
        elif n.op_type == "Gelu":
            x, y = n.input[0], n.output[0]
            half = helper.make_node("Constant", [], [tag + "_h"], value=numpy_helper.from_array(np.array(0.5), "v"))
            one = helper.make_node("Constant", [], [tag + "_1"], value=numpy_helper.from_array(np.array(1.0), "v"))
            nodes += [half, one]
            if helper.get_attribute_value(n.attribute[0]).decode() == "tanh" if n.attribute else False:
                c = helper.make_node("Constant", [], [tag + "_c"], value=numpy_helper.from_array(
                    np.array(math.sqrt(2 / math.pi)), "v"))
                k = helper.make_node("Constant", [], [tag + "_k"], value=numpy_helper.from_array(np.array(0.044715), "v"))
                nodes += [c, k, helper.make_node("Mul", [x, x], [tag + "_x2"]),
                          helper.make_node("Mul", [tag + "_x2", x], [tag + "_x3"]),
                          helper.make_node("Mul", [tag + "_x3", tag + "_k"], [tag + "_kx3"]),
                          helper.make_node("Add", [x, tag + "_kx3"], [tag + "_in"]),
                          helper.make_node("Mul", [tag + "_in", tag + "_c"], [tag + "_in2"]),
                          helper.make_node("Tanh", [tag + "_in2"], [tag + "_e"])]
            else:
                r2 = helper.make_node("Constant", [], [tag + "_r"], value=numpy_helper.from_array(
                    np.array(math.sqrt(0.5)), "v"))
                nodes += [r2, helper.make_node("Mul", [x, tag + "_r"], [tag + "_xs"])]
                nodes += erf_f64_nodes(tag + "_xs", tag + "_e", tag + "_erf")
            nodes += [helper.make_node("Add", [tag + "_e", tag + "_1"], [tag + "_p"]),
                      helper.make_node("Mul", [tag + "_p", x], [tag + "_q"]),
                      helper.make_node("Mul", [tag + "_q", tag + "_h"], [y])]
        else:
            nodes.append(n)
    m.graph.ClearField("node")
    m.graph.node.extend(nodes)
    for t in m.graph.initializer:
        if t.data_type == F32:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == F32:
            v.type.tensor_type.elem_type = D
    m.graph.ClearField("value_info")
    for n in m.graph.node:
        for a in list(n.attribute):
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F32:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
            elif n.op_type == "Cast" and a.name == "to" and a.i == F32:
                a.i = D
            elif n.op_type == "Constant" and a.name == "value_float":
                n.attribute.remove(a)
                n.attribute.extend([helper.make_attribute("value", numpy_helper.from_array(
                    np.array(a.f, np.float64), "v"))])
    return m


class LossFn:
    """The loss as ORT computes it, with the weights as graph inputs:
    float64 where ORT runs every op of the model in float64, else float32."""

    def __init__(self, case, f64=True):
        m = onnx.ModelProto()
        m.CopyFrom(case.compiled_model())
        self.w0 = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer if t.data_type == F32}
        keep = [t for t in m.graph.initializer if t.name not in self.w0]
        m.graph.ClearField("initializer")
        m.graph.initializer.extend(keep)
        m.graph.input.extend([helper.make_tensor_value_info(k, F32, list(v.shape)) for k, v in self.w0.items()])
        self.f64 = False
        self.feeds = case.feeds
        if f64:
            try:
                self.sess = self._session(to_double(m))
                self.f64, self.dt = True, np.float64
                if not np.isfinite(self(self.w0)):
                    raise ValueError("not finite")
            except Exception:           # ORT lacks a float64 kernel of some op: float32 then
                self.f64 = False
        if not self.f64:
            m.CopyFrom(case.compiled_model())
            m.graph.ClearField("initializer")
            m.graph.initializer.extend(keep)
            m.graph.input.extend([helper.make_tensor_value_info(k, F32, list(v.shape)) for k, v in self.w0.items()])
            self.sess = self._session(m)
        self.dt = np.float64 if self.f64 else np.float32
        self.feeds = {k: v.astype(self.dt) if v.dtype == np.float32 else v for k, v in case.feeds.items()}

    @staticmethod
    def _session(m):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 4
        return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def __call__(self, weights, feeds=None):
        f = {k: v.astype(self.dt) if v.dtype.kind == "f" else v
             for k, v in (self.feeds if feeds is None else feeds).items()}
        f.update({k: np.asarray(v, dtype=self.dt) for k, v in weights.items()})
        return float(np.sum(self.sess.run([LOSS], f)[0], dtype=np.float64))


def grad_check(case, w0, after):
    """None when every trained weight's gradient (w0 - after: one SGD step
    at lr 1) agrees with central differences of ORT's loss, else
    (kind, detail). Per weight and for GRAD_DIRECTIONS random unit
    directions v, ours = g.v against fd = (L(w + e v) - L(w - e v)) / 2e,
    as |ours - fd| / max(|g| / sqrt(n), |fd|, |ours|, floor): |g| / sqrt(n)
    is the size of g.v for a random v, and the size of the float32
    rounding's share in it, so the test is as strict for a large weight as
    for a small one; a gradient wrong in a block of rows is off by O(1).
    A direction that fails is retried with e / 10 (a kink of Relu or Abs
    crossed). A mismatch that stays within SENS_FACTOR times how far fd
    moves when every weight and input is perturbed by 1e-6 is forgiven,
    as ill-conditioned, and so is one within the weight's float32 spacing
    (g is read from float32 weights) plus 16 float32 roundings of the
    loss's scale (g is computed in float32: a gradient that cancels to 0,
    as a bias before a LayerNorm, comes out as rounding noise). Frozen
    weights keep their values in the differences."""
    lf = LossFn(case)
    case.fd_dtype = "float64" if lf.f64 else "float32"
    eps = GRAD_EPS_F64 if lf.f64 else GRAD_EPS_F32
    tol = GRAD_TOL_F64 if lf.f64 else GRAD_TOL_F32
    base = {k: v.astype(np.float64) for k, v in lf.w0.items()}
    l0 = lf(base)
    floor = (1e-7 if lf.f64 else 1e-6 / eps) * max(1.0, abs(l0))
    rng = np.random.default_rng([case.seed, case.index, 99])

    def fd(k, v, e, weights=base, feeds=None):
        lp = lf(dict(weights, **{k: weights[k] + e * v}), feeds)
        lm = lf(dict(weights, **{k: weights[k] - e * v}), feeds)
        return (lp - lm) / (2 * e)

    ill = False
    for k in sorted(w0):
        g = base[k] - after[k].astype(np.float64)
        n = max(g.size, 1)
        for _ in range(GRAD_DIRECTIONS):
            v = rng.standard_normal(g.shape)
            v /= max(np.linalg.norm(v), 1e-30)
            ours = float(np.sum(g * v))
            f = fd(k, v, eps)

            def err(f):
                return abs(ours - f) / max(np.linalg.norm(g) / np.sqrt(n), abs(f), abs(ours), floor)
            e = err(f)
            if e > tol:
                f2 = fd(k, v, eps / 10)
                if err(f2) < e:
                    f, e = f2, err(f2)
            # g = w0 - after is read from float32 weights: known only to their
            # spacing (a gradient far below a weight's ulp comes out 0 or 1
            # ulp), the spacing of the larger of the two: an update that
            # crosses a power of two (w0 = 1.0, after just below) rounds to
            # the coarser side's ulp
            big = np.maximum(np.abs(after[k].astype(np.float32)), np.abs(w0[k].astype(np.float32)))
            quant = float(np.linalg.norm(np.spacing(big).astype(np.float64)))
            # and computed in float32: a gradient whose terms cancel (a bias
            # before a LayerNorm: exactly 0) comes out as float32 roundings
            # of the loss's scale, not 0, amplified by the LayerNorm's 1/sigma
            # (seen: 14 ulps of a scalar bias on 64 rows of a low-variance
            # Gemm); 16 of them are forgiven
            quant += 16 * float(np.finfo(np.float32).eps) * max(1.0, abs(l0))
            if e > tol and abs(ours - f) <= tol * max(np.linalg.norm(g) / np.sqrt(n), abs(f), abs(ours), floor) + quant:
                continue
            if e > tol:
                # ill-conditioned? how far fd moves under a ~1e-6 change of everything
                srng = np.random.default_rng(12345)
                slack = 0.0
                for _ in range(3):
                    pw = {kk: vv * (1 + 1e-6 * srng.standard_normal(vv.shape)) for kk, vv in base.items()}
                    pf = {kk: vv * (1 + 1e-6 * srng.standard_normal(vv.shape)) if vv.dtype.kind == "f" else vv
                          for kk, vv in lf.feeds.items()}
                    slack = max(slack, abs(fd(k, v, eps, pw, pf) - f))
                den = max(np.linalg.norm(g) / np.sqrt(n), abs(f), abs(ours), floor)
                if abs(ours - f) <= tol * den + SENS_FACTOR * slack:
                    ill = True
                    continue
                return "gradient", "%s %s: gradient . v = %.7g, ORT's %s central difference %.7g " \
                    "(error %.2g of the projection's scale; |g| = %.4g over %d elements, loss %.7g; " \
                    "%s)" % (k, list(g.shape), ours, "float64" if lf.f64 else "float32", f, e,
                             np.linalg.norm(g), g.size, l0, "weights " + ", ".join(sorted(w0)))
    return ("ill-conditioned", "") if ill else None


def train_result(case, out, golden, stdout, stdout2):
    """(status, kind, detail) of a --train case that ran: its printed loss
    against ORT's, its gradients (grad_check), then the loss its second
    step printed (stdout2, a run of --steps 2) against ORT's float32 loss at
    the weights after one step."""
    m = re.findall(r"^step 1 loss (\S+)$", stdout, re.M)
    if len(m) != 1:
        return "FAIL", "run", "printed %d losses for --steps 1: %s" % (len(m), stdout[-300:])
    loss, ref = float(m[0]), float(np.sum(golden[LOSS], dtype=np.float64))
    ill = False
    if not abs(loss - ref) <= LOSS_ATOL + LOSS_RTOL * abs(ref):
        sens = float(np.max(sensitivity(case, golden)[LOSS]))
        if not abs(loss - ref) <= LOSS_ATOL + LOSS_RTOL * abs(ref) + SENS_FACTOR * sens:
            return "FAIL", "loss", "step 1 loss %.9g, ORT's %.9g (ORT's own sensitivity %.3g)" % (loss, ref, sens)
        ill = True
    w0 = case.weights()
    after = {}
    for k in w0:
        try:
            after[k] = np.load(os.path.join(out, "w_%s.npy" % k))
        except (OSError, ValueError) as e:
            return "FAIL", "run", "%s: cannot read the trained weight: %s" % (k, e)
        if after[k].shape != w0[k].shape or not np.all(np.isfinite(after[k])):
            return "FAIL", "gradient", "%s: trained weight %s, not finite or not of shape %s" % (
                k, after[k].shape, w0[k].shape)
    bad = grad_check(case, w0, after)
    if bad and bad[0] != "ill-conditioned":
        return "FAIL", bad[0], bad[1]
    m2 = re.findall(r"^step 2 loss (\S+)$", stdout2, re.M)
    if len(m2) != 1:
        return "FAIL", "run", "--steps 2 printed no step 2 loss: %s" % stdout2[-300:]
    lf = LossFn(case, f64=False)
    w1 = dict(lf.w0, **after)
    l1, l2 = lf(w1), float(m2[0])
    if np.isfinite(l1) and abs(l1) < 1e30 and not abs(l2 - l1) <= LOSS_ATOL + LOSS_RTOL * abs(l1):
        srng = np.random.default_rng(12345)
        sens = 0.0
        for _ in range(3):
            pw = {k: v * (1 + 1e-6 * srng.standard_normal(v.shape)) for k, v in w1.items()}
            pf = {k: v * (1 + 1e-6 * srng.standard_normal(v.shape)) if v.dtype.kind == "f" else v
                  for k, v in lf.feeds.items()}
            sens = max(sens, abs(lf(pw, pf) - l1))
        if not abs(l2 - l1) <= LOSS_ATOL + LOSS_RTOL * abs(l1) + SENS_FACTOR * sens:
            return "FAIL", "step2", "step 2 loss %.9g, ORT's %.9g at the weights after step 1 (ORT's own " \
                "sensitivity %.3g)" % (l2, l1, sens)
        ill = True
    return "PASS", "ill-conditioned" if ill or bad else "", ""


def sensitivity(case, golden, tries=3, rel=1e-6):
    """How far ORT's own outputs move when every float input and weight is
    perturbed by ~rel (a few float32 ulps): per output, the elementwise max
    over a few perturbations. Where a graph amplifies rounding this much
    (LayerNorm of nearly equal values, a cancelling sum), a different but
    equally valid summation order differs from ORT by about as much."""
    rng = np.random.default_rng(12345)
    sens = {k: np.zeros(v.shape, np.float64) for k, v in golden.items() if v.dtype.kind == "f"}
    for _ in range(tries):
        m = onnx.ModelProto()
        m.CopyFrom(case.compiled_model())
        for t in m.graph.initializer:
            if t.data_type == F32:
                a = numpy_helper.to_array(t)
                t.CopyFrom(numpy_helper.from_array(
                    (a * (1 + rel * rng.standard_normal(a.shape))).astype(np.float32), t.name))
        feeds = {k: (v * (1 + rel * rng.standard_normal(v.shape))).astype(np.float32)
                 if v.dtype == np.float32 else v for k, v in case.feeds.items()}
        out = run_ort(m.SerializeToString(), feeds)
        for k in sens:
            sens[k] = np.maximum(sens[k], np.abs(out[k].astype(np.float64) - golden[k].astype(np.float64)))
    return sens


def compare(golden, out, atol, rtol, slack=None):
    """None when out matches golden (within atol + rtol |golden| + slack),
    else a one-line description."""
    if golden.shape != out.shape or golden.dtype != out.dtype:
        return "shape/dtype %s %s vs golden %s %s" % (out.shape, out.dtype, golden.shape, golden.dtype)
    if golden.dtype.kind in "biu":
        bad = np.argwhere(golden != out)
        if len(bad):
            i = tuple(int(v) for v in bad[0])
            return "%d of %d differ, first at %s: got %s, golden %s" % (len(bad), golden.size, i, out[i],
                                                                        golden[i])
        return None
    g64, o64 = golden.astype(np.float64), out.astype(np.float64)
    if not np.all(np.isfinite(o64)) and not np.array_equal(np.isfinite(o64), np.isfinite(g64)):
        return "non-finite values where the golden is finite"
    err = np.abs(o64 - g64)
    excess = err - (atol + rtol * np.abs(g64) + (0 if slack is None else slack))
    if excess.size and np.max(excess) > 0:
        w = np.unravel_index(np.argmax(excess), excess.shape)
        return "at %s: got %.9g, golden %.9g%s; max abs err %.3g, %d of %d elements off" % (
            tuple(int(v) for v in w), o64[w], g64[w],
            "" if slack is None else " (ORT's own sensitivity there %.3g)" % slack[w],
            float(err.max()), int(np.sum(excess > 0)), err.size)
    return None


def refusal_reason(msg):
    """The compile error without the case's names and numbers, for a histogram."""
    line = msg.strip().splitlines()[-1] if msg.strip() else "(no message)"
    line = re.sub(r"^onnx2spmd: error: ", "", line)
    line = re.sub(r"^\S+\.onnx: ", "", line)
    line = re.sub(r'"[^"]*"', '"X"', line)
    line = re.sub(r"--shard [^:]*:", "--shard X=SPEC:", line)
    line = re.sub(r"\[[^\]]*\]", "[..]", line)
    line = re.sub(r"\b\d+\b", "N", line)
    line = re.sub(r"by [a-z+]+", "by AXES", line)
    return line


def write_case(case, d, golden=None):
    """The model, inputs and goldens into folder d; returns the golden outputs."""
    os.makedirs(d, exist_ok=True)
    model_path = os.path.join(d, "model.onnx")
    with open(model_path, "wb") as fh:
        fh.write(case.compiled_model().SerializeToString())
    if case.train:                   # the graph before its loss: what --replay and minimizing start from
        with open(os.path.join(d, "body.onnx"), "wb") as fh:
            fh.write(case.model.SerializeToString())
    for k, v in case.feeds.items():
        np.save(os.path.join(d, "input_%s.npy" % k), v)
    with open(os.path.join(d, "shardings.txt"), "w") as fh:
        fh.write("# fuzz_plans case %s\n" % case.tag + "".join("%s=%s\n" % a for a in case.shards))
    if golden is None:
        golden = run_ort(model_path, case.feeds)
    for k, v in golden.items():
        np.save(os.path.join(d, "output_%s.npy" % k), v)
    return golden


def compile_cmd(case, folder, out):
    """The compile command for the case written into folder (write_case)."""
    cmd = [BIN, "compile", folder + "/model.onnx", "--mesh", case.mesh_str()]
    if case.shard_file and case.shards:
        cmd += ["--shardings", folder + "/shardings.txt"]
    else:
        for t, s in case.shards:
            cmd += ["--shard", "%s=%s" % (t, s)]
    return cmd + case.flags() + ["-o", out]


def run_case(case, work, golden=None):
    """Returns (status, kind, detail, golden): status PASS / REFUSED / FAIL,
    kind: a failure class (compile, build, run, timeout, mismatch) or the
    refusal reason."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    golden = write_case(case, work, golden)
    out = os.path.join(work, "out")
    try:
        p = subprocess.run(compile_cmd(case, work, out),
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "FAIL", "compile-hang", "compile ran over 120 s", golden
    err = p.stderr.strip()
    if p.returncode == 2 and "internal error" not in err and err:
        return "REFUSED", refusal_reason(err), err, golden
    if p.returncode != 0:
        return "FAIL", "compile", "exit %d: %s" % (p.returncode, err[-600:]), golden
    b = subprocess.run(["make", "-s", "-C", out, "CFLAGS=" + isa_cflags(case.isa), "WARN=-Wall -Wextra -Werror"],
                       capture_output=True, text=True)
    if b.returncode != 0:
        return "FAIL", "build", (b.stdout + b.stderr)[-1500:], golden
    args = []
    for k in case.feeds:
        args += ["--in", "%s=%s" % (k, os.path.join(work, "input_%s.npy" % k))]
    if case.train:
        args += ["--steps", "1"]
        for k in case.weights():
            args += ["--out", "%s=%s" % (k, os.path.join(out, "w_%s.npy" % k))]
    else:
        for k in golden:
            args += ["--out", "%s=%s" % (k, os.path.join(out, "got_%s.npy" % k))]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        r = mpi_isolated.run([os.path.join(out, "run.sh")] + args + ["--timeout", "60"], env=env,
                           capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "FAIL", "timeout", "run.sh ran over 150 s", golden
    if r.returncode != 0:
        log = (r.stdout + r.stderr).strip().splitlines()
        lines = [ln for ln in log if "error" in ln.lower()] or log
        return "FAIL", "run", "exit %d: %s" % (r.returncode, " | ".join(lines[:4])[:600]), golden
    if case.train:
        # Two steps: the second step's loss is the loss at the weights the
        # first one wrote (an update in the wrong place, or padding of a
        # split weight left dirty by it, shows there).
        try:
            r2 = mpi_isolated.run([os.path.join(out, "run.sh")] + args[:args.index("--steps")] +
                                  ["--steps", "2", "--timeout", "60"], env=env, capture_output=True, text=True,
                                  timeout=150, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "FAIL", "timeout", "run.sh --steps 2 ran over 150 s", golden
        stdout2 = r2.stdout
        # A step-2 loss that is not finite stops the program (its one line
        # says the value): judged like a printed one, against ORT's loss at
        # the weights after step 1 (where that is not finite either, fine).
        stopped = re.search(r"step 2: the loss is (\S+), not finite", r2.stderr)
        if r2.returncode != 0 and stopped:
            stdout2 += "\nstep 2 loss %s\n" % stopped.group(1)
        elif r2.returncode != 0:
            log = (r2.stdout + r2.stderr).strip().splitlines()
            return "FAIL", "run", "--steps 2: exit %d: %s" % (r2.returncode, " | ".join(log[:4])[:600]), golden
        return train_result(case, out, golden, r.stdout, stdout2) + (golden,)
    atol, rtol = case.tolerance()
    got, bad = {}, []
    for k, v in golden.items():
        try:
            got[k] = np.load(os.path.join(out, "got_%s.npy" % k))
        except (OSError, ValueError) as e:
            return "FAIL", "mismatch", "%s: cannot read the output: %s" % (k, e), golden
        if compare(v, got[k], atol, rtol):
            bad.append(k)
    if not bad:
        return "PASS", "", "", golden
    # A mismatch: is it above what rounding alone moves ORT's own result by?
    # A plan bug (wrong rows, a lost or doubled reduction) is off by O(1).
    sens = sensitivity(case, golden)
    res = ["%s: %s" % (k, compare(golden[k], got[k], atol, rtol, SENS_FACTOR * sens[k] if k in sens else None))
           for k in bad]
    res = [r for r in res if not r.endswith(": None")]
    if res:
        return "FAIL", "mismatch", "; ".join(res), golden
    return "PASS", "ill-conditioned", "", golden


def describe(case):
    """The graph as text: one line per node with its shapes."""
    m = onnx.shape_inference.infer_shapes(case.model)
    shapes = {}
    for v in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                          for d in v.type.tensor_type.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    lines = ["mesh %s; annotations: %s%s" % (case.mesh_str(),
                                             " ".join("%s=%s" % a for a in case.shards) or "(none)",
                                             "; flags: " + " ".join(case.flags()) if case.flags() else "")]
    lines.append("kernels built for: %s (CFLAGS %s)" % (built_isa(case.isa), isa_cflags(case.isa)))
    lines.append("inputs: " + ", ".join("%s%s %s" % (k, list(v.shape), v.dtype) for k, v in case.feeds.items()))
    for n in m.graph.node:
        attrs = []
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            if isinstance(v, TensorProto):
                v = numpy_helper.to_array(v).tolist()
            attrs.append("%s=%s" % (a.name, v))
        ins = []
        for i in n.input:
            if i in inits and inits[i].dtype == np.int64 and inits[i].size <= 8:
                ins.append("%s=%s" % (i, inits[i].tolist()))
            else:
                ins.append("%s%s" % (i, shapes.get(i, "?")))
        lines.append("  %s = %s(%s)%s" % (", ".join("%s%s" % (o, shapes.get(o, "?")) for o in n.output),
                                          n.op_type, ", ".join(ins), " " + " ".join(attrs) if attrs else ""))
    lines.append("outputs: " + ", ".join(o.name for o in m.graph.output))
    if case.train:
        lines.append("loss: every output's ReduceMean(o * o) or ReduceSum(o * R), added (model.onnx has it; "
                     "train_model)")
    return "\n".join(lines)


def save_failure(case, golden, kind, detail, folder):
    shutil.rmtree(folder, ignore_errors=True)
    write_case(case, folder, golden)
    atol, rtol = case.tolerance()
    rel = os.path.relpath(ROOT, folder)
    work = "build/fuzz_plans/repro/" + case.tag
    if os.path.basename(os.path.normpath(folder)) == "min":
        work += "_min"
    q = lambda s: "'" + s.replace("'", "'\\''") + "'"
    cmd = compile_cmd(case, '"$HERE"', work)
    cmd[0] = "build/onnx2spmd"
    lines = ["#!/bin/sh", "# fuzz_plans case %s: %s" % (case.tag, kind),
             "# Rebuilds and reruns this failure from the repository root; exits 1 on a mismatch.",
             "set -e", 'HERE=$(cd "$(dirname "$0")" && pwd)', 'cd "$HERE/%s"' % rel,
             "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
             "rm -rf %s" % work,
             " ".join(c if c.startswith('"$HERE') else q(c) for c in cmd),
             'make -s -C %s CFLAGS="%s" WARN="-Wall -Wextra -Werror"' % (work, isa_cflags(case.isa))]
    if case.train:
        # one SGD step at lr 1 (w - w_after is the gradient), then the whole
        # check again (loss against ORT, gradients against finite differences)
        lines += ["%s/run.sh %s --steps 1 --timeout 60" % (work, " ".join(
                      ['--in %s="$HERE/input_%s.npy"' % (k, k) for k in case.feeds] +
                      ["--out %s=%s/w_%s.npy" % (k, work, k) for k in case.weights()])),
                  'exec build/venv/bin/python tests/e2e/fuzz_plans.py --replay "$HERE"']
    else:
        lines += ["%s/run.sh %s --timeout 60" % (work, " ".join(
                      ['--in %s="$HERE/input_%s.npy"' % (k, k) for k in case.feeds] +
                      ["--out %s=%s/got_%s.npy" % (k, work, k) for k in golden])),
                  "rc=0"]
        for k in golden:
            lines.append('build/venv/bin/python tests/e2e/compare.py "$HERE/output_%s.npy" %s/got_%s.npy %g %g '
                         '|| rc=1' % (k, work, k, atol, rtol))
        lines.append("exit $rc")
    path = os.path.join(folder, "repro.sh")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.chmod(path, 0o755)
    with open(os.path.join(folder, "case.json"), "w") as fh:
        json.dump({"seed": case.seed, "index": case.index, "mesh": case.mesh, "shards": case.shards,
                   "links": case.links, "fsdp": case.fsdp, "prefetch": case.prefetch, "fuse": case.fuse,
                   "shard_file": case.shard_file, "dims": case.dims, "auto": case.auto, "pipe": case.pipe,
                   "isa": case.isa, "train": case.train, "frozen": case.frozen, "train_flags": case.train_flags, "kind": kind}, fh)
    with open(os.path.join(folder, "case.txt"), "w") as fh:
        fh.write("case %s: %s\n%s\n\n%s\n" % (case.tag, kind, detail, describe(case)))


# ---- minimizing a failure ------------------------------------------------------

def prune(case, keep_out):
    """The case cut down to the nodes that output keep_out depends on."""
    m = onnx.shape_inference.infer_shapes(case.model)
    vi = {v.name: v for v in list(m.graph.value_info) + list(m.graph.output)}
    if keep_out not in vi:
        return None
    producer = {o: n for n in m.graph.node for o in n.output}
    need, stack = set(), [keep_out]
    while stack:
        t = stack.pop()
        if t in need:
            continue
        need.add(t)
        if t in producer:
            stack.extend(i for i in producer[t].input if i)
    nodes = [n for n in m.graph.node if any(o in need for o in n.output)]
    used = set(i for n in nodes for i in n.input)
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi[keep_out])
    g = helper.make_graph(nodes, m.graph.name, [i for i in m.graph.input if i.name in used],
                          [out], [t for t in m.graph.initializer if t.name in used])
    mm = helper.make_model(g, producer_name=m.producer_name, opset_imports=list(m.opset_import))
    mm.ir_version = m.ir_version
    names = used | set(o for n in nodes for o in n.output)
    return case.but(model=mm, feeds={k: v for k, v in case.feeds.items() if k in used},
                    shards=[(t, s) for t, s in case.shards if t in names])


def bypass(case, k):
    """The case without node k (its output read from its same-shaped input)."""
    m = onnx.shape_inference.infer_shapes(case.model)
    shapes = {v.name: (v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim])
              for v in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output)}
    for t in m.graph.initializer:
        shapes[t.name] = (t.data_type, list(t.dims))
    n = m.graph.node[k]
    init_names = set(t.name for t in m.graph.initializer)
    src = [i for i in n.input if i and i not in init_names and shapes.get(i) == shapes.get(n.output[0])]
    if not src or len(n.output) != 1:
        return None
    o = n.output[0]
    if any(x.name == o for x in m.graph.output):
        return None
    nodes = [x for j, x in enumerate(m.graph.node) if j != k]
    for x in nodes:
        for j, i in enumerate(x.input):
            if i == o:
                x.input[j] = src[0]
    g = helper.make_graph(nodes, m.graph.name, list(m.graph.input), list(m.graph.output),
                          list(m.graph.initializer))
    mm = helper.make_model(g, producer_name=m.producer_name, opset_imports=list(m.opset_import))
    mm.ir_version = m.ir_version
    used = set(i for x in nodes for i in x.input)
    mm.graph.ClearField("input")
    mm.graph.input.extend([i for i in m.graph.input if i.name in used])
    inits = [t for t in m.graph.initializer if t.name in used]
    mm.graph.ClearField("initializer")
    mm.graph.initializer.extend(inits)
    return case.but(model=mm, feeds={kk: v for kk, v in case.feeds.items() if kk in used},
                    shards=[(t, s) for t, s in case.shards if t != o])


def drop_axis(case, axis):
    mesh = [a for a in case.mesh if a[0] != axis]
    if not mesh:
        if case.mesh == [(axis, 1)]:
            return None
        mesh = [(axis, 1)]                   # one rank, the specs kept as they are
        return case.but(mesh=mesh)
    shards = []
    for t, s in case.shards:
        dims = ["+".join(x for x in d.split("+") if x != axis) or "_" for d in s[1:-1].split(",")]
        shards.append((t, "[" + ",".join(dims) + "]"))
    return case.but(mesh=mesh, shards=shards, links={a: l for a, l in case.links.items() if a != axis},
                    fsdp=None if case.fsdp == axis else case.fsdp)


def halve_axis(case, axis):
    size = dict(case.mesh)[axis]
    if size != 4:
        return None
    mesh = [(a, 2 if a == axis else s) for a, s in case.mesh]
    return case.but(mesh=mesh)


def minimize(case, kind, work, log=print):
    """Greedy shrinking while the failure keeps its kind."""
    tries = [0]

    def still_fails(c):
        if c is None:
            return False
        tries[0] += 1
        try:
            st, k, _, _ = run_case(c, work)
        except Exception:                      # e.g. ORT rejects the cut graph
            return False
        return st == "FAIL" and k == kind

    cur = case
    changed = True
    while changed and tries[0] < 150:
        changed = False
        # 1. the smallest single-output subgraph that still fails
        producer_rank = {}
        for j, n in enumerate(cur.model.graph.node):
            for o in n.output:
                producer_rank[o] = j
        cands = []
        for o in producer_rank:
            c = prune(cur, o)
            if c is not None and len(c.model.graph.node) < len(cur.model.graph.node) or \
                    (c is not None and len(cur.model.graph.output) > 1):
                cands.append((len(c.model.graph.node), producer_rank[o], c))
        for _, _, c in sorted(cands, key=lambda x: (x[0], x[1])):
            if still_fails(c):
                cur, changed = c, True
                break
        # 2. annotations, one at a time
        for i in range(len(cur.shards)):
            c = cur.but(shards=cur.shards[:i] + cur.shards[i + 1:])
            if still_fails(c):
                cur, changed = c, True
                break
        # 3. the link classes and --shard-weights
        for c in (cur.but(links={}) if cur.links else None, cur.but(fsdp=None) if cur.fsdp else None,
                  cur.but(prefetch=None) if cur.prefetch is not None else None,
                  cur.but(fuse=None) if cur.fuse is not None else None,
                  cur.but(shard_file=False) if cur.shard_file else None,
                  cur.but(isa="generic") if cur.isa != "generic" else None):
            if still_fails(c):
                cur, changed = c, True
        # 4. the mesh
        for a, _ in cur.mesh:
            for c in (drop_axis(cur, a), halve_axis(cur, a)):
                if still_fails(c):
                    cur, changed = c, True
                    break
        # 5. nodes whose output has their input's shape
        for k in range(len(cur.model.graph.node)):
            c = bypass(cur, k)
            if still_fails(c):
                cur, changed = c, True
                break
    shutil.rmtree(work, ignore_errors=True)
    log("  minimized in %d tries to %d nodes on %s" % (tries[0], len(cur.model.graph.node), cur.mesh_str()))
    return cur


def load_case(folder):
    """A saved failure (model.onnx, input_*.npy, repro.sh) as a Case."""
    with open(os.path.join(folder, "case.json")) as fh:
        meta = json.load(fh)
    m = onnx.load(os.path.join(folder, "body.onnx" if meta.get("train") else "model.onnx"))
    feeds = {}
    for i in m.graph.input:
        feeds[i.name] = np.load(os.path.join(folder, "input_%s.npy" % i.name))
    return Case(meta["seed"], meta["index"], m, feeds, [tuple(a) for a in meta["mesh"]],
                [tuple(a) for a in meta["shards"]], meta.get("links"), meta.get("fsdp"), meta.get("prefetch"),
                meta.get("fuse"), meta.get("shard_file", False), meta.get("dims"), meta.get("auto"), meta.get("pipe"),
                meta.get("isa"), meta.get("train", False), meta.get("frozen"), meta.get("train_flags"))


# ---- driver --------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.run = self.passed = self.refused = self.failed = self.skipped = 0
        self.reasons = {}
        self.fails = {}
        self.ops = {}
        self.illcond = 0          # passed only within ORT's own rounding sensitivity
        self.distributed = 0      # passed cases whose plan splits some tensor
        self.colls = {}           # collectives by kind over the passed cases
        self.packed = {}          # ISA -> [passed cases, packed GEMM calls, folded bias Adds]
        self.fd = {}              # --train: finite differences' dtype -> cases whose gradients were checked


def plan_stats(work):
    """(tensors split on more than one rank, collectives by kind) of a compiled case."""
    try:
        with open(os.path.join(work, "out", "plan.json")) as fh:
            plan = json.load(fh)
    except (OSError, ValueError):
        return 0, {}
    split = sum(1 for t in plan["tensors"] if t["local_shape"] != t["shape"])
    kinds = {}
    for c in plan["collectives"]:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    return split, kinds


def packed_stats(case, work):
    """(packed-weight GEMM calls, those that start from a bias: a folded Add
    or a Gemm's row C) over a compiled case's rank files."""
    calls = folds = 0
    out = os.path.join(work, "out")
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        if re.fullmatch(r"rank\d+\.c", name):
            with open(os.path.join(out, name)) as fh:
                src = fh.read()
            for args in re.findall(r"^\s*k_matmul_packed_f32\(([^;]*)\);", src, re.M):
                calls += 1
                folds += args.split(",")[3].strip() != "NULL"  # y, a, pack, bias, ...
    return calls, folds


def one(seed, index, tally, args):
    work = os.path.join(OUT, "work", "%s_%s" % (seed, index))
    try:
        case = generate(seed, index)
        golden = write_case(case, work)
    except Exception as e:            # the generator made something ONNX or ORT rejects
        with tally.lock:
            tally.skipped += 1
        print("case %s_%s: generator error (not counted): %s" % (seed, index, str(e).splitlines()[0][:300]),
              flush=True)
        shutil.rmtree(work, ignore_errors=True)
        return
    try:
        st, kind, detail, golden = run_case(case, work, golden)
    except Exception as e:        # this script's own trouble (or the compiler rebuilt under it)
        st, kind, detail = "FAIL", "harness", "%s: %s" % (type(e).__name__, e)
    split, kinds = plan_stats(work)
    packed = packed_stats(case, work) if st == "PASS" else None
    line = "case %s: %d nodes, mesh %s, %s%s" % (case.tag, len(case.model.graph.node), case.mesh_str(),
                                                " ".join("%s=%s" % a for a in case.shards) or "no annotations",
                                                " " + " ".join(case.flags()) if case.flags() else "")
    with tally.lock:
        tally.run += 1
        for op in set(case.ops()):
            tally.ops[op] = tally.ops.get(op, 0) + 1
        if st == "PASS":
            tally.passed += 1
            tally.illcond += kind == "ill-conditioned"
            tally.distributed += split > 0
            for k, n in kinds.items():
                tally.colls[k] = tally.colls.get(k, 0) + n
            if getattr(case, "fd_dtype", None):
                tally.fd[case.fd_dtype] = tally.fd.get(case.fd_dtype, 0) + 1
            if packed:
                t = tally.packed.setdefault(built_isa(case.isa), [0, 0, 0])
                t[0] += 1
                t[1] += packed[0]
                t[2] += packed[1]
        elif st == "REFUSED":
            tally.refused += 1
            tally.reasons[kind] = tally.reasons.get(kind, 0) + 1
        else:
            tally.failed += 1
            tally.fails[kind] = tally.fails.get(kind, 0) + 1
    folder = os.path.join(OUT, "failures", case.tag)
    if st in ("PASS", "REFUSED"):
        if args.verbose:
            print(line + (": ok" if st == "PASS" else ": refused: " + detail.splitlines()[-1]), flush=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)      # an earlier run's failure, now gone
        return
    save_failure(case, golden, kind, detail, folder)
    msg = "FAIL %s: %s: %s\n  saved in %s" % (line, kind, detail[:800], os.path.relpath(folder, ROOT))
    if args.minimize:
        small = minimize(case, kind, work + "_min", log=lambda s: None)
        st2, k2, d2, g2 = run_case(small, work + "_min")
        if st2 == "FAIL":
            save_failure(small, g2, k2, d2, os.path.join(folder, "min"))
            msg += "\n  minimized (%d nodes, mesh %s): %s/min\n" % (
                len(small.model.graph.node), small.mesh_str(), os.path.relpath(folder, ROOT))
            msg += "    " + describe(small).replace("\n", "\n    ")
        shutil.rmtree(work + "_min", ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print(msg, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None,
                    help="first seed (default 1; with --seconds, one from the clock, printed)")
    ap.add_argument("--count", type=int, default=None, help="cases (per seed with --seconds)")
    ap.add_argument("--seconds", type=float, default=None, help="run seeds SEED, SEED+1, ... for this long")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--minimize", action="store_true", help="shrink each failure into <failure>/min")
    ap.add_argument("--exclude", default="", help="builders to leave out: " + ",".join(BUILDERS))
    ap.add_argument("--extended", action="store_true",
                    help="also the exporter ops of issue 9: " + ",".join(EXTENDED))
    ap.add_argument("--auto", action="store_true",
                    help="compile with --auto (random device preset and memory limit)")
    ap.add_argument("--pipeline", action="store_true",
                    help="put pipeline stages (a pp axis, microbatches) in front of meshes of 1-2 ranks")
    ap.add_argument("--train", action="store_true",
                    help="differentiable graphs with a loss, compiled with --train, one SGD step: the loss "
                         "against ORT's and each weight's gradient against finite differences")
    ap.add_argument("--replay", metavar="DIR", help="rerun a saved failure folder")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    for x in filter(None, args.exclude.split(",")):
        if x not in BUILDERS and x not in EXTENDED:
            ap.error("--exclude %s: no such builder" % x)
        EXCLUDE.add(x)
    USE_EXTENDED[0] = args.extended
    USE_AUTO[0] = args.auto
    USE_PIPELINE[0] = args.pipeline
    USE_TRAIN[0] = args.train
    if not os.access(BIN, os.X_OK):
        print("fuzz_plans: %s is not built (run make)" % BIN)
        return 2
    if args.replay:
        case = load_case(args.replay)
        st, kind, detail, _ = run_case(case, os.path.join(OUT, "work", "replay"))
        print("%s: %s %s %s" % (args.replay, st, kind, detail))
        if st == "FAIL" and args.minimize:
            small = minimize(case, kind, os.path.join(OUT, "work", "replay_min"))
            st2, k2, d2, g2 = run_case(small, os.path.join(OUT, "work", "replay_min"))
            save_failure(small, g2, k2, d2, os.path.join(args.replay, "min"))
            print(describe(small))
        return 1 if st == "FAIL" else 0
    if args.seed is None:
        args.seed = int(time.time()) % 1000000 if args.seconds is not None else 1
    print("fuzz_plans: seed %d, %s%s" % (args.seed, "%d cases" % (args.count or 50) if args.seconds is None
                                         else "seeds from it for %g s" % args.seconds,
                                         (", extended op set" if args.extended else "") +
                                         (", --auto" if args.auto else "") + (", --train" if args.train else "")),
          flush=True)
    os.makedirs(os.path.join(OUT, "work"), exist_ok=True)
    tally = Tally()
    t0 = time.time()
    if args.seconds is None:
        jobs = [(args.seed, k) for k in range(args.count or 50)]
    else:
        per = args.count or 25
        jobs = ((s, k) for s in range(args.seed, 1 << 30) for k in range(per))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        pending = set()
        for seed, k in jobs:
            if args.seconds is not None and time.time() - t0 > args.seconds:
                break
            pending.add(ex.submit(one, seed, k, tally, args))
            if len(pending) >= max(1, args.jobs):      # no queue: stops soon after T seconds
                done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for f in done:
                    f.result()
        for f in concurrent.futures.as_completed(pending):
            f.result()
    if tally.reasons:
        print("refusals by reason:")
        for r, n in sorted(tally.reasons.items(), key=lambda x: -x[1]):
            print("  %5d  %s" % (n, r))
    if tally.fails:
        print("failures by kind: " + ", ".join("%s %d" % kv for kv in sorted(tally.fails.items())))
    print("passed cases that split some tensor: %d; their collectives: %s" % (
        tally.distributed, ", ".join("%s %d" % kv for kv in sorted(tally.colls.items())) or "none"))
    if tally.packed:
        print("packed-weight GEMM (passed cases built with it): " + ", ".join(
            "%s: %d cases, %d calls, %d starting from a bias" % (isa, *v) for isa, v in sorted(tally.packed.items())))
    if tally.fd:
        print("--train: passed cases' gradients against finite differences in " + ", ".join(
            "%s: %d" % kv for kv in sorted(tally.fd.items())))
    if args.verbose:
        print("cases per op: " + ", ".join("%s %d" % kv for kv in sorted(tally.ops.items())))
    print("fuzz_plans: %d cases run, %d passed%s, %d refused, %d failed%s in %.0f s" % (
        tally.run, tally.passed,
        " (%d within ORT's rounding sensitivity)" % tally.illcond if tally.illcond else "",
        tally.refused, tally.failed,
        " (%d generator errors skipped)" % tally.skipped if tally.skipped else "", time.time() - t0))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
