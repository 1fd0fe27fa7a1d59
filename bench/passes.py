#!/usr/bin/env python3
"""Each pass's measured peak against the planner's prediction for it.

    bench/passes.py TIMELINE.jsonl RESULT.jsonl [--label LABEL]

TIMELINE is `tessel bench step --timeline` output; RESULT holds that step's JSON line (the last
line of `bench step`'s output, or a line of gpu-bench.jsonl picked by --label). A poll belongs to
the pass of the next per-tile sample; measured bytes are live bytes less the step's start (model
state and image), as the step's own measured peak is. Predicted: `predicted_passes`, segment i's
forward at 2i and its backward at 2i + 1 (the head's bytes are in every one), less what outlives
the step (parameters and optimizer state: `predicted_bytes`' total less `predicted_step_bytes`),
so both count the gradients, which each step allocates again after zero_grad freed them. Prints
one row per pass: segment, pass, tiles, milliseconds, measured and predicted MiB, their ratio.
"""
import argparse
import json
import sys

MIB = 2**20


def load_result(path, label):
    lines = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    if label:
        lines = [j for j in lines if j.get("label") == label]
    lines = [j for j in lines if "predicted_passes" in j]
    if not lines:
        sys.exit(f"passes.py: no JSON line with predicted_passes in {path}"
                 + (f" labelled {label!r}" if label else ""))
    return lines[-1]


def pass_peaks(timeline_path):
    lines = [json.loads(l) for l in open(timeline_path) if l.strip()]
    head = next((j for j in lines if j.get("type") == "step"), None)
    if head is None:
        sys.exit(f"passes.py: {timeline_path} has no step line (not a bench step --timeline file)")
    start = head["start_live"]
    passes = {}  # (segment, pass) -> {peak, tiles, t0, t1}
    pending = []
    t_prev = 0.0
    for j in lines:
        if j.get("type") == "poll":
            pending.append(j)
        elif j.get("type") == "tile":
            key = (j["segment"], j["pass"])
            p = passes.setdefault(key, {"peak": 0, "tiles": 0, "t0": t_prev, "t1": 0.0})
            for s in pending + [j]:
                p["peak"] = max(p["peak"], s["live"] - start)
            p["tiles"] += 1
            p["t1"] = j["t_ms"]
            t_prev = j["t_ms"]
            pending = []
    return start, passes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("result")
    ap.add_argument("--label")
    a = ap.parse_args()
    result = load_result(a.result, a.label)
    pred = result.get("predicted_bytes", {})
    fixed = pred.get("total", 0) - result.get(
        "predicted_step_bytes", pred.get("total", 0) - pred.get("parameters", 0)
        - pred.get("optimizer", 0))
    predicted = [b - fixed for b in result["predicted_passes"]]
    start, passes = pass_peaks(a.timeline)
    print(f"{result.get('model', '?')} {result.get('height', '?')}x{result.get('width', '?')} "
          f"{result.get('strategy', '?')} on {result.get('device', '?')}: start {start / MIB:.0f} MiB, "
          f"step peak measured {result.get('measured_peak_bytes', 0) / MIB:.0f} MiB, predicted "
          f"{(pred.get('total', 0) - fixed) / MIB:.0f} MiB (model state {fixed / MIB:.0f} MiB not counted)")
    print(f"{'seg':>3} {'pass':8} {'tiles':>5} {'ms':>8} {'measured':>9} {'predicted':>9} {'ratio':>6}")
    for (segment, kind), p in sorted(passes.items(), key=lambda kv: kv[1]["t0"]):
        i = 2 * segment + (0 if kind == "forward" else 1)
        pred = predicted[i] if 0 <= i < len(predicted) else 0
        ratio = f"{p['peak'] / pred:6.3f}" if pred > 0 else "     -"
        print(f"{segment:>3} {kind:8} {p['tiles']:>5} {p['t1'] - p['t0']:8.0f} "
              f"{p['peak'] / MIB:9.1f} {pred / MIB:9.1f} {ratio}")


if __name__ == "__main__":
    main()
