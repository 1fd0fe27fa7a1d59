#!/usr/bin/env python3
"""One benchmark point in PyTorch from Python: what a researcher would write instead of Tessel.

Builds the same network as models/zoo.cpp (same layers, Kaiming init, SGD with momentum 0.9,
cross-entropy, 2 classes), times warm-up + repeat training steps on a random image and prints
one JSON line with the fields of `tessel bench step` that make sense here.

  --method pytorch              plain autograd on the whole image
  --method pytorch-checkpoint   torch.utils.checkpoint.checkpoint_sequential; with several
                                --segments (default 2,4,8) each count runs in a fresh process
                                and the line printed is the fastest (as SFT's Fig. 8 picks)

  --device cuda[:N]             on a GPU (timed after torch.cuda.synchronize(); peak from the
                                caching allocator: max_memory_allocated, and reserved)
  --precision float32|tf32|bf16 float32 with TF32 off (as Tessel's float32), TF32 on, or
                                torch.autocast(dtype=torch.bfloat16) around forward and loss

Run it with the project's .venv/bin/python (torch 2.11, the wheel Tessel's LibTorch comes from);
bench/run does.
"""
import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

MiB = 1 << 20
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

VGG16 = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]
# Darknet-19 (YOLO9000): (out channels, kernel) per conv; 0 marks a 2×2 max pool.
DARKNET19 = [(32, 3), 0, (64, 3), 0, (128, 3), (64, 1), (128, 3), 0, (256, 3), (128, 1),
             (256, 3), 0, (512, 3), (256, 1), (512, 3), (256, 1), (512, 3), 0, (1024, 3),
             (512, 1), (1024, 3), (512, 1), (1024, 3)]


def parse_bytes(text):
    for unit in sorted(UNITS, key=len, reverse=True):
        if unit and text.endswith(unit):
            return int(float(text[:-len(unit)]) * UNITS[unit])
    return int(float(text))


def parse_size(text):
    if "x" in text:
        w, h = text.split("x")
        return int(h), int(w)
    return int(text), int(text)


