#!/usr/bin/env python3
"""Writes the ONNX test networks and their PyTorch references for the ONNX-import tests.

    .venv/bin/python tests/onnx/make_networks.py OUTDIR [--check] [--seed N] [NAME ...]

For each network (no NAME: all of them) it builds the torchvision/timm model with random weights
(nothing is downloaded), perturbs every parameter and BatchNorm buffer so that nothing is all-zero
or all-one, exports it with torch.onnx.export at a static 1x3x224x224 input, and runs the PyTorch
model (not the ONNX file) on a seeded random input of another, non-square size (109x134) to write
the reference. Files per network, in OUTDIR:

    NAME.onnx           the exported network
    NAME.input.f32      reference input, raw little-endian NCHW (.f64 for float64 networks)
    NAME.output.f32     PyTorch's output (logits) on it, [1, K]
    NAME.features.f32   PyTorch's pooled features (the classifier's input), [1, C]
    NAME.json           shapes, dtype, exporter, opset, and whether the importer should refuse it

Everything is deterministic for a given --seed (each network's seed is derived from its name, so a
subset gives the same files as a full run). --check also checks every file with onnx.checker and
runs it with onnxruntime (float64: onnx.reference, as onnxruntime's CPU Conv lacks float64), and
compares it with PyTorch: at 224x224 as exported, and at the reference size with the file's static
input shape relaxed, which is what the importer does (it imports the 224 file and runs it at any
size). It fails (exit 1) when the relative error max|onnx - torch| / max|torch| exceeds 1e-4
(float64: 1e-10).
Python is a test tool here only; tessel never needs it at run time.
"""

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
import zlib
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import timm
import torchvision

EXPORT_SIZE = (224, 224)
REF_SIZE = (109, 134)  # non-square, neither a multiple of 32; big enough for every network here
NUM_CLASSES = 10
OPSET = 18
RTOL = 1e-4
RTOL_F64 = 1e-10


def tv(name):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, num_classes=NUM_CLASSES)
    return build, f"torchvision.models.{name}(weights=None, num_classes={NUM_CLASSES})"


def timm_model(name):
    def build():
        import timm
        return timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES)
    return build, f"timm.create_model('{name}', pretrained=False, num_classes={NUM_CLASSES})"


POOL = "global-pool output"
# name: (builder, exporter, dtype, expect, refuse_reason, (features module, "output"|"input"),
#        features_at)
NETWORKS = {
    "tv_resnet18": (tv("resnet18"), "dynamo", "float32", "import", None, ("avgpool", "output"), POOL),
    "tv_resnet50": (tv("resnet50"), "dynamo", "float32", "import", None, ("avgpool", "output"), POOL),
    "tv_densenet121": (tv("densenet121"), "dynamo", "float32", "import", None,
                       ("classifier", "input"), POOL + " (after the final BN+ReLU)"),
    "tv_mobilenet_v3_small": (tv("mobilenet_v3_small"), "dynamo", "float32", "import", None,
                              ("avgpool", "output"),
                              POOL + " (input of the Linear-Hardswish-Dropout-Linear classifier)"),
    "tv_regnet_y_400mf": (tv("regnet_y_400mf"), "dynamo", "float32", "import", None,
                          ("avgpool", "output"), POOL),
    "tv_convnext_tiny": (tv("convnext_tiny"), "dynamo", "float32", "import", None,
                         ("avgpool", "output"), POOL + " (before head LayerNorm)"),
    "timm_resnet50d": (timm_model("resnet50d"), "dynamo", "float32", "import", None,
                       ("global_pool", "output"), POOL),
    "timm_convnext_nano": (timm_model("convnext_nano"), "dynamo", "float32", "import", None,
                           ("head.global_pool", "output"), POOL + " (before head LayerNorm)"),
    "timm_efficientnet_lite0": (timm_model("efficientnet_lite0"), "dynamo", "float32", "import",
                                None, ("global_pool", "output"), POOL),
    "timm_efficientnet_b0": (timm_model("efficientnet_b0"), "dynamo", "float32", "import", None,
                             ("global_pool", "output"), POOL),
    "tv_resnet18_legacy": (tv("resnet18"), "legacy", "float32", "import", None,
                           ("avgpool", "output"), POOL),
    "tv_resnet18_f64": (tv("resnet18"), "dynamo", "float64", "import", None,
                        ("avgpool", "output"), POOL),
    # Exactly the command docs/models.md gives: the exporter's defaults, which write the weights
    # to tv_resnet18_defaults.onnx.data beside the file (external data).
    "tv_resnet18_defaults": (tv("resnet18"), "defaults", "float32", "import", None,
                             ("avgpool", "output"), POOL),
    "timm_tf_efficientnet_lite0": (timm_model("tf_efficientnet_lite0"), "dynamo", "float32",
                                   "import", None, ("global_pool", "output"), POOL),
}

