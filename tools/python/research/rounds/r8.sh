#!/usr/bin/env bash
# Device round 8 (issue 15), from the repo root on the GPU machine: seeds 2 and 3 of seven
# more study points (SWA+sinks at 8 / 64 KB, GDN at 32 / 64 KB, mla at 32 / 64 KB, BLA at
# 4 KB) with round 4's recipe (1,500 steps at the selected lr, then 3,000 resumed), each
# stage capped in time to fit the session's last device minutes (steps run: metrics.json).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cd tools/python
mkdir -p /tmp/o8
runs=$(python -c "
from research.study_runs import study_name as n
print(','.join(n(f, kb, 3e-3, s) for f, kb in (('swa-sinks', 8), ('swa-sinks', 64), ('gdn', 32), ('gdn', 64), ('mla', 32), ('mla', 64), ('bla', 4)) for s in (2, 3)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o8/seeds1 --time-budget 125 --deadline 140 --runs "$runs" > /tmp/o8/seeds1.log 2>&1
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o8/seeds2 --time-budget 200 --deadline 215 --steps 3000 --init-dir /tmp/o8/seeds1/mqar --runs "$runs" > /tmp/o8/seeds2.log 2>&1
for f in seeds1 seeds2; do tail -n 15 /tmp/o8/$f.log | grep -v "^ " | cut -c1-200; done
cd /tmp/o8 && tar cf - . | split -b 15M - "$OUT/r8.tar."
