"""op_cases_loss.py: per-op test models of the loss family (ir/ops_loss.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with lo_.
Graph inputs can only be float32, int64 or bool (make_models.py), so the
int32 targets and float16 data of some cases come through a Cast.
"""
import numpy as np
from onnx import helper, TensorProto

N = helper.make_node
F16, F32, I32 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.INT32


def cases(add):
    r = np.random.default_rng(1233177)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    cls = lambda c, *s: r.integers(0, c, s, dtype=np.int64)

    # NegativeLogLikelihoodLoss: x [N, C, d1], targets [N, d1]; every
    # reduction, a weight, an ignore_index that occurs in the targets.
    t = cls(6, 4, 2)
    t[0, 0] = t[2, 1] = 1
    add("lo_nll_none", 13, [N("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="none")],
        {"x": f(4, 6, 2), "t": t}, {}, ["y"])
    add("lo_nll_sum_w_ii", 13,
        [N("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], reduction="sum", ignore_index=1)],
        {"x": f(4, 6, 2), "t": t}, {"w": pos(6)}, ["y"])
    add("lo_nll_mean_w", 13, [N("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"])],
        {"x": f(4, 6, 2), "t": t, "w": pos(6)}, {}, ["y"])
    add("lo_nll_mean_ii", 22, [N("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], ignore_index=1)],
        {"x": f(4, 6, 2), "t": t}, {}, ["y"])
    add("lo_nll_2d_i32", 13, [N("Cast", ["t"], ["t32"], to=I32),
                              N("NegativeLogLikelihoodLoss", ["x", "t32"], ["y"], reduction="sum")],
        {"x": f(4, 6), "t": cls(6, 4)}, {}, ["y"])
    add("lo_nll_f16", 13, [N("Cast", ["x"], ["xh"], to=F16),
                           N("NegativeLogLikelihoodLoss", ["xh", "t"], ["yh"], reduction="none"),
                           N("Cast", ["yh"], ["y"], to=F32)],
        {"x": f(4, 6, 2), "t": t}, {}, ["y"])

    # SoftmaxCrossEntropyLoss, with and without the log_prob output.
    add("lo_sce_mean", 13, [N("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"])],
        {"x": f(4, 6), "t": cls(6, 4)}, {}, ["y"])
    add("lo_sce_none_lp", 13, [N("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="none")],
        {"x": f(4, 6, 2), "t": t}, {}, ["y", "lp"])
    add("lo_sce_sum_w_ii", 13,
        [N("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y"], reduction="sum", ignore_index=1)],
        {"x": f(4, 6, 2), "t": t}, {"w": pos(6)}, ["y"])
    add("lo_sce_sum_lp", 13, [N("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="sum")],
        {"x": f(4, 6, 2), "t": t}, {}, ["y", "lp"])
    add("lo_sce_mean_w_ii_lp", 13,
        [N("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y", "lp"], ignore_index=1)],
        {"x": f(4, 6, 2), "t": t}, {"w": pos(6)}, ["y", "lp"])

    # Dropout in inference: the identity and an all-true mask.
    add("lo_dropout", 13, [N("Dropout", ["x"], ["y", "m"])], {"x": f(4, 6)}, {}, ["y", "m"])
    # Scalar ratio and training_mode come from Constant nodes: initializers
    # are written at least 1-D (make_models.py), and Dropout wants scalars.
    scalars = lambda ratio, training: [
        N("Constant", [], ["r"], value=helper.make_tensor("r", F32, [], [ratio])),
        N("Constant", [], ["tm"], value=helper.make_tensor("tm", TensorProto.BOOL, [], [training]))]
    add("lo_dropout_not_training", 13, scalars(0.3, False) + [N("Dropout", ["x", "r", "tm"], ["y", "m"])],
        {"x": f(4, 6)}, {}, ["y", "m"])
    add("lo_dropout_train_ratio0", 13, scalars(0.0, True) + [N("Dropout", ["x", "r", "tm"], ["y"])],
        {"x": f(2, 4, 2)}, {}, ["y"])

    # Hardmax (ties go to the first) and LpNormalization.
    x = f(4, 6, 2)
    x[1, 2, 0] = x[1, 4, 0] = 9.0
    add("lo_hardmax_axis1", 13, [N("Hardmax", ["x"], ["y"], axis=1)], {"x": x}, {}, ["y"])
    add("lo_hardmax_default", 13, [N("Hardmax", ["x"], ["y"])], {"x": f(4, 2, 6)}, {}, ["y"])
    add("lo_lpnorm_default", 13, [N("LpNormalization", ["x"], ["y"])], {"x": f(4, 2, 6)}, {}, ["y"])
    add("lo_lpnorm_p1_axis0", 13, [N("LpNormalization", ["x"], ["y"], axis=0, p=1)], {"x": f(4, 6)}, {}, ["y"])

    # ReduceLogSum: axes as an attribute (opset 13) and as an input (18).
    add("lo_rls_attr", 13, [N("ReduceLogSum", ["x"], ["y"], axes=[1])], {"x": pos(4, 6, 2)}, {}, ["y"])
    add("lo_rls_all", 13, [N("ReduceLogSum", ["x"], ["y"], keepdims=0)], {"x": pos(4, 2)}, {}, ["y"])
    add("lo_rls_input", 18, [N("ReduceLogSum", ["x", "axes"], ["y"], keepdims=0)],
        {"x": pos(4, 6, 2)}, {"axes": np.array([0, -1], np.int64)}, ["y"])

    # MeanVarianceNormalization: default axes (N, H, W) and one axis.
    add("lo_mvn_default", 13, [N("MeanVarianceNormalization", ["x"], ["y"])], {"x": f(2, 4, 2, 2)}, {}, ["y"])
    add("lo_mvn_axis", 13, [N("MeanVarianceNormalization", ["x"], ["y"], axes=[1])], {"x": f(2, 4, 2)}, {}, ["y"])

    # EyeLike: folded from the input's shape (a graph input or not).
    add("lo_eyelike_k", 13, [N("EyeLike", ["x"], ["e"], k=1), N("Add", ["x", "e"], ["y"])],
        {"x": f(4, 6)}, {}, ["y"])
    add("lo_eyelike_dtype", 13, [N("EyeLike", ["x"], ["y"], k=-2, dtype=TensorProto.INT64)],
        {"x": f(4, 4)}, {}, ["y"])
