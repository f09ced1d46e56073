#!/usr/bin/env python3
"""xla_bench.py: bytes per rank, onnx2spmd's plan beside XLA's partitioner.

For each case (a model, a mesh and the same annotations on both sides) the
ONNX graph is rebuilt as a jax function (a small interpreter for the ops
these models use), jitted with the annotations as in_shardings and, for an
intermediate, jax.lax.with_sharding_constraint, and compiled by XLA on 8
fake CPU devices (--xla_force_host_platform_device_count=8). The
collectives in the optimised HLO are counted with the ring formulas
onnx2spmd's plan uses (bytes sent per rank: all-gather (n-1) x input,
reduce-scatter and all-to-all (n-1)/n x input, all-reduce twice that), so
the two columns compare like for like. Outputs are left to each side
(onnx2spmd keeps a split output split; XLA's out_shardings are
unconstrained).

Runs in build/venv-xla (jax, jaxlib and onnx pinned by tools/deps.sh --xla):
    build/venv-xla/bin/python bench/xla_bench.py
"""
import json
import os
import re
import subprocess
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))


def shardings_file(path):
    """The annotations of a --shardings file (NAME=SPEC per line, # comments)."""
    with open(os.path.join(ROOT, path)) as f:
        return [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]


# name, model, mesh, annotations, what the case is about
CASES = [
    ("conflict", "mlp", "tp=2", ["x=[tp,_]", "W1=[_,tp]"],
     "two annotations put tp on two factors of one contraction"),
    ("intermediate", "mlp", "tp=2", ["x=[tp,_]", "h=[_,tp]"],
     "an annotated intermediate against the input's split"),
    ("pinned", "mlp", "tp=2", ["x=[_,tp]", "W1=[_,_]"],
     "a weight pinned replicated against a contraction-split input"),
    ("megatron_mlp", "mlp", "dp=2,tp=4", ["x=[dp,_]", "W1=[_,tp]"],
     "Megatron MLP under data parallelism"),
    ("two_axis_sum", "mlp", "dp=2,tp=4", ["x=[_,dp+tp]", "W1=[dp+tp,_]"],
     "a contraction split over two axes: one reduction over both"),
    ("two_axis_scatter", "mlp", "dp=2,tp=2", ["W2=[dp+tp,_]", "b2=[dp+tp]"],
     "a sum over two axes that a consumer wants split"),
    ("heads_tp4", "attention", "tp=4", ["Wq=[_,tp]", "Wk=[_,tp]", "Wv=[_,tp]", "Wo=[tp,_]"],
     "Megatron attention, 4 heads on tp=4"),
    ("heads_free_wo", "attention", "tp=2", ["Wq=[_,tp]", "Wk=[_,tp]", "Wv=[_,tp]"],
     "Wo left free: row-split it and reduce o_mm, or gather the smaller ctx_m"),
    ("heads_tp8", "attention", "tp=8", ["Wq=[_,tp]", "Wk=[_,tp]", "Wv=[_,tp]", "Wo=[tp,_]"],
     "fewer heads (4) than tp (8)"),
    ("pinned_w2", "mlp", "tp=2", ["W1=[_,tp]", "W2=[_,_]"],
     "a column-split W1 before a W2 pinned replicated: gather a, or slice W2 and reduce o"),
    ("uneven", "mlp", "tp=3", ["h=[_,tp]"],
     "a dim (256) its axis (3) does not divide"),
    ("conv_out_ch", "convnet", "tp=2", ["c0_W=[tp,_,_,_]"],
     "a Conv's output channels split: keep channels split, or gather"),
    ("gpt_pinned", "tiny_gpt", "tp=2", shardings_file("tests/partition/tiny_gpt_tp_pinned.txt"),
     "Wo and W2 pinned replicated after column-split Q/K/V and W1"),
]


# ---- the ONNX graph as a jax function -----------------------------------------

