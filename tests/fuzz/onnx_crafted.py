#!/usr/bin/env python3
"""Writes the hand-made regression inputs of the ONNX importer (tests/fuzz/README.md) to OUTDIR.

    .venv/bin/python tests/fuzz/onnx_crafted.py tests/fuzz/regressions/onnx

Each is a tiny graph made with onnx.helper that once crashed, hung, overflowed, allocated
gigabytes, let a LibTorch c10::Error escape or imported something else than the file says;
pipelines::import_onnx (or io::read_onnx) now refuses each with a tessel::Error naming the node.
Byte mutations of the seeds rarely reach these (they need a whole node or a consistent shape), so
they are written here rather than found by the fuzzer, and committed: the smoke run needs no
Python. What each one did before is in the comment above it.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper


def model(nodes, constants, channels=3, size=16, output=None):
    x = h.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    y = h.make_tensor_value_info(output or nodes[-1].output[0], TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()]
    m = h.make_model(h.make_graph(nodes, "crafted", [x], [y], inits),
                     opset_imports=[h.make_opsetid("", 18)], producer_name="onnx_crafted.py")
    m.ir_version = 8
    return m


def f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def chain(op, first, count, prefix, **attrs):
    """`count` nodes of `op`, each reading the one before (twice for Concat)."""
    nodes, last = [], first
    for i in range(count):
        inputs = [last, last] if op == "Concat" else [last]
        nodes.append(h.make_node(op, inputs, [f"{prefix}{i}"], **attrs))
        last = f"{prefix}{i}"
    return nodes


POOLED = [h.make_node("GlobalAveragePool", ["x"], ["p"]), h.make_node("Flatten", ["p"], ["f"])]
CONV_W = {"w": f32(4, 3, 3, 3)}


def crafted():
    # Concats of concats: the channel count doubled past int64 (UBSan: signed overflow).
    yield "concat-doubling-channels", model(chain("Concat", "x", 64, "c", axis=1), {})
    # A batch norm, a LayerNorm on an input of 2^31 - 1 channels: the graph allocated the
    # layer's 8 GB parameters before the 3-value constants were compared (c10::Error: out of
    # memory).
    yield "batchnorm-huge-channels", model(
        [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.ones(3, np.float32)}, channels=2**31 - 1)
    yield "layernorm-huge-channels", model(
        [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
         h.make_node("LayerNormalization", ["t", "s", "b"], ["n"], axis=-1),
         h.make_node("Transpose", ["n"], ["y"], perm=[0, 3, 1, 2])],
        {"s": f32(3), "b": f32(3)}, channels=2**31 - 1)
    # group 2^62: the weight's channels times the groups overflowed.
    yield "conv-huge-group", model(
        [h.make_node("Conv", ["x", "w"], ["y"], group=2**62)], {"w": f32(4, 2, 3, 3)}, channels=2)
    # A dilation and pads near int64's end: the window arithmetic overflowed.
    yield "conv-huge-dilation", model(
        [h.make_node("Conv", ["x", "w"], ["y"], dilations=[2**62, 1], pads=[2**62, 0, 2**62, 0])],
        CONV_W)
    # An image side of 2^62 with pads of 2^62: the output size overflowed.
    yield "input-huge-size", model(
        [h.make_node("Conv", ["x", "w"], ["y"], pads=[2**62] * 4)], CONV_W, size=2**62)
    # One stride, one dilation where two are read: a read past the attribute's end.
    yield "avgpool-one-stride", model(
        [h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2])], {})
    yield "conv-same-one-dilation", model(
        [h.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", dilations=[1])], CONV_W)
    # Pads as a 2×4 tensor, a pad value of two numbers: c10::Error from Tensor::item.
    yield "pad-pads-matrix", model(
        [h.make_node("Pad", ["x", "p"], ["q"]), h.make_node("Conv", ["q", "w"], ["y"])],
        {"p": np.zeros((2, 4), np.int64), **CONV_W})
    yield "pad-value-two-numbers", model(
        [h.make_node("Pad", ["x", "p", "v"], ["q"]), h.make_node("Conv", ["q", "w"], ["y"])],
        {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "v": np.zeros(2, np.float32),
         **CONV_W})
    # A Pad that crops (-1) before a Conv padding 1: folded into padding 0, another function.
    yield "pad-negative-folded", model(
        [h.make_node("Pad", ["x", "p"], ["q"]),
         h.make_node("Conv", ["q", "w"], ["y"], pads=[1, 1, 1, 1])],
        {"p": np.array([0, 0, -1, 0, 0, 0, 0, 0], np.int64), **CONV_W})
    # Shape arithmetic on constants LibTorch refuses: c10::Error escaped.
    yield "add-constants-not-broadcasting", model(
        [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Mul", ["x", "s"], ["y"])],
        {"a": f32(3, 1, 2), "b": f32(3, 1, 3)})
    yield "reshape-constant-mismatch", model(
        [h.make_node("Reshape", ["a", "shape"], ["s"]), h.make_node("Mul", ["x", "s"], ["y"])],
        {"a": f32(3, 1, 1), "shape": np.array([0, 2], np.int64)})
    yield "transpose-constant-bad-perm", model(
        [h.make_node("Transpose", ["a"], ["s"], perm=[0, 0, 5]),
         h.make_node("Mul", ["x", "s"], ["y"])], {"a": f32(3, 1, 1)})
    yield "transpose-3d-constant-default-perm", model(
        [h.make_node("Transpose", ["a"], ["s"]), h.make_node("Mul", ["x", "s"], ["y"])],
        {"a": f32(1, 1, 3)})
    yield "gemm-3d-weight", model(POOLED + [h.make_node("Gemm", ["f", "w"], ["y"])],
                                  {"w": f32(2, 3, 1)})
    # 4096 × 4096 constants from a 4096 and a 4096, forty times: 2.6 GB.
    yield "constant-broadcast-blowup", model(
        [h.make_node("Add", ["a", "b"], ["s0"])] +
        [h.make_node("Add", [f"s{i - 1}", "a"], [f"s{i}"]) for i in range(1, 40)] +
        [h.make_node("Mul", ["x", "s39"], ["y"])],
        {"a": np.ones((4096, 1), np.float32), "b": np.ones((1, 4096), np.float32)})
    # An Add that writes the Conv's own output, folded into its bias: the output's aliases
    # looped forever.
    yield "conv-bias-add-same-output", model(
        [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Add", ["c", "b"], ["c"])],
        {"w": f32(4, 3, 1, 1), "b": f32(4)}, output="c")
    # Division by a per-channel constant holding a zero: imported as an infinite weight. By a
    # scalar zero it was refused, with a message about finite constants.
    yield "div-by-zero-channel", model(
        [h.make_node("Div", ["x", "z"], ["y"])],
        {"z": np.array([1, 0, 1], np.float32).reshape(3, 1, 1)})
    yield "div-by-zero-scalar", model(
        [h.make_node("Div", ["x", "z"], ["y"])], {"z": np.zeros((), np.float32)})
    # An Erf without an input: the GELU fusion read it (SEGV).
    yield "erf-without-input", model([h.make_node("Erf", [], ["y"])], {})
    # 3000 ReLUs: every default layer name was tried against every layer, O(n³): over 20 s.
    yield "deep-relu-chain", model(chain("Relu", "x", 3000, "r"), {})


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, m in crafted():
        path = os.path.join(sys.argv[1], name + ".onnx")
        onnx.save(m, path)
        print(f"{path}: {os.path.getsize(path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
