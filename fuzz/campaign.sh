#!/usr/bin/env bash
# A long fuzz campaign: each target in turn, one libFuzzer process, until it has executed RUNS
# inputs (default 10 million) or CAP seconds have passed (default 4 h: a safety bound), with the
# committed seeds, keeping the working corpus in fuzz/corpus/<target>/ (not committed).
# Usage: fuzz/campaign.sh [target...]        (default: every target)
#        FAST=1 CAP=4800 fuzz/campaign.sh wal_recovery
# FAST=1 builds without AddressSanitizer and without comparison tracing (`-s none
# --no-trace-compares`, its own target dir target/fast): the same target code and assertions,
# ~8x the executions per CPU-second for wal_recovery (RELIABILITY.md "Fuzzing" says what that
# leaves out and why it is sound for these targets). Default: the CI build (ASan + tracing).
# NICE (default 19) yields the CPU to everything else; FLAGS: more libFuzzer flags.
# -close_fd_mask=2: the product's stderr lines (wal_recovery prints one per accepted loss, ~half
# its inputs) go to /dev/null, libFuzzer's own output to the log. On a crash the artifact is run
# again with stderr shown, so the panic message is in the output.
# Prints one line per target: executions, seconds, exec/s, coverage, corpus size, commit; a crash
# stops the campaign with the artifact under fuzz/artifacts/<target>/ (keep it as a seed and a
# regression test).
set -euo pipefail
cd "$(dirname "$0")"
RUNS="${RUNS:-10000000}"
CAP="${CAP:-14400}"
NICE="${NICE:-19}"
build=()
bin_dir=target/x86_64-unknown-linux-gnu/release
if [[ "${FAST:-0}" == 1 ]]; then
    build=(-s none --no-trace-compares --target-dir target/fast)
    bin_dir=target/fast/x86_64-unknown-linux-gnu/release
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then # every target under fuzz_targets/
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- fuzz_targets Cargo.toml Cargo.lock ../src ../Cargo.toml ../Cargo.lock ||
    commit="$commit+changes" # the code the binaries are built from
mkdir -p target
for target in "${targets[@]}"; do
    nice -n "$NICE" cargo +nightly fuzz build "${build[@]}" "$target"
    mkdir -p "corpus/$target" "artifacts/$target"
    log="target/campaign-$target.log"
    start=$SECONDS
    echo "campaign $target: started $(date -u +%FT%TZ) on $commit"
    # shellcheck disable=SC2086 # FLAGS is a list of flags
    if ! nice -n "$NICE" "$bin_dir/$target" "corpus/$target" "seeds/$target" \
        -artifact_prefix="artifacts/$target/" -runs="$RUNS" -max_total_time="$CAP" \
        -print_final_stats=1 -close_fd_mask=2 ${FLAGS:-} >"$log" 2>&1; then
        tail -n 30 "$log"
        for a in "artifacts/$target"/*; do
            [[ -f "$a" ]] && "$bin_dir/$target" "$a" 2>&1 | tail -n 30
        done
        echo "campaign $target: CRASH after $((SECONDS - start))s (artifact under fuzz/artifacts/$target)"
        exit 1
    fi
    secs=$((SECONDS - start))
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 || true)
    rate=$( ((secs > 0)) && [[ "$runs" != '?' ]] && echo $((runs / secs)) || echo '?')
    echo "campaign $target: $runs execs in ${secs}s ($rate exec/s), ${cov:-cov: ?}," \
        "corpus $(ls "corpus/$target" | wc -l) files, 0 crashes, on $commit"
done
