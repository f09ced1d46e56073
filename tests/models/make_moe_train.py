#!/usr/bin/env python3
"""Writes tests/models/train/moe_block_mse.onnx and its fixed inputs: one
mixture-of-experts block in the exporters' batched form
(tests/models/make_moe_block.py: 16 tokens of width 16, top-2 of 4
experts, normalised routing weights, SiLU-gated experts of width 32) with
loss = ReduceMean((y - target)^2). Every weight trains: the experts
through ir/moe.c's dispatch and combine, the router through TopK's values.
Running it twice gives byte-identical files.

  build/venv/bin/python tests/models/make_moe_train.py
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
from make_moe_block import make_block  # noqa: E402

OUT = os.path.join(ROOT, "tests", "models", "train")
N, D, F, E, K = 16, 16, 32, 4, 2


def main():
    path = os.path.join(OUT, "moe_block_mse.onnx")
    make_block(path, N, D, F, E, K, True, 11)
    m = onnx.load(path)
    g = m.graph
    out = g.output[0].name
    g.input.append(helper.make_tensor_value_info("target", TensorProto.FLOAT, [N, D]))
    g.node.extend([helper.make_node("Sub", [out, "target"], ["err"], name="loss/sub"),
                   helper.make_node("Mul", ["err", "err"], ["sq"], name="loss/sq"),
                   helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="loss/mean")])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    g.name = "moe_block_mse"
    onnx.checker.check_model(m, full_check=True)
    with open(path, "wb") as fh:
        fh.write(m.SerializeToString())
    rng = np.random.default_rng(2611)
    np.save(os.path.join(OUT, "moe_block_mse.input_x.npy"), rng.standard_normal((N, D)).astype(np.float32))
    np.save(os.path.join(OUT, "moe_block_mse.input_target.npy"), rng.standard_normal((N, D)).astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
