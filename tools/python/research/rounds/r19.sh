#!/usr/bin/env bash
# Device round 19 (issue 28 item 5, issue 27 item 5's MQAR side): fla's own RWKV-7 and Mamba-2
# in the state study's second edition (docs/state-study.md, the protocol's dated note of
# 2026-12-06), seed 1 of every size at the lr grid {1e-3, 3e-3, 1e-2}, the recipe of every
# other family (research/study_runs.py z2_runs(): two layers at d 64, vocabulary 8,192, the
# length curriculum, early stop, a 2,400-step cap), trained by ferrite_train.train with fla's
# classes (ferrite_train.fla_lm.FlaLM; eager steps: no CUDA graphs). From the repo root on the
# GPU machine, carrying target/wheels (fla-core and flash-linear-attention 0.6.0, `pip download
# --no-deps`):
#   r19.sh RUNS_FILE TIME_BUDGET END [TAG]
# RUNS_FILE: one run name a line (research/rounds/r19-all.txt: r19-rwkv7.txt, then r19-mamba2.txt,
# as the one call that ran; or each list in a call of its own); every run
# trains for TIME_BUDGET seconds after its warm-up (fla's Triton compile, outside the budget)
# or until END seconds after the launch, whichever is first; survivors are killed at END + 45.
# JOBS (environment, default 36): at most this many runs at once. fla's Mamba-2 (its PyTorch
# path) holds 4-8.5 GB of GPU memory a run at batch 64 x 256 tokens: 21 at once ran out of an
# H100's 80 GB in the pilot of 2026-12-06 (docs/state-study.md), so JOBS=9 there.
# Brings back $OUT/r19-TAG.tar (metrics.json, config.json and loss.csv of every run, the logs; no
# weights).
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fla target/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/fla
runs=$(paste -sd, "$1")
budget=$2
end=$3
tag=${4:-$(basename "$1" .txt)}
cd tools/python
mkdir -p /tmp/o19
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o19/$tag --time-budget "$budget" \
  --end-by "$end" --deadline $((end + 45)) --eager --jobs "${JOBS:-36}" --runs "$runs" > /tmp/o19/$tag.log 2>&1
grep -v "^ " /tmp/o19/$tag.log | cut -c1-240 | tail -n 40
for f in /tmp/o19/$tag/logs/*.log; do grep -q "Traceback" "$f" && { echo "== $f"; tail -n 12 "$f"; }; done | head -50
nvidia-smi --query-gpu=name,memory.used --format=csv
cd /tmp/o19 && tar cf "$OUT/r19-$tag.tar" $tag.log $tag/logs $(ls $tag/mqar/*/metrics.json $tag/mqar/*/loss.csv $tag/mqar/*/config.json 2>/dev/null)
