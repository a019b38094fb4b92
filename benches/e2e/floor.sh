#!/usr/bin/env bash
# Issue 28's table in one run: every row's CPU per unit as a ratio to sluice's own refusal (a 503
# from a 1-token bucket: the same parse, a same-sized answer) measured in the same run, on the
# same backend and at the same concurrency. nginx `return 202` stays as a reference row.
#
# Then issue 43's three ratios per backend, each with the user µs of both sides: durable 202 ÷
# refusal at c256 (bound 1.30), delivered batched ÷ durable 202 at c64 (1.10), delivered
# unbatched ÷ durable 202 at c64 (1.45).
#
# Rows: refusal, durable 202 (fsync) at c64 and c256, and the delivered event (its ingest, WAL and
# outbound call included) unbatched and batched (`BATCH`, default 64), each on io_uring and mio.
# The delivered runs use 64 connections, so their ratio is to the c64 refusal.
#
# It runs `ingest_vs_nginx.sh` at c64 and c256, then `delivered_vs_nginx.sh` unbatched and
# batched on each backend, keeps their full output in $OUT (default a temp dir) and prints the
# table. Bounded: about 16 × DURATION seconds of load plus each delivered run's drain (≤ 60 s).
#
# Usage: [BIN=path/to/sluice] [BATCH=64] [OUT=dir] benches/e2e/floor.sh [DURATION_SECONDS]
# Needs: wrk and nginx (Debian: apt-get install wrk nginx-light), a release build.
set -euo pipefail
DUR=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BATCH_N=${BATCH:-64}
unset BATCH
OUT=${OUT:-$(mktemp -d /tmp/sluice-floor.XXXXXX)}
mkdir -p "$OUT"
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
  BIN="$ROOT/target/release/sluice"
fi
export BIN
source "$ROOT/benches/e2e/lib.sh"

step() { # OUTPUT-NAME ENV... -- SCRIPT ARGS...: one run, its output kept; a failure names it
  local name=$1
  shift
  e2e_ports_free
  if ! env "$@" >"$OUT/$name.txt" 2>&1; then
    echo "floor.sh: the $name run failed; its output: $OUT/$name.txt" >&2
    tail -n 5 "$OUT/$name.txt" >&2
    exit 1
  fi
}
E2E="$ROOT/benches/e2e"
step ingest-c64 "$E2E/ingest_vs_nginx.sh" "$DUR" 64
step ingest-c256 "$E2E/ingest_vs_nginx.sh" "$DUR" 256
for io in uring mio; do
  step "delivered-$io" SLUICE_IO=$io "$E2E/delivered_vs_nginx.sh" "$DUR"
  step "delivered-$io-batch" SLUICE_IO=$io BATCH="$BATCH_N" "$E2E/delivered_vs_nginx.sh" "$DUR"
done

ingest() { e2e_ingest_cpu "$@"; }
delivered() { e2e_delivered_cpu "$@"; }
row() { # label backend conc "total user kernel" refusal-total
  read -r t u k <<<"$4"
  awk -v l="$1" -v b="$2" -v c="$3" -v t="$t" -v u="$u" -v k="$k" -v r="$5" \
    'BEGIN { printf "| %s | %s | %s | %.2f | %.2f | %.2f | %s |\n", l, b, c, t, u, k, (r > 0 ? sprintf("%.2f×", t / r) : "") }'
}

echo "machine: $(nproc) cores, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg); outputs in $OUT"
echo
echo "| row | backend | conns | CPU µs / unit | user | kernel | ÷ refusal |"
echo "|---|---|---|---|---|---|---|"
for c in 64 256; do
  f="$OUT/ingest-c$c.txt"
  row "nginx return 202 (reference)" nginx "$c" "$(ingest "$f" "nginx return 202")" 0
done
for io in uring mio; do
  name=$([ $io = uring ] && echo io_uring || echo mio)
  r64=$(ingest "$OUT/ingest-c64.txt" "--io $io, buckets of 1 token" | cut -d' ' -f1)
  r256=$(ingest "$OUT/ingest-c256.txt" "--io $io, buckets of 1 token" | cut -d' ' -f1)
  row "refusal (503)" "$name" 64 "$(ingest "$OUT/ingest-c64.txt" "--io $io, buckets of 1 token")" "$r64"
  row "refusal (503)" "$name" 256 "$(ingest "$OUT/ingest-c256.txt" "--io $io, buckets of 1 token")" "$r256"
  row "durable 202 (fsync)" "$name" 64 "$(ingest "$OUT/ingest-c64.txt" "--io $io --durability fsync (")" "$r64"
  row "durable 202 (fsync)" "$name" 256 "$(ingest "$OUT/ingest-c256.txt" "--io $io --durability fsync (")" "$r256"
  row "delivered event, unbatched" "$name" 64 "$(delivered "$OUT/delivered-$io.txt")" "$r64"
  row "delivered event, batch $BATCH_N" "$name" 64 "$(delivered "$OUT/delivered-$io-batch.txt")" "$r64"
done
echo
# Issue 43's three targets: each against the durable 202 of the same run, backend and
# concurrency (the refusal at c256 for the 202 itself), total CPU and user CPU side by side.
ratio() { # label "total user kernel" "total user kernel" target
  read -r t1 u1 _ <<<"$2"
  read -r t2 u2 _ <<<"$3"
  awk -v l="$1" -v t1="$t1" -v u1="$u1" -v t2="$t2" -v u2="$u2" -v g="$4" 'BEGIN {
    r = (t2 > 0 ? t1 / t2 : 0)
    printf "| %s | %.2f× | %.2f → %.2f | %s %s |\n", l, r, u2, u1, g, (r <= g + 0 ? "met" : "not met") }'
}
echo "| target (issue 43) | CPU ratio | user µs (denominator → row) | bound |"
echo "|---|---|---|---|"
for io in uring mio; do
  name=$([ $io = uring ] && echo io_uring || echo mio)
  ref256=$(ingest "$OUT/ingest-c256.txt" "--io $io, buckets of 1 token")
  d64=$(ingest "$OUT/ingest-c64.txt" "--io $io --durability fsync (")
  d256=$(ingest "$OUT/ingest-c256.txt" "--io $io --durability fsync (")
  ratio "$name: durable 202 c256 ÷ refusal c256" "$d256" "$ref256" 1.30
  ratio "$name: delivered, batch $BATCH_N ÷ durable 202 c64" "$(delivered "$OUT/delivered-$io-batch.txt")" "$d64" 1.10
  ratio "$name: delivered, unbatched ÷ durable 202 c64" "$(delivered "$OUT/delivered-$io.txt")" "$d64" 1.45
done
echo
for f in "$OUT"/delivered-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^sluice:' "$f")"
done
