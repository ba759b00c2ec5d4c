#!/usr/bin/env bash
# Device round 18 (issue 28, item 6: the language-model side; docs/state-study.md
# "Language-model side"), from the repo root on the GPU machine, carrying tools/python/data
# (ferrite-lm-data and ferrite-english-data): the 13 runs of research.study_runs lm_side_runs(),
# one process each, all at once, a 430 s time budget (killed at 490 s).
#   r18.sh [TIME_BUDGET]
# Brings back $OUT/r18.tar: every run's metrics.json, config.json, loss.csv and model.safetensors
# (f32, ~0.6 MB each), and the logs.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
budget=${1:-430}
cd tools/python
mkdir -p /tmp/o18
runs=$(python -c "from research.study_runs import lm_side_runs; print(','.join(lm_side_runs()))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o18/lms --time-budget "$budget" \
  --deadline $((budget + 60)) --runs "$runs" > /tmp/o18/lms.log 2>&1
grep -v "^ " /tmp/o18/lms.log | cut -c1-260 | tail -n 20
for f in /tmp/o18/lms/logs/*.log; do grep -q "Traceback" "$f" && { echo "== $f"; tail -n 15 "$f"; }; done | head -60
nvidia-smi --query-gpu=name,memory.used --format=csv
cd /tmp/o18 && tar cf "$OUT/r18.tar" lms.log lms/logs $(ls lms/lm/*/metrics.json lms/lm/*/loss.csv lms/lm/*/config.json lms/lm/*/model.safetensors 2>/dev/null)
