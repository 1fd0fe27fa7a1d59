#!/usr/bin/env python3
"""Writes the small ONNX seeds of the ONNX fuzz harness (tests/fuzz/README.md) to OUTDIR.

    .venv/bin/python tests/fuzz/onnx_seeds.py tests/fuzz/corpus/onnx

A few channels each, so that every file stays a few KB and a mutation often lands in the graph
rather than in the weights; together they reach every importer path the unit tests' networks do:

    conv.onnx                  Conv (bias; strided, no bias), Relu, LeakyRelu, AveragePool,
                               global pool, Flatten, Gemm; the legacy exporter (opset 17)
    bn-pool-add-concat.onnx    Conv (grouped), MaxPool, BatchNormalization, Relu, Add, Concat,
                               SiLU as Sigmoid·x, Clip; dynamo (opset 18)
    layernorm-gelu.onnx        ConvNeXt's block: Transpose, LayerNormalization, MatMul, GELU in
                               the erf form, layer scale, Transpose back, Add; dynamo (opset 18)

Committed rather than made by the smoke run: the smoke run needs the same bytes every time, and
the exporters' output changes with the torch version. Python is a test tool here only.
"""

import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE = (1, 3, 16, 16)


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = self.pool(F.leaky_relu(self.conv2(x), 0.1))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class BnPoolAddConcat(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)  # after a pool and after an Add: not folded into a Conv
        self.branch = nn.Conv2d(4, 4, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(4)
        self.side = nn.Conv2d(4, 2, 3, padding=1, groups=2)

    def forward(self, x):
        x = self.bn1(F.max_pool2d(F.relu(self.stem(x)), 3, stride=2, padding=1))
        y = self.bn2(F.relu(self.branch(x)) + x)
        z = F.silu(self.side(y))
        return torch.clamp(torch.cat([y, z], 1), 0.0, 6.0)


class LayerNormGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 2, stride=2)
        self.norm = nn.LayerNorm(4)
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)
        self.gamma = nn.Parameter(torch.full((4,), 0.5))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.stem(x)
        y = self.norm(x.permute(0, 2, 3, 1))
        y = self.gamma * self.fc2(F.gelu(self.fc1(y)))
        x = x + y.permute(0, 3, 1, 2)
        return self.head(torch.flatten(x.mean((2, 3), keepdim=True), 1))


def perturbed(model):
    """Weights and statistics that are neither zeros nor ones."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.add_(0.1 * torch.randn(t.shape, generator=gen))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_var.abs_().add_(0.5)
    return model.eval()


def strip(path):
    """Without the exporter's metadata, which the importer does not read: smaller files, and a
    mutation lands in the graph more often."""
    import onnx
    m = onnx.load(path)
    m.doc_string = ""
    del m.metadata_props[:]
    del m.graph.value_info[:]
    m.graph.doc_string = ""
    for n in m.graph.node:
        n.doc_string = ""
        del n.metadata_props[:]
    for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.initializer):
        v.doc_string = ""
        del v.metadata_props[:]
    onnx.save(m, path)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(SIZE)
    seeds = [("conv.onnx", Conv(), False), ("bn-pool-add-concat.onnx", BnPoolAddConcat(), True),
             ("layernorm-gelu.onnx", LayerNormGelu(), True)]
    for name, model, dynamo in seeds:
        path = os.path.join(out, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if dynamo:
                torch.onnx.export(perturbed(model), (x,), path, dynamo=True, opset_version=18,
                                  external_data=False, verbose=False)
            else:
                torch.onnx.export(perturbed(model), (x,), path, dynamo=False, opset_version=17,
                                  input_names=["image"], verbose=False)
        strip(path)
        print(f"{path}: {os.path.getsize(path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
