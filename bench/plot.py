#!/usr/bin/env python3
"""bench/run's plots (PNG), drawn with matplotlib (the project's .venv):

  PREFIX-MODEL.png     step time and peak memory vs pixels, log scales, one line per method
                       (as Fig. 8 of the SFT paper; a missing point is out of memory)
  PREFIX-timeline.png  one step's live bytes vs time, by category, with the budget line
                       (from `tessel bench step --timeline FILE`)

Prints the paths it wrote, one a line.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

MiB = 1 << 20
METHODS = [  # (strategy, label, style)
    ("none", "LibTorch plain (Tessel, no tiling)", dict(color="tab:red", marker="s")),
    ("grid", "Tessel grid", dict(color="tab:blue", marker="o")),
    ("rows", "Tessel rows", dict(color="tab:cyan", marker="o")),
    ("auto", "Tessel auto", dict(color="tab:purple", marker="o")),
    ("pytorch", "PyTorch plain autograd", dict(color="tab:orange", marker="x", linestyle="--")),
    ("pytorch-checkpoint", "PyTorch checkpoint_sequential",
     dict(color="goldenrod", marker="+", linestyle="--")),
]


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def scaling_plots(points, prefix):
    written = []
    models = []
    for p in points:
        if p.get("model") and p["model"] not in models:
            models.append(p["model"])
    for model in models:
        fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
        for strategy, label, style in METHODS:
            ok = sorted((p for p in points if p["model"] == model and p["strategy"] == strategy
                         and p["status"] == "ok"), key=lambda p: p["height"] * p["width"])
            if not ok:
                continue
            pixels = [p["height"] * p["width"] for p in ok]
            ax_time.plot(pixels, [p["step_ms_median"] / 1000 for p in ok], label=label, **style)
            ax_mem.plot(pixels, [p["max_rss_bytes"] / MiB for p in ok], label=label, **style)
        for ax, ylabel in ((ax_time, "step time, s (median)"),
                           (ax_mem, "peak memory, MiB (process max RSS)")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("pixels (H × W)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        ax_time.legend(fontsize=8)
        fig.suptitle(f"{model}: one training step (a missing point did not fit in memory)")
        fig.tight_layout()
        path = f"{prefix}-{model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def timeline_plot(path, prefix):
    lines = read_lines(path)
    head = next(j for j in lines if j["type"] == "step")
    polls = [j for j in lines if j["type"] == "poll"]
    tiles = [j for j in lines if j["type"] == "tile"]
    start = head["start_live"]
    t = [j["t_ms"] / 1000 for j in polls]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.stackplot(t, [[start / MiB] * len(polls), [(j["live"] - start) / MiB for j in polls]],
                 labels=["model state and image (live at the step's start)",
                         "step tensors (checkpoints, working set, gradients in flight)"],
                 colors=["tab:gray", "tab:blue"], alpha=0.6)
    ax.plot(t, [j["peak"] / MiB for j in polls], color="black", linewidth=0.8,
            label="peak so far")
    categories = sorted({c for j in tiles for c, v in j.get("by_category", {}).items() if v})
    for c in categories:
        ax.plot([j["t_ms"] / 1000 for j in tiles],
                [j.get("by_category", {}).get(c, 0) / MiB for j in tiles], marker=".",
                label=f"tile store: {c}")
    backward = next((j["t_ms"] / 1000 for j in tiles if j.get("pass") == "backward"), None)
    if backward is not None:
        ax.axvline(backward, color="tab:green", linestyle=":", label="first backward tile done")
    if head["budget"]:
        ax.axhline(head["budget"] / MiB, color="tab:red", linestyle="--", label="budget")
    ax.set_xlabel("time in the step, s")
    ax.set_ylabel("live bytes, MiB (tracking allocator)")
    ax.set_title(f"{head['model']} {head['height']}×{head['width']}, {head['strategy']}: "
                 f"memory during one training step")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    out = f"{prefix}-timeline.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", help="bench/run's results (JSON lines)")
    ap.add_argument("--timeline", help="`tessel bench step --timeline` output")
    ap.add_argument("--prefix", required=True, help="PNG paths start with this")
    args = ap.parse_args()
    written = []
    if args.points:
        written += scaling_plots(read_lines(args.points), args.prefix)
    if args.timeline:
        written += timeline_plot(args.timeline, args.prefix)
    print("\n".join(written))


if __name__ == "__main__":
    main()
