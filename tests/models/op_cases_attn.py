"""op_cases_attn.py: per-op test models of the attn family (ir/ops_attn.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with at_.

There are no cases, on purpose: Attention and RotaryEmbedding are opset-23
ops, and ONNX Runtime 1.22, which writes the goldens of these models, loads
opsets up to 22 only (it refuses the model at load). The ops are checked
instead by the ONNX backend node tests, which ship their own expected
outputs (tests/conformance/run.py 'test_attention|test_rotary_embedding'),
until an ONNX Runtime that loads opset 23 lets cases be added here.
"""


def cases(add):
    del add
