#!/usr/bin/env python3
"""Runs the engine benchmark: one `tessel bench step` process per point, so peaks do not leak
between points, and writes the results (JSON lines) and the tables of bench/README.md.

  bench/run              the published table (about 30-40 minutes on the 2-core machine)
  bench/run --quick      a smoke run of a few seconds: the harness works (no timing claims)
  bench/run --only read  just the slide-reading section (`tessel bench read`, 20000² JPEG TIFF)
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30
MiB = 1 << 20

FULL = [
    # (model, sizes, tiled budget)
    ("vgg-mini", [512, 1024, 2048, 4096, 8192], "1GiB"),
    ("vgg16", [512, 1024, 2048], "2GiB"),
]
QUICK = [("tiny", [128, 256], "64MiB")]


def run_point(tessel, model, size, strategy, budget, repeat, warmup):
    cmd = [tessel, "bench", "step", "--model", model, "--size", f"{size}x{size}",
           "--strategy", strategy, "--budget", budget, "--repeat", str(repeat),
           "--warmup", str(warmup), "--memory-limit", "20GiB", "--log-level", "warn"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        status = "out_of_memory (killed)" if proc.returncode < 0 else "error"
        return {"model": model, "height": size, "width": size, "strategy": strategy,
                "status": status, "message": proc.stderr.strip()[-300:],
                "wall_s": time.time() - t0}
    point = json.loads(proc.stdout.strip().splitlines()[-1])
    point["wall_s"] = time.time() - t0
    return point


def plan_speed(tessel, runs=5):
    """Wall time of `tessel plan` for VGG-16 on a 200000² slide (process start included)."""
    times = []
    for _ in range(runs):
        t0 = time.time()
        subprocess.run([tessel, "plan", "--model", "vgg16", "--size", "200000x200000",
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
    path = os.path.join(ROOT, "bench", "README.md")
    with open(path) as f:
        text = f.read()
    if READ_TABLE_BEGIN not in text:
        return
    head, rest = text.split(READ_TABLE_BEGIN, 1)
    tail = rest.split(READ_TABLE_END, 1)[1]
    with open(path, "w") as f:
        f.write(head + READ_TABLE_BEGIN + "\n" + table.strip() + "\n" + READ_TABLE_END + tail)


def fmt_mib(b):
    return f"{b / MiB:,.0f}"


def tables(points):
    out = []
    by_model = {}
    for p in points:
        by_model.setdefault(p["model"], []).append(p)
    for model, pts in by_model.items():
        budget = next((p["budget_bytes"] for p in pts if p.get("strategy") != "none"
                       and p.get("budget_bytes")), 0)
        out.append(f"\n### {model} (tiled budget {budget / GiB:g} GiB)\n")
        out.append("| size | strategy | step s (median) | fwd s | bwd s | × plain | measured peak MiB "
                   "| predicted MiB | max RSS MiB | tiles fwd/bwd | status |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        plain = {p["height"]: p for p in pts if p["strategy"] == "none" and p["status"] == "ok"}
        for p in sorted(pts, key=lambda p: (p["height"], ["none", "grid", "rows", "auto"].index(
                p["strategy"]))):
            size = f"{p['height']}²"
            if p["status"] != "ok":
                msg = p.get("message", "").split(":")[0][:60]
                out.append(f"| {size} | {p['strategy']} | – | – | – | – | – | – | – | – | "
                           f"{p['status']} {msg} |")
                continue
            ratio = ""
            if p["height"] in plain and p["strategy"] != "none":
                ratio = f"{p['step_ms_median'] / plain[p['height']]['step_ms_median']:.2f}"
            pred = p["predicted_bytes"]
            predicted = pred["checkpoints"] + pred["working_set"] + pred["head"]
            out.append(
                f"| {size} | {p['strategy']} | {p['step_ms_median'] / 1000:.2f} | "
                f"{p['forward_ms_median'] / 1000:.2f} | {p['backward_ms_median'] / 1000:.2f} | "
                f"{ratio} | {fmt_mib(p['measured_peak_bytes'])} | {fmt_mib(predicted)} | "
                f"{fmt_mib(p['max_rss_bytes'])} | {p['forward_tiles']}/{p['backward_tiles']} | ok |")
    return "\n".join(out)


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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run of a few seconds")
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build", "app", "tessel"))
    ap.add_argument("--out", default=None, help="results file (JSON lines)")
    ap.add_argument("--only", choices=["step", "read"], default=None,
                    help="run one section only")
    args = ap.parse_args()
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"bench: {args.tessel} is not built; run `make build` first")

    scenarios = QUICK if args.quick else FULL
    stamp = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   f"step-{'quick' if args.quick else stamp}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    points = []
    if args.only == "read":
        scenarios = []
    with open(out, "w") as f:
        for model, sizes, budget in scenarios:
            for size in sizes:
                big = size * size >= 4096 * 4096 or (model == "vgg16" and size >= 2048)
                repeat, warmup = (1, 0) if big else (2, 1)
                if args.quick:
                    repeat, warmup = 1, 0
                for strategy in ("none", "grid", "rows"):
                    b = "0" if strategy == "none" else budget
                    p = run_point(args.tessel, model, size, strategy, b, repeat, warmup)
                    points.append(p)
                    f.write(json.dumps(p) + "\n")
                    f.flush()
                    print(f"bench: {model} {size}² {strategy}: {p['status']} "
                          f"{p.get('step_ms_median', 0) / 1000:.2f} s/step, peak "
                          f"{p.get('measured_peak_bytes', 0) / MiB:.0f} MiB", flush=True)
    read_report = ""
    if args.only != "step":
        settings = READ_QUICK if args.quick else READ_FULL
        read_points = run_read(args.tessel, settings["size"], settings["limit"])
        with open(out.replace("step-", "read-"), "w") as f:
            for p in read_points:
                f.write(json.dumps(p) + "\n")
        read_report = read_table(read_points)
        print(read_report, flush=True)
        if not args.quick:
            write_read_table_into_readme(read_table(read_points))
    if args.only == "read":
        return
    planner_s = plan_speed(args.tessel, 1 if args.quick else 5)
    print(f"bench: tessel plan vgg16 200000² 8GiB: {planner_s:.2f} s (process wall time)")
    report = (f"Machine: {machine()}. Date: {stamp}. Threads: "
              f"{points[0].get('threads', '?')}.\n" + tables(points) +
              f"\n\nPlanner: `tessel plan --model vgg16 --size 200000x200000 --budget 8GiB` "
              f"takes {planner_s:.2f} s wall time, process start included (median of "
              f"{1 if args.quick else 5}).\n" + read_report + "\n")
    with open(out.replace(".jsonl", ".md"), "w") as f:
        f.write(report)
    print(report)
    bad = [p for p in points if p["status"] == "error"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
