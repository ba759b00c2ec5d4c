#!/usr/bin/env bash
# Device round 5 (issue 15, item 4), from the repo root on the GPU machine (carry
# tools/python/data, built by ferrite-lm-data and ferrite-english-data): the English LMs
# of runs.py english_lm_runs(), four processes at once, 500 s each.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cd tools/python
mkdir -p /tmp/o
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/en1 --time-budget 500 --deadline 545 \
  --runs en-m3,en-m3-scratch,en-m4f,en-m4f-from-large > /tmp/o/en1.log 2>&1
tail -n 8 /tmp/o/en1.log | cut -c1-260
for f in /tmp/o/en1/lm/*/loss.csv; do echo "$f"; tr -d "\r" < "$f" | awk -F, '$5 != ""' | cut -c1-120; done
cd /tmp/o && tar cf - . | split -b 15M - "$OUT/r5.tar."
