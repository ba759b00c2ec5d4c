#!/usr/bin/env bash
# A fuzzing campaign over every target, on a machine without Rust or
# network (docs/fuzzing.md, "Campaigns"): the binaries are built elsewhere
# (`cargo xtask fuzz --seconds 1` leaves them in
# fuzz/target/x86_64-unknown-linux-gnu/release/) and copied over with this
# fuzz/ directory (its corpus/ and seeds*/).
#
#   fuzz/campaign.sh BIN_DIR OUT_DIR [WORKERS] [SECONDS] [TARGET...]
#
# runs each target (all of fuzz/targets.txt whose binary is in BIN_DIR, or
# those named) at the same time, each with WORKERS libFuzzer fork-mode
# workers (default 2) for SECONDS (default 600), from its committed corpus
# and seeds. Then, per target, in OUT_DIR/<target>/:
#   new/       what the workers added (raw, unminimized)
#   corpus/    the committed corpus plus the new units that add coverage
#              (`-merge=1`): copy it over fuzz/corpus/<target> to keep them
#   crashes/   crash-*, timeout-*, oom-* inputs (reproduce: BIN_DIR/<target> FILE)
#   fuzz.log   the fork-mode log; merge.log the merge's
# and OUT_DIR/summary.tsv (and summary.md, the same as a table): execs,
# exec/s (execs over the run's seconds, all workers), coverage (edges;
# features), corpus size, units the merge kept, the crash, timeout and OOM
# inputs found and the fork log's own oom/timeout/crash count. Exit status 1
# when any target left a crash, timeout or OOM input, else 0.
# FUZZ_FLAGS (environment) is appended to every target's libFuzzer flags
# (e.g. FUZZ_FLAGS=-len_control=0).
set -euo pipefail

# name seeds-dir max_len share, one target a line (xtask reads the same file)
TARGETS=$(grep -v '^#' "$(dirname "$0")/targets.txt")

if [ $# -lt 2 ]; then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
BIN=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
WORKERS=${3:-2}
SECONDS_EACH=${4:-600}
shift $(($# < 4 ? $# : 4))
ONLY=" $* "
FUZZ=$(cd "$(dirname "$0")" && pwd)

chosen=()
while read -r name seeds max_len _share; do
    [ -n "$name" ] || continue
    if [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]]; then
        continue
    fi
    if [ ! -x "$BIN/$name" ]; then
        echo "campaign: no binary $BIN/$name, skipping $name" >&2
        continue
    fi
    chosen+=("$name $seeds $max_len")
done <<<"$TARGETS"
[ ${#chosen[@]} -gt 0 ] || { echo "campaign: no target to run" >&2; exit 2; }

echo "campaign: ${#chosen[@]} targets x $WORKERS workers x ${SECONDS_EACH} s -> $OUT" >&2
pids=()
for t in "${chosen[@]}"; do
    read -r name seeds max_len <<<"$t"
    dir="$OUT/$name"
    mkdir -p "$dir/new" "$dir/crashes" "$FUZZ/corpus/$name"
    # -ignore_*: a crash stops one job, not the target's run; every input
    # that failed is kept in crashes/.
    (cd "$dir" && exec "$BIN/$name" "$dir/new" "$FUZZ/corpus/$name" "$FUZZ/$seeds" \
        -fork="$WORKERS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_len="$max_len" -max_total_time="$SECONDS_EACH" -timeout=60 -rss_limit_mb=2048 \
        -artifact_prefix="$dir/crashes/" ${FUZZ_FLAGS:-} >"$dir/fuzz.log" 2>&1) &
    pids+=($!)
done
for p in "${pids[@]}"; do
    wait "$p" || true
done

# The last fork-mode status line: "#N: cov: C ft: F corp: U exec/s: E
# oom/timeout/crash: O/T/C time: Ss job: J ...".
status() { # status LOG -> that line (empty when the log has none)
    grep -a -E '^#[0-9]+: cov:' "$1" | tail -n 1 || true
}
field() { # field LOG NAME -> the value after "NAME: " on the last status line
    status "$1" | sed -n "s|.* $2: \([0-9/]*\).*|\1|p"
}
printf 'target\tworkers\tseconds\texecs\texec_per_s\tcov_edges\tfeatures\tcorpus_units\tmerge_added\tcrashes\ttimeouts\tooms\tlog_oom_timeout_crash\n' >"$OUT/summary.tsv"
bad=0
for t in "${chosen[@]}"; do
    read -r name seeds max_len <<<"$t"
    dir="$OUT/$name"
    rm -rf "$dir/corpus"
    cp -r "$FUZZ/corpus/$name" "$dir/corpus"
    "$BIN/$name" -merge=1 "$dir/corpus" "$dir/new" -max_len="$max_len" \
        -timeout=60 -rss_limit_mb=2048 -artifact_prefix="$dir/crashes/" >"$dir/merge.log" 2>&1 || true
    log="$dir/fuzz.log"
    execs=$(status "$log" | sed -n 's/^#\([0-9]*\):.*/\1/p')
    secs=$(status "$log" | sed -n 's/.* time: \([0-9]*\)s.*/\1/p')
    rate="?"
    if [ -n "$execs" ] && [ -n "$secs" ] && [ "$secs" -gt 0 ]; then
        rate=$((execs / secs))
    fi
    added=$(sed -n 's/.*MERGE-OUTER: \([0-9]*\) new files.*/\1/p' "$dir/merge.log" | tail -n 1 || true)
    crashes=$(find "$dir/crashes" -name 'crash-*' | wc -l)
    timeouts=$(find "$dir/crashes" -name 'timeout-*' | wc -l)
    ooms=$(find "$dir/crashes" -name 'oom-*' | wc -l)
    [ $((crashes + timeouts + ooms)) -eq 0 ] || bad=1
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$WORKERS" "$SECONDS_EACH" \
        "${execs:-?}" "$rate" "$(field "$log" cov)" "$(field "$log" ft)" "$(field "$log" corp)" \
        "${added:-?}" "$crashes" "$timeouts" "$ooms" "$(field "$log" oom/timeout/crash)" >>"$OUT/summary.tsv"
done
{
    head -n 1 "$OUT/summary.tsv" | sed 's/\t/ | /g; s/^/| /; s/$/ |/'
    head -n 1 "$OUT/summary.tsv" | sed 's/[^\t]*/---/g; s/\t/|/g; s/^/|/; s/$/|/'
    tail -n +2 "$OUT/summary.tsv" | sed 's/\t/ | /g; s/^/| /; s/$/ |/'
} >"$OUT/summary.md"
# sharded_checkpoint's scratch directories (one per process, removed by the
# next process of the target; the last ones, and the merge's, are left).
for d in /dev/shm/ferrite-fuzz-sharded-* "${TMPDIR:-/tmp}"/ferrite-fuzz-sharded-*; do
    if [ -d "$d" ] && [ ! -e "/proc/${d##*-}" ]; then rm -rf "$d"; fi
done
cat "$OUT/summary.md"
exit "$bad"
