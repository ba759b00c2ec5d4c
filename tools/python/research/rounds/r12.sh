#!/usr/bin/env bash
# Device round 12 (issue 28, the state study's second edition; docs/state-study.md "Second
# edition: protocol"), from the repo root on the GPU machine: the lr sweep. Seed 1 of every
# (family, size) of swa, bla and gdn at 1-64 KB, at lr 1e-3, 3e-3 and 1e-2 (63 runs at once):
# Zoology's MQAR (vocab 8,192, 256 tokens, 16 pairs) after the 64/4 and 128/8 curriculum,
# 2,400 steps at most, early stop on the validation split. A run whose CUDA graph capture
# fails would step eagerly (several times slower): the watchdog then stops the round.
#   r12.sh [TIME_BUDGET]   (default 380 s: the launch's --time-budget; --deadline 100 s later)
# Brings back $OUT/r12.tar (metrics.json, config.json and loss.csv of every run, the logs; no weights).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
budget=${1:-380}
cd tools/python
mkdir -p /tmp/o12
runs=$(python -c "
from research.study_runs import Z2_FAMILIES, Z2_KB, Z2_GRID, z2_name
print(','.join(z2_name(f, kb, lr, 1) for f in Z2_FAMILIES for kb in Z2_KB for lr in Z2_GRID))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o12/sweep --time-budget "$budget" \
  --deadline $((budget + 100)) --runs "$runs" > /tmp/o12/sweep.log 2>&1 &
launch=$!
while kill -0 $launch 2>/dev/null; do
  sleep 10
  if grep -l "capture failed" /tmp/o12/sweep/logs/*.log > /dev/null 2>&1; then
    echo "[r12] a CUDA graph capture failed: stopping"; grep -h "capture failed" /tmp/o12/sweep/logs/*.log | head -3
    pkill -TERM -P $launch; kill $launch; break
  fi
done
wait $launch
grep -v "^ " /tmp/o12/sweep.log | cut -c1-220 | tail -n 70
for f in /tmp/o12/sweep/logs/*.log; do grep -q "Traceback" "$f" && { echo "== $f"; tail -n 15 "$f"; }; done | head -60
cd /tmp/o12 && tar cf "$OUT/r12.tar" sweep.log sweep/logs $(cd /tmp/o12 && ls sweep/mqar/*/metrics.json sweep/mqar/*/loss.csv sweep/mqar/*/config.json 2>/dev/null)
