"""op_cases_shape.py: per-op test models of the shape family (ir/ops_shape.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, exactly as op_cases() in make_models.py does; make_models.py
writes the models to tests/models/ops/ and ONNX Runtime's outputs to
tests/golden/ops/. Use the seeded generator below only, so that adding a
case here never changes another family's models.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def cases(add):
    r = np.random.default_rng(4189151)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    del pos
    # An exporter's reshape: the target shape computed from the input's own.
    add("shape_reshape", 15,
        [N("Constant", [], ["i0"], value=helper.make_tensor("i0v", I64, [], [0])),
         N("Shape", ["x"], ["s"]), N("Gather", ["s", "i0"], ["b"], axis=0),
         N("Unsqueeze", ["b", "ax0"], ["b1"]), N("Concat", ["b1", "m1"], ["t"], axis=0),
         N("Reshape", ["x", "t"], ["r"]), N("Relu", ["r"], ["y"])],
        {"x": f(4, 3, 2)}, {"ax0": np.array([0], np.int64),
                            "m1": np.array([-1], np.int64)}, ["y"])
    # Shape with a window, arithmetic on it, and a slice.
    add("shape_window_arith", 15,
        [N("Shape", ["x"], ["s"], start=1), N("Mul", ["s", "two"], ["s2"]),
         N("Slice", ["s2", "st", "en"], ["t0"]), N("Concat", ["one", "t0"], ["t"], axis=0),
         N("Reshape", ["x", "t"], ["y"])],
        {"x": f(2, 3, 2)}, {"two": np.array([1, 2], np.int64), "st": np.array([0], np.int64),
                            "en": np.array([1], np.int64), "one": np.array([4], np.int64)}, ["y"])
    # Size, and Range over a dim taken from the shape (position ids).
    add("shape_size_range", 13,
        [N("Constant", [], ["i1"], value=helper.make_tensor("i1v", I64, [], [1])),
         N("Constant", [], ["zero"], value=helper.make_tensor("zv", I64, [], [0])),
         N("Constant", [], ["step"], value=helper.make_tensor("sv", I64, [], [1])),
         N("Shape", ["x"], ["s"]), N("Gather", ["s", "i1"], ["len"], axis=0),
         N("Range", ["zero", "len", "step"], ["pos"]), N("Size", ["x"], ["n"]),
         N("Mul", ["pos", "n"], ["pn"]), N("Cast", ["pn"], ["pf"], to=F32),
         N("Add", ["x", "pf"], ["y"])],
        {"x": f(4, 6)}, {}, ["y"])
    # A float Range (rotary-embedding style angles) and ConstantOfShape.
    add("shape_range_float_cos", 13,
        [N("Constant", [], ["a"], value=helper.make_tensor("av", F32, [], [0.5])),
         N("Constant", [], ["b"], value=helper.make_tensor("bv", F32, [], [4.0])),
         N("Constant", [], ["c"], value=helper.make_tensor("cv", F32, [], [0.75])),
         N("Range", ["a", "b", "c"], ["r"]), N("Add", ["x", "r"], ["y"])],
        {"x": f(3, 5)}, {}, ["y"])
    add("shape_constant_of_shape", 13,
        [N("Shape", ["x"], ["s"]),
         N("ConstantOfShape", ["s"], ["ones"], value=helper.make_tensor("v", F32, [1], [1.5])),
         N("Mul", ["x", "ones"], ["y"])],
        {"x": f(2, 4)}, {}, ["y"])
