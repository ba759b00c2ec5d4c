#!/usr/bin/env bash
# Device round 3 (issues 15 and 11), from the repo root on the GPU machine:
# - stage 2 of the state study: every (family, size) below 0.995 validation accuracy
#   resumes from its round-2 run at the selected learning rate (stage1/<run>, carried;
#   list in stage1/RESUME) for 3,000 more steps (fresh AdamW, warm-up and cosine);
# - the sweep runs that ran out of GPU memory in round 2, again (1,500 steps);
# - the int4 QAT fine-tunes of both LMs (eager steps, 420 s).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
stage1=$(pwd)/stage1
cd tools/python
mkdir -p /tmp/o
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/qat --time-budget 420 --deadline 470 --eager --runs lm-small-qat4,lm-large-qat4 > /tmp/o/qat.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/redo --time-budget 420 --deadline 480 \
  --runs st-gsa-8k-lr1e-3-s1,st-gsa-8k-lr3e-3-s1,st-gdn-32k-lr3e-3-s1,st-gdn-64k-lr3e-3-s1 > /tmp/o/redo.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/stage2 --time-budget 440 --deadline 490 --steps 3000 \
  --init-dir "$stage1" --runs "$(cat "$stage1/RESUME")" > /tmp/o/stage2.log 2>&1
wait
for f in stage2 redo qat; do tail -n 40 /tmp/o/$f.log | grep -v "^ " | cut -c1-200; done
cd /tmp/o && tar czf "$OUT/r3-logs.tgz" --exclude='*.safetensors' . && tar cf - $(find . -name '*.safetensors') | split -b 15M - "$OUT/r3-models.tar."
