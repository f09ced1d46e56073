"""op_cases_nn.py: per-op test models of the nn family (ir/ops_nn.def).

cases(add) calls add(case, opset, nodes, inputs, initializers, outputs) for
each model, as op_cases_reduce.py does. Every case name starts with nn_.

Batch and channel dims are even, so that tests/e2e/run_ops_sharded.sh
splits them (they pass through every op here but LRN's channels and
grouped ConvTranspose); the spatial dims are split too, which the rules
must undo (gathered before the window slides). Resize's roi, scales and
sizes are initializers: the compiler needs them at compile time.
"""
import numpy as np
from onnx import helper

N = helper.make_node


def cases(add):
    r = np.random.default_rng(3207486)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    fl = lambda *v: np.array(v, np.float32)
    ints = lambda *v: np.array(v, np.int64)

    # ---- AveragePool (opset 19: dilations), LpPool (opset 18), GlobalMaxPool
    add("nn_avgpool_2d", 19, [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1])], {"x": f(2, 4, 6, 6)}, {}, ["y"])
    add("nn_avgpool_2d_ceil", 19, [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                     pads=[1, 0, 1, 0], ceil_mode=1)], {"x": f(2, 4, 6, 6)}, {}, ["y"])
    # count_include_pad counts the pads a window covers. Its pads are the
    # same on every side: ONNX Runtime 1.22 reads a 2-D pool's end pad of
    # the rows from the begin pad of the columns (pads[1]), so asymmetric
    # pads give other counts there than in the spec and the ONNX reference.
    add("nn_avgpool_2d_incl_ceil", 19, [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1)],
        {"x": f(2, 4, 6, 6)}, {}, ["y"])
    add("nn_avgpool_1d_same", 19, [N("AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[2],
                                     auto_pad="SAME_UPPER")], {"x": f(2, 4, 7)}, {}, ["y"])
    add("nn_avgpool_3d_dil", 19, [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2], dilations=[2, 2, 2])],
        {"x": f(2, 2, 4, 5, 4)}, {}, ["y"])
    add("nn_lppool_2d", 18, [N("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], p=3)],
        {"x": f(2, 4, 6, 6)}, {}, ["y"])
    add("nn_lppool_1d_pads", 18, [N("LpPool", ["x"], ["y"], kernel_shape=[3], pads=[1, 1])],
        {"x": f(2, 2, 8)}, {}, ["y"])
    add("nn_globalmaxpool", 13, [N("GlobalMaxPool", ["x"], ["y"])], {"x": f(2, 4, 3, 5)}, {}, ["y"])

    # ---- LRN (ONNX Runtime takes odd sizes and 4-D inputs only)
    add("nn_lrn", 13, [N("LRN", ["x"], ["y"], size=3, alpha=1e-3, beta=0.75, bias=2.0)],
        {"x": f(2, 6, 4, 4)}, {}, ["y"])
    add("nn_lrn_5", 13, [N("LRN", ["x"], ["y"], size=5)], {"x": f(2, 6, 3, 2)}, {}, ["y"])

    # ---- Resize: nearest modes, linear, cubic, coordinate transforms,
    # scales or sizes, axes and keep_aspect_ratio_policy (opset 18+)
    def resize(case, x, scales=None, sizes=None, roi=None, opset=19, **attrs):
        names = ["x", "roi" if roi is not None else "", "scales" if scales is not None else ""]
        inits = {}
        if roi is not None:
            inits["roi"] = roi
        if scales is not None:
            inits["scales"] = scales
        if sizes is not None:
            names.append("sizes")
            inits["sizes"] = sizes
        while names[-1] == "":
            names.pop()
        add(case, opset, [N("Resize", names, ["y"], **attrs)], {"x": x}, inits, ["y"])

    resize("nn_resize_nearest_up", f(2, 2, 3, 4), scales=fl(1, 1, 2, 1.5), mode="nearest")
    resize("nn_resize_nearest_asym_floor", f(2, 2, 8, 6), scales=fl(1, 1, 0.5, 0.5), mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    resize("nn_resize_nearest_ceil_sizes", f(2, 2, 4, 4), sizes=ints(2, 2, 7, 3), mode="nearest",
           coordinate_transformation_mode="align_corners", nearest_mode="ceil")
    resize("nn_resize_nearest_prefer_ceil", f(2, 2, 4, 6), scales=fl(1, 1, 3, 0.5), mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil")
    # integers: nearest only; uint8 (images) through Casts, widened to int64 around the kernel
    add("nn_resize_nearest_uint8", 19, [N("Cast", ["x"], ["xb"], to=2), N("Resize", ["xb", "", "scales"], ["yb"]),
                                        N("Cast", ["yb"], ["y"], to=7)],
        {"x": r.integers(0, 255, (2, 2, 3, 4), dtype=np.int64)}, {"scales": fl(1, 1, 2, 0.5)}, ["y"])
    resize("nn_resize_linear_up", f(2, 2, 4, 4), scales=fl(1, 1, 2, 2), mode="linear")
    resize("nn_resize_linear_align_sizes", f(2, 2, 4, 4), sizes=ints(2, 2, 3, 7), mode="linear",
           coordinate_transformation_mode="align_corners")
    resize("nn_resize_linear_pytorch_down", f(2, 2, 8, 6), scales=fl(1, 1, 0.5, 0.5), mode="linear",
           coordinate_transformation_mode="pytorch_half_pixel")
    resize("nn_resize_cubic", f(2, 2, 4, 4), scales=fl(1, 1, 1.5, 2), mode="cubic", exclude_outside=1)
    resize("nn_resize_cubic_asym", f(2, 2, 4, 4), scales=fl(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.5,
           coordinate_transformation_mode="asymmetric")
    resize("nn_resize_crop", f(2, 2, 6, 6), sizes=ints(2, 2, 3, 4), roi=fl(0, 0, 0.2, 0.4, 1, 1, 0.8, 1.2),
           mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0)
    resize("nn_resize_axes_not_larger", f(2, 2, 4, 6), sizes=ints(3, 3), axes=[2, 3], mode="linear",
           keep_aspect_ratio_policy="not_larger")
    resize("nn_resize_antialias", f(2, 2, 8, 8), scales=fl(1, 1, 0.5, 0.75), mode="linear", antialias=1)
    resize("nn_resize_rank3", f(4, 6, 5), scales=fl(1, 1, 2), mode="linear")
    resize("nn_resize_batch_dim", f(2, 4, 4), scales=fl(2, 1, 1), mode="nearest")

    # ---- ConvTranspose: strides, pads, output_padding, groups, dilations,
    # output_shape, auto_pad, 1-D and 3-D
    add("nn_convt_2d", 17, [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1])], {"x": f(2, 4, 5, 5), "w": f(4, 6, 3, 3)}, {"b": f(6)}, ["y"])
    add("nn_convt_group_dil", 17, [N("ConvTranspose", ["x", "w"], ["y"], group=2, dilations=[2, 2])],
        {"x": f(2, 4, 4, 4)}, {"w": f(4, 3, 2, 2)}, ["y"])
    add("nn_convt_1d_output_shape", 17, [N("ConvTranspose", ["x", "w"], ["y"], strides=[3], output_shape=[14])],
        {"x": f(2, 4, 5)}, {"w": f(4, 2, 3)}, ["y"])
    add("nn_convt_same_upper", 17, [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                                      auto_pad="SAME_UPPER")], {"x": f(2, 2, 3, 3)}, {"w": f(2, 4, 3, 3), "b": f(4)},
        ["y"])
    add("nn_convt_3d", 17, [N("ConvTranspose", ["x", "w"], ["y"])], {"x": f(2, 2, 3, 2, 3)},
        {"w": f(2, 2, 2, 2, 2)}, ["y"])

    # ---- Col2Im (opset 18): image_shape and block_shape as initializers
    add("nn_col2im_2d", 18, [N("Col2Im", ["x", "image", "block"], ["y"])], {"x": f(2, 8, 16)},
        {"image": ints(5, 5), "block": ints(2, 2)}, ["y"])
    add("nn_col2im_pads_strides", 18, [N("Col2Im", ["x", "image", "block"], ["y"], pads=[1, 0, 1, 1],
                                         strides=[2, 1], dilations=[1, 2])], {"x": f(2, 12, 12)},
        {"image": ints(6, 5), "block": ints(3, 2)}, ["y"])

    # ---- MaxUnpool of MaxPool's indices. No case gives output_shape larger
    # than the inverse of the pooling: the ONNX reference (and conformance
    # suite) puts the values in its leading corner, ONNX Runtime 1.22 writes
    # the flat indices into the larger tensor, so their planes shift.
    add("nn_maxunpool", 13, [N("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
                             N("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        {"x": f(2, 4, 4, 6)}, {}, ["y"])
    add("nn_maxunpool_1d_shape", 13, [N("MaxPool", ["x"], ["p", "i"], kernel_shape=[3], strides=[2]),
                                      N("MaxUnpool", ["p", "i", "shape"], ["y"], kernel_shape=[3], strides=[2])],
        {"x": f(2, 4, 7)}, {"shape": ints(2, 4, 7)}, ["y"])
