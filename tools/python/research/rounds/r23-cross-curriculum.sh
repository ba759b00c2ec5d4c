#!/usr/bin/env bash
# Device round 23 (issue 32 item 4): the memory-lookup model at m = 256 and 1,024 slots with
# a pair curriculum. Round 21 trained them full from the start and their loss never left the
# plateau (ln 64) in 90 or 330 s (docs/cross-attention.md); here every run starts with 5
# pairs in its m-slot memory (the rest padding) and grows them geometrically to the full
# memory over the first RAMP of the run (ferrite_train.memory_task.curriculum_pairs), with
# ramps 0.5 and 0.8. The four runs share one GPU, in parallel, each for BUDGET seconds of
# training (default 330), then score 1,024 held-out sequences of full memories. One call of
# at most 8 minutes, from the repo root:
#   bash tools/python/research/rounds/r23-cross-curriculum.sh [BUDGET]
# Brings back $OUT/r23-cross.tar (per run: metrics.json, loss.csv with the pairs, the model
# directory, 4 held-out memory files with their queries) and $OUT/r23-summary.txt.
set -u -o pipefail
export PYTHONUNBUFFERED=1
budget=${1:-330}
cd tools/python
mkdir -p /tmp/o23
runs="m256-r0.5 m256-r0.8 m1024-r0.5 m1024-r0.8"
pids=()
for run in $runs; do
  m=${run%%-*}; m=${m#m}; ramp=${run##*-r}
  timeout $((budget + 120)) python -m ferrite_train.memory_lookup --slots "$m" --out /tmp/o23/$run \
    --time-budget "$budget" --curriculum-start 5 --curriculum-ramp "$ramp" \
    > /tmp/o23/$run.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
{
  echo "run slots pairs steps seconds heldout_accuracy reference_max_abs_diff"
  for run in $runs; do
    python - "$run" <<'PY' 2>/dev/null || echo "$run (no metrics: see $run.log)"
import json, sys
run = sys.argv[1]
d = json.load(open(f"/tmp/o23/{run}/metrics.json"))
print(run, d["slots"], d["pairs"], d["steps"], d["train_seconds"], round(d["heldout_accuracy"], 4),
      f'{d["reference_max_abs_diff"]:.2e}')
PY
  done
} | tee "$OUT/r23-summary.txt"
for run in $runs; do grep -q Traceback /tmp/o23/$run.log && { echo "== $run"; tail -n 15 /tmp/o23/$run.log; }; done
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null
cd /tmp/o23 && tar cf "$OUT/r23-cross.tar" m*.log m*/metrics.json m*/loss.csv m*/model m*/heldout
