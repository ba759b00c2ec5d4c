#!/usr/bin/env bash
# One device call of round 13 with a fuzz campaign beside it (issue 28 and docs/fuzzing.md
# "Campaigns"), from the repository root on the GPU machine:
#   r13-call.sh RUNS_FILE TIME_BUDGET FUZZ_SECONDS [FUZZ_WORKERS]
#   e.g. r13-call.sh tools/python/research/rounds/r13-call1.txt 440 460   (then r13-call2.txt)
#   RUNS_FILE "-" trains nothing: the call is the fuzz campaign alone, at normal priority.
# The GPU trains RUNS_FILE's runs (r13.sh, TIME_BUDGET its --time-budget; the call lasts about
# TIME_BUDGET + 95 s); the CPUs run fuzz/campaign.sh over every target, FUZZ_WORKERS workers each
# (default 1) at nice 19, for FUZZ_SECONDS (its merges take about a minute more), from the tree's
# fuzz/ (corpus/, seeds*/, campaign.sh, targets.txt) and the binaries staged in .device-fuzz/bins/
# or, smaller to carry (the tree and the carried paths travel within 64 MiB), packed in
# .device-fuzz/bins.tgz (ignored by git: carry .device-fuzz; `cargo xtask fuzz --seconds 1`
# builds them in fuzz/target/x86_64-unknown-linux-gnu/release/). Brings back $OUT/r13.tar, $OUT/fuzz.tgz (summary.md/.tsv, per target the merged
# corpus/, crashes/ and the logs), machine.txt, mon.txt (GPU memory and load every 20 s) and
# campaign.log.
set -u
B=$PWD/.device-fuzz/bins
if [ -f $PWD/.device-fuzz/bins.tgz ]; then mkdir -p $B && tar xzf $PWD/.device-fuzz/bins.tgz -C $B; fi
W=/tmp/fz
mkdir -p $W
chmod +x $B/* fuzz/campaign.sh
nice=19
[ "$1" = "-" ] && nice=0
nproc > $OUT/machine.txt; nvidia-smi --query-gpu=name,memory.total --format=csv >> $OUT/machine.txt
(nice -n $nice fuzz/campaign.sh $B $W/out "${4:-1}" "$3" > $W/campaign.log 2>&1
 echo "campaign rc=$?" >> $W/campaign.log) &
fz=$!
(while sleep 20; do
   echo "$(date +%s) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) | $(cut -d' ' -f1-3 /proc/loadavg)"
 done) > $W/mon.txt 2>&1 &
mon=$!
t0=$(date +%s)
if [ "$1" != "-" ]; then
  bash tools/python/research/rounds/r13.sh "$1" "$2"
  echo "[call] study done after $(( $(date +%s) - t0 )) s"
fi
wait $fz
echo "[call] fuzz done after $(( $(date +%s) - t0 )) s"
kill $mon
cp $W/mon.txt $W/campaign.log $OUT/
cd $W/out && tar czf $OUT/fuzz.tgz summary.md summary.tsv */corpus */crashes */fuzz.log */merge.log
cat summary.md
ls -la $OUT