NOTES = {
    "timm_tf_efficientnet_lite0":
        "TF-SAME padding: the export bakes the pads for 224x224 into the Convs (asymmetric for the "
        "stride-2 ones); the references were made with those same static pads, i.e. what the ONNX "
        "graph computes at the reference size, not TF-SAME recomputed for it",
    "tv_resnet18_legacy": "torch.onnx.export(dynamo=False, opset_version=17, input_names=['image'])",
    "tv_resnet18_defaults": "torch.onnx.export(net, args, path, dynamo=True): weights in "
                            "tv_resnet18_defaults.onnx.data",
}


def network_seed(name, seed):
    return (zlib.crc32(name.encode()) ^ seed) & 0x7FFFFFFF


@torch.no_grad()
def perturb(model, gen):
    """Random weights with no all-zero or all-one tensors (the exporter drops all-zero biases)."""
    for p in model.parameters():
        if p.dim() <= 1:  # biases, norm weights, layer scales
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        else:
            std = float(p.std()) or 0.01
            p.add_(0.05 * std * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))


def freeze_same_pads(model, size, dtype):
    """Replaces timm's dynamic TF-SAME padding by the static pads it has at `size`, which are the
    pads the exporter writes into the ONNX file."""
    from timm.layers.conv2d_same import Conv2dSame
    from timm.layers.padding import pad_same_arg
    convs = [m for m in model.modules() if isinstance(m, Conv2dSame)]
    pads = {}
    hooks = [m.register_forward_pre_hook(
        lambda m, a: pads.__setitem__(m, pad_same_arg(a[0].shape[-2:], m.weight.shape[-2:],
                                                      m.stride, m.dilation)))
        for m in convs]
    with torch.no_grad():
        model(torch.zeros(1, 3, *size, dtype=dtype))
    for h in hooks:
        h.remove()
    for m in convs:
        m.forward = (lambda m, p: lambda x: F.conv2d(
            F.pad(x, p), m.weight, m.bias, m.stride, 0, m.dilation, m.groups))(m, pads[m])
    return {tuple(p) for p in pads.values()}


def capture_features(model, where):
    path, kind = where
    module = model.get_submodule(path)
    store = {}
    if kind == "output":
        h = module.register_forward_hook(lambda m, a, out: store.__setitem__("f", out))
    else:
        h = module.register_forward_pre_hook(lambda m, a: store.__setitem__("f", a[0]))
    return store, h


def onnx_opset(m):
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


def export(model, x, path, exporter):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "defaults":
            torch.onnx.export(model, (x,), path, dynamo=True)
            if not os.path.exists(path + ".data"):
                raise SystemExit("make_networks: the exporter's defaults no longer write "
                                 "external data; tv_resnet18_defaults tests nothing new")
        elif exporter == "dynamo":
            torch.onnx.export(model, (x,), path, dynamo=True, opset_version=OPSET,
                              external_data=False, verbose=False)
        else:
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                              input_names=["image"], verbose=False)


def make(name, outdir, seed):
    import onnx
    (build, source), exporter, dtype, expect, reason, where, features_at = NETWORKS[name]
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    ext = ".f64" if dtype == "float64" else ".f32"
    s = network_seed(name, seed)
    torch.manual_seed(s)
    model = build()
    gen = torch.Generator().manual_seed(s + 1)
    perturb(model, gen)
    model = model.to(tdtype).eval()

    onnx_path = os.path.join(outdir, name + ".onnx")
    x224 = torch.randn(1, 3, *EXPORT_SIZE, generator=gen, dtype=tdtype)
    export(model, x224, onnx_path, exporter)

    if name == "timm_tf_efficientnet_lite0":
        freeze_same_pads(model, EXPORT_SIZE, tdtype)
    x = torch.randn(1, 3, *REF_SIZE, generator=gen, dtype=tdtype)
    store, hook = capture_features(model, where)
    with torch.no_grad():
        y = model(x)
    hook.remove()
    feats = store["f"].flatten(1)
    npdt = "<f8" if dtype == "float64" else "<f4"
    x.numpy().astype(npdt).tofile(os.path.join(outdir, name + ".input" + ext))
    y.numpy().astype(npdt).tofile(os.path.join(outdir, name + ".output" + ext))
    feats.numpy().astype(npdt).tofile(os.path.join(outdir, name + ".features" + ext))

    m = onnx.load(onnx_path)
    ops = Counter(n.op_type for n in m.graph.node)
    inits = {i.name for i in m.graph.initializer}
    convs_no_bias = sum(1 for n in m.graph.node
                        if n.op_type == "Conv" and (len(n.input) < 3 or not n.input[2]))
    meta = {
        "name": name,
        "source": source,
        "num_classes": NUM_CLASSES,
        "seed": s,
        "input_shape": list(x.shape),
        "output_shape": list(y.shape),
        "features_shape": list(feats.shape),
        "features_at": features_at,
        "dtype": dtype,
        "exporter": exporter,
        "opset": onnx_opset(m),
        "ir_version": m.ir_version,
        "export_input_shape": list(x224.shape),
        "onnx_input_name": next(i.name for i in m.graph.input if i.name not in inits),
        "expect": expect,
        "refuse_reason": reason,
    }
    if name in NOTES:
        meta["note"] = NOTES[name]
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return model, x224, ops, convs_no_bias, os.path.getsize(onnx_path) / 1e6


