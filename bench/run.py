#!/usr/bin/env python3
"""Runs the engine benchmark: one `tessel bench step` process per point, so peaks do not leak
between points, and writes the results (JSON lines) and the tables of bench/README.md.

  bench/run              the published table (about 30-40 minutes on the 2-core machine)
  bench/run --quick      a smoke run of a few seconds: the harness works (no timing claims)
  bench/run --only read  just the slide-reading section (`tessel bench read`, 20000² JPEG TIFF)
  bench/run --only offload  just the offload section (checkpoints on disk vs resident)
  bench/run --only dist  data-parallel training: 1 vs 2 local ranks, allreduce time per step
  bench/run --only barriers  train-mode batch norm and group norm against frozen batch norm
  bench/run --only attention  the attention-MIL head against the max-pool head, memory by size
  bench/run --only rows  grid, overlapping rows (OverL) and shared rows (2PS) under one budget
  bench/run --only glass  synthetic slides at 10-100% tissue: glass computed once against dense
                          (BENCH_GLASS_SIZES=2048 BENCH_GLASS_MODELS=vgg-mini for a short run;
                          MODEL, MODEL:NORM or MODEL:NORM:SIZE, comma-separated,
                          BENCH_GLASS_REPEAT=N / BENCH_GLASS_WARMUP=N for the median of N steps
                          after N warm-ups, BENCH_GLASS_SAME_PLAN=0 to skip the same plan run
                          dense, BENCH_GLASS_ROUNDS=N to run every variant N times in turn
                          and take the medians, so the machine's drift over minutes falls on
                          all of them; a run of some models keeps the other models' rows)
  bench/run --only glass-slides  the real slides of ../shared/slides with tissue_fill: glass
                          against dense, and the gradient in float64 (about 5 minutes)
  bench/run --only cohort  whole-slide throughput: one training epoch over a synthetic cohort
                          of JPEG pyramidal slides (tessel sample-data), slides per hour and the
                          epoch against its slides' opening, steps and waits for pixels
                          (BENCH_COHORT_SLIDES, _SIZE, _MODELS=vgg-mini,resnet50:batch, _MPP,
                          _BUDGET, _DEVICE, _PRECISION; about 5 minutes as it comes)
                             (resnet50 in 2 GiB; BENCH_BARRIER_SIZES=1024,2048,4096 to choose)

Besides Tessel's strategies (none = plain LibTorch, grid, rows) each size runs the baselines a
user would pick instead, PyTorch from Python (bench/pytorch_step.py with the project's .venv, the
same torch 2 wheel Tessel's LibTorch comes from): plain autograd with glibc's allocator as it comes
(`pytorch`), the same with the allocator tuned so freed pages are kept rather than faulted in again
every step (`pytorch-tuned`, as a careful user runs it), and checkpoint_sequential (the fastest of
2, 4, 8 segments). Plots (PNG, matplotlib from .venv): time and peak memory vs pixels per model,
and one step's memory timeline.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30
MiB = 1 << 20

FULL = [
    # (model, sizes, tiled budget)
    ("vgg-mini", [512, 1024, 2048, 4096, 8192, 16384], "1GiB"),
    ("vgg16", [512, 1024, 2048, 4096], "2GiB"),
    ("darknet19", [512, 1024, 2048, 4096], "2GiB"),
]
# The points past what plain training can hold, kept to one tiled strategy (and the baselines'
# instant refusals) so that the full run stays under ~40 minutes: (model, size) -> methods.
LONG_POINTS = {
    ("vgg-mini", 16384): ["none", "grid", "pytorch", "pytorch-tuned"],
    ("vgg16", 4096): ["none", "grid", "pytorch", "pytorch-tuned"],
}
QUICK = [("tiny", [128], "64MiB")]
STRATEGIES = ["none", "grid", "rows", "auto", "pytorch", "pytorch-tuned", "pytorch-checkpoint"]
# The project's Python environment (scripts/setup: torch, matplotlib); TESSEL_BENCH_PYTHON: another.
SYSTEM_PYTHON = os.environ.get("TESSEL_BENCH_PYTHON", os.path.join(ROOT, ".venv", "bin", "python"))
# `pytorch-tuned`: glibc's malloc keeps what it frees. Large tensors otherwise come from mmap and
# go back to the kernel when freed, so every step faults in and zeroes its pages again (the
# issue measured PyTorch's vgg-mini 2048² step at 4.30 s with the defaults, 2.33 s tuned).
TUNED_ALLOCATOR = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 62),
                   "MALLOC_TOP_PAD_": str(1 << 30)}
# The timeline plot: one step of a tiled plan (model, size, strategy, budget).
TIMELINE_FULL = ("vgg-mini", 2048, "grid", "1GiB")
TIMELINE_QUICK = ("tiny", 128, "grid", "1MiB")


def run_point(tessel, model, size, strategy, budget, repeat, warmup, timeline=None):
    cmd = [tessel, "bench", "step", "--model", model, "--size", f"{size}x{size}",
           "--strategy", strategy, "--budget", budget, "--repeat", str(repeat),
           "--warmup", str(warmup), "--memory-limit", "20GiB", "--log-level", "warn"]
    if timeline:
        cmd += ["--timeline", timeline]
    return run_process(cmd, model, size, strategy)


def run_pytorch_point(model, size, method, threads, repeat, warmup, segments):
    tuned = method == "pytorch-tuned"
    cmd = [SYSTEM_PYTHON, os.path.join(ROOT, "bench", "pytorch_step.py"), "--model", model,
           "--size", f"{size}x{size}", "--method", "pytorch" if tuned else method,
           "--threads", str(threads), "--repeat", str(repeat), "--warmup", str(warmup),
           "--segments", segments, "--memory-limit", "20GiB"]
    env = dict(os.environ, **TUNED_ALLOCATOR) if tuned else None
    point = run_process(cmd, model, size, method, env)
    point["strategy"] = method
    return point


def run_process(cmd, model, size, strategy, env=None):
    """One point in a fresh process; a killed process (the OOM killer) is out of memory."""
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        status = "out_of_memory (killed)" if proc.returncode < 0 else "error"
        return {"model": model, "height": size, "width": size, "strategy": strategy,
                "status": status, "message": proc.stderr.strip()[-300:],
                "wall_s": time.time() - t0}
    point = json.loads(proc.stdout.strip().splitlines()[-1])
    point["wall_s"] = time.time() - t0
    return point


def plan_speed(tessel, runs=5, size=200000):
    """Wall time of `tessel plan` for VGG-16 on a size² slide (process start included)."""
    times = []
    for _ in range(runs):
        t0 = time.time()
        subprocess.run([tessel, "plan", "--model", "vgg16", "--size", f"{size}x{size}",
                        "--budget", "8GiB"], check=True, capture_output=True)
        times.append(time.time() - t0)
    return sorted(times)[len(times) // 2]


READ_FULL = {"size": 20000, "limit": 0}
READ_QUICK = {"size": 1024, "limit": 4}
READ_TABLE_BEGIN = "<!-- read table: bench/run writes between these lines -->"
READ_TABLE_END = "<!-- end of read table -->"


def run_read(tessel, size, limit):
    """One `tessel bench read` process: a JSON line per reader × thread count."""
    cmd = [tessel, "bench", "read", "--size", str(size), "--limit", str(limit),
           "--threads", "1,2", "--readers", "raw,openslide,libvips", "--log-level", "warn"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench: tessel bench read failed: {proc.stderr.strip()[-300:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def read_table(points):
    raw = {p["threads"]: p for p in points if p["reader"] == "raw"}
    p0 = points[0]
    out = [f"\n### Slide reading: {p0['regions']} regions of {p0['region']}² at level 0 of a "
           f"{p0['width']}×{p0['height']} JPEG tiled TIFF, {p0['order']} order, cache cold\n",
           "| reader | threads | regions/s | MB/s (RGB) | × raw | read() waited s |",
           "|---|---|---|---|---|---|"]
    for p in points:
        base = raw.get(p["threads"])
        ratio = f"{p['regions_per_s'] / base['regions_per_s']:.2f}" if base else ""
        wait = f"{p['wait_s']:.2f}" if p["reader"] != "raw" else ""
        out.append(f"| {p['reader']} | {p['threads']} | {p['regions_per_s']:.1f} | "
                   f"{p['mb_per_s']:.1f} | {ratio} | {wait} |")
    return "\n".join(out)


def write_read_table_into_readme(table):
    write_between_markers(READ_TABLE_BEGIN, READ_TABLE_END, table)


def fmt_mib(b):
    return f"{b / MiB:,.0f}"


def system_python_has(module):
    """Whether the bench's python (.venv's) can import `module`."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return False
    return subprocess.run([SYSTEM_PYTHON, "-c", f"import {module}"],
                          capture_output=True).returncode == 0


