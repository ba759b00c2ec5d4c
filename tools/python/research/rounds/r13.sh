#!/usr/bin/env bash
# Device round 13 (issue 28, the state study's second edition; docs/state-study.md "Second
# edition: protocol"), from the repo root on the GPU machine: seeds 2 and 3 of every point at
# the lr round 12 selected, and seed 1 at the next lr out where the selection sat at an edge
# of the grid, all at once with round 12's recipe.
#   r13.sh RUNS_FILE [TIME_BUDGET]   RUNS_FILE: one run name a line (research/rounds/r13-runs.txt,
#                                    written by ferrite-study2-report --next from round 12's rows);
#                                    TIME_BUDGET: the launch's --time-budget (default 290 s, round 12's)
# Brings back $OUT/r13.tar (metrics.json, config.json and loss.csv of every run, the logs; no weights).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
runs=$(paste -sd, "$1")
budget=${2:-290}
cd tools/python
mkdir -p /tmp/o13
# As round 12: at most 52 runs at a time (~2.3 GB of GPU memory each), a queued run starts with
# the time left before the deadline; the slowest (GDN 16-64 KB) first.
runs=$(python -c "
import sys
names = sys.argv[1].split(',')
slow = ('gdn-64k', 'gdn-32k', 'gdn-16k')
print(','.join(sorted(names, key=lambda n: not any(s in n for s in slow))))" "$runs")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o13/seeds --time-budget "$budget" \
  --deadline $((budget + 90)) --jobs 52 --runs "$runs" > /tmp/o13/seeds.log 2>&1
grep -v "^ " /tmp/o13/seeds.log | cut -c1-220 | tail -n 70
for f in /tmp/o13/seeds/logs/*.log; do grep -q "Traceback" "$f" && { echo "== $f"; tail -n 15 "$f"; }; done | head -60
cd /tmp/o13 && tar cf "$OUT/r13.tar" seeds.log seeds/logs $(ls seeds/mqar/*/metrics.json seeds/mqar/*/loss.csv seeds/mqar/*/config.json 2>/dev/null)
