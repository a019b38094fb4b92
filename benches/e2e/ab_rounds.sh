#!/usr/bin/env bash
# A/B of every end-to-end CPU figure between two binaries, in alternated rounds: round 1 runs A
# then B, round 2 B then A, and so on (A B B A A B …), so a drift of the machine over the run
# weighs on both. One binary's turn in a round is `ingest_vs_nginx.sh DURATION 256`, the same at
# 64 connections, then `delivered_vs_nginx.sh DURATION` on io_uring and on mio. Every run's
# output is kept in $OUT; at the end one table row per figure: each round's CPU µs per unit,
# total (user / kernel), for A and for B, the ratio of B's median to A's, and the median of the
# rounds' B ÷ A ratios. Rows: the durable 202 (fsync) and the refusal (503 from 1-token buckets)
# at c256 and c64 on each backend, the delivered event on each backend, and nginx `return 202`
# (the reference, which does not change between A and B: its ratio is the machine's noise).
#
# This is the rewrite of the A/B script (and its parser) that produced the A/Bs of 2026-12-04 in
# benches/LOG.md; the original was kept outside the repository and is lost.
#
# Bounded: ROUNDS × 2 turns, each 16 × DURATION s of ingest load plus 2 delivered bursts of
# DURATION s and their drains (≤ 60 s each): about 15 minutes at the defaults.
#
# Usage: A=path/to/sluice B=path/to/sluice [ROUNDS=4] [OUT=dir] benches/e2e/ab_rounds.sh [DURATION_SECONDS]
# Needs: what ingest_vs_nginx.sh and delivered_vs_nginx.sh need (wrk, nginx), two release builds.
set -euo pipefail
DUR=${1:-5}
ROUNDS=${ROUNDS:-4}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${A:?A=path of the first binary}" "${B:?B=path of the second binary}"
source "$ROOT/benches/e2e/lib.sh"
OUT=${OUT:-$(mktemp -d /tmp/sluice-ab.XXXXXX)}
mkdir -p "$OUT"
E2E="$ROOT/benches/e2e"

step() { # OUTPUT-NAME ENV... -- one run, its output kept; a failure names it and stops
  local name=$1
  shift
  e2e_ports_free
  if ! env "$@" >"$OUT/$name.txt" 2>&1; then
    echo "ab_rounds.sh: the $name run failed; its output: $OUT/$name.txt" >&2
    tail -n 5 "$OUT/$name.txt" >&2
    exit 1
  fi
}

echo "machine: $(nproc) cores, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg); outputs in $OUT"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for which in $order; do
    bin=${!which}
    echo "round $r: $which ($bin), $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg)"
    step "r$r-$which-ingest-c256" BIN="$bin" "$E2E/ingest_vs_nginx.sh" "$DUR" 256
    step "r$r-$which-ingest-c64" BIN="$bin" "$E2E/ingest_vs_nginx.sh" "$DUR" 64
    step "r$r-$which-delivered-uring" BIN="$bin" SLUICE_IO=uring "$E2E/delivered_vs_nginx.sh" "$DUR"
    step "r$r-$which-delivered-mio" BIN="$bin" SLUICE_IO=mio "$E2E/delivered_vs_nginx.sh" "$DUR"
  done
done

figure() { # ROUND WHICH FILE-SUFFIX PATTERN: "total user kernel" of one run ("delivered": the event)
  local f="$OUT/r$1-$2-$3.txt"
  if [ "$4" = delivered ]; then e2e_delivered_cpu "$f"; else e2e_ingest_cpu "$f" "$4"; fi
}
row() { # LABEL FILE-SUFFIX PATTERN: one table row
  local label=$1 suffix=$2 pat=$3 which r t u k cells vals ratios=() a b
  local -A med=() runs=()
  for which in A B; do
    cells=""
    vals=()
    for r in $(seq "$ROUNDS"); do
      read -r t u k <<<"$(figure "$r" "$which" "$suffix" "$pat")"
      [ -n "${t:-}" ] || { echo "ab_rounds.sh: no figure for '$label' in $OUT/r$r-$which-$suffix.txt" >&2; exit 1; }
      cells+="$t($u/$k) "
      vals+=("$t")
    done
    runs[$which]=$cells
    med[$which]=$(printf '%s\n' "${vals[@]}" | e2e_median)
  done
  for r in $(seq "$ROUNDS"); do
    read -r a _ <<<"$(figure "$r" A "$suffix" "$pat")"
    read -r b _ <<<"$(figure "$r" B "$suffix" "$pat")"
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f", b / a}')")
  done
  awk -v l="$label" -v ra="${runs[A]}" -v rb="${runs[B]}" -v ma="${med[A]}" -v mb="${med[B]}" \
    -v mr="$(printf '%s\n' "${ratios[@]}" | e2e_median)" \
    'BEGIN {printf "| %s | %s| %s| %.3f | %.3f |\n", l, ra, rb, mb / ma, mr}'
}

echo
echo "CPU µs per unit, total(user/kernel), rounds 1..$ROUNDS; A = $A, B = $B"
echo
echo "| | A | B | B ÷ A (medians) | median of the rounds' B ÷ A |"
echo "|---|---|---|---|---|"
for io in uring mio; do
  name=$([ $io = uring ] && echo io_uring || echo mio)
  for c in 256 64; do
    row "durable 202, $name, c$c" "ingest-c$c" "--io $io --durability fsync ("
  done
done
row "delivered event, io_uring" delivered-uring delivered
row "delivered event, mio" delivered-mio delivered
for io in uring mio; do
  name=$([ $io = uring ] && echo io_uring || echo mio)
  for c in 256 64; do
    row "refusal, $name, c$c" "ingest-c$c" "--io $io, buckets of 1 token"
  done
done
for c in 256 64; do
  row "nginx return 202 (reference), c$c" "ingest-c$c" "nginx return 202"
done