def ratio(p, base):
    if not base or p is base or not base.get("step_ms_median"):
        return ""
    return f"{p['step_ms_median'] / base['step_ms_median']:.2f}"


def predicted_total(p):
    pred = p.get("predicted_bytes", {})
    if "predicted_step_bytes" in p:  # Tessel's planner, on the measured peak's basis
        return p["predicted_step_bytes"]
    if "working_set" in pred:  # the same from an older results file: what the step allocates,
        # the gradients included (zero_grad frees them, so each step makes them again)
        return pred["checkpoints"] + pred["working_set"] + pred["head"] + pred["gradients"]
    return pred.get("total", 0)


def tiles_cell(p):
    if p["strategy"] == "pytorch-checkpoint":
        return f"{p.get('segments', 0)} segments"
    if p["strategy"] in ("pytorch", "pytorch-tuned"):
        return ""
    return f"{p['forward_tiles']}/{p['backward_tiles']}"


def tables(points):
    out = []
    by_model = {}
    for p in points:
        by_model.setdefault(p["model"], []).append(p)
    for model, pts in by_model.items():
        budget = next((p["budget_bytes"] for p in pts if p.get("strategy") != "none"
                       and p.get("budget_bytes")), 0)
        out.append(f"\n### {model} (tiled budget {budget / GiB:g} GiB)\n")
        out.append("| size | strategy | step s (median) | fwd s | bwd s | × plain | × pytorch "
                   "| × pytorch tuned | measured peak MiB | predicted MiB | max RSS MiB "
                   "| tiles fwd/bwd | status |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        ok = [p for p in pts if p["status"] == "ok"]
        plain = {p["height"]: p for p in ok if p["strategy"] == "none"}
        pytorch = {p["height"]: p for p in ok if p["strategy"] == "pytorch"}
        tuned = {p["height"]: p for p in ok if p["strategy"] == "pytorch-tuned"}
        for p in sorted(pts, key=lambda p: (p["height"], STRATEGIES.index(p["strategy"]))):
            size = f"{p['height']}²"
            if p["status"] != "ok":
                msg = p.get("message", "").split(":")[0][:60]
                out.append(f"| {size} | {p['strategy']} | – | – | – | – | – | – | – | – | – | – | "
                           f"{p['status']} {msg} |")
                continue
            out.append(
                f"| {size} | {p['strategy']} | {p['step_ms_median'] / 1000:.2f} | "
                f"{p['forward_ms_median'] / 1000:.2f} | {p['backward_ms_median'] / 1000:.2f} | "
                f"{ratio(p, plain.get(p['height']))} | {ratio(p, pytorch.get(p['height']))} | "
                f"{ratio(p, tuned.get(p['height']))} | {fmt_mib(p['measured_peak_bytes'])} | {fmt_mib(predicted_total(p))} | "
                f"{fmt_mib(p['max_rss_bytes'])} | {tiles_cell(p)} | ok |")
    return "\n".join(out)


def largest_table(points):
    """Per model and method, the largest size that trained, and the smallest that did not."""
    out = ["\n### The largest image each method trains on this machine\n",
           "| model | method | largest trained | smallest refused or failed |", "|---|---|---|---|"]
    models = []
    for p in points:
        if p["model"] not in models:
            models.append(p["model"])
    for model in models:
        for method in STRATEGIES:
            pts = [p for p in points if p["model"] == model and p["strategy"] == method]
            if not pts:
                continue
            ok = [p["height"] for p in pts if p["status"] == "ok"]
            bad = [p["height"] for p in pts if p["status"] != "ok"]
            out.append(f"| {model} | {method} | {f'{max(ok)}²' if ok else '–'} | "
                       f"{f'{min(bad)}²' if bad else 'none tried'} |")
    return "\n".join(out)


CSV_COLUMNS = ["model", "height", "width", "strategy", "status", "step_ms_median", "step_ms_min",
               "step_ms_max", "forward_ms_median", "backward_ms_median", "measured_peak_bytes",
               "max_rss_bytes", "predicted_total_bytes", "forward_tiles", "backward_tiles",
               "offloaded_bytes", "segments", "threads", "wall_s", "message"]


def write_csv(points, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for p in points:
            times = p.get("step_ms") or []
            row = dict(p, predicted_total_bytes=predicted_total(p) if p["status"] == "ok" else "",
                       step_ms_min=min(times) if times else "",
                       step_ms_max=max(times) if times else "")
            w.writerow([row.get(c, "") for c in CSV_COLUMNS])


STEP_TABLES_BEGIN = "<!-- step tables: bench/run writes between these lines -->"
STEP_TABLES_END = "<!-- end of step tables -->"


def write_between_markers(begin, end, text):
    """Replaces README.md's text between two marker lines (nothing happens without them)."""
    path = os.path.join(ROOT, "bench", "README.md")
    with open(path) as f:
        whole = f.read()
    if begin not in whole or end not in whole:
        return
    head, rest = whole.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text.strip() + "\n" + end + tail)


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}"


def record(points, f, p):
    points.append(p)
    f.write(json.dumps(p) + "\n")
    f.flush()
    print(f"bench: {p['model']} {p['height']}² {p['strategy']}: {p['status']} "
          f"{p.get('step_ms_median', 0) / 1000:.2f} s/step, peak "
          f"{p.get('measured_peak_bytes', 0) / MiB:.0f} MiB", flush=True)


def plots(tessel, out, quick):
    """The PNGs: time and peak memory vs pixels per model, and one step's memory timeline."""
    if not system_python_has("matplotlib"):
        print(f"bench: skipping the plots: {SYSTEM_PYTHON} cannot import matplotlib (run "
              "scripts/setup)", flush=True)
        return []
    model, size, strategy, budget = TIMELINE_QUICK if quick else TIMELINE_FULL
    timeline = out.replace(".jsonl", "-timeline.jsonl")
    p = run_point(tessel, model, size, strategy, budget, 1, 0 if quick else 1, timeline)
    cmd = [SYSTEM_PYTHON, os.path.join(ROOT, "bench", "plot.py"), "--points", out,
           "--prefix", out.replace(".jsonl", "")]
    if p["status"] == "ok":
        cmd += ["--timeline", timeline]
    else:
        print(f"bench: no timeline plot: the point {model} {size}² {strategy} {budget} "
              f"ended {p['status']}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench: bench/plot.py failed: {proc.stderr.strip()[-500:]}")
    pngs = proc.stdout.split()
    for png in pngs:
        print(f"bench: wrote {png}", flush=True)
    return pngs


def measure(args, model, size, method, budget, points):
    """One point: Tessel's strategies through `tessel bench step`, the baselines through Python."""
    big = size * size >= 4096 * 4096 or (model == "vgg16" and size >= 2048)
    repeat, warmup = (1, 0) if big or args.quick else (2, 1)
    if not method.startswith("pytorch"):
        b = "0" if method == "none" else budget
        return run_point(args.tessel, model, size, method, b, repeat, warmup)
    threads = next((q["threads"] for q in points if q.get("threads")), 2)
    segments = "2" if args.quick else "2,4,8"
    return run_pytorch_point(model, size, method, threads, repeat, warmup, segments)
