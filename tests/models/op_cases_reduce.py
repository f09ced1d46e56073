"""op_cases_reduce.py: per-op test models of the reduce family (ir/ops_reduce.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, exactly as op_cases() in make_models.py does; make_models.py
writes the models to tests/models/ops/ and ONNX Runtime's outputs to
tests/golden/ops/. Use the seeded generator below only, so that adding a
case here never changes another family's models.

Every case name starts with r_. Shapes have even dims where a split is
interesting: tests/e2e/run_ops_sharded.sh splits every input along each
even dim on 2 ranks, which is where a wrong factor rule (a non-sum
reduction left partial) would show. Opset 13 cases give axes as an
attribute, opset 18 ones as a constant input. RMSNormalization (opset 23)
has no case: ONNX Runtime 1.22 does not load opset 23 models.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def cases(add):
    r = np.random.default_rng(5004808)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    ints = lambda *s: r.integers(-9, 9, s, dtype=np.int64)
    ax = lambda *v: np.array(v, np.int64)

    # ---- reductions: axes as attribute (opset 13) and as input (opset 18)
    for op, name, data in (("ReduceMax", "max", f), ("ReduceMin", "min", f), ("ReduceProd", "prod", pos),
                           ("ReduceSumSquare", "sumsquare", f), ("ReduceL1", "l1", f), ("ReduceL2", "l2", f),
                           ("ReduceLogSumExp", "logsumexp", f)):
        add("r_%s_attr" % name, 13, [N(op, ["x"], ["y"], axes=[1], keepdims=1)], {"x": data(4, 6, 2)}, {}, ["y"])
        add("r_%s_attr_neg" % name, 13, [N(op, ["x"], ["y"], axes=[0, -1], keepdims=0)],
            {"x": data(4, 3, 6)}, {}, ["y"])
        add("r_%s_input" % name, 18, [N(op, ["x", "axes"], ["y"], keepdims=0)],
            {"x": data(2, 3, 4)}, {"axes": ax(0, 2)}, ["y"])
        add("r_%s_all" % name, 18, [N(op, ["x"], ["y"])], {"x": data(4, 2)}, {}, ["y"])
    add("r_max_noop", 18, [N("ReduceMax", ["x", "axes"], ["y"], noop_with_empty_axes=1)],
        {"x": f(4, 3)}, {"axes": ax()}, ["y"])
    for op, name in (("ReduceSumSquare", "sumsquare"), ("ReduceL2", "l2"), ("ReduceLogSumExp", "logsumexp")):
        add("r_%s_noop" % name, 18, [N(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)],
            {"x": f(2, 4)}, {"axes": ax()}, ["y"])
    add("r_min_empty_axes", 18, [N("ReduceMin", ["x", "axes"], ["y"], keepdims=0)],
        {"x": f(2, 4)}, {"axes": ax()}, ["y"])
    add("r_max_int64", 13, [N("ReduceMax", ["x"], ["y"], axes=[0])], {"x": ints(4, 3)}, {}, ["y"])
    add("r_min_int64", 18, [N("ReduceMin", ["x", "axes"], ["y"], keepdims=0)],
        {"x": ints(2, 6)}, {"axes": ax(-1)}, ["y"])
    add("r_prod_int64", 13, [N("ReduceProd", ["x"], ["y"], axes=[1], keepdims=0)],
        {"x": r.integers(-3, 4, (4, 3), dtype=np.int64)}, {}, ["y"])
    add("r_sumsquare_int64", 13, [N("ReduceSumSquare", ["x"], ["y"], axes=[0])], {"x": ints(4, 2)}, {}, ["y"])
    # A split reduced dim feeding a non-linear consumer: the partial sum of
    # squares must be all-reduced before the Sqrt.
    add("r_sumsquare_sqrt", 13, [N("ReduceSumSquare", ["x"], ["s"], axes=[1]), N("Sqrt", ["s"], ["y"])],
        {"x": f(4, 6)}, {}, ["y"])

    # ---- arg-reductions (ties on purpose: small integer-valued floats)
    ties = lambda *s: r.integers(-2, 3, s).astype(np.float32)
    add("r_argmax", 13, [N("ArgMax", ["x"], ["y"], axis=1)], {"x": f(4, 6, 2)}, {}, ["y"])
    add("r_argmax_default", 13, [N("ArgMax", ["x"], ["y"])], {"x": ties(4, 6)}, {}, ["y"])
    add("r_argmax_last", 13, [N("ArgMax", ["x"], ["y"], axis=-1, keepdims=0, select_last_index=1)],
        {"x": ties(4, 6)}, {}, ["y"])
    add("r_argmin", 13, [N("ArgMin", ["x"], ["y"], axis=0, keepdims=0)], {"x": ties(4, 6)}, {}, ["y"])
    add("r_argmin_last", 13, [N("ArgMin", ["x"], ["y"], axis=1, select_last_index=1)],
        {"x": ties(2, 6, 2)}, {}, ["y"])
    add("r_argmax_int64", 13, [N("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], {"x": ints(4, 6)}, {}, ["y"])

    # ---- CumSum: axis as a constant input
    add("r_cumsum", 14, [N("CumSum", ["x", "a"], ["y"])], {"x": f(4, 6)}, {"a": np.array(1, np.int64)}, ["y"])
    add("r_cumsum_excl_rev", 14, [N("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1)],
        {"x": f(2, 4, 6)}, {"a": np.array(-2, np.int64)}, ["y"])
    add("r_cumsum_excl", 14, [N("CumSum", ["x", "a"], ["y"], exclusive=1)],
        {"x": f(4, 2)}, {"a": np.array(0, np.int64)}, ["y"])
    add("r_cumsum_int64_rev", 14, [N("CumSum", ["x", "a"], ["y"], reverse=1)],
        {"x": ints(2, 6)}, {"a": np.array(1, np.int64)}, ["y"])

    # ---- LogSoftmax
    add("r_logsoftmax", 13, [N("LogSoftmax", ["x"], ["y"])], {"x": f(4, 6) * 3}, {}, ["y"])
    add("r_logsoftmax_axis1", 13, [N("LogSoftmax", ["x"], ["y"], axis=1)], {"x": f(2, 6, 4)}, {}, ["y"])

    # ---- TopK: k as a constant input; largest and smallest, sorted
    add("r_topk", 13, [N("TopK", ["x", "k"], ["v", "i"])], {"x": f(4, 6)}, {"k": ax(3)}, ["v", "i"])
    add("r_topk_smallest_axis1", 13, [N("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0)],
        {"x": ties(2, 6, 4)}, {"k": ax(4)}, ["v", "i"])
    add("r_topk_int64", 13, [N("TopK", ["x", "k"], ["v", "i"], axis=0)], {"x": ints(6, 4)}, {"k": ax(2)}, ["v", "i"])

    # ---- normalizations
    add("r_instancenorm", 13, [N("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)],
        {"x": f(2, 4, 3, 4)}, {"s": f(4), "b": f(4)}, ["y"])
    add("r_instancenorm_1d", 13, [N("InstanceNormalization", ["x", "s", "b"], ["y"])],
        {"x": f(2, 6, 8) + 3}, {"s": f(6), "b": f(6)}, ["y"])
    add("r_groupnorm", 21, [N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
        {"x": f(2, 4, 3, 2)}, {"s": f(4), "b": f(4)}, ["y"])
    add("r_groupnorm_g1", 21, [N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=1, epsilon=1e-3)],
        {"x": f(4, 6, 2)}, {"s": f(6), "b": f(6)}, ["y"])

    # ---- shape arithmetic that folds at compile time: ReduceMax/Min/Prod
    # and CumSum on the input's shape vector compute reshape targets.
    add("r_fold_shape", 18,
        [N("Shape", ["x"], ["s"]),
         N("ReduceProd", ["s"], ["p"], keepdims=1), N("ReduceMax", ["s"], ["m"], keepdims=1),
         N("ReduceMin", ["s"], ["mn"], keepdims=1),
         N("Div", ["p", "m"], ["rows"]), N("Concat", ["rows", "m"], ["t1"], axis=0),
         N("Reshape", ["x", "t1"], ["y1"]),
         N("CumSum", ["s", "a0"], ["cs"]), N("Gather", ["cs", "i0"], ["c0"], axis=0),
         N("Div", ["p", "mn"], ["q"]), N("Concat", ["c0", "q"], ["t2"], axis=0),
         N("Reshape", ["x", "t2"], ["y2"])],
        {"x": f(2, 3, 4)}, {"a0": np.array(0, np.int64), "i0": ax(0)}, ["y1", "y2"])
