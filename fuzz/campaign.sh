#!/usr/bin/env bash
# A long fuzz campaign: each target until it has executed RUNS inputs (default 10 million), with
# the committed seeds, keeping the working corpus in fuzz/corpus/ (not committed).
# Usage: fuzz/campaign.sh [target...]        (default: every target)
#        RUNS=5000000 FLAGS='-jobs=2 -workers=2' fuzz/campaign.sh wal_recovery
# FLAGS: more libFuzzer flags. With -jobs=N, N processes fuzz (sharing the corpus directory),
# each until it has executed RUNS inputs, writing its log to fuzz/fuzz-<job>.log; the summary
# adds up their executions. (-fork=N was tried: its short child jobs, each replaying the
# corpus from a fresh process, ran at a third of one process's rate here.)
# Prints one line per target: executions, seconds, coverage, corpus size; a crash stops the
# campaign with the artifact under fuzz/artifacts/<target>/ (keep it as a regression test).
set -euo pipefail
cd "$(dirname "$0")"
RUNS="${RUNS:-10000000}"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then # every target under fuzz_targets/
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
cargo +nightly fuzz build
mkdir -p target
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log="target/campaign-$target.log"
    rm -f fuzz-*.log
    start=$SECONDS
    if ! cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -runs="$RUNS" -print_final_stats=1 ${FLAGS:-} >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "campaign $target: CRASH after $((SECONDS - start))s (artifact under fuzz/artifacts/$target)"
        exit 1
    fi
    # One final-stats line per fuzzing process (with -jobs the parent copies each job's log, with
    # its final stats, into this one as the job exits).
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" |
        grep -Eo '[0-9]+$' | paste -sd+ | bc || true)
    runs=${runs:-?}
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | sort -t' ' -k2 -n | tail -n 1 || true)
    echo "campaign $target: $runs execs in $((SECONDS - start))s, ${cov:-cov: ?}, corpus $(ls "corpus/$target" | wc -l) inputs, 0 crashes"
done
