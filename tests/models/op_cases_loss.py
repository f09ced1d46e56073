"""op_cases_loss.py: per-op test models of the loss family (ir/ops_loss.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with lo_.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node


def cases(add):
    r = np.random.default_rng(1233177)
    del r
