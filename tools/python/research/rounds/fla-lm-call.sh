#!/usr/bin/env bash
# One device call that trains the RWKV-7 and Mamba-2 byte LMs of issue 27 item 5
# (ferrite_train.fla_lm) and brings them back, from the repository root on the GPU machine:
#   bash tools/python/research/rounds/fla-lm-call.sh BUDGET_SECONDS
# Carry: target/wheels (fla-core + flash-linear-attention 0.6.0, `pip download --no-deps`)
# and tools/python/data (ferrite_train.corpus.fortunes / .english).
# What the first try (2026-12-06, H100) taught, each a line below:
# - everything goes back in ONE tar: the device returns a limited number of files
#   from $OUT, and the rest is lost when the call ends ($OUT is emptied per call);
# - nothing here waits on a job that can hang (the RWKV-7 fixture with --ieee-dots
#   compiled for more than 10 minutes: make fixtures in a call of their own);
# - RWKV-7's first bf16 step compiles fla's Triton kernels for ~6 minutes on a cold
#   machine (Mamba-2's ~1 minute), inside --time-budget: give RWKV-7 the larger budget.
set -u
B=${1:-420}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fla target/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/fla:tools/python
R=/tmp/fla-lm && mkdir -p $R
for fam in rwkv7 mamba2; do
  (timeout $((B + 120)) python3 -m ferrite_train.fla_lm --family $fam --out $R/$fam-m3 \
     --time-budget $B > $R/$fam.log 2>&1; echo rc=$? >> $R/$fam.log) &
done
wait
for f in $R/*.log; do echo "== $f"; tail -n 3 "$f"; done
tar czf $OUT/fla-lm.tgz -C $R .
ls -la $OUT
