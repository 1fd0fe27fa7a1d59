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

    bench/passes.py TIMELINE.jsonl RESULT.jsonl --tiles SEGMENT:PASS   (PASS: forward|backward)

adds, for that pass, each tile in the order it ran: whether it was glass, the live bytes at its
start, the most live while it ran (polls between its tile_start and tile_done) and their
difference, its working set, beside the pass's predicted working set (its predicted bytes less
the live bytes at the pass's first tile): which tiles the model prices low (session 67: tiles that
fill around several boxes of tissue held ~16% more than a dense tile).
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


def tile_rows(timeline_path, segment, kind):
    """Each tile of (segment, kind) as it ran: [tile, glass, live at start, most live, ms]."""
    lines = [json.loads(l) for l in open(timeline_path) if l.strip()]
    start = next(j for j in lines if j.get("type") == "step")["start_live"]
    rows, running = [], False
    for j in lines:
        t = j.get("type")
        ours = j.get("segment") == segment and j.get("pass") == kind
        if t == "tile_start" and ours:
            rows.append([j["tile"], bool(j.get("glass")), j["live"] - start, j["live"] - start,
                         j["t_ms"]])
            running = True
        elif t == "tile_done" and ours and running:
            rows[-1][3] = max(rows[-1][3], j["live"] - start)
            rows[-1][4] = j["t_ms"] - rows[-1][4]
            running = False
        elif t == "poll" and running:
            rows[-1][3] = max(rows[-1][3], j["live"] - start)
    return rows


def print_tiles(a, predicted):
    segment, kind = a.tiles.split(":")
    segment = int(segment)
    rows = tile_rows(a.timeline, segment, kind)
    if not rows:
        sys.exit(f"passes.py: no tile_start lines for segment {segment} {kind} in {a.timeline} "
                 "(a timeline from before session 66 has none)")
    i = 2 * segment + (0 if kind == "forward" else 1)
    pred = predicted[i] - rows[0][2] if 0 <= i < len(predicted) else 0
    print(f"\nsegment {segment} {kind}: each tile's working set (most live less live at its start); "
          f"predicted {pred / MIB:.1f} MiB")
    print(f"{'tile':>5} {'glass':>5} {'start':>9} {'most':>9} {'working':>9} {'ms':>8} {'ratio':>6}")
    for tile, glass, at, most, ms in rows:
        ratio = f"{(most - at) / pred:6.3f}" if pred > 0 else "     -"
        print(f"{tile:>5} {'yes' if glass else '':>5} {at / MIB:9.1f} {most / MIB:9.1f} "
              f"{(most - at) / MIB:9.1f} {ms:8.0f} {ratio}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("result")
    ap.add_argument("--label")
    ap.add_argument("--tiles", metavar="SEGMENT:PASS",
                    help="also each tile of that pass: its working set against the prediction")
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

    if a.tiles:
        print_tiles(a, predicted)


if __name__ == "__main__":
    main()
