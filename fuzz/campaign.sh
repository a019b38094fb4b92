#!/usr/bin/env bash
# A long fuzz campaign: each target until it has executed RUNS inputs (default 10 million), with
# the committed seeds, keeping the working corpus in fuzz/corpus/ (not committed).
# Usage: fuzz/campaign.sh [target...]        (default: every target)
#        RUNS=10000000 JOBS=1 fuzz/campaign.sh wal_recovery
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
    start=$SECONDS
    if ! cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -runs="$RUNS" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "campaign $target: CRASH after $((SECONDS - start))s (artifact under fuzz/artifacts/$target)"
        exit 1
    fi
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 || true)
    echo "campaign $target: $runs execs in $((SECONDS - start))s, ${cov:-cov: ?}, corpus $(ls "corpus/$target" | wc -l) inputs, 0 crashes"
done
