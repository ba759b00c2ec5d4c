#!/usr/bin/env bash
# Device round 7 (issue 15): the latent-compressed window (mla) in the state study,
# with the recipe of the other families: the sweep (lr 1e-3 and 3e-3, seed 1, 1,500
# steps, early stop at 0.995 validation), the selection per size on the validation
# split (ties: the lower final training loss), and stage 2 (3,000 more steps) of every
# selected run that did not solve validation. From the repo root on the GPU machine.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cd tools/python
mkdir -p /tmp/o7
runs=$(python -c "
from research.study_runs import study_name as n, STUDY_KB
print(','.join(n('mla', kb, lr, 1) for kb in STUDY_KB for lr in (1e-3, 3e-3)))")
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o7/sweep --time-budget 150 --deadline 175 --runs "$runs" > /tmp/o7/sweep.log 2>&1
resume=$(python -c "
import json
from pathlib import Path
best = {}
for m in sorted(Path('/tmp/o7/sweep/mqar').glob('*/metrics.json')):
    d = json.loads(m.read_text())
    kb = d['name'].split('-')[2]
    score = (d['pytorch']['val_accuracy'], -d['training']['final_train_loss'])
    if kb not in best or score > best[kb][0]:
        best[kb] = (score, d['name'])
print(','.join(name for (acc, _), name in best.values() if acc < 0.995))")
echo "stage 2: $resume"
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o7/stage2 --time-budget 240 --deadline 265 --steps 3000 \
  --init-dir /tmp/o7/sweep/mqar --runs "$resume" > /tmp/o7/stage2.log 2>&1
for f in sweep stage2; do tail -n 16 /tmp/o7/$f.log | grep -v "^ " | cut -c1-230; done
cd /tmp/o7 && tar cf - . | split -b 15M - "$OUT/r7.tar."
