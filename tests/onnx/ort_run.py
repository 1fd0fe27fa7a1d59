#!/usr/bin/env python3
"""Runs an ONNX network with onnxruntime (CPU) on a raw float32 image and writes its first output.

    .venv/bin/python tests/onnx/ort_run.py MODEL.onnx INPUT.f32 H W OUTPUT.f32

INPUT.f32 is 1x3xHxW, raw little-endian float32, NCHW. The model's first input gets it; when the
file declares a static H and W different from the given ones, they are made symbolic first (the
model is changed in memory only), so a file exported at 224x224 runs at any size. OUTPUT.f32 gets
the first output, raw little-endian float32; its shape is printed as e.g. "output 1x10".
A test tool for `tessel export` (Python is never a tessel run-time dependency).
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: ort_run.py MODEL.onnx INPUT.f32 H W OUTPUT.f32")
    model_path, input_path, h, w, output_path = sys.argv[1:]
    h, w = int(h), int(w)
    x = np.fromfile(input_path, dtype="<f4")
    if x.size != 3 * h * w:
        sys.exit(f"{input_path}: {x.size} floats, expected 1x3x{h}x{w} = {3 * h * w}")
    x = x.reshape(1, 3, h, w)

    model = onnx.load(model_path)
    inits = {i.name for i in model.graph.initializer}
    inp = next(i for i in model.graph.input if i.name not in inits)
    dims = inp.type.tensor_type.shape.dim
    if len(dims) == 4 and any(d.HasField("dim_value") for d in dims[2:]) and \
            [d.dim_value for d in dims[2:]] != [h, w]:
        dims[2].dim_param, dims[3].dim_param = "H", "W"
        del model.graph.value_info[:]

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    y = sess.run(None, {inp.name: x})[0]
    np.ascontiguousarray(y, dtype="<f4").tofile(output_path)
    print("output " + "x".join(str(d) for d in y.shape))


if __name__ == "__main__":
    main()