def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def run_node(node, env, constrain):
    x = [env[i] if i else None for i in node.input]
    op = node.op_type
    if op == "MatMul":
        y = jnp.matmul(x[0], x[1])
    elif op == "Add":
        y = x[0] + x[1]
    elif op == "Mul":
        y = x[0] * x[1]
    elif op == "Gelu":
        y = jax.nn.gelu(x[0], approximate=attr(node, "approximate", b"none") == b"tanh")
    elif op == "Softmax":
        y = jax.nn.softmax(x[0], axis=attr(node, "axis", -1))
    elif op == "Transpose":
        y = jnp.transpose(x[0], attr(node, "perm"))
    elif op == "Reshape":
        shape = [int(v) for v in np.asarray(x[1])]
        y = jnp.reshape(x[0], [x[0].shape[i] if v == 0 else v for i, v in enumerate(shape)])
    elif op == "Identity":
        y = x[0]
    elif op == "Relu":
        y = jnp.maximum(x[0], 0)
    elif op == "Where":
        y = jnp.where(x[0], x[1], x[2])
    elif op == "Gather":
        y = jnp.take(x[0], x[1], axis=attr(node, "axis", 0))
    elif op == "LayerNormalization":
        axis = attr(node, "axis", -1)
        axes = tuple(range(axis % x[0].ndim, x[0].ndim))
        mean = jnp.mean(x[0], axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(x[0] - mean), axis=axes, keepdims=True)
        y = (x[0] - mean) / jnp.sqrt(var + attr(node, "epsilon", 1e-5)) * x[1]
        if len(x) > 2 and x[2] is not None:
            y = y + x[2]
    elif op == "Conv":
        k = len(x[1].shape) - 2
        pads = attr(node, "pads", [0] * 2 * k)
        y = jax.lax.conv_general_dilated(
            x[0], x[1], window_strides=attr(node, "strides", [1] * k),
            padding=[(pads[i], pads[i + k]) for i in range(k)], rhs_dilation=attr(node, "dilations", [1] * k),
            feature_group_count=attr(node, "group", 1))
        if len(x) > 2 and x[2] is not None:
            y = y + x[2].reshape((1, -1) + (1,) * k)
    elif op == "BatchNormalization":
        k = x[0].ndim - 2
        shape = (1, -1) + (1,) * k
        inv = x[1] / jnp.sqrt(x[4] + attr(node, "epsilon", 1e-5))
        y = (x[0] - x[3].reshape(shape)) * inv.reshape(shape) + x[2].reshape(shape)
    elif op == "MaxPool":
        k = attr(node, "kernel_shape")
        st = attr(node, "strides", [1] * len(k))
        y = jax.lax.reduce_window(x[0], -jnp.inf, jax.lax.max, (1, 1) + tuple(k), (1, 1) + tuple(st), "VALID")
    elif op == "Flatten":
        axis = attr(node, "axis", 1)
        y = jnp.reshape(x[0], (int(np.prod(x[0].shape[:axis])), -1))
    elif op == "Gemm":
        a = x[0].T if attr(node, "transA", 0) else x[0]
        b = x[1].T if attr(node, "transB", 0) else x[1]
        y = attr(node, "alpha", 1.0) * jnp.matmul(a, b)
        if len(x) > 2 and x[2] is not None:
            y = y + attr(node, "beta", 1.0) * x[2]
    else:
        raise SystemExit("xla_bench: op %s is not in the interpreter" % op)
    out = node.output[0]
    env[out] = constrain(out, y)


def jax_function(model, constraints):
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    shapes = [i.name for i in g.input if i.name not in inits]
    # Reshape targets stay compile-time constants; everything else is an argument.
    static = {i.input[1] for i in g.node if i.op_type == "Reshape"}
    args = shapes + [n for n in inits if n not in static]

    def fn(*vals):
        env = dict(zip(args, vals))
        for n in static:
            env[n] = inits[n]

        def constrain(name, y):
            return jax.lax.with_sharding_constraint(y, constraints[name]) if name in constraints else y

        for node in g.node:
            run_node(node, env, constrain)
        return tuple(env[o.name] for o in g.output)

    def example(name):
        if name in inits:
            return inits[name]
        t = next(i for i in g.input if i.name == name)
        dims = [d.dim_value for d in t.type.tensor_type.shape.dim]
        return np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(t.type.tensor_type.elem_type))

    return fn, args, [example(a) for a in args]


def spec_of(text, mesh_axes):
    """[dp+tp,_] -> PartitionSpec(('dp','tp'), None)."""
    dims = text.strip()[1:-1].split(",")
    parts = []
    for d in dims:
        d = d.strip()
        if d == "_":
            parts.append(None)
        else:
            axes = tuple(d.split("+"))
            parts.append(axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*parts)


# ---- counting XLA's collectives ------------------------------------------------

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "s32": 4, "s64": 8, "u32": 4, "pred": 1, "s8": 1, "u8": 1}
COLL = re.compile(r"=\s*(.*?)\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(-start)?\(")
SHAPE = re.compile(r"\b(f32|f16|bf16|f64|s32|s64|u32|pred|s8|u8)\[([0-9,]*)\]")


