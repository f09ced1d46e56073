"""op_cases_reduce.py: per-op test models of the reduce family (ir/ops_reduce.def).

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
    r = np.random.default_rng(5004808)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    del f, pos  # no cases yet
