#!/usr/bin/env bash
# Device round 10 (issue 15), from the repo root on the GPU machine: is GDN's split between
# seeds that solve MQAR-256 and seeds that stall at ~0.22 a matter of the lr or of steps?
# (docs/state-study.md, "GDN: a longer schedule"; outside the study's selection protocol.)
# - long/:   GDN at 4-64 KB, lr 1e-3 (the sweep's other lr), seeds 1-3, one 4,500-step
#            schedule from scratch (the study's 1,500 + 3,000 as one cosine);
# - stage3/: the stalled lr 3e-3 seed-2 runs at 4, 8 and 16 KB (their stage-2 weights carried
#            in DIR/<run>) resumed for 4,500 more steps at lr 3e-3.
# Both within 450 s of training per run (steps run: metrics.json).
#   r10.sh DIR
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
stalled=$(realpath "$1")
cd tools/python
mkdir -p /tmp/o10
long=$(python -c "
from research.study_runs import study_name as n
print(','.join(n('gdn', kb, 1e-3, s) for kb in (4, 8, 16, 32, 64) for s in (1, 2, 3)))")
stage3=$(python -c "
from research.study_runs import study_name as n
print(','.join(n('gdn', kb, 3e-3, 2) for kb in (4, 8, 16)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o10/stage3 --time-budget 450 --deadline 500 --steps 4500 \
  --init-dir "$stalled" --runs "$stage3" > /tmp/o10/stage3.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o10/long --time-budget 450 --deadline 500 --steps 4500 \
  --runs "$long" > /tmp/o10/long.log 2>&1
wait
for f in long stage3; do tail -n 18 /tmp/o10/$f.log | grep -v "^ " | cut -c1-200; done
cd /tmp/o10 && tar cf - . | split -b 15M - "$OUT/r10.tar."
