#!/usr/bin/env bash
# Speed probe for round 17 (issue 28; docs/state-study.md, the dated note of 2026-12-03 before
# round 16): GSA's nine 16-64 KB seed-1 runs of r17-runs.txt together for a 60 s time budget, from
# the repo root on the GPU machine. The budget compresses the curriculum (64 tokens for the first
# 15 s, 128 to 30 s, the 256-token task to 60 s), so each run's loss.csv (elapsed_s per 25 steps)
# gives its steps/s in every phase with nine runs sharing the GPU. Not a result: no row of it goes
# into runs.csv. Brings back $OUT/probe.tar (the launch log, loss.csv and metrics.json of each run).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
runs=$(paste -sd, "${1:-tools/python/research/rounds/r17-runs.txt}")
cd tools/python && mkdir -p /tmp/p
timeout 140 python -m ferrite_train.launch --registry research.study_runs --out /tmp/p/probe \
  --time-budget 60 --deadline 125 --jobs 9 --runs "$runs" > /tmp/p/probe.log 2>&1
grep -v "^ " /tmp/p/probe.log | grep -v Warn | cut -c1-200 | tail -n 12
cd /tmp/p && tar cf "$OUT/probe.tar" probe.log $(ls probe/mqar/*/loss.csv probe/mqar/*/metrics.json)
