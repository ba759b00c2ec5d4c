#!/usr/bin/env bash
# Device round 4 (issues 15 and 11), from the repo root on the GPU machine:
# - seeds 2 and 3 of six study points (BLA and SWA at 16 / 32 KB, GDN at 4 / 8 KB) with
#   the seed-1 recipe: 1,500 steps at the selected lr, then a resumed 3,000 steps;
# - int4 QAT of models/mqar/bla-m7 (eager, 2,000 steps or 300 s).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cd tools/python
mkdir -p /tmp/o
runs=$(python -c "
from research.study_runs import study_name as n
print(','.join(n(f, kb, 3e-3, s) for f, kb in (('bla', 16), ('bla', 32), ('swa', 16), ('swa', 32), ('gdn', 4), ('gdn', 8)) for s in (2, 3)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/qat --time-budget 300 --deadline 340 --eager --runs bla-m7-qat4 > /tmp/o/qat.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/seeds1 --time-budget 150 --deadline 175 --runs "$runs" > /tmp/o/seeds1.log 2>&1
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/seeds2 --time-budget 190 --deadline 215 --steps 3000 --init-dir /tmp/o/seeds1/mqar --runs "$runs" > /tmp/o/seeds2.log 2>&1
wait
for f in seeds1 seeds2 qat; do tail -n 14 /tmp/o/$f.log | grep -v "^ " | cut -c1-200; done
cd /tmp/o && tar czf "$OUT/r4.tgz" .
