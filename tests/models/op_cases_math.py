"""op_cases_math.py: per-op test models of the math family (ir/ops_math.def).

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
    r = np.random.default_rng(3373494)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    pos = lambda *s: (r.random(s, dtype=np.float32) + 0.5)
    i64 = lambda lo, hi, *s: r.integers(lo, hi, s, dtype=np.int64)
    bl = lambda *s: r.random(s) < 0.5
    T = lambda a: np.array(a, np.float32)

    # Unary float ops (Log on positive inputs; Round on exact halves too).
    for op in ("Neg", "Abs", "Exp", "Reciprocal", "Sin", "Cos", "Floor", "Ceil", "Sign", "Softplus", "Softsign"):
        x = f(4, 3) * 3
        if op == "Sign":
            x[0, :] = 0
        add("m_" + op.lower(), 13, [N(op, ["x"], ["y"])], {"x": x}, {}, ["y"])
    add("m_log", 13, [N("Log", ["x"], ["y"])], {"x": pos(4, 3) * 4}, {}, ["y"])
    add("m_round", 13, [N("Round", ["x"], ["y"])],
        {"x": np.concatenate([T([[-2.5, -1.5, -0.5], [0.5, 1.5, 2.5]]), f(2, 3) * 4])}, {}, ["y"])
    for op in ("Neg", "Abs", "Sign"):
        add("m_%s_i64" % op.lower(), 13, [N(op, ["x"], ["y"])], {"x": i64(-9, 9, 4, 3)}, {}, ["y"])
    add("m_not", 13, [N("Not", ["x"], ["y"])], {"x": bl(2, 3, 4)}, {}, ["y"])
    special = T([[np.nan, np.inf, -np.inf, 0.0], [1.0, -2.0, np.nan, 3.0]])
    add("m_isnan", 13, [N("IsNaN", ["x"], ["y"])], {"x": special}, {}, ["y"])
    add("m_isinf", 13, [N("IsInf", ["x"], ["y"])], {"x": special}, {}, ["y"])
    add("m_isinf_neg", 13, [N("IsInf", ["x"], ["y"], detect_positive=0)], {"x": special}, {}, ["y"])

    # Activations.
    add("m_leakyrelu", 13, [N("LeakyRelu", ["x"], ["y"], alpha=0.2)], {"x": f(4, 3)}, {}, ["y"])
    add("m_elu", 13, [N("Elu", ["x"], ["y"], alpha=0.7)], {"x": f(4, 3) * 2}, {}, ["y"])
    add("m_selu", 13, [N("Selu", ["x"], ["y"])], {"x": f(4, 3) * 2}, {}, ["y"])
    add("m_hardsigmoid", 13, [N("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], {"x": f(4, 3) * 3}, {}, ["y"])
    add("m_hardswish", 14, [N("HardSwish", ["x"], ["y"])], {"x": f(4, 3) * 4}, {}, ["y"])
    add("m_mish", 18, [N("Mish", ["x"], ["y"])], {"x": f(4, 3) * 3}, {}, ["y"])
    add("m_prelu_bcast", 13, [N("PRelu", ["x", "s"], ["y"])], {"x": f(2, 3, 4)}, {"s": f(3, 1)}, ["y"])
    add("m_prelu_in", 13, [N("PRelu", ["x", "s"], ["y"])], {"x": f(2, 4), "s": f(4)}, {}, ["y"])

    # Clip with constant bounds (initializers, a Constant node, one omitted).
    add("m_clip", 13, [N("Clip", ["x", "lo", "hi"], ["y"])], {"x": f(4, 3)},
        {"lo": T(-0.5), "hi": T(0.7)}, ["y"])
    add("m_clip_max_only", 13, [N("Constant", [], ["hi"], value_float=0.25), N("Clip", ["x", "", "hi"], ["y"])],
        {"x": f(4, 3)}, {}, ["y"])
    add("m_clip_none", 13, [N("Clip", ["x"], ["y"])], {"x": f(4, 3)}, {}, ["y"])
    add("m_clip_i64", 13, [N("Clip", ["x", "lo", "hi"], ["y"])], {"x": i64(-9, 9, 4, 3)},
        {"lo": np.array(-3, np.int64), "hi": np.array(5, np.int64)}, ["y"])

    add("m_clip_inputs", 13, [N("Clip", ["x", "lo", "hi"], ["y"])], {"x": f(4, 3), "lo": T(-0.3), "hi": T(0.4)},
        {}, ["y"])
    add("m_clip_inputs_i64", 13, [N("Clip", ["x", "lo", ""], ["y"])],
        {"x": i64(-9, 9, 4, 3), "lo": np.array(-2, np.int64)}, {}, ["y"])

    # Comparisons (inputs with ties), broadcasting.
    small = lambda *s: r.integers(0, 3, s).astype(np.float32)
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        add("m_%s_bcast" % op.lower(), 13, [N(op, ["a", "b"], ["y"])], {"a": small(2, 1, 4), "b": small(3, 1)}, {}, ["y"])
    add("m_equal_i64", 13, [N("Equal", ["a", "b"], ["y"])], {"a": i64(0, 3, 4, 3), "b": i64(0, 3, 3)}, {}, ["y"])
    add("m_less_i64", 13, [N("Less", ["a", "b"], ["y"])], {"a": i64(0, 3, 4, 3)}, {"b": np.array(1, np.int64)}, ["y"])
    add("m_equal_bool", 13, [N("Equal", ["a", "b"], ["y"])], {"a": bl(2, 3), "b": bl(2, 1)}, {}, ["y"])
    for op in ("And", "Or", "Xor"):
        add("m_%s_bcast" % op.lower(), 13, [N(op, ["a", "b"], ["y"])], {"a": bl(2, 1, 4), "b": bl(3, 4)}, {}, ["y"])

    # Variadic ops with broadcasting; one-input forms; int64.
    for op in ("Min", "Max", "Mean", "Sum"):
        add("m_%s_var" % op.lower(), 13, [N(op, ["a", "b", "c"], ["y"])],
            {"a": f(2, 1, 4), "b": f(3, 1), "c": f(4)}, {}, ["y"])
    add("m_sum_one", 13, [N("Sum", ["a"], ["y"])], {"a": f(4, 3)}, {}, ["y"])
    add("m_max_two", 13, [N("Max", ["a", "b"], ["y"])], {"a": f(4, 3), "b": f(4, 3)}, {}, ["y"])
    add("m_min_i64", 13, [N("Min", ["a", "b"], ["y"])], {"a": i64(-9, 9, 4, 3), "b": i64(-9, 9, 3)}, {}, ["y"])
    add("m_max_i64", 13, [N("Max", ["a", "b", "c"], ["y"])],
        {"a": i64(-9, 9, 4, 1), "b": i64(-9, 9, 3), "c": i64(-9, 9, 4, 3)}, {}, ["y"])

    # Mod: integer (divisor's sign), fmod (dividend's sign), float fmod.
    nz = lambda *s: (r.integers(1, 5, s) * r.choice([-1, 1], s)).astype(np.int64)
    add("m_mod_i64", 13, [N("Mod", ["a", "b"], ["y"])], {"a": i64(-20, 20, 4, 3), "b": nz(3)}, {}, ["y"])
    add("m_mod_fmod_i64", 13, [N("Mod", ["a", "b"], ["y"], fmod=1)], {"a": i64(-20, 20, 4, 3), "b": nz(4, 3)}, {}, ["y"])
    add("m_mod_f32", 13, [N("Mod", ["a", "b"], ["y"], fmod=1)], {"a": f(4, 3) * 5}, {"b": T([1.5, -2.0, 0.75])}, ["y"])

    # Shape arithmetic folded at compile time: Equal, Not, And, Greater,
    # Min, Neg, Where pick Reshape's target; Sin, Cos of the shape feed an Add.
    i64c = lambda v: np.array(v, np.int64)
    add("m_fold_mask", 13, [
        N("Shape", ["x"], ["s"]),
        N("Equal", ["s", "c40"], ["e"]),
        N("Not", ["e"], ["ne"]),
        N("Greater", ["s", "c00"], ["gt"]),
        N("And", ["ne", "gt"], ["cond"]),
        N("Min", ["s", "c33"], ["mn"]),
        N("Neg", ["one"], ["m1"]),
        N("Where", ["cond", "m1", "mn"], ["tgt"]),
        N("Reshape", ["x", "tgt"], ["y"]),
    ], {"x": f(4, 3)}, {"c40": i64c([4, 0]), "c00": i64c([0, 0]), "c33": i64c([3, 3]), "one": i64c([1, 1])}, ["y"])
    add("m_fold_trig", 13, [
        N("Shape", ["x"], ["s"]),
        N("Cast", ["s"], ["sf"], to=F32),
        N("Sin", ["sf"], ["sn"]),
        N("Cos", ["sf"], ["cs"]),
        N("Add", ["x", "sn"], ["t"]),
        N("Add", ["t", "cs"], ["y"]),
    ], {"x": f(3, 2)}, {}, ["y"])
    # More folded shape arithmetic: Mod, comparisons, Or/Xor, Max, Abs,
    # Sign, Neg, Clip give Reshape's target [2, 6].
    add("m_fold_mod", 13, [
        N("Shape", ["x"], ["s"]),
        N("Mod", ["s", "c35"], ["m"]),
        N("Add", ["m", "m"], ["t"]),
        N("LessOrEqual", ["s", "c44"], ["le"]),
        N("GreaterOrEqual", ["s", "c50"], ["ge"]),
        N("Xor", ["le", "ge"], ["xo"]),
        N("Less", ["s", "c00"], ["lt"]),
        N("Or", ["xo", "lt"], ["cond"]),
        N("Max", ["t", "c00"], ["mx"]),
        N("Neg", ["t"], ["ng"]),
        N("Abs", ["ng"], ["ab"]),
        N("Where", ["cond", "mx", "ab"], ["w"]),
        N("Sign", ["w"], ["sg"]),
        N("Mul", ["w", "sg"], ["w2"]),
        N("Clip", ["w2", "c1", "c6"], ["tgt"]),
        N("Reshape", ["x", "tgt"], ["y"]),
    ], {"x": f(4, 3)}, {"c35": i64c([3, 5]), "c44": i64c([4, 4]), "c50": i64c([5, 0]), "c00": i64c([0, 0]),
                        "c1": i64c(1), "c6": i64c(6)}, ["y"])

    # Inverse and hyperbolic trigonometry, on inputs inside each domain.
    u = lambda *s: r.uniform(-0.9, 0.9, s).astype(np.float32)
    for op, x in (("Acos", u(4, 3)), ("Asin", u(4, 3)), ("Atanh", u(4, 3)), ("Atan", f(4, 3) * 3),
                  ("Asinh", f(4, 3) * 3), ("Acosh", pos(4, 3) * 4 + 1), ("Cosh", f(4, 3) * 2),
                  ("Sinh", f(4, 3) * 2), ("Tan", u(4, 3) * 1.5)):
        add("m_" + op.lower(), 13, [N(op, ["x"], ["y"])], {"x": x}, {}, ["y"])
    add("m_thresholdedrelu", 13, [N("ThresholdedRelu", ["x"], ["y"], alpha=0.4)], {"x": f(4, 6)}, {}, ["y"])
    add("m_shrink", 13, [N("Shrink", ["x"], ["y"], lambd=0.6, bias=0.2)], {"x": f(4, 6) * 2}, {}, ["y"])
    add("m_celu", 13, [N("Celu", ["x"], ["y"], alpha=0.7)], {"x": f(4, 6) * 2}, {}, ["y"])

    # Bitwise ops on int64, and on int32 / uint8 through Casts (graph inputs
    # are int64): the uint8 BitwiseNot must wrap to 255 - x when narrowed.
    I32, U8 = TensorProto.INT32, TensorProto.UINT8
    big = lambda *s: r.integers(-2**40, 2**40, s, dtype=np.int64)
    add("m_bitwise_and", 18, [N("BitwiseAnd", ["a", "b"], ["y"])], {"a": big(4, 6), "b": big(6)}, {}, ["y"])
    add("m_bitwise_or", 18, [N("BitwiseOr", ["a", "b"], ["y"])], {"a": big(4, 1), "b": big(4, 6)}, {}, ["y"])
    add("m_bitwise_xor", 18, [N("BitwiseXor", ["a", "b"], ["y"])], {"a": big(4, 6), "b": big(4, 6)}, {}, ["y"])
    add("m_bitwise_not", 18, [N("BitwiseNot", ["a"], ["y"])], {"a": big(4, 6)}, {}, ["y"])
    add("m_bitwise_not_u8", 18, [N("Cast", ["a"], ["a8"], to=U8), N("BitwiseNot", ["a8"], ["y8"]),
                                 N("Cast", ["y8"], ["y"], to=I64)], {"a": i64(0, 256, 4, 6)}, {}, ["y"])
    add("m_bitwise_xor_i32", 18, [N("Cast", ["a"], ["a32"], to=I32), N("Cast", ["b"], ["b32"], to=I32),
                                  N("BitwiseXor", ["a32", "b32"], ["y32"]), N("Cast", ["y32"], ["y"], to=I64)],
        {"a": i64(-2**31, 2**31, 4, 6), "b": i64(-2**31, 2**31, 4, 6)}, {}, ["y"])
    add("m_bitwise_and_u8", 18, [N("Cast", ["a"], ["a8"], to=U8), N("Cast", ["b"], ["b8"], to=U8),
                                 N("BitwiseAnd", ["a8", "b8"], ["y8"]), N("Cast", ["y8"], ["y"], to=I64)],
        {"a": i64(0, 256, 4, 6), "b": i64(0, 256, 4, 6)}, {}, ["y"])
    # Folded: BitwiseNot of a constant uint8 vector wraps at compile time too.
    add("m_fold_bitwise_not_u8", 18, [N("BitwiseNot", ["c"], ["n8"]), N("Cast", ["n8"], ["n"], to=I64),
                                      N("Add", ["x", "n"], ["y"])],
        {"x": i64(0, 9, 2, 3)}, {"c": np.array([0, 7, 255], np.uint8)}, ["y"])
    # Three chained Adds, each read only by the next: the bias fusion
    # (codegen/views.c) once fused the first into the second and the second
    # into the third, so that the first never ran (fuzz_plans --train 4_7:
    # a loss that adds its terms).
    add("m_add_chain3", 13, [N("Add", ["a", "b"], ["s0"]), N("Add", ["s0", "c"], ["s1"]),
                             N("Add", ["s1", "d"], ["y"])],
        {"a": f(3, 4), "b": f(3, 4), "c": f(3, 4), "d": f(3, 4)}, {}, ["y"])
