"""op_cases_attn.py: per-op test models of the attn family (ir/ops_attn.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with at_.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node


def cases(add):
    r = np.random.default_rng(1240413)
    del r
