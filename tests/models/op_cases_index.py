"""op_cases_index.py: per-op test models of the index family (ir/ops_index.def).

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
    r = np.random.default_rng(4244584)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    i64 = lambda lo, hi, *s: r.integers(lo, hi, s, dtype=np.int64)
    c64 = lambda *v: np.array(v, np.int64)

    # Expand: shape as a constant input; bidirectional broadcast, rank growth.
    add("x_expand", 13, [N("Expand", ["x", "s"], ["y"])], {"x": f(2, 1, 4)}, {"s": c64(2, 6, 1)}, ["y"])
    add("x_expand_rank_up", 13, [N("Expand", ["x", "s"], ["y"])], {"x": i64(-9, 9, 4, 1)}, {"s": c64(2, 4, 6)}, ["y"])
    add("x_expand_then_add", 13, [N("Expand", ["x", "s"], ["e"]), N("Add", ["e", "b"], ["y"])],
        {"x": f(1, 3), "b": f(4, 3)}, {"s": c64(4, 1)}, ["y"])
    # Tile: repeats constant; untiled, tiled and size-1 dims.
    add("x_tile", 13, [N("Tile", ["x", "rep"], ["y"])], {"x": f(2, 4, 1)}, {"rep": c64(1, 3, 2)}, ["y"])
    add("x_tile_2d", 13, [N("Tile", ["x", "rep"], ["y"])], {"x": i64(-9, 9, 2, 4)}, {"rep": c64(2, 2)}, ["y"])
    # A split of Tile's output on the tiled dim (from b): whole copies per rank.
    add("x_tile_then_add", 13, [N("Tile", ["x", "rep"], ["t"]), N("Add", ["t", "b"], ["y"])],
        {"x": f(2, 3), "b": f(8, 3)}, {"rep": c64(4, 1)}, ["y"])
    # Trilu: upper (default), lower with k, negative k on int64.
    add("x_trilu_upper", 14, [N("Trilu", ["x"], ["y"])], {"x": f(4, 6)}, {}, ["y"])
    add("x_trilu_lower_k", 14, [N("Trilu", ["x", "k"], ["y"], upper=0)], {"x": f(2, 4, 6)}, {"k": c64(1)}, ["y"])
    add("x_trilu_upper_kneg", 14, [N("Trilu", ["x", "k"], ["y"], upper=1)], {"x": i64(-9, 9, 6, 4)},
        {"k": np.array(-1, np.int64)}, ["y"])
    add("x_trilu_k_input", 14, [N("Trilu", ["x", "k"], ["y"], upper=0)], {"x": f(4, 6), "k": np.array(-2, np.int64)},
        {}, ["y"])
    # GatherElements: indices smaller than data off the axis, negative indices.
    add("x_gather_elements_axis1", 13, [N("GatherElements", ["x", "i"], ["y"], axis=1)],
        {"x": f(4, 6), "i": i64(-6, 6, 4, 2)}, {}, ["y"])
    add("x_gather_elements_axis0", 13, [N("GatherElements", ["x", "i"], ["y"], axis=0)],
        {"x": f(4, 6), "i": i64(-4, 4, 2, 6)}, {}, ["y"])
    add("x_gather_elements_3d", 13, [N("GatherElements", ["x", "i"], ["y"], axis=-1)],
        {"x": f(2, 4, 6), "i": i64(0, 6, 2, 4, 6)}, {}, ["y"])
    # GatherND: whole tuples, partial tuples (slices), batch_dims.
    add("x_gather_nd", 13, [N("GatherND", ["x", "i"], ["y"])],
        {"x": f(4, 2, 6), "i": np.array([[1, 0], [3, 1], [-1, 0], [0, 1]], np.int64)}, {}, ["y"])
    add("x_gather_nd_full", 13, [N("GatherND", ["x", "i"], ["y"])],
        {"x": i64(-9, 9, 4, 6), "i": np.array([[[1, 5], [3, 0]], [[2, 2], [0, -1]]], np.int64)}, {}, ["y"])
    add("x_gather_nd_batch", 13, [N("GatherND", ["x", "i"], ["y"], batch_dims=1)],
        {"x": f(2, 4, 6), "i": np.array([[[1], [3], [0], [2]], [[0], [0], [3], [1]]], np.int64)}, {}, ["y"])
    # ScatterND: no reduction (unique indices), add with duplicates.
    add("x_scatter_nd", 13, [N("ScatterND", ["x", "i", "u"], ["y"])],
        {"x": f(4, 6), "u": f(2, 6)}, {"i": np.array([[1], [3]], np.int64)}, ["y"])
    add("x_scatter_nd_add", 16, [N("ScatterND", ["x", "i", "u"], ["y"], reduction="add")],
        {"x": f(4, 2, 6), "u": f(3, 6)}, {"i": np.array([[1, 0], [1, 0], [3, 1]], np.int64)}, ["y"])
    add("x_scatter_nd_elems", 13, [N("ScatterND", ["x", "i", "u"], ["y"])],
        {"x": i64(-9, 9, 4, 6), "u": i64(-9, 9, 3)}, {"i": np.array([[0, 5], [3, 0], [2, 2]], np.int64)}, ["y"])
    # ScatterElements: no reduction (unique per line), add with duplicates.
    add("x_scatter_elements", 13, [N("ScatterElements", ["x", "i", "u"], ["y"], axis=1)],
        {"x": f(4, 6), "u": f(4, 2)}, {"i": np.array([[0, 5], [1, -2], [3, 2], [5, 0]], np.int64)}, ["y"])
    add("x_scatter_elements_add", 16, [N("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction="add")],
        {"x": f(4, 6), "u": f(3, 6)}, {"i": i64(0, 4, 3, 6)}, ["y"])
    add("x_scatter_elements_max", 18, [N("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="max")],
        {"x": f(2, 6), "u": f(2, 4)}, {"i": i64(0, 6, 2, 4)}, ["y"])
    # Pad: constant (value given / default), reflect, edge, wrap, axes.
    add("x_pad_constant", 13, [N("Pad", ["x", "p", "v"], ["y"])],
        {"x": f(2, 4)}, {"p": c64(0, 1, 0, 2), "v": np.array(1.5, np.float32)}, ["y"])
    add("x_pad_constant_i64", 13, [N("Pad", ["x", "p"], ["y"], mode="constant")],
        {"x": i64(-9, 9, 2, 3, 4)}, {"p": c64(1, 0, 0, 0, 2, 1)}, ["y"])
    add("x_pad_reflect", 13, [N("Pad", ["x", "p"], ["y"], mode="reflect")],
        {"x": f(2, 3, 4)}, {"p": c64(0, 0, 1, 0, 0, 2)}, ["y"])
    add("x_pad_edge", 13, [N("Pad", ["x", "p"], ["y"], mode="edge")], {"x": f(2, 4)}, {"p": c64(1, 0, 1, 3)}, ["y"])
    add("x_pad_wrap", 19, [N("Pad", ["x", "p"], ["y"], mode="wrap")], {"x": f(2, 4)}, {"p": c64(0, 1, 0, 2)}, ["y"])
    add("x_pad_axes", 18, [N("Pad", ["x", "p", "", "a"], ["y"])],
        {"x": f(2, 4, 4)}, {"p": c64(1, 2), "a": c64(-1)}, ["y"])
    add("x_pad_crop", 13, [N("Pad", ["x", "p"], ["y"])], {"x": f(2, 6)}, {"p": c64(0, -1, 0, 2)}, ["y"])
    # OneHot: int64 indices with negatives and one out of range; axes.
    add("x_onehot", 13, [N("OneHot", ["i", "d", "v"], ["y"])],
        {"i": np.array([[0, 3, -1, 4], [2, -5, 1, 7]], np.int64)},
        {"d": np.array(5, np.int64), "v": np.array([0.0, 1.0], np.float32)}, ["y"])
    add("x_onehot_axis0_i64", 13, [N("OneHot", ["i", "d", "v"], ["y"], axis=0)],
        {"i": i64(-4, 4, 2, 4)}, {"d": c64(4), "v": c64(-2, 7)}, ["y"])
    add("x_onehot_float", 13, [N("OneHot", ["i", "d", "v"], ["y"], axis=1)],
        {"i": np.array([[0.0, 2.0], [1.0, 3.0]], np.float32)},
        {"d": np.array([4.0], np.float32), "v": np.array([0.5, -2.0], np.float32)}, ["y"])
    # DepthToSpace (DCR, CRD), SpaceToDepth.
    add("x_depth_to_space_dcr", 13, [N("DepthToSpace", ["x"], ["y"], blocksize=2)], {"x": f(2, 8, 2, 3)}, {}, ["y"])
    add("x_depth_to_space_crd", 13, [N("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")],
        {"x": f(2, 8, 2, 3)}, {}, ["y"])
    add("x_space_to_depth", 13, [N("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": f(2, 2, 4, 6)}, {}, ["y"])
    # Folding: Expand, Tile, GatherElements, GatherND on int64 constants.
    add("x_fold_index", 13, [N("Expand", ["c", "s"], ["e"]), N("Tile", ["e", "rep"], ["t"]),
                             N("GatherElements", ["t", "gi"], ["ge"], axis=1), N("GatherND", ["ge", "ni"], ["gn"]),
                             N("Add", ["x", "gn"], ["y"])],
        {"x": i64(-9, 9, 2, 6)},
        {"c": c64(4, 5, 6).reshape(1, 3), "s": c64(2, 3), "rep": c64(1, 2), "gi": i64(-6, 6, 2, 6),
         "ni": np.array([[1], [0]], np.int64)}, ["y"])
