#!/usr/bin/env bash
# Issue 54's speed-up point (docs/slide-parallel.md): one process with one thread against two
# ranks (processes over Gloo, a file rendezvous) with one thread each, vgg-mini (frozen) in 1 GiB
# at fixed prices, each planned for its own rank count (`tessel plan --ranks 2` shows the split's).
#   bench/slide-parallel.sh SIZE REPEAT [STRATEGY]   e.g. 4096x4096 1 (about 95 s on 2 cores)
#   MODEL=resnet50 NORM=batch BUDGET=2GiB bench/slide-parallel.sh 2048x2048 1
#   EXTRA="--background 0.9" bench/slide-parallel.sh 4096x4096 1   (glass skipped by each rank)
#   TIMELINES=DIR ...: each rank's last step's timeline in DIR/rankR.jsonl, and each rank's tile
#   time by segment and pass (bench/tile_times.py): which tiles make a rank wait.
set -euo pipefail
if [ -n "${TIMELINES:-}" ]; then TIMELINES=$(realpath -m "$TIMELINES"); mkdir -p "$TIMELINES"; fi
cd "$(dirname "$0")/.."
repo=$(pwd)
T=${TESSEL:-build/app/tessel}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
T=$(realpath "$OLDPWD/$T")
ARGS="bench step --model ${MODEL:-vgg-mini} --norm ${NORM:-frozen} --size $1 --budget ${BUDGET:-1GiB} --prices 100,100 --strategy ${3:-auto} --warmup 1 --repeat $2 ${EXTRA:-}"
$T --threads 1 $ARGS 2>/dev/null | tail -n 1 > one.json
timeline() { if [ -n "${TIMELINES:-}" ]; then echo "--timeline $TIMELINES/rank$1.jsonl"; fi; }
for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r $T --threads 1 $ARGS $(timeline $r) --distributed --rendezvous file://$scratch/rendezvous --dist-timeout 600 > two$r.log 2>two$r.err & done; wait
tail -n 1 two0.log > two.json
python3 - <<'PY'
import json
a=json.load(open('one.json')); b=json.load(open('two.json'))
print(f"step ms: one rank {a['step_ms']}, two ranks {b['step_ms']}; "
      f"speed-up {a['step_ms_median'] / b['step_ms_median']:.3f}; "
      f"in exchanges over ranks (waits included) ms {b.get('sum_ms')}; "
      f"by rank: step ms {b.get('step_ms_by_rank')}, in exchanges {b.get('sum_ms_by_rank')}; "
      f"rank 0 gave {b.get('summed_bytes', 0) / 2**20:.1f} MiB a step "
      f"(predicted {b.get('summed_bytes_predicted', 0) / 2**20:.1f}), "
      f"ran {b['forward_tiles']} forward and {b['backward_tiles']} backward tiles "
      f"({b.get('glass_forward_tiles', 0)} and {b.get('glass_backward_tiles', 0)} of them glass, "
      f"alone {a.get('glass_forward_tiles', 0)} and {a.get('glass_backward_tiles', 0)}); "
      f"measured peak MiB {a['measured_peak_bytes'] >> 20} alone, "
      f"{[x >> 20 for x in b.get('measured_peak_bytes_by_rank', [b['measured_peak_bytes']])]} by rank "
      f"(predicted {a['predicted_step_bytes'] >> 20} alone, "
      f"{b['predicted_step_bytes'] >> 20} the busiest rank in each pass; the step's own bytes, "
      f"gradients included)")
PY
if [ -n "${TIMELINES:-}" ]; then python3 "$repo/bench/tile_times.py" "$TIMELINES"/rank0.jsonl "$TIMELINES"/rank1.jsonl; fi
