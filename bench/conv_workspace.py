#!/usr/bin/env python3
"""What cuDNN allocates beyond a layer's tensors: the workspace the GPU memory model lacks.

    python3 bench/conv_workspace.py [--device cuda] [--out FILE.jsonl] [--seconds 150]

For the convolutions of Tessel's zoo (vgg-mini, VGG-16, ResNet-50's 1×1, 3×3, strided and stem
convolutions) and train-mode batch norm, at tile-like shapes (squares and full-width rows), in
float32 and bf16, contiguous and channels-last, with cuDNN as Tessel's training and bench steps
leave it (no benchmark search, TF32 off; --deterministic: deterministic algorithms too, as
`tessel gradcheck` and the tests set them): the caching allocator's peak during the no-grad forward, the
forward with grad and the backward, less the tensors that pass must hold (input, output, weight,
gradients). One JSON line per case; a summary of the largest workspace as a share of the output
at the end. Python's torch from the same wheel as Tessel's LibTorch, so the same cuDNN.
"""
import argparse
import json
import time

import torch

MIB = 2**20

VGG_MINI = [(3, 16), (16, 16), (16, 32), (32, 32), (32, 64), (64, 64), (64, 128), (128, 128)]
VGG16 = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256), (256, 512), (512, 512)]
# (cin, cout, kernel, stride, padding): ResNet-50's kinds
RESNET50 = [(3, 64, 7, 2, 3), (64, 64, 1, 1, 0), (64, 64, 3, 1, 1), (64, 256, 1, 1, 0),
            (256, 64, 1, 1, 0), (128, 128, 3, 2, 1), (256, 512, 1, 2, 0), (512, 128, 1, 1, 0)]
SHAPES = [(256, 256), (1024, 1024), (160, 8192), (2048, 2048)]
ACTIVATION_CAP = 2 * 2**30  # skip cases whose input or output alone exceeds this (float32)


def nbytes(t):
    return t.numel() * t.element_size()


def measure(dev, layer, x_shape, dtype, channels_last):
    sync = lambda: torch.cuda.synchronize(dev)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    layer = layer.to(dev, dtype=dtype).to(memory_format=fmt)
    x = torch.randn(x_shape, device=dev, dtype=dtype).to(memory_format=fmt)
    params = sum(nbytes(p) for p in layer.parameters())
    out = {}
    # no-grad forward (Tessel's forward passes)
    sync(); torch.cuda.reset_peak_memory_stats(dev); base = torch.cuda.memory_allocated(dev)
    with torch.no_grad():
        y = layer(x)
    sync()
    out["forward_nograd"] = torch.cuda.max_memory_allocated(dev) - base - nbytes(y)
    out_bytes = nbytes(y)
    del y
    # forward with grad (the backward pass's recompute)
    x.requires_grad_(True)
    sync(); torch.cuda.reset_peak_memory_stats(dev); base = torch.cuda.memory_allocated(dev)
    y = layer(x)
    sync()
    held = torch.cuda.memory_allocated(dev) - base  # output and what autograd saved beyond x
    out["forward_grad"] = torch.cuda.max_memory_allocated(dev) - base - held
    g = torch.randn_like(y)
    sync(); torch.cuda.reset_peak_memory_stats(dev); base = torch.cuda.memory_allocated(dev)
    y.backward(g)
    sync()
    grads = nbytes(x.grad) + sum(nbytes(p.grad) for p in layer.parameters() if p.grad is not None)
    out["backward"] = torch.cuda.max_memory_allocated(dev) - base - grads
    out.update(input_bytes=nbytes(x), output_bytes=out_bytes, param_bytes=params)
    return out


def cases():
    for net, convs in (("vgg-mini", VGG_MINI), ("vgg16", VGG16)):
        for cin, cout in convs:
            yield net, f"conv3x3 {cin}->{cout}", lambda cin=cin, cout=cout: torch.nn.Conv2d(
                cin, cout, 3, padding=1), cin, cout, 1
    for cin, cout, k, s, p in RESNET50:
        yield "resnet50", f"conv{k}x{k}/{s} {cin}->{cout}", lambda cin=cin, cout=cout, k=k, s=s, p=p: \
            torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, bias=False), cin, cout, s
    for c in (64, 256):
        yield "resnet50", f"batchnorm-train {c}", lambda c=c: torch.nn.BatchNorm2d(c), c, c, 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="conv-workspace.jsonl")
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--deterministic", action="store_true",
                    help="deterministic algorithms (core::use_exact_algorithms: checks, tests)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cudnn.deterministic = a.deterministic
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(dev)}, deterministic {a.deterministic}", flush=True)
    deadline = time.monotonic() + a.seconds
    rows = []
    with open(a.out, "w") as f:
        for dtype in (torch.float32, torch.bfloat16):
            for channels_last in (False, True):
                for net, name, make, cin, cout, stride in cases():
                    for h, w in SHAPES:
                        if 4 * max(cin, cout) * h * w > ACTIVATION_CAP:
                            continue
                        if time.monotonic() > deadline:
                            print("conv_workspace: stopped at the time bound", flush=True)
                            return summary(rows)
                        try:
                            m = measure(dev, make(), (1, cin, h, w), dtype, channels_last)
                        except torch.cuda.OutOfMemoryError as e:
                            m = {"error": str(e)[:200]}
                        torch.cuda.empty_cache()
                        row = {"net": net, "layer": name, "height": h, "width": w,
                               "deterministic": a.deterministic,
                               "dtype": str(dtype).replace("torch.", ""),
                               "channels_last": channels_last, **m}
                        rows.append(row)
                        f.write(json.dumps(row) + "\n")
                        f.flush()
    summary(rows)


def summary(rows):
    print(f"{'layer':26} {'shape':>10} {'dtype':8} {'cl':2} {'fwd MiB':>8} {'fwd+g':>8} "
          f"{'bwd MiB':>8} {'out MiB':>8} {'bwd/out':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['layer']:26} {r['height']}x{r['width']} {r['dtype']} error")
            continue
        ratio = r["backward"] / r["output_bytes"] if r["output_bytes"] else 0
        print(f"{r['layer']:26} {r['height']:>4}x{r['width']:<5} {r['dtype']:8} "
              f"{'y' if r['channels_last'] else 'n':2} {r['forward_nograd'] / MIB:8.1f} "
              f"{r['forward_grad'] / MIB:8.1f} {r['backward'] / MIB:8.1f} "
              f"{r['output_bytes'] / MIB:8.1f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
