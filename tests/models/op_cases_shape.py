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
