#!/usr/bin/env bash
# Device round 12 (issue 28, the state study's second edition; docs/state-study.md "Second
# edition: protocol"), from the repo root on the GPU machine: the lr sweep. Seed 1 of every
# (family, size) of swa, bla and gdn at 1-64 KB, at lr 1e-3, 3e-3 and 1e-2 (63 runs at once):
# Zoology's MQAR (vocab 8,192, 256 tokens, 16 pairs) after the 64/4 and 128/8 curriculum,
# 2,400 steps at most, early stop on the validation split. A run whose CUDA graph capture
# fails steps eagerly (several times slower): where 6 runs do, the watchdog stops the round.
#   r12.sh [TIME_BUDGET]   (default 290 s: the launch's --time-budget; --deadline 90 s later)
# Brings back $OUT/r12.tar (metrics.json, config.json and loss.csv of every run, the logs; no weights).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
budget=${1:-290}
cd tools/python
mkdir -p /tmp/o12
# At most 52 runs at a time (63 at once ran out of the GPU's memory, ~2.3 GB each); the order
# starts the slowest (GDN 16-64 KB) first and queues the cheapest (SWA and BLA at 1-2 KB) last,
# to start as the early solvers (64 KB) finish, with the time left before the deadline.
runs=$(python -c "
from research.study_runs import Z2_FAMILIES, Z2_KB, Z2_GRID, z2_name
pts = [(f, kb) for f in Z2_FAMILIES for kb in Z2_KB]
key = {('gdn', 64): 0, ('gdn', 32): 1, ('gdn', 16): 2, ('swa', 64): 3, ('bla', 64): 4}
pts.sort(key=lambda p: (key.get(p, 5), -p[1]))
print(','.join(z2_name(f, kb, lr, 1) for f, kb in pts for lr in Z2_GRID))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o12/sweep --time-budget "$budget" \
  --deadline $((budget + 90)) --jobs 52 --runs "$runs" > /tmp/o12/sweep.log 2>&1 &
launch=$!
while kill -0 $launch 2>/dev/null; do
  sleep 10
  if [ "$(grep -l "capture failed" /tmp/o12/sweep/logs/*.log 2>/dev/null | wc -l)" -ge 6 ]; then
    echo "[r12] a CUDA graph capture failed: stopping"; grep -h "capture failed" /tmp/o12/sweep/logs/*.log | head -3
    pkill -TERM -P $launch; kill $launch; break
  fi
done
wait $launch
grep -v "^ " /tmp/o12/sweep.log | cut -c1-220 | tail -n 70
for f in /tmp/o12/sweep/logs/*.log; do grep -q "Traceback" "$f" && { echo "== $f"; tail -n 15 "$f"; }; done | head -60
cd /tmp/o12 && tar cf "$OUT/r12.tar" sweep.log sweep/logs $(cd /tmp/o12 && ls sweep/mqar/*/metrics.json sweep/mqar/*/loss.csv sweep/mqar/*/config.json 2>/dev/null)
