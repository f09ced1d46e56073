"""op_cases_nn.py: per-op test models of the nn family (ir/ops_nn.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with nn_.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node


def cases(add):
    r = np.random.default_rng(3207486)
    del r
