#!/usr/bin/env python3
"""Each tile's time from `tessel bench step --timeline FILE` (its tile_start and tile_done
lines), summed by segment and pass: tiles run, glass tiles among them, and milliseconds. Given
several files (one per rank of a split step: `TIMELINES=DIR bench/slide-parallel.sh ...`), one
block each and the busiest minus the least busy rank's tile time: the wait the shares leave.

  bench/tile_times.py rank0.jsonl rank1.jsonl [--tiles]   (--tiles: every tile's ms too)
"""
import argparse
import collections
import json


def tile_times(path):
    """{(segment, pass): [(tile, glass, ms), ...]} in the order the tiles finished."""
    started, times = {}, collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if j.get("type") not in ("tile_start", "tile_done"):
                continue
            key = (j["segment"], j["pass"], j["tile"])
            if j["type"] == "tile_start":
                started[key] = j["t_ms"]
            elif key in started:
                times[key[:2]].append((j["tile"], j["glass"], j["t_ms"] - started.pop(key)))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timelines", nargs="+")
    ap.add_argument("--tiles", action="store_true", help="every tile's milliseconds too")
    args = ap.parse_args()
    totals = []
    for path in args.timelines:
        times = tile_times(path)
        if not times:
            raise SystemExit(f"{path}: no tile_start/tile_done lines (an older tessel?)")
        total = 0.0
        print(path)
        for (segment, pass_), tiles in sorted(times.items()):
            ms = sum(t[2] for t in tiles)
            total += ms
            glass = sum(1 for t in tiles if t[1])
            print(f"  segment {segment} {pass_:8s} {len(tiles):4d} tiles ({glass} glass) "
                  f"{ms:9.0f} ms")
            if args.tiles:
                print("    " + " ".join(f"{t}{'g' if g else ''}:{m:.0f}" for t, g, m in tiles))
        print(f"  all tiles {total:.0f} ms")
        totals.append(total)
    if len(totals) > 1:
        print(f"busiest minus least busy: {max(totals) - min(totals):.0f} ms of tile time")


if __name__ == "__main__":
    main()