def shape_bytes(m):
    n = DTYPE_BYTES[m.group(1)]
    for d in filter(None, m.group(2).split(",")):
        n *= int(d)
    return n


def group_size(line, ndev):
    """replica_groups as mesh['a'=2,'b'=4] {'b'}, [G,S]<=[N] or {{0,1},...}."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if m:
        sizes = dict((k.strip("'"), int(v)) for k, v in (kv.split("=") for kv in m.group(1).split(",")))
        n = 1
        for a in filter(None, (x.strip().strip("'") for x in m.group(2).split(","))):
            n *= sizes[a]
        return n
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if m:
        return len(m.group(1).split(","))
    return ndev


def xla_bytes(hlo, ndev):
    """Bytes sent per rank by the collectives of the entry computation,
    from each call's result type (the operands carry no types in this
    HLO text): an all-gather's input is its result over n, a
    reduce-scatter's its result times n."""
    total, calls, kinds = 0, 0, {}
    for line in hlo.splitlines():
        m = COLL.search(line)
        if not m:
            continue
        kind = m.group(2)
        result = sum(shape_bytes(s) for s in SHAPE.finditer(m.group(1)))
        n = group_size(line, ndev)
        if n <= 1:
            continue
        if kind == "all-gather":
            b = (n - 1) * (result // n)
        elif kind == "reduce-scatter":
            b = result * (n - 1)
        elif kind == "all-to-all":
            b = result // n * (n - 1)
        elif kind == "all-reduce":
            b = 2 * (result // n * (n - 1))
        else:
            b = result
        total += b
        calls += 1
        kinds[kind] = kinds.get(kind, 0) + 1
    return total, calls, kinds


def xla_plan(model_path, mesh_text, annotations):
    model = onnx.load(model_path)
    names, sizes = [], []
    for part in mesh_text.split(","):
        a, s = part.split("=")
        names.append(a)
        sizes.append(int(s))
    ndev = int(np.prod(sizes))
    mesh = Mesh(np.array(jax.devices()[:ndev]).reshape(sizes), tuple(names))
    ann = {}
    for a in annotations:
        t, spec = a.split("=", 1)
        ann[t] = NamedSharding(mesh, spec_of(spec, names))
    fn, args, examples = jax_function(model, {t: s for t, s in ann.items()})
    in_sh = [ann.get(a, NamedSharding(mesh, PartitionSpec())) for a in args]
    # Unannotated weights and inputs replicated, as onnx2spmd treats them.
    compiled = jax.jit(fn, in_shardings=in_sh).lower(*examples).compile()
    return xla_bytes(compiled.as_text(), ndev)


def ours(model_path, mesh_text, annotations):
    cmd = [BIN, "plan", model_path, "--mesh", mesh_text, "--json"]
    for a in annotations:
        cmd += ["--shard", a]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
    j = json.loads(p.stdout)
    return j["per_rank"]["communication_bytes"], len(j["collectives"])


def main():
    print("xla_bench: bytes per rank in the step, onnx2spmd plan vs XLA (jax %s, %d CPU devices)"
          % (jax.__version__, len(jax.devices())))
    print("%-18s %-10s %-10s %12s %12s  %s" % ("case", "model", "mesh", "onnx2spmd", "XLA", "verdict"))
    worse = 0
    for name, model, mesh, ann, what in CASES:
        path = os.path.join(ROOT, "tests", "models", model + ".onnx")
        ob, oc = ours(path, mesh, ann)
        try:
            xb, xc, kinds = xla_plan(path, mesh, ann)
            xs = "%d" % xb
        except Exception as e:  # XLA refusing is a result too
            xb, xs = None, "error: %s" % str(e).splitlines()[0][:40]
        if ob is None:
            verdict = "onnx2spmd refuses: %s" % oc
            worse += 1
        elif xb is None:
            verdict = "ok (XLA fails)"
        else:
            verdict = "ok" if ob <= xb else "MORE (%.2fx)" % (ob / max(xb, 1))
            worse += ob > xb
        print("%-18s %-10s %-10s %12s %12s  %s   [%s]" % (name, model, mesh, "-" if ob is None else ob, xs,
                                                         verdict, what))
    print("xla_bench: %d of %d cases with bytes no more than XLA's" % (len(CASES) - worse, len(CASES)))


if __name__ == "__main__":
    sys.exit(main())
