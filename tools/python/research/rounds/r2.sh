#!/usr/bin/env bash
# Device round 2 (issues 15 and 11): the state study's learning-rate sweep
# (5 families x 7 sizes, GSA up to 16 KB, lr 1e-3 and 3e-3, seed 1; 1,500
# steps of batch 64 or 440 s, early stop at 0.995 validation accuracy), all at
# once, and the int4 QAT fine-tunes of both LMs (eager steps, 420 s).
# Run from the repo root on the GPU machine; results: $OUT/r2-*.
set -u -o pipefail
export PYTHONUNBUFFERED=1
cd tools/python
runs=$(python -c "
from research.study_runs import study_name as n, STUDY_FAMILIES, STUDY_KB
print(','.join(n(f, kb, lr, 1) for f in STUDY_FAMILIES for kb in STUDY_KB for lr in (1e-3, 3e-3) if not (f == 'gsa' and kb > 16)))")
mkdir -p /tmp/o
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/qat --time-budget 420 --deadline 480 --eager --runs lm-small-qat4,lm-large-qat4 > /tmp/o/qat.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/sweep --time-budget 440 --deadline 520 --runs "$runs" > /tmp/o/sweep.log 2>&1
wait
tail -n 70 /tmp/o/sweep.log | cut -c1-230
tail -n 3 /tmp/o/qat.log | cut -c1-300
cd /tmp/o && tar czf "$OUT/r2-logs.tgz" --exclude='*.safetensors' . && tar cf - $(find . -name '*.safetensors') | split -b 15M - "$OUT/r2-models.tar."
ls -la "$OUT"
