#!/usr/bin/env bash
# Device round 6 (issue 15), from the repo root on the GPU machine:
# - stage 2 of the English LMs en-m4f and en-m3 from round 5's weights (carried in
#   stage_en/<run>; LM_STAGE2_LR), 450 s;
# - seeds 2 and 3 of eight more study points (BLA and SWA at 8 / 64 KB, SWA+sinks at
#   16 / 32 KB, GDN at 2 / 16 KB) with round 4's recipe (1,500 steps, then 3,000 resumed).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
stage_en=$(pwd)/stage_en
cd tools/python
mkdir -p /tmp/o6
runs=$(python -c "
from research.study_runs import study_name as n
print(','.join(n(f, kb, 3e-3, s) for f, kb in (('bla', 8), ('bla', 64), ('swa', 8), ('swa', 64), ('swa-sinks', 16), ('swa-sinks', 32), ('gdn', 2), ('gdn', 16)) for s in (2, 3)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o6/en2 --time-budget 450 --deadline 490 --lm-stage2 "$stage_en" \
  --runs en-m4f,en-m3 > /tmp/o6/en2.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o6/seeds1 --time-budget 150 --deadline 175 --runs "$runs" > /tmp/o6/seeds1.log 2>&1
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o6/seeds2 --time-budget 260 --deadline 290 --steps 3000 --init-dir /tmp/o6/seeds1/mqar --runs "$runs" > /tmp/o6/seeds2.log 2>&1
wait
for f in en2 seeds1 seeds2; do tail -n 18 /tmp/o6/$f.log | grep -v "^ " | cut -c1-230; done
for f in /tmp/o6/en2/lm/*/loss.csv; do echo "$f"; tr -d "\r" < "$f" | awk -F, '$5 != ""' | cut -c1-120; done
cd /tmp/o6 && tar cf - . | split -b 15M - "$OUT/r6.tar."
