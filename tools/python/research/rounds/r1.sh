#!/usr/bin/env bash
# Device round 1 (issues 11 and 15): a throughput probe of the state study's
# families with CUDA-graph steps (5 families x 4 / 64 KB, lr 1e-3, 75 s each,
# all at once) and the int4 QAT fine-tunes of both LMs (240 s each), together.
# Run from the repo root on the GPU machine; results go to $OUT/r1.tgz.
set -u -o pipefail
export PYTHONUNBUFFERED=1
cd tools/python
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
runs=$(python -c "from research.study_runs import study_name as n; print(','.join(n(f, kb, 1e-3, 1) for f in ('swa', 'swa-sinks', 'bla', 'gsa', 'gdn') for kb in (4, 64)))")
mkdir -p /tmp/o
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/qat --time-budget 240 --deadline 280 --runs lm-small-qat4,lm-large-qat4 > /tmp/o/qat.log 2>&1 &
python -m ferrite_train.launch --registry research.study_runs --out /tmp/o/probe --time-budget 75 --deadline 160 --runs "$runs" 2>&1 | tee /tmp/o/probe.log
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
wait
cat /tmp/o/qat.log | tail -4
tar czf "$OUT/r1.tgz" -C /tmp/o .
