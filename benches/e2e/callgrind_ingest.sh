#!/usr/bin/env bash
# User-space instructions per durable 202 and per refusal, counted by callgrind (issue 43's
# "user instructions per durable 202 ≤ 1.4× a refusal's"). Deterministic in what it counts, unlike
# CPU time on this shared machine; valgrind runs one thread at a time, so group commits are
# smaller than on a native run and the commit's share per request weighs more (the requests per
# commit are printed beside the count).
#
# For each of the two rows: one `serve --workers 1 --durability fsync` (SLUICE_IO=mio: valgrind
# does not run io_uring) under `valgrind --tool=callgrind`, with the buckets raised (durable 202)
# or of 1 token (refusal, the ingest_vs_nginx.sh settings); `wrk -t1 -c64` with the 1 KiB POST
# for WARM seconds, `callgrind_control -z`, DURATION seconds of load, `callgrind_control -d`;
# instructions of every thread ÷ requests of the measured burst. Prints both, and their ratio.
#
# OUT=dir keeps the two dumps there (`callgrind_annotate OUT/durable_202.callgrind`).
#
# Usage: BIN=path/to/sluice [WARM=2] [OUT=dir] benches/e2e/callgrind_ingest.sh [DURATION_SECONDS]
# Needs: valgrind and wrk (Debian: apt-get install valgrind wrk), curl, a release build.
# Bounded: two rows of WARM + DURATION seconds of load, each start ≤ 60 s.
set -euo pipefail
DUR=${1:-4}
WARM=${WARM:-2}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/benches/e2e/lib.sh"
e2e_init callgrind-ingest
: "${BIN:?BIN=path of the sluice binary}"
PORT=18180

row() { # NAME CAPACITY: prints "NAME: R requests, C commits, I instructions, X per request"
  local name=$1 cap=$2 dir="$WORK/$1"
  mkdir -p "$dir"
  env SLUICE_IO=mio HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY="$cap" \
    HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY="$cap" HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC="$cap" \
    taskset -c "$SERVER_CPU" valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
    "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$dir/data" --workers 1 --durability fsync \
    >"$dir/sluice.out" 2>"$dir/sluice.err" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    grep -q listening "$dir/sluice.out" 2>/dev/null && break
    sleep 0.1
  done
  grep -q listening "$dir/sluice.out" || { echo "sluice did not start: $(tail -5 "$dir/sluice.err")" >&2; exit 1; }
  load() { taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"$1s" -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$PORT" | awk '/requests in/ {print $1}'; }
  commits() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^sluice_wal_sync_seconds_count/ {s += $2} END {print s + 0}'; }
  load "$WARM" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local c0 n c1
  c0=$(commits)
  n=$(load "$DUR")
  c1=$(commits)
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local dump ir
  # The dump after the zeroing: the oldest file with a part number (`cg.PID.N`); the final dump
  # at exit has none.
  dump=$(ls -tr "$dir"/cg."$pid".* 2>/dev/null | head -1)
  ir=$(awk '/^summary:/ {print $2}' "$dump")
  [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$dump" "$OUT/$name.callgrind"
  echo "$name: $n requests, $((${c1%.*} - ${c0%.*})) commits, $ir instructions," \
    "instructions_per_request=$(awk -v i="$ir" -v r="$n" 'BEGIN {printf "%.0f", i / r}')"
}

echo "bin=$BIN; mio, one worker under callgrind, 64 connections, ${WARM}s warm-up, ${DUR}s counted"
durable=$(row durable_202 100000000)
echo "$durable"
e2e_ports_free
refusal=$(row refusal 1)
echo "$refusal"
per() { sed 's/.*instructions_per_request=//' <<<"$1"; }
awk -v d="$(per "$durable")" -v r="$(per "$refusal")" \
  'BEGIN {printf "durable 202 ÷ refusal, user instructions: %.2f× (issue 43: ≤ 1.4×)\n", d / r}'