def layer_plan(model):
    """The zoo's layers as (kind, args) in order, before the head (global average pool + linear)."""
    layers = []
    if model in ("vgg-mini", "vgg16"):
        divisor = 4 if model == "vgg-mini" else 1
        cin = 3
        for c in VGG16:
            if c == 0:
                layers.append(("pool",))
                continue
            layers += [("conv", cin, c // divisor, 3, True), ("relu",)]
            cin = c // divisor
    elif model == "darknet19":
        cin = 3
        for spec in DARKNET19:
            if spec == 0:
                layers.append(("pool",))
                continue
            out, k = spec
            layers += [("conv", cin, out, k, False), ("bn", out), ("leaky",)]
            cin = out
    elif model == "tiny":
        layers = [("conv", 3, 8, 3, True), ("relu",), ("pool",), ("conv", 8, 16, 3, True),
                  ("relu",), ("pool",), ("conv", 16, 16, 3, True), ("relu",)]
    else:
        raise SystemExit(f"pytorch_step: unknown model {model!r} (tiny, vgg-mini, vgg16, "
                         "darknet19)")
    return layers


def predicted_bytes(layers, height, width, segments):
    """Bytes the step keeps for backward: every tensor autograd saves under plain autograd (conv
    and batch-norm outputs, activations shared with them when in place, as without checkpointing;
    max-pool outputs and their int64 indices), the segment boundaries plus one segment's under
    checkpointing (activations not in place there), and a backward transient of three of the
    largest activation; plus parameters, gradients and momentum."""
    c, h, w = 3, height, width
    sizes = [c * h * w]
    params = 0
    for layer in layers:
        if layer[0] == "conv":
            c = layer[2]
            params += layer[1] * layer[2] * layer[3] ** 2
            sizes.append(c * h * w)
        elif layer[0] == "bn":
            sizes.append(c * h * w)
        elif layer[0] == "pool":
            h, w = h // 2, w // 2
            sizes.append(3 * c * h * w)  # output and int64 indices
        elif segments:
            sizes.append(c * h * w)  # relu / leaky ReLU, not in place under checkpointing
    kept = sum(sizes)
    if segments:
        per = max(1, len(sizes) // segments)
        chunks = [sum(sizes[i:i + per]) for i in range(0, len(sizes), per)]
        kept = sum(sizes[::per]) + max(chunks)
    return 4 * (kept + 3 * max(sizes) + 3 * params)


def build(torch, layers, inplace, classes=2):
    nn = torch.nn
    modules = []
    channels = 3
    for layer in layers:
        if layer[0] == "conv":
            _, cin, cout, k, bias = layer
            modules.append(nn.Conv2d(cin, cout, k, padding=k // 2, bias=bias))
            channels = cout
        elif layer[0] == "relu":
            modules.append(nn.ReLU(inplace=inplace))
        elif layer[0] == "leaky":
            modules.append(nn.LeakyReLU(0.1, inplace=inplace))
        elif layer[0] == "bn":
            # Tessel's frozen batch norm: running statistics fixed, affine trained (eval mode).
            modules.append(nn.BatchNorm2d(layer[1]))
        elif layer[0] == "pool":
            modules.append(nn.MaxPool2d(2))
    modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    net = nn.Sequential(*modules)
    with torch.no_grad():
        for m in net.modules():
            # Kaiming normal, ReLU gain, fan in; biases zero (core/graph/graph.cpp init_parameters).
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.normal_(0.0, (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()
    net.eval()  # batch norm uses its running statistics, as Tessel's frozen batch norm does
    return net


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_one(args, segments):
    """One process, one segment count (0: plain autograd). Returns the JSON-able result."""
    height, width = parse_size(args.size)
    layers = layer_plan(args.model)
    result = {"model": args.model, "height": height, "width": width,
              "strategy": "pytorch-checkpoint" if segments else "pytorch",
              "budget_bytes": 0, "threads": args.threads, "status": "ok", "message": "",
              "repeat": args.repeat, "step_ms": [], "step_ms_median": 0,
              "forward_ms_median": 0, "backward_ms_median": 0, "measured_peak_bytes": 0,
              "max_rss_bytes": 0, "segments": segments, "forward_tiles": 0,
              "backward_tiles": 0, "peak_source": "max RSS above the RSS at the start of the first step "
              "(includes the first allocation of gradients and momentum)"}
    predicted = predicted_bytes(layers, height, width, segments)
    result["predicted_bytes"] = {"total": predicted}
    limit = parse_bytes(args.memory_limit)
    if limit and predicted > limit:
        result["status"] = "out_of_memory"
        result["message"] = (f"predicted {predicted / (1 << 30):.1f} GiB of activations exceeds "
                             f"the machine limit of {limit / (1 << 30):.1f} GiB; not run")
        return result

    import torch
    from torch.utils.checkpoint import checkpoint_sequential
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    result["torch_version"] = torch.__version__
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    result["device"] = str(device)
    result["precision"] = args.precision
    if gpu:
        tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True  # what a careful user sets on a GPU
        result["peak_source"] = "torch.cuda.max_memory_allocated above the start of the first step"
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
        if args.precision == "bf16" else contextlib.nullcontext
    # In-place activations, as torchvision's VGG; not under checkpointing, where an in-place op
    # on a segment's (detached, grad-requiring) input is an error.
    net = build(torch, layers, inplace=not segments).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    image = torch.rand(1, 3, height, width).to(device)
    target = torch.zeros(1, dtype=torch.long, device=device)
    if segments:
        # Reentrant checkpointing needs an input that requires grad, or no parameter gets one.
        image.requires_grad_(True)
    start_rss = rss_bytes()
    if gpu:
        torch.cuda.synchronize(device)
        start_allocated = torch.cuda.memory_allocated(device)
        start_reserved = torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else (lambda: None)
    step_ms, forward_ms, backward_ms = [], [], []
    try:
        for i in range(args.warmup + args.repeat):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=False)
            with autocast():
                if segments:
                    logits = checkpoint_sequential(net, segments, image, use_reentrant=False)
                else:
                    logits = net(image)
                loss = torch.nn.functional.cross_entropy(logits, target)
            sync()
            t1 = time.perf_counter()
            loss.backward()
            sync()
            t2 = time.perf_counter()
            optimizer.step()
            sync()
            t3 = time.perf_counter()
            if i >= args.warmup:
                step_ms.append((t3 - t0) * 1000)
                forward_ms.append((t1 - t0) * 1000)
                backward_ms.append((t2 - t1) * 1000)
    except (MemoryError, RuntimeError) as e:
        text = str(e)
        if isinstance(e, RuntimeError) and "alloc" not in text.lower() \
                and "memory" not in text.lower():
            raise
        result["status"] = "out_of_memory"
        result["message"] = text.strip().splitlines()[0][:200] if text.strip() else "MemoryError"
        result["max_rss_bytes"] = max_rss_bytes()
        return result
    result["step_ms"] = step_ms
    result["step_ms_median"] = statistics.median(step_ms)
    result["forward_ms_median"] = statistics.median(forward_ms)
    result["backward_ms_median"] = statistics.median(backward_ms)
    result["max_rss_bytes"] = max_rss_bytes()
    result["measured_peak_bytes"] = max(0, result["max_rss_bytes"] - start_rss)
    if gpu:
        result["measured_peak_bytes"] = torch.cuda.max_memory_allocated(device) - start_allocated
        result["measured_peak_reserved_bytes"] = \
            torch.cuda.max_memory_reserved(device) - start_reserved
    return result


def best_of_segments(args, counts):
    """Each segment count in a fresh process (a process's max RSS never goes down); the fastest
    that ran wins, as in SFT's Fig. 8."""
    trials = []
    for k in counts:
        cmd = [sys.executable, os.path.abspath(__file__), "--model", args.model, "--size",
               args.size, "--threads", str(args.threads), "--seed", str(args.seed), "--repeat",
               str(args.repeat), "--warmup", str(args.warmup), "--memory-limit",
               args.memory_limit, "--method", "pytorch-checkpoint", "--segments", str(k),
               "--device", args.device, "--precision", args.precision]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            status = "out_of_memory" if proc.returncode < 0 else "error"
            trials.append({"segments": k, "status": status,
                           "message": proc.stderr.strip()[-300:]})
            continue
        trials.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ok = [t for t in trials if t["status"] == "ok"]
    if ok:
        best = dict(min(ok, key=lambda t: t["step_ms_median"]))
    else:
        best = dict(trials[0])
        height, width = parse_size(args.size)
        for key, value in (("model", args.model), ("height", height), ("width", width),
                           ("strategy", "pytorch-checkpoint"), ("threads", args.threads)):
            best.setdefault(key, value)
    best["segment_trials"] = [{k: t.get(k) for k in ("segments", "status", "step_ms_median",
                                                      "measured_peak_bytes", "max_rss_bytes")}
                              for t in trials]
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vgg-mini")
    ap.add_argument("--size", default="1024x1024", help="WIDTHxHEIGHT or one edge")
    ap.add_argument("--method", choices=["pytorch", "pytorch-checkpoint"], default="pytorch")
    ap.add_argument("--segments", default="2,4,8", help="checkpoint_sequential segment counts")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--memory-limit", default="20GiB",
                    help="points predicted above this are recorded as out of memory, not run")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", choices=["float32", "tf32", "bf16"], default="float32")
    args = ap.parse_args()
    if args.method == "pytorch":
        result = run_one(args, 0)
    else:
        counts = [int(k) for k in args.segments.split(",")]
        result = run_one(args, counts[0]) if len(counts) == 1 else best_of_segments(args, counts)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
