#!/usr/bin/env bash
# Device round 9 (issue 15), from the repo root on the GPU machine, in two calls: seeds 2 and 3
# of the last 19 study points that had one run (SWA and SWA+sinks at 1-4 KB, BLA at 1-2 KB,
# GSA at 1-16 KB, GDN at 1 KB, mla at 1-16 KB), with seed 1's recipe: 1,500 steps at the
# selected lr within 440 s, then 3,000 resumed within 440 s (steps run: metrics.json).
#   r9.sh 1           stage 1 of all 38 runs -> $OUT/r9-1.tar.*
#   r9.sh 2 DIR       stage 2, each run resumed from DIR/mqar/<run> (stage 1's seeds1/)
#   r9.sh 2 DIR RUNS  stage 2 of only RUNS (comma-separated; the second stage-2 call reran
#                     st-gsa-4k-lr3e-3-s3 and st-gsa-16k-lr3e-3-s2, which the first call's deadline
#                     stopped after their training but before their evaluation: 2 runs share the GPU
#                     there instead of 38, so they ran all 3,000 steps)
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
stage=$1
init=${2:-}
[ -n "$init" ] && init=$(realpath "$init")
cd tools/python
mkdir -p /tmp/o9
runs=$(python -c "
from research.study_runs import study_name as n
points = [('swa', 1), ('swa', 2), ('swa', 4), ('swa-sinks', 1), ('swa-sinks', 2), ('swa-sinks', 4),
          ('bla', 1), ('bla', 2), ('gdn', 1), ('mla', 1), ('mla', 2), ('mla', 4), ('mla', 8),
          ('mla', 16), ('gsa', 1), ('gsa', 2), ('gsa', 4), ('gsa', 8), ('gsa', 16)]
lr = {('swa', 2): 1e-3}  # the lr each point's sweep selected (3e-3 elsewhere)
print(','.join(n(f, kb, lr.get((f, kb), 3e-3), s) for f, kb in points for s in (2, 3)))")
runs=${3:-$runs}
if [ "$stage" = 1 ]; then
  python -m ferrite_train.launch --registry research.study_runs --out /tmp/o9/seeds1 --time-budget 440 --deadline 470 --runs "$runs" > /tmp/o9/seeds1.log 2>&1
  tail -n 45 /tmp/o9/seeds1.log | grep -v "^ " | cut -c1-200
  cd /tmp/o9 && tar cf - seeds1 seeds1.log | split -b 15M - "$OUT/r9-1.tar."
else
  python -m ferrite_train.launch --registry research.study_runs --out /tmp/o9/seeds2 --time-budget 440 --deadline 520 --steps 3000 --init-dir "$init/mqar" --runs "$runs" > /tmp/o9/seeds2.log 2>&1
  tail -n 45 /tmp/o9/seeds2.log | grep -v "^ " | cut -c1-200
  cd /tmp/o9 && tar cf - seeds2 seeds2.log | split -b 15M - "$OUT/r9-2.tar."
fi
