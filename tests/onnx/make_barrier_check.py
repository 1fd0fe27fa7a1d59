#!/usr/bin/env python3
"""Writes the reference for the train-mode import check: PyTorch's own BatchNorm2d, GroupNorm and
squeeze-and-excitation in TRAIN mode on a whole image, against which Tessel's tiled step must give
the same gradients (tests/pipelines/onnx_import_test.cpp, TrainModeImport).

    .venv/bin/python tests/onnx/make_barrier_check.py OUTDIR

A small float64 network (conv, BatchNorm2d, relu, a residual block with a second batch norm and a
squeeze-and-excitation with a sigmoid gate, a strided conv, GroupNorm, SiLU, a squeeze-and-
excitation with a SiLU and a hard-sigmoid gate, a 1x1 conv) with random weights and running
statistics is exported in eval mode as PyTorch writes it with its batch norms kept (the legacy
exporter, opset 17, do_constant_folding=False: otherwise a batch norm after a conv is folded into
it). Then ONE train-mode step on a 1x3x40x37 image (a size no tile grid divides): the output, the
loss sum(output * projection), every parameter's gradient and every batch norm's running mean and
variance after the step. Files in OUTDIR: barrier_check.onnx, raw little-endian float64 tensors
(*.f64, C order) and barrier_check.json indexing them:

    {"input": {"file", "shape"}, "projection": ..., "output": ..., "loss": float,
     "parameters": [{"name", "shape", "value", "grad"}],     value/grad: file names
     "buffers": [{"name", "shape", "before", "after"}]}

PyTorch's own float64 hardsigmoid backward multiplies by 1.0f/6.0f (a float32 constant in ATen's
CPU kernel), a relative error of 3e-8 in every gradient behind it; the reference step therefore
runs the second gate's forward as F.hardsigmoid with the exact derivative (1/6 inside (-3, 3)).

The C++ test finds each PyTorch tensor among Tessel's parameters by value (the import copies them
bit for bit), so it needs no table of names. Deterministic; a second run is skipped while this
script and torch are unchanged. Python is a test tool here only.
"""

import hashlib
import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import SqueezeExcitation

SIZE = (40, 37)
SEED = 20


class ExactHardsigmoid(torch.autograd.Function):
    """F.hardsigmoid, with the derivative 1/6 in float64 (ATen's backward uses 1.0f/6.0f)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.hardsigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x > -3) & (x < 3)).to(grad.dtype) / 6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)  # momentum 0.1
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8, eps=1e-3, momentum=0.3)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.se1 = SqueezeExcitation(8, 4)  # relu, sigmoid
        self.down = nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False)
        self.gn = nn.GroupNorm(3, 12)
        self.se2 = SqueezeExcitation(12, 3, activation=nn.SiLU, scale_activation=nn.Hardsigmoid)
        self.head = nn.Conv2d(12, 5, 1)

    def forward(self, x):
        x = torch.relu(self.bn1(self.stem(x)))
        y = torch.relu(self.bn2(self.conv2(x)))
        y = self.se1(self.conv3(y))
        x = torch.relu(x + y)
        x = nn.functional.silu(self.gn(self.down(x)))
        return self.head(self.se2(x))


def write(outdir, name, t):
    t.detach().contiguous().numpy().astype("<f8").tofile(os.path.join(outdir, name))
    return {"file": name, "shape": list(t.shape)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_barrier_check.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    stamp_path = os.path.join(outdir, "stamp")
    with open(__file__, "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest() + " torch " + torch.__version__
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        print("make_barrier_check: %s is up to date" % outdir)
        return
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + 1)
    model = Net().double()
    with torch.no_grad():  # nothing all-zero or all-one
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
    x = torch.randn(1, 3, *SIZE, generator=gen, dtype=torch.float64)

    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), os.path.join(outdir, "barrier_check.onnx"), dynamo=False,
                          opset_version=17, do_constant_folding=False)

    buffers = {n: b.clone() for n, b in model.named_buffers() if not n.endswith("batches_tracked")}
    model.se2.scale_activation.forward = ExactHardsigmoid.apply
    model.train()
    y = model(x)
    projection = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    loss = (y * projection).sum()
    loss.backward()

    index = {"input": write(outdir, "input.f64", x),
             "projection": write(outdir, "projection.f64", projection),
             "output": write(outdir, "output.f64", y),
             "loss": loss.item(), "parameters": [], "buffers": []}
    for name, p in model.named_parameters():
        index["parameters"].append({"name": name, "shape": list(p.shape),
                                    "value": write(outdir, name + ".value.f64", p)["file"],
                                    "grad": write(outdir, name + ".grad.f64", p.grad)["file"]})
    after = dict(model.named_buffers())
    for name, b in buffers.items():
        index["buffers"].append({"name": name, "shape": list(b.shape),
                                 "before": write(outdir, name + ".before.f64", b)["file"],
                                 "after": write(outdir, name + ".after.f64", after[name])["file"]})
    with open(os.path.join(outdir, "barrier_check.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    with open(stamp_path, "w") as f:
        f.write(stamp)
    print("make_barrier_check: wrote %s (loss %.6f, %d parameters, %d buffers)" % (
        outdir, loss.item(), len(index["parameters"]), len(index["buffers"])))


if __name__ == "__main__":
    main()
