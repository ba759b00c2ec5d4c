#!/usr/bin/env bash
# Device round 21 (issue 32 stage 2, item 4 of the issue): the memory-lookup model, trained with
# ferrite_train at memory sizes m = 16, 64, 256 and 1,024 slots (5, 21, 85 and 341 key-value
# pairs), every sequence with its own memory encoded by the model's own memory encoder
# (ferrite_train.memory_task, ferrite_train.memory_lookup; docs/cross-attention.md, "The trained
# memory-lookup model"). The four runs share one GPU, in parallel, each for BUDGET seconds of
# training (default 330), then score 1,024 held-out sequences (memories of unseen seeds) and
# check the export against the f64 reference. One call of at most 8 minutes, from the repo root:
#   bash tools/python/research/rounds/r21-cross.sh [BUDGET]
# Brings back $OUT/r21-cross.tar: per m, metrics.json, loss.csv, the model directory (config.json +
# model.safetensors, ~1 MB) and 4 held-out memory files with their queries; $OUT/r21-summary.txt.
# On the host afterwards (the tools bake the memories with the runtime's encoder):
#   ferrite quantize m256/model -o lookup256.fer --dtype int8 --memory m256/heldout/memory_0.bin ...
set -u -o pipefail
export PYTHONUNBUFFERED=1
budget=${1:-330}
cd tools/python
mkdir -p /tmp/o21
pids=()
for m in 16 64 256 1024; do
  timeout $((budget + 120)) python -m ferrite_train.memory_lookup --slots "$m" --out /tmp/o21/m$m \
    --time-budget "$budget" \
    > /tmp/o21/m$m.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
{
  echo "slots pairs steps seconds heldout_accuracy reference_max_abs_diff"
  for m in 16 64 256 1024; do
    python - "$m" <<'PY' 2>/dev/null || echo "$m (no metrics: see m$m.log)"
import json, sys
m = sys.argv[1]
d = json.load(open(f"/tmp/o21/m{m}/metrics.json"))
print(d["slots"], d["pairs"], d["steps"], d["train_seconds"], round(d["heldout_accuracy"], 4),
      f'{d["reference_max_abs_diff"]:.2e}')
PY
  done
} | tee "$OUT/r21-summary.txt"
for m in 16 64 256 1024; do grep -q Traceback /tmp/o21/m$m.log && { echo "== m$m"; tail -n 15 /tmp/o21/m$m.log; }; done
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null
cd /tmp/o21 && tar cf "$OUT/r21-cross.tar" m*.log m*/metrics.json m*/loss.csv m*/model m*/heldout