# Offload (issue 6): a step whose checkpoints exceed the budget several times, with the
# checkpoints beyond it on disk (page cache bypassed: each block is flushed and dropped after
# it is written and after it is read, so every read comes from the device), against the same
# plan with every checkpoint resident. The planner alone never offloads vgg-mini in 1 GiB (its
# cheapest plan streams the whole network as one segment, at any size): the checkpoints are
# every candidate layer up to a size. (model, size, budget, checkpoints under, repeat, warmup).
OFFLOAD_FULL = ("vgg-mini", 4096, "1GiB", "1GiB", 1, 0)
OFFLOAD_QUICK = ("tiny", 128, "1MiB", "1MiB", 1, 0)
OFFLOAD_TABLE_BEGIN = "<!-- offload table: bench/run --only offload writes between these lines -->"
OFFLOAD_TABLE_END = "<!-- end of offload table -->"


def run_offload_point(tessel, model, size, budget, under, repeat, warmup, extra, label,
                      scratch):
    cmd = [tessel, "bench", "step", "--model", model, "--size", f"{size}x{size}",
           "--strategy", "grid", "--budget", budget, "--checkpoints-under", under,
           "--repeat", str(repeat), "--warmup", str(warmup), "--memory-limit", "20GiB",
           "--log-level", "warn"] + extra
    if scratch:
        cmd += ["--scratch", scratch]
    p = run_process(cmd, model, size, "grid")
    p["run"] = label
    return p


