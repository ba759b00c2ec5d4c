#!/usr/bin/env bash
# Device round 11 (issue 15), from the repo root on the GPU machine; outside the study's
# protocol (docs/state-study.md, "GDN: steps or lr?"): does a length curriculum cure GDN's
# seed lottery? GDN at 4, 8 and 16 KB, lr 3e-3, seeds 1-3: 1,500 steps of 64-token MQAR
# (cu64-*, 16 pairs), then 3,000 steps of the study's 256 tokens from those weights
# (cu256-*), each stage capped in time to fit the session's last device minutes.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cd tools/python
mkdir -p /tmp/o11
short=$(python -c "print(','.join(f'cu64-gdn-{kb}k-s{s}' for kb in (4, 8, 16) for s in (1, 2, 3)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o11/short --time-budget 60 --deadline 80 --runs "$short" > /tmp/o11/short.log 2>&1
# Stage 2 finds each run's start under its own name.
mkdir -p /tmp/o11/init
for d in /tmp/o11/short/mqar/cu64-*; do cp -r "$d" "/tmp/o11/init/$(basename "$d" | sed 's/^cu64-/cu256-/')"; done
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o11/long --time-budget 175 --deadline 195 --steps 3000 --init-dir /tmp/o11/init \
  --runs "${short//cu64-/cu256-}" > /tmp/o11/long.log 2>&1
rm -rf /tmp/o11/init
for f in short long; do tail -n 10 /tmp/o11/$f.log | grep -v "^ " | cut -c1-200; done
cd /tmp/o11 && tar cf - . | split -b 15M - "$OUT/r11.tar."