def relaxed(m):
    """The model with its input's H and W made symbolic and no intermediate shapes, so that
    onnxruntime runs it at any size (as the importer will)."""
    import onnx
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    inits = {i.name for i in m2.graph.initializer}
    for inp in m2.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        dims[2].dim_param, dims[3].dim_param = "H", "W"
    del m2.graph.value_info[:]
    return m2


def rel_err(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def check(name, outdir, model, x224):
    import onnx
    import onnxruntime as ort
    onnx_path = os.path.join(outdir, name + ".onnx")
    meta = json.load(open(os.path.join(outdir, name + ".json")))
    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    npdt = "<f8" if meta["dtype"] == "float64" else "<f4"
    ext = ".f64" if meta["dtype"] == "float64" else ".f32"
    if meta["dtype"] == "float64":
        # onnxruntime's CPU Conv has no float64 kernel: use ONNX's reference evaluator (numpy)
        from onnx.reference import ReferenceEvaluator
        runner, engine, rtol = lambda mm: ReferenceEvaluator(mm).run, "onnx.reference", RTOL_F64
    else:
        runner = lambda mm: ort.InferenceSession(mm.SerializeToString(), opts,
                                                 providers=["CPUExecutionProvider"]).run
        engine, rtol = "onnxruntime", RTOL
    feed = lambda a: {meta["onnx_input_name"]: a}
    errs = []
    try:
        with torch.no_grad():
            y224 = model(x224).numpy()
        errs.append(rel_err(runner(m)(None, feed(x224.numpy()))[0], y224))
        x = np.fromfile(os.path.join(outdir, name + ".input" + ext), npdt).reshape(
            meta["input_shape"])
        y = np.fromfile(os.path.join(outdir, name + ".output" + ext), npdt).reshape(
            meta["output_shape"])
        errs.append(rel_err(runner(relaxed(m))(None, feed(x))[0], y))
    except Exception as e:
        msg = str(e).splitlines()[0][:160]
        return False, f"{engine} failed: {msg}"
    ok = all(e <= rtol for e in errs)
    return ok, "%s, rel err 224x224 %.1e, %dx%d %.1e (limit %.0e)" % (
        engine, errs[0], *REF_SIZE, errs[1], rtol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", help="networks (default: all): " + " ".join(NETWORKS))
    ap.add_argument("--check", action="store_true",
                    help="also check every file with onnx.checker and onnxruntime")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_intermixed_args()
    names = args.names or list(NETWORKS)
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        ap.error("unknown network(s): " + " ".join(unknown))
    torch.set_num_threads(2)
    os.makedirs(args.outdir, exist_ok=True)
    # The files of a full run are kept while this script, the seed and the packages are the same
    # (ctest runs it before the import tests every time; a full run takes ~90 s on 2 cores).
    stamp_path = os.path.join(args.outdir, "stamp")
    with open(__file__, "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest() + " seed %d torch %s torchvision %s timm %s" % (
            args.seed, torch.__version__, torchvision.__version__, timm.__version__)
    full = names == list(NETWORKS)
    if full and not args.check and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read() == stamp:
                print("make_networks: %s is up to date" % args.outdir)
                return
    if full and os.path.exists(stamp_path):
        os.remove(stamp_path)
    failed = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        model, x224, ops, no_bias, mb = make(name, args.outdir, args.seed)
        line = "%-27s %5.1f s %6.1f MB  %s" % (
            name, time.perf_counter() - t0, mb,
            ", ".join(f"{k} {v}" for k, v in ops.most_common()))
        if no_bias:
            line += f"  [Conv without bias: {no_bias}]"
        print(line, flush=True)
        if args.check:
            t0 = time.perf_counter()
            ok, msg = check(name, args.outdir, model, x224)
            print("    check %s (%.1f s): %s" % ("ok" if ok else "FAILED",
                                                 time.perf_counter() - t0, msg), flush=True)
            if not ok:
                failed.append(name)
    print("total %.1f s" % (time.perf_counter() - t_all))
    if full and not failed:
        with open(stamp_path, "w") as f:
            f.write(stamp)
    if failed:
        print("check failed: " + " ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