def offload_table(points):
    resident = next((p for p in points if p["run"] == "resident" and p["status"] == "ok"), None)
    p0 = points[0]
    out = [f"\n### Offload: {p0['model']} {p0['height']}², grid, budget "
           f"{fmt_mib(p0.get('budget_bytes', 0))} MiB, checkpoints "
           f"{fmt_mib(p0.get('checkpoint_bytes', 0))} MiB\n",
           "| run | step s | fwd s | bwd s | × resident | measured peak MiB | checkpoints offloaded "
           "MiB | moved/step MiB (measured / predicted) | I/O thread busy s | step waited s "
           "| hidden |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        if p["status"] != "ok":
            out.append(f"| {p['run']} | – | – | – | – | – | – | – | – | – | – | "
                       f"{p['status']} {p.get('message', '')[:60]} |")
            continue
        hidden = p.get("hidden_share")
        moved = (f"{fmt_mib(p['moved_bytes'])} / {fmt_mib(p['moved_bytes_predicted'])}"
                 if p.get("moved_bytes") else "–")
        busy = f"{p['transfer_s']:.1f}" if p.get("transfer_s") else "–"
        waited = f"{p['wait_s']:.1f}" if p.get("transfer_s") else "–"
        out.append(f"| {p['run']} | {p['step_ms_median'] / 1000:.1f} | "
                   f"{p['forward_ms_median'] / 1000:.1f} | {p['backward_ms_median'] / 1000:.1f} | "
                   f"{ratio(p, resident)} | {fmt_mib(p['measured_peak_bytes'])} | "
                   f"{fmt_mib(p.get('offloaded_bytes', 0))} | {moved} | {busy} | {waited} | "
                   f"{'' if hidden is None else f'{hidden:.0%}'} |")
    return "\n".join(out)


def run_offload_section(args):
    """The offload table: disk tier with a cold page cache, with the page cache, and resident."""
    model, size, budget, under, repeat, warmup = OFFLOAD_QUICK if args.quick else OFFLOAD_FULL
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"offload-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # Quick: the tiny budget needs every checkpoint forced out to show the machinery.
    mode = ["--offload", "disk"] if args.quick else ["--offload", "auto"]
    runs = [("disk, page cache bypassed", mode + ["--cold-disk"]),
            ("disk, page cache allowed", mode + ["--page-cache"]),
            ("resident", mode + ["--keep-resident"])]
    points = []
    with open(out, "w") as f:
        for label, extra in runs:
            p = run_offload_point(args.tessel, model, size, budget, under, repeat, warmup, extra,
                                  label, os.environ.get("TESSEL_BENCH_SCRATCH"))
            points.append(p)
            f.write(json.dumps(p) + "\n")
            f.flush()
            print(f"bench: offload {model} {size}² {label}: {p['status']} "
                  f"{p.get('step_ms_median', 0) / 1000:.1f} s/step, hidden "
                  f"{p.get('hidden_share')}", flush=True)
    table = (f"Measured by `bench/run --only offload` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. Median of {repeat} step(s) after "
             f"{warmup} warmup.\n" + offload_table(points))
    print(table, flush=True)
    with open(out.replace(".jsonl", ".md"), "w") as f:
        f.write(table + "\n")
    if not args.quick:
        write_between_markers(OFFLOAD_TABLE_BEGIN, OFFLOAD_TABLE_END, table)
    if any(p["status"] == "error" for p in points):
        sys.exit(1)
# Barriers (docs/barriers.md): the same network with frozen batch norm, train-mode batch norm
# (whole-image statistics, exact) and group norm, tiled in one budget, and plain LibTorch where
# it fits: the cost of exact statistics. (model, sizes, budget, repeat, warmup).
BARRIERS_FULL = ("resnet50", [1024, 2048], "2GiB", 1, 1)
BARRIERS_QUICK = ("resnet18", [64], "512MiB", 1, 0)
BARRIERS_TABLE_BEGIN = "<!-- barriers table: bench/run --only barriers writes between these lines -->"
BARRIERS_TABLE_END = "<!-- end of barriers table -->"


def barriers_table(points):
    out = ["| size | norm | strategy | step s | fwd s | bwd s | × frozen (tiled) | "
           "× plain (same norm) | measured peak MiB | tiles fwd/bwd |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        if p["status"] != "ok":
            out.append(f"| {p['height']}² | {p['norm']} | {p['strategy']} | – | – | – | – | – | – "
                       f"| {p['status']} {p.get('message', '')[:60]} |")
            continue
        frozen = next((q for q in points if q["height"] == p["height"] and q["norm"] == "frozen"
                       and q["strategy"] != "none" and q["status"] == "ok"), None)
        plain = next((q for q in points if q["height"] == p["height"] and q["norm"] == p["norm"]
                      and q["strategy"] == "none" and q["status"] == "ok"), None)
        out.append(f"| {p['height']}² | {p['norm']} | {p['strategy']} | "
                   f"{p['step_ms_median'] / 1000:.1f} | {p['forward_ms_median'] / 1000:.1f} | "
                   f"{p['backward_ms_median'] / 1000:.1f} | "
                   f"{ratio(p, frozen) if p['strategy'] != 'none' else '–'} | "
                   f"{ratio(p, plain) if plain is not None else '–'} | "
                   f"{fmt_mib(p['measured_peak_bytes'])} | {tiles_cell(p)} |")
    return "\n".join(out)


def run_variant_points(args, name, model, sizes, variants, repeat, warmup):
    """`tessel bench step` of `model` at each size for each variant (its extra flags, its
    strategy and the labels the point gets), each in a fresh process, into
    bench/results/NAME-DATE.jsonl (NAME-quick with --quick, or --out). Returns the points and
    the results file."""
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"{name}-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    points = []
    with open(out, "w") as f:
        for size in sizes:
            for flags, strategy, labels in variants:
                cmd = [args.tessel, "bench", "step", "--model", model, "--size",
                       f"{size}x{size}", "--strategy", strategy, "--repeat", str(repeat),
                       "--warmup", str(warmup), "--memory-limit", "20GiB",
                       "--log-level", "warn"] + flags
                p = run_process(cmd, model, size, strategy)
                p.update(labels)
                points.append(p)
                f.write(json.dumps(p) + "\n")
                f.flush()
                print(f"bench: {name} {model} {size}² {' '.join(str(v) for v in labels.values())} {strategy}: "
                      f"{p['status']} {p.get('step_ms_median', 0) / 1000:.2f} s/step", flush=True)
    return points, out


def write_jsonl(out, points):
    with open(out, "w") as f:
        for p in points:
            f.write(json.dumps(p) + "\n")


def report_section(args, table, out, begin, end, points):
    """The section's table into its .md beside the results and, unless --quick, into
    bench/README.md between its markers; exits 1 when a point failed."""
    print(table, flush=True)
    with open(out.replace(".jsonl", ".md"), "w") as f:
        f.write(table + "\n")
    if not args.quick:
        write_between_markers(begin, end, table)
    if any(p["status"] == "error" for p in points):
        sys.exit(1)


def run_barriers_section(args):
    model, sizes, budget, repeat, warmup = BARRIERS_QUICK if args.quick else BARRIERS_FULL
    if os.environ.get("BENCH_BARRIER_SIZES"):
        sizes = [int(x) for x in os.environ["BENCH_BARRIER_SIZES"].split(",")]
    variants = [(["--norm", norm, "--budget", budget if strategy != "none" else "0"], strategy,
                 {"norm": norm})
                for norm, strategy in [("frozen", "auto"), ("batch", "auto"), ("group", "auto"),
                                       ("frozen", "none"), ("batch", "none")]]
    points, out = run_variant_points(args, "barriers", model, sizes, variants, repeat, warmup)
    stamp = datetime.date.today().isoformat()
    table = (f"Measured by `bench/run --only barriers` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. {model}, budget {budget} for the tiled "
             f"points; median of {repeat} step(s) after {warmup} warmup.\n\n"
             + barriers_table(points))
    report_section(args, table, out, BARRIERS_TABLE_BEGIN, BARRIERS_TABLE_END, points)


# The attention-MIL head (core/exec/attention.h) against the global max pool at the same sizes and
# budget: its step time (the bar: within 5% of max) and its memory as the slide grows (the bar:
# flat). (model, sizes, budget, repeat, warmup).
ATTENTION_FULL = ("vgg-mini", [2048, 4096, 8192], "1GiB", 1, 1)
ATTENTION_QUICK = ("tiny", [96], "1MiB", 1, 0)
ATTENTION_TABLE_BEGIN = "<!-- attention table: bench/run --only attention writes between these lines -->"
ATTENTION_TABLE_END = "<!-- end of attention table -->"


def attention_table(points):
    out = ["| size | pool | step s | fwd s | bwd s | × max | measured peak MiB | "
           "predicted MiB | tiles fwd/bwd |",
           "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        if p["status"] != "ok":
            out.append(f"| {p['height']}² | {p['pool']} | – | – | – | – | – | – "
                       f"| {p['status']} {p.get('message', '')[:60]} |")
            continue
        base = next((q for q in points if q["height"] == p["height"] and q["pool"] == "max"
                     and q["status"] == "ok"), None)
        out.append(f"| {p['height']}² | {p['pool']} | {p['step_ms_median'] / 1000:.2f} | "
                   f"{p['forward_ms_median'] / 1000:.2f} | {p['backward_ms_median'] / 1000:.2f} | "
                   f"{ratio(p, base) if p['pool'] != 'max' else '–'} | "
                   f"{fmt_mib(p['measured_peak_bytes'])} | {fmt_mib(predicted_total(p))} | "
                   f"{tiles_cell(p)} |")
    return "\n".join(out)


def run_attention_section(args):
    model, sizes, budget, repeat, warmup = ATTENTION_QUICK if args.quick else ATTENTION_FULL
    if os.environ.get("BENCH_ATTENTION_SIZES"):
        sizes = [int(x) for x in os.environ["BENCH_ATTENTION_SIZES"].split(",")]
    # Alternating, so a drift of the machine's speed falls on both heads alike.
    pools = ("max", "attention") if args.quick else ("max", "attention", "max", "attention")
    variants = [(["--pool", pool, "--budget", budget], "auto", {"pool": pool}) for pool in pools]
    points, out = run_variant_points(args, "attention", model, sizes, variants, repeat, warmup)
    # Each size's runs per head: the faster (the machine's noise is one-sided).
    best = {}
    for p in points:
        key = (p["height"], p["pool"])
        kept = best.get(key)
        if kept is None or (p["status"] == "ok" and (kept["status"] != "ok" or
                                                    p["step_ms_median"] < kept["step_ms_median"])):
            best[key] = p
    rows = [best[k] for k in sorted(best, key=lambda k: (k[0], k[1] != "max"))]
    stamp = datetime.date.today().isoformat()
    table = (f"Measured by `bench/run --only attention` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. {model}, budget {budget}, strategy "
             f"auto; the faster of {len(pools) // 2} alternating runs per head, each the median "
             f"of {repeat} step(s) after {warmup} warmup.\n\n" + attention_table(rows))
    report_section(args, table, out, ATTENTION_TABLE_BEGIN, ATTENTION_TABLE_END, points)


# LR-CNN's two row schemes against SFT's grid (issue 23): overlapping rows (OverL, `rows`)
# recompute the halos they share; two-phase sharing (2PS, `rows-shared`) computes each position
# once and keeps the boundary rows instead. (model, size, budget) points, repeat, warmup.
ROWS_FULL = ([("vgg-mini", 8192, "1GiB"), ("vgg-mini", 16384, "1GiB"), ("vgg16", 4096, "2GiB")],
             1, 0)
ROWS_QUICK = ([("tiny", 96, "1MiB")], 1, 0)
ROWS_TABLE_BEGIN = "<!-- rows table: bench/run --only rows writes between these lines -->"
ROWS_TABLE_END = "<!-- end of rows table -->"


def rows_table(points):
    out = ["| model | size | budget | strategy | step s | fwd s | bwd s | × rows | × grid | "
           "fwd FLOPs × plain | measured peak MiB | predicted MiB | moved GiB | tiles fwd/bwd |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        head = f"| {p['model']} | {p['height']}² | {p['budget']} | {p['strategy']} |"
        if p["status"] != "ok":
            out.append(head + f" – | – | – | – | – | – | – | – | – | {p['status']} "
                       f"{p.get('message', '')[:60]} |")
            continue
        same = [q for q in points if q["model"] == p["model"] and q["height"] == p["height"]
                and q["status"] == "ok"]
        rows = next((q for q in same if q["strategy"] == "rows"), None)
        grid = next((q for q in same if q["strategy"] == "grid"), None)
        flops = p["tiled_flops"] / p["plain_flops"] if p.get("plain_flops") else float("nan")
        out.append(head + f" {p['step_ms_median'] / 1000:.1f} | "
                   f"{p['forward_ms_median'] / 1000:.1f} | {p['backward_ms_median'] / 1000:.1f} | "
                   f"{ratio(p, rows) if p['strategy'] != 'rows' else '–'} | "
                   f"{ratio(p, grid) if p['strategy'] != 'grid' else '–'} | {flops:.3f} | "
                   f"{fmt_mib(p['measured_peak_bytes'])} | {fmt_mib(predicted_total(p))} | "
                   f"{p.get('moved_bytes', 0) / 2**30:.1f} | {tiles_cell(p)} |")
    return "\n".join(out)


def run_rows_section(args):
    cases, repeat, warmup = ROWS_QUICK if args.quick else ROWS_FULL
    if os.environ.get("BENCH_ROWS_SIZES"):
        keep = {int(x) for x in os.environ["BENCH_ROWS_SIZES"].split(",")}
        cases = [c for c in cases if c[1] in keep]
    points = []
    for model, size, budget in cases:
        variants = [(["--budget", budget], strategy, {"budget": budget})
                    for strategy in ("grid", "rows", "rows-shared")]
        more, out = run_variant_points(args, "rows", model, [size], variants, repeat, warmup)
        points += more
    # run_variant_points writes one file per call: the whole section's points into the last.
    with open(out, "w") as f:
        for p in points:
            f.write(json.dumps(p) + "\n")
    stamp = datetime.date.today().isoformat()
    table = (f"Measured by `bench/run --only rows` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. Strategies fixed, the planner's "
             f"partitions and checkpoints under each budget; median of {repeat} step(s) after "
             f"{warmup} warmup.\n\n" + rows_table(points))
    report_section(args, table, out, ROWS_TABLE_BEGIN, ROWS_TABLE_END, points)


# Glass computed once (docs/glass.md): synthetic slides whose background covers 90, 70, 40 and
# 0% of the image (tissue 10, 30, 60, 100%), each step with its glass tiles skipped, the same plan
# run dense (--no-glass), and today's dense step (no background: the planner's own plan). The
# bar: the glass step within 1.25 × dense × (tissue + the margin the plan reports), i.e.
# 1.25 × dense × (1 − the share of FLOPs not computed: glass tiles and the other tiles' fills);
# at 100% tissue no slower than dense. (model, norm, size, budget) cases, repeat, warmup.
# resnet50 with train-mode batch norm in 8 GiB (sub-segments; in 2 GiB the plan recomputes in
# rounds, 20 minutes a step here), and at 1024² in 1 GiB (two sub-segment segments, minutes):
# BENCH_GLASS_MODELS=resnet50:batch for those alone, resnet50:batch:1024 for the second.
GLASS_FULL = ([("vgg-mini", "frozen", 4096, "1GiB"), ("resnet50", "frozen", 4096, "2GiB"),
               ("resnet50", "batch", 4096, "8GiB"), ("resnet50", "batch", 1024, "1GiB")], 1, 1)
GLASS_QUICK = ([("tiny", "frozen", 192, "1MiB")], 1, 0)
GLASS_BACKGROUNDS = [0.9, 0.7, 0.4, 0.0]
GLASS_TABLE_BEGIN = "<!-- glass table: bench/run --only glass writes between these lines -->"
GLASS_TABLE_END = "<!-- end of glass table -->"


def glass_table(points):
    out = ["| model | norm | size | tissue | glass FLOPs (tiles + filled) | step s | "
           "same plan dense s | dense s | "
           "× dense | bar × dense | within | glass tiles fwd | checkpoints' glass MiB | "
           "moved MiB (same plan dense) | measured peak MiB (same plan dense) | "
           "predicted peak MiB | steps (warm-up) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        if p.get("variant") != "glass":
            continue
        head = f"| {p['model']} | {p['norm']} | {p['height']}² | {100 * (1 - p['background']):.0f}% |"
        same = [q for q in points if q["model"] == p["model"] and q["norm"] == p["norm"]
                and q["height"] == p["height"]]
        dense = next((q for q in same if q.get("variant") == "dense"), None)
        nog = next((q for q in same if q.get("variant") == "no-glass"
                    and q.get("background") == p["background"]), None)
        if p["status"] != "ok" or dense is None or dense["status"] != "ok":
            out.append(head + f" – | – | – | – | – | – | – | {p['status']} "
                       f"{p.get('message', '')[:50]} | – | – | – | – | – | – |")
            continue
        tiles, filled = p.get("glass_flops_fraction", 0.0), p.get("glass_filled_fraction", 0.0)
        flops = tiles + filled
        step, base = p["step_ms_median"], dense["step_ms_median"]
        bar = 1.25 * (1 - flops) if p["background"] > 0 else 1.05
        same_s = f"{nog['step_ms_median'] / 1000:.1f}" if nog and nog["status"] == "ok" else "–"
        out.append(head + f" {100 * flops:.0f}% ({100 * tiles:.0f} + {100 * filled:.0f}) | "
                   f"{step / 1000:.1f} | {same_s} | "
                   f"{base / 1000:.1f} | {step / base:.2f} | {bar:.2f} | "
                   f"{'yes' if step / base <= bar else 'NO'} | "
                   f"{p.get('glass_forward_tiles', 0)}/{p.get('forward_tiles', 0)} | "
                   f"{fmt_mib(p.get('uniform_checkpoint_bytes', 0))} of "
                   f"{fmt_mib(p.get('checkpoint_bytes', 0))} | "
                   f"{glass_pair(p, nog, 'moved_bytes')} | "
                   f"{glass_pair(p, nog, 'measured_peak_bytes')} | "
                   f"{fmt_mib(predicted_total(p))} | "
                   f"{p.get('repeat', '?')} ({p.get('warmup', '?')})"
                   f"{' × ' + str(p['rounds']) + ' rounds' if p.get('rounds', 1) > 1 else ''} |")
    return "\n".join(out)


def glass_pair(p, nog, key):
    """`key` of the glass step, and in parentheses of the same plan run dense (MiB)."""
    ok = nog is not None and nog["status"] == "ok"
    return f"{fmt_mib(p.get(key) or 0)} ({fmt_mib(nog.get(key) or 0) if ok else '–'})"


def glass_points_kept(cases):
    """The points of the newest glass results file for (model, norm, size) cases this run does
    not measure, so a run of some models (resnet50 frozen: 17 minutes for 2 rounds) keeps the
    table's other rows."""
    folder = os.path.join(ROOT, "bench", "results")
    files = sorted(f for f in os.listdir(folder)
                   if f.startswith("glass-20") and f.endswith(".jsonl"))
    if not files:
        return []
    measured = {(m, n, size) for m, n, size, _ in cases}
    with open(os.path.join(folder, files[-1])) as f:
        points = [json.loads(line) for line in f if line.strip()]
    return [p for p in points if (p["model"], p["norm"], p["height"]) not in measured]


def merge_rounds(same):
    """One point from the rounds of one variant: every round's steps, their median, and the
    medians of the rounds' forward and backward times; a failed round fails the point."""
    bad = [p for p in same if p["status"] != "ok"]
    if bad or len(same) == 1:
        return bad[0] if bad else same[0]
    p = dict(same[-1])
    p["step_ms"] = [t for q in same for t in q["step_ms"]]
    p["step_ms_median"] = statistics.median(p["step_ms"])
    for key in ("forward_ms_median", "backward_ms_median"):
        p[key] = statistics.median(q[key] for q in same)
    p["measured_peak_bytes"] = max(q["measured_peak_bytes"] for q in same)
    return p


def run_glass_section(args):
    cases, repeat, warmup = GLASS_QUICK if args.quick else GLASS_FULL
    repeat = int(os.environ.get("BENCH_GLASS_REPEAT", repeat))
    warmup = int(os.environ.get("BENCH_GLASS_WARMUP", warmup))
    same_plan = os.environ.get("BENCH_GLASS_SAME_PLAN", "1") != "0"
    rounds = int(os.environ.get("BENCH_GLASS_ROUNDS", "1"))
    if os.environ.get("BENCH_GLASS_SIZES"):
        sizes = [int(x) for x in os.environ["BENCH_GLASS_SIZES"].split(",")]
        cases = [(m, n, size, b) for m, n, _, b in cases for size in sizes]
    if os.environ.get("BENCH_GLASS_MODELS"):
        keep = os.environ["BENCH_GLASS_MODELS"].split(",")
        cases = [c for c in cases
                 if f"{c[0]}:{c[1]}:{c[2]}" in keep or f"{c[0]}:{c[1]}" in keep or c[0] in keep]
    points, out = [] if args.quick else glass_points_kept(cases), None
    for model, norm, size, budget in cases:
        base = ["--norm", norm, "--budget", budget, "--prices", "100,100"]
        steps = {"warmup": warmup, "rounds": rounds}
        variants = [(base, "auto", {"variant": "dense", "norm": norm, "budget": budget, **steps})]
        for b in GLASS_BACKGROUNDS:
            labels = {"norm": norm, "budget": budget, "background": b, **steps}
            variants.append((base + ["--background", str(b)], "auto",
                             dict(labels, variant="glass")))
            if b > 0 and same_plan:
                variants.append((base + ["--background", str(b), "--no-glass"], "auto",
                                 dict(labels, variant="no-glass")))
        runs = []
        for _ in range(rounds):
            more, out = run_variant_points(args, "glass", model, [size], variants, repeat, warmup)
            runs.append(more)
        points += [merge_rounds(list(same)) for same in zip(*runs)]
    with open(out, "w") as f:
        for p in points:
            f.write(json.dumps(p) + "\n")
    stamp = datetime.date.today().isoformat()
    table = (f"Measured by `bench/run --only glass` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. Synthetic slides (a seeded background "
             f"over 1 − tissue of the image, blobs with holes and one-cell bridges); the planner's "
             f"plan for each under the budget at fixed prices (100 ns/byte, 100 GFLOP/s); 'same "
             f"plan dense' runs the glass step's plan without skipping; 'dense' is the plan "
             f"without a background. Bar: 1.25 × (1 − glass FLOPs) × dense (at 100% tissue "
             f"1.05). 'steps (warm-up)': the median of that many steps after that many warm-up "
             f"steps, each variant of a model in its own process, in turn, as many rounds as "
             f"'× rounds' says. Rows measured in this run: "
             f"{', '.join(f'{m} {n} {size}²' for m, n, size, _ in cases)}; the others are kept "
             f"from the previous results file, measured on their own day.\n\n"
             + glass_table(points))
    report_section(args, table, out, GLASS_TABLE_BEGIN, GLASS_TABLE_END, points)


# Glass on real slides (../shared/slides, with tissue_fill): the background the tissue mask
# leaves, the step with its glass computed once against the same plan run dense and the plan
# without glass (glass=false), and `tessel gradcheck --slide` at a coarser resolution (float64
# plain autograd holds the whole image): the gradient equal. (name, file, settings, gradcheck's
# settings.)
GLASS_SLIDES = [
    ("CMU-1 (Aperio, 20×)", "cmu-1-small-region.svs", ["level=0"], ["mpp=2"]),
    ("TCGA-CR-7395 (Aperio, no mpp in the file: 0.25 assumed)", "tcga-cr-7395-01a-01-ts1.svs",
     ["base_mpp=0.25", "mpp=0.5"], ["base_mpp=0.25", "mpp=2"]),
]
GLASS_SLIDES_MODEL, GLASS_SLIDES_BUDGET = "vgg-mini", "1GiB"
GLASS_SLIDES_TABLE_BEGIN = ("<!-- glass slides table: bench/run --only glass-slides writes "
                            "between these lines -->")
GLASS_SLIDES_TABLE_END = "<!-- end of glass slides table -->"


def glass_slide_points(args, path, settings, repeat, warmup):
    """The slide's step with glass, the same plan run dense, and the plan without glass."""
    points = []
    for flags, variant in [([], "glass"), (["--no-glass"], "no-glass"), (["glass=false"], "dense")]:
        cmd = [args.tessel, "bench", "step", "--model", GLASS_SLIDES_MODEL, "--slide", path,
               "tissue_fill=true"] + settings + flags + [
               "--budget", GLASS_SLIDES_BUDGET, "--prices", "100,100", "--repeat", str(repeat),
               "--warmup", str(warmup), "--log-level", "warn"]
        p = run_process(cmd, GLASS_SLIDES_MODEL, 0, "auto")
        p["variant"] = variant
        points.append(p)
        print(f"bench: glass-slides {os.path.basename(path)} {variant}: {p['status']} "
              f"{p.get('step_ms_median', 0) / 1000:.2f} s/step", flush=True)
    return points


def glass_slide_gradcheck(args, path, settings):
    """`tessel gradcheck --slide` in float64: (passed, worst error, its uniform share line)."""
    cmd = [args.tessel, "gradcheck", "--model", GLASS_SLIDES_MODEL, "--slide", path,
           "tissue_fill=true"] + settings + ["--budget", "40MiB", "--prices", "100,100",
                                              "--log-level", "warn"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return proc.returncode == 0, last


def glass_slides_row(name, points, check):
    glass, nog, dense = (next(p for p in points if p["variant"] == v)
                         for v in ("glass", "no-glass", "dense"))
    if any(p["status"] != "ok" for p in (glass, nog, dense)):
        bad = next(p for p in (glass, nog, dense) if p["status"] != "ok")
        return f"| {name} | – | – | – | – | – | – | – | {bad['status']} {bad.get('message', '')[:60]} | – |"
    flops = glass.get("glass_flops_fraction", 0.0) + glass.get("glass_filled_fraction", 0.0)
    step, base = glass["step_ms_median"], dense["step_ms_median"]
    bar = 1.25 * (1 - flops)
    return (f"| {name} | {glass['width']}×{glass['height']} | "
            f"{100 * glass.get('background_fraction', 0):.0f}% | {100 * flops:.0f}% | "
            f"{step / 1000:.1f} | {nog['step_ms_median'] / 1000:.1f} | {base / 1000:.1f} | "
            f"{step / base:.2f} (bar {bar:.2f}: {'yes' if step / base <= bar else 'NO'}) | "
            f"{fmt_mib(glass['measured_peak_bytes'])} ({fmt_mib(dense['measured_peak_bytes'])}); "
            f"predicted {fmt_mib(predicted_total(glass))} | "
            f"{'PASS' if check[0] else 'FAIL'}: {check[1].split(': ', 1)[-1]} |")


def run_glass_slides_section(args):
    repeat, warmup = (1, 0) if args.quick else (2, 1)
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"glass-slides-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    slides_dir = os.path.join(ROOT, "..", "shared", "slides")
    rows, points = [], []
    for name, file, settings, check_settings in GLASS_SLIDES:
        path = os.path.join(slides_dir, file)
        if not os.path.exists(path):
            print(f"bench: glass-slides: {path} is missing; skipped", flush=True)
            continue
        more = glass_slide_points(args, path, settings, repeat, warmup)
        check = glass_slide_gradcheck(args, path, check_settings)
        for p in more:
            p.update({"slide": file, "settings": settings, "gradcheck": check[1]})
        points += more
        rows.append(glass_slides_row(name, more, check))
    if not points:
        return
    write_jsonl(out, points)
    table = (f"Measured by `bench/run --only glass-slides` on {stamp}. Machine: {machine()}. "
             f"Threads: {points[0].get('threads', '?')}. {GLASS_SLIDES_MODEL} (frozen), "
             f"{GLASS_SLIDES_BUDGET}, prices 100 ns/byte and 100 GFLOP/s, tissue_fill: true; "
             f"'same plan' runs the glass step's plan without skipping, 'dense' the plan without "
             f"glass (glass=false). Bar: 1.25 × (1 − glass FLOPs) × dense. Median of {repeat} "
             f"step(s) after {warmup} warmup. Gradient: `tessel gradcheck --slide` in float64 at "
             f"2 µm/px (the worst relative error of any quantity, bar 1e-10).\n\n"
             "| slide | pixels | background | glass FLOPs | step s | same plan dense s | "
             "dense s | × dense | measured peak MiB (dense) | gradient |\n"
             "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    report_section(args, table, out, GLASS_SLIDES_TABLE_BEGIN, GLASS_SLIDES_TABLE_END, points)


COHORT_TABLE_BEGIN = "<!-- cohort table: bench/run --only cohort writes between these lines -->"
COHORT_TABLE_END = "<!-- end of cohort table -->"


def cohort_settings(quick):
    """The cohort and the runs over it: a small one for this CPU (6 slides of 8192² at 0.25 µm/px,
    2048² at the 1 µm/px they train at), the issue's (20 of 40000²) where a GPU is at hand."""
    env = os.environ.get
    return {"slides": int(env("BENCH_COHORT_SLIDES", 2 if quick else 6)),
            "size": int(env("BENCH_COHORT_SIZE", 2048 if quick else 8192)),
            "models": env("BENCH_COHORT_MODELS", "tiny" if quick else "vgg-mini").split(","),
            "mpp": float(env("BENCH_COHORT_MPP", 1.0)),
            "budget": env("BENCH_COHORT_BUDGET", "1GiB"),
            "device": env("BENCH_COHORT_DEVICE", "cpu"),
            "precision": env("BENCH_COHORT_PRECISION", "float32"),
            # Each network at each of these read_ahead settings (slides opened ahead; 0: in turn).
            "read_ahead": env("BENCH_COHORT_READ_AHEAD", "auto,0").split(",")}


def check_cohort(settings):
    if not all(r == "auto" or r.isdigit() for r in settings["read_ahead"]):
        sys.exit("bench: BENCH_COHORT_READ_AHEAD must be a list of read_ahead settings (auto or "
                 "a number of slides; 0: each opened in turn), such as auto,0")
    if settings["slides"] < 2:
        sys.exit("bench: BENCH_COHORT_SLIDES must be at least 2 (half tumour, half normal: a "
                 "classifier needs two classes)")


def cohort_slides(tessel, folder, settings):
    """Writes the cohort (tessel sample-data at 0.25 µm/px), every slide in the train split: the
    epoch is training alone. Returns the manifest and the seconds writing took."""
    t0 = time.monotonic()
    manifest = os.path.join(folder, "manifest.csv")
    if not os.path.exists(manifest):  # BENCH_COHORT_FOLDER may hold it, written beforehand
        subprocess.run([tessel, "sample-data", "--out", folder, "--slides",
                        str(settings["slides"]), "--size", str(settings["size"]), "--mpp", "0.25",
                        "--seed", "1"], check=True, capture_output=True)
    with open(manifest) as m:
        rows = list(csv.DictReader(m))
    for row in rows:
        row["split"] = "train"
    with open(manifest, "w", newline="") as m:
        w = csv.DictWriter(m, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return manifest, time.monotonic() - t0


def cohort_point(tessel, tmp, manifest, settings, spec, read_ahead):
    """One epoch of `spec` (MODEL or MODEL:NORM) over the cohort, the next slide read ahead or
    not: its slides' events summed."""
    model, _, norm = spec.partition(":")
    run = os.path.join(tmp, "run-" + spec.replace(":", "-") + "-ahead-" + read_ahead)
    config = os.path.join(tmp, "cohort.yaml")
    with open(config, "w") as c:
        c.write(f"manifest: {manifest}\nmodel: {model}\nnorm: {norm or 'frozen'}\n"
                f"mpp: {settings['mpp']}\ntissue_fill: true\nepochs: 1\nbatch: 1\n"
                f"optimizer: sgd\nbudget: {settings['budget']}\ndevice: {settings['device']}\n"
                f"precision: {settings['precision']}\nread_ahead: {read_ahead}\n"
                f"seed: 1\noutput: {run}\n")
    t0 = time.monotonic()
    done = subprocess.run([tessel, "--log-level", "warn", "train", "--config", config],
                          capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        return {"model": spec, "read_ahead": read_ahead, "status": "error",
                "message": done.stderr.strip()[-600:]}
    with open(os.path.join(run, "metrics.csv")) as m:
        epoch_s = float(list(csv.DictReader(m))[-1]["seconds"])
    slides = [json.loads(line) for line in open(os.path.join(run, "events.jsonl"))]
    slides = [e for e in slides if e.get("type") == "slide"]
    total = {k: sum(e[k] for e in slides) for k in
             ("seconds", "open_seconds", "open_wait_seconds", "step_seconds", "wait_seconds",
              "flops")}
    return {"model": spec, "read_ahead": read_ahead, "status": "ok", "slides": len(slides),
            "epoch_s": epoch_s,
            "process_s": wall, "slides_per_hour": 3600.0 * len(slides) / epoch_s,
            "pixels": [e["height"] * e["width"] for e in slides],
            "peak_bytes": max(e["measured_peak_bytes"] for e in slides), **total}


def cohort_name(p):
    ahead = p["read_ahead"]
    return f"{p['model']}, " + ("in turn" if ahead == "0" else f"read ahead {ahead}")


def cohort_row(p, settings):
    name = cohort_name(p)
    if p["status"] != "ok":
        return f"| {name} | error: {p['message'][:200]} |" + " |" * 9
    e = p["epoch_s"]
    side = int(round((sum(p["pixels"]) / len(p["pixels"])) ** 0.5))
    rest = e - p["seconds"]
    return (f"| {name} | {p['slides']} × ~{side}² | {e:.1f} | {p['slides_per_hour']:.0f} | "
            f"{p['open_seconds']:.1f} | "
            f"{p['open_wait_seconds']:.1f} ({100 * p['open_wait_seconds'] / e:.0f}%) | "
            f"{p['step_seconds']:.1f} ({100 * p['step_seconds'] / e:.0f}%) | "
            f"{p['wait_seconds']:.2f} ({100 * p['wait_seconds'] / e:.1f}%) | "
            f"{rest:.1f} ({100 * rest / e:.0f}%) | {p['flops'] / e / 1e12:.3g} | "
            f"{fmt_mib(p['peak_bytes'])} |")


def run_cohort_section(args):
    import tempfile
    settings = cohort_settings(args.quick)
    check_cohort(settings)
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"cohort-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    points = []
    with tempfile.TemporaryDirectory(prefix="tessel-cohort-") as tmp:
        # BENCH_COHORT_FOLDER: slides written there beforehand (`tessel sample-data` with the
        # same --slides, --size, --mpp 0.25 --seed 1: scripts/gpu-session writes them while its
        # checks run), or written there now.
        folder = os.environ.get("BENCH_COHORT_FOLDER") or os.path.join(tmp, "slides")
        manifest, written_s = cohort_slides(args.tessel, folder, settings)
        print(f"bench: cohort of {settings['slides']} slides of {settings['size']}² written in "
              f"{written_s:.1f} s", flush=True)
        for spec in settings["models"]:
            for read_ahead in settings["read_ahead"]:
                p = cohort_point(args.tessel, tmp, manifest, settings, spec, read_ahead)
                p.update({k: settings[k] for k in ("size", "mpp", "budget", "device",
                                                   "precision")})
                p["cohort_slides"] = settings["slides"]
                points.append(p)
                write_jsonl(out, points)  # each point as it comes: a timed-out run keeps them
                print(f"bench: cohort {cohort_name(p)}: " +
                      (f"{p['slides_per_hour']:.0f} slides/h, epoch {p['epoch_s']:.1f} s"
                       if p["status"] == "ok" else p["message"]), flush=True)
    write_jsonl(out, points)
    table = (f"Measured by `bench/run --only cohort` on {stamp}. Machine: {machine()}. Device "
             f"{settings['device']}, {settings['precision']}. Cohort: {settings['slides']} "
             f"synthetic H&E-like slides (`tessel sample-data`, JPEG pyramidal TIFF) of "
             f"{settings['size']}² at 0.25 µm/px, trained one epoch at {settings['mpp']} µm/px "
             f"(tissue_fill: true, so glass is computed once), batch 1, SGD, budget "
             f"{settings['budget']}. Opening: the slide, its tissue mask and the plan (read "
             f"ahead N: the next N slides', each with the pixels its first tiles read, each on a "
             f"thread while the current one trains, `read_ahead: N`; auto: 1 on a CPU, one per 4 "
             f"CPU threads on a GPU, 1 to 4); waited: what training waited for the opening; "
             f"waits: the step waiting for pixels (inside the step's time); the rest: "
             f"between slides (optimizer, checkpoint, logs); epoch TFLOP/s: the FLOPs the plans "
             f"execute (`tessel plan`'s priced compute: recompute and halos in, glass not run "
             f"out) over the epoch's seconds.\n\n"
             "| network | slides | epoch s | slides / hour | opening s | waited for it s | "
             "steps s | waits s | rest s | epoch TFLOP/s | peak MiB |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|\n" +
             "\n".join(cohort_row(p, settings) for p in points))
    report_section(args, table, out, COHORT_TABLE_BEGIN, COHORT_TABLE_END, points)


# Data-parallel training (`tessel train --distributed`, docs/distributed.md) on this machine:
# local ranks over loopback TCP, each at 1 thread. Kept apart from the step benchmark above.
DIST_MODELS = ["vgg-mini", "vgg16"]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tessel, args, world, cwd):
    """`tessel ARGS` as `world` local ranks (torchrun-style environment); rank 0's stdout."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([tessel] + args, env=env, cwd=cwd, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outputs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outputs):
        if p.returncode != 0:
            sys.exit(f"bench: {' '.join(args)} failed: {err.strip()[-800:]}")
    return outputs[0][0]


def run_dist(tessel, out, quick):
    import tempfile
    stamp = datetime.date.today().isoformat()
    out = out or os.path.join(ROOT, "bench", "results", f"dist-{'quick' if quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    slides, size, epochs = (6, 512, 2) if quick else (16, 2048, 2)
    points = []
    with tempfile.TemporaryDirectory(prefix="tessel-dist-bench-") as tmp, open(out, "w") as f:
        subprocess.run([tessel, "sample-data", "--out", os.path.join(tmp, "slides"), "--slides",
                        str(slides), "--size", str(size), "--seed", "1"], check=True,
                       capture_output=True)
        config = os.path.join(tmp, "run.yaml")
        with open(config, "w") as c:
            c.write(f"manifest: {tmp}/slides/manifest.csv\nmodel: {'tiny' if quick else 'vgg-mini'}"
                    f"\nlevel: 1\nepochs: {epochs}\nbatch: 2\noptimizer: sgd\nbudget: 1GiB\n")
        for world in (1, 2):
            run = os.path.join(tmp, f"run-{world}")
            args = ["--threads", "1", "train", "--config", config, f"output={run}"]
            if world > 1:
                args.append("--distributed")
            run_ranks(tessel, args, world, tmp)
            with open(os.path.join(run, "metrics.csv")) as m:
                rows = list(csv.DictReader(m))
            events = [json.loads(line) for line in open(os.path.join(run, "events.jsonl"))]
            exchanges = [e for e in events if e["type"] == "allreduce"]
            seconds = float(rows[-1]["seconds"])  # the last epoch: no start-up in it
            with open(os.path.join(tmp, "slides", "manifest.csv")) as m:
                splits = [row["split"] for row in csv.DictReader(m)]
            epoch_slides = splits.count("train") + splits.count("val")
            p = {"kind": "train", "world_size": world, "threads_per_rank": 1,
                 "epoch_seconds": seconds, "epoch_slides": epoch_slides,
                 "slides_per_second": epoch_slides / seconds,
                 "allreduce_seconds": exchanges[-1]["seconds"] if exchanges else 0,
                 "allreduce_calls": exchanges[-1]["calls"] if exchanges else 0}
            points.append(p)
            f.write(json.dumps(p) + "\n")
            print(f"bench: train {world} rank(s): epoch {seconds:.1f} s, "
                  f"{p['slides_per_second']:.2f} slides/s", flush=True)
        for model in (["tiny"] if quick else DIST_MODELS):
            line = run_ranks(tessel, ["--threads", "1", "bench", "allreduce", "--model", model,
                                      "--repeat", "3" if quick else "10"], 2, tmp)
            p = json.loads(line.strip().splitlines()[-1])
            p["step_ms_median"] = sorted(p["step_ms"])[len(p["step_ms"]) // 2]
            points.append(p)
            f.write(json.dumps(p) + "\n")
            print(f"bench: allreduce {model} ({p['gradient_bytes'] / MiB:.1f} MiB) on 2 ranks: "
                  f"{p['step_ms_median']:.1f} ms", flush=True)
    one, two = points[0], points[1]
    print(f"Machine: {machine()}. Date: {stamp}.\n"
          f"Slides per second (train + val, last epoch of {epochs}, 1 thread per rank): 1 rank "
          f"{one['slides_per_second']:.2f}, 2 ranks {two['slides_per_second']:.2f} "
          f"({two['slides_per_second'] / one['slides_per_second']:.2f}×)"
          f"; allreduce over the epoch on rank 0: {two['allreduce_seconds']:.2f} s in "
          f"{two['allreduce_calls']} steps (waiting for the other rank included)")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run of a few seconds")
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build", "app", "tessel"))
    ap.add_argument("--out", default=None, help="results file (JSON lines)")
    ap.add_argument("--only", choices=["step", "read", "offload", "dist", "barriers", "attention",
                                       "rows", "glass", "glass-slides", "cohort"],
                    default=None,
                    help="run one section only")
    ap.add_argument("--redo", default=None, metavar="MODEL:SIZE:METHOD,...",
                    help="re-measure these points of today's run, keep the rest, rewrite the "
                         "report")
    args = ap.parse_args()
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"bench: {args.tessel} is not built; run `make build` first")
    if args.only == "offload":
        run_offload_section(args)
        return
    if args.only == "dist":
        run_dist(args.tessel, args.out, args.quick)
        return
    if args.only == "barriers":
        run_barriers_section(args)
        return
    if args.only == "rows":
        run_rows_section(args)
        return
    if args.only == "attention":
        run_attention_section(args)
        return
    if args.only == "glass":
        run_glass_section(args)
        return
    if args.only == "glass-slides":
        run_glass_slides_section(args)
        return
    if args.only == "cohort":
        run_cohort_section(args)
        return

    scenarios = QUICK if args.quick else FULL
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"step-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    points = []
    if args.only == "read":
        scenarios = []
    baselines = args.only != "read" and system_python_has("torch")
    if args.only != "read" and not baselines:
        print(f"bench: skipping the PyTorch baselines: {SYSTEM_PYTHON} cannot import torch "
              "(run scripts/setup)", flush=True)
    budgets = {model: budget for model, _, budget in FULL + QUICK}
    if args.redo:
        # Re-measures the named points (say, ones a noisy neighbour disturbed) and replaces them in
        # the run's results; everything else, the slide-reading results included, is kept.
        with open(out) as f:
            points = [json.loads(line) for line in f if line.strip()]
        for spec in args.redo.split(","):
            try:
                model, size, method = spec.split(":")
                size = int(size)
                budgets[model]
                STRATEGIES.index(method)
            except (ValueError, KeyError):
                sys.exit(f"bench: --redo {spec}: expected MODEL:SIZE:METHOD with a model of "
                         f"{', '.join(budgets)} and a method of {', '.join(STRATEGIES)}")
            p = measure(args, model, size, method, budgets[model], points)
            points = [q for q in points if (q["model"], q["height"], q["strategy"]) !=
                      (model, size, method)] + [p]
            print(f"bench: re-measured {model} {size}² {method}: {p['status']} "
                  f"{p.get('step_ms_median', 0) / 1000:.2f} s/step", flush=True)
        with open(out, "w") as f:
            for p in points:
                f.write(json.dumps(p) + "\n")
    # `--only read` leaves the step results as they are.
    with open(out if args.only != "read" and not args.redo else os.devnull, "w") as f:
        for model, sizes, budget in scenarios if not args.redo else []:
            for size in sizes:
                methods = LONG_POINTS.get((model, size), STRATEGIES)
                for method in ("none", "grid", "rows", "pytorch", "pytorch-tuned",
                               "pytorch-checkpoint"):
                    if method not in methods:
                        continue
                    if method.startswith("pytorch") and not baselines:
                        continue
                    record(points, f, measure(args, model, size, method, budget, points))
    read_report = ""
    # Next to the step results, never over them (--out may not contain "step-").
    read_out = os.path.join(os.path.dirname(out),
                            "read-" + os.path.basename(out).replace("step-", ""))
    if args.redo and os.path.exists(read_out):
        with open(read_out) as f:
            read_report = read_table([json.loads(line) for line in f if line.strip()])
    elif args.only != "step":
        settings = READ_QUICK if args.quick else READ_FULL
        read_points = run_read(args.tessel, settings["size"], settings["limit"])
        with open(read_out, "w") as f:
            for p in read_points:
                f.write(json.dumps(p) + "\n")
        read_report = read_table(read_points)
        print(read_report, flush=True)
        if not args.quick:
            write_read_table_into_readme(read_table(read_points))
    if args.only == "read":
        return
    # Quick: a 20000² slide, to keep the smoke run short; the full run times 200000².
    plan_size = 20000 if args.quick else 200000
    planner_s = plan_speed(args.tessel, 1 if args.quick else 5, plan_size)
    print(f"bench: tessel plan vgg16 {plan_size}² 8GiB: {planner_s:.2f} s (process wall time)")
    report = (f"Machine: {machine()}. Date: {stamp}. Threads: "
              f"{points[0].get('threads', '?')}.\n" + tables(points) +
              f"\n\nPlanner: `tessel plan --model vgg16 --size {plan_size}x{plan_size} "
              f"--budget 8GiB` "
              f"takes {planner_s:.2f} s wall time, process start included (median of "
              f"{1 if args.quick else 5}).\n" + largest_table(points) + "\n")
    write_csv(points, out.replace(".jsonl", ".csv"))
    pngs = plots(args.tessel, out, args.quick)
    if pngs:
        report += "\nPlots: " + ", ".join(os.path.relpath(p, os.path.dirname(out))
                                          for p in pngs) + "\n"
    with open(out.replace(".jsonl", ".md"), "w") as f:
        f.write(report + read_report + "\n")
    print(report + read_report)
    if not args.quick and args.only is None:
        # The plots sit next to README.md under fixed names, so the page's images stay put.
        named = []
        for png in pngs:
            dest = os.path.join(ROOT, "bench", "plots",
                                os.path.basename(png).replace(f"step-{stamp}", "step"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(png, dest)
            named.append(dest)
        images = "\n".join(f"![{os.path.basename(d)}](plots/{os.path.basename(d)})"
                           for d in named)
        write_between_markers(STEP_TABLES_BEGIN, STEP_TABLES_END,
                              f"Measured by `bench/run` on {stamp}.\n\n" + report + "\n" + images)
    bad = [p for p in points if p["status"] == "error"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
