#!/usr/bin/env bash
# User-space instructions per *delivered* event, counted by callgrind (deterministic: no
# sensitivity to the machine's load, unlike the CPU time of delivered_vs_nginx.sh, whose noise on
# this shared machine is ±10 % and more): one sluice worker (`SLUICE_IO`, default mio) under
# `valgrind --tool=callgrind`, a trigger whose handler is nginx `return 200`; a first wrk burst
# warms the server up and is drained; `callgrind_control -z` zeroes the counts; a second burst
# of DURATION seconds is posted and drained; `callgrind_control -d` dumps. Instructions of every
# thread ÷ events delivered between the two dumps (`sluice_events_delivered_total`: events, not calls,
# for a batched destination). Kernel work is not counted (callgrind sees user space only), nor is the event
# rate comparable with a native run (valgrind runs one thread at a time): it is an A/B of the
# user-space work per delivered event between two binaries. valgrind does not run io_uring:
# with SLUICE_IO=uring use COUNT=syscalls.
#
# COUNT=syscalls: the server runs natively and `perf stat -e raw_syscalls:sys_enter -p PID`
# counts its system calls over the second burst and its drain (the kernel side of the same A/B:
# a count, not a time); ÷ events delivered.
#
# Usage: BIN=path/to/sluice [SLUICE_IO=mio|uring] [COUNT=instructions|syscalls] [BATCH=N] [OUT=dir: keep the dump]
#        benches/e2e/callgrind_delivered.sh [DURATION_SECONDS]
# Needs: valgrind (or perf), wrk and nginx; a release build.
# Bounded: two bursts of DURATION s (wrk), each drain at most 120 s.
set -euo pipefail
DUR=${1:-4}
IO=${SLUICE_IO:-mio}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/benches/e2e/lib.sh"
e2e_init callgrind
: "${BIN:?BIN=path of the sluice binary}"
metric_sum() { curl -s "http://127.0.0.1:18180/metrics" | awk -v m="$1" -v l="$2" 'index($1, m) == 1 && (l == "" || index($0, l)) {s += $2} END {print s + 0}'; }

nginx_conf '18181 200 ok'
taskset -c "$CLIENT_CPU" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
pids+=($!)
# BATCH=N: the destination takes batched calls, as in delivered_vs_nginx.sh.
BATCH_N=${BATCH:-}
deliver_toml "$([ -n "$BATCH_N" ] && echo "batch = { max_events = $BATCH_N, linger = \"5ms\" }")" \
  "$([ -n "$BATCH_N" ] && printf '[orchestrator]\npumps = { max_outstanding = %d }\n' $((16 * BATCH_N)))"
COUNT=${COUNT:-instructions}
wrap=(valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p")
[ "$COUNT" = syscalls ] && wrap=()
env SLUICE_IO="$IO" HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 \
  HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000 \
  taskset -c "$SERVER_CPU" "${wrap[@]}" \
  "$BIN" serve --config "$WORK/sluice.toml" --listen 127.0.0.1:18180 --data-dir "$WORK/data" \
  --workers 1 >"$WORK/sluice.out" 2>"$WORK/sluice.err" &
pids+=($!)
SLUICE=$!
for _ in $(seq 600); do
  grep -q listening "$WORK/sluice.out" 2>/dev/null && break
  sleep 0.1
done
grep -q listening "$WORK/sluice.out" || { echo "sluice did not start: $(tail -5 "$WORK/sluice.err")" >&2; exit 1; }

drain() { # polled once a second: each scrape's own instructions are counted too (~1 % here)
  for _ in $(seq 120); do
    sleep 1
    [ "$(metric_sum sluice_wal_pending_events '')" = 0 ] && return 0
  done
  echo "the backlog did not drain in 120 s" >&2
  exit 1
}
burst() { taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" http://127.0.0.1:18180 | awk '/requests in/ {print $1}'; }

burst >/dev/null
drain
if [ "$COUNT" = syscalls ]; then
  perf stat -e raw_syscalls:sys_enter -p "$SLUICE" -o "$WORK/perf.txt" &
  PERF=$!
  sleep 0.5
else
  callgrind_control -z "$SLUICE" >/dev/null 2>&1
fi
before=$(metric_sum sluice_events_delivered_total "")
accepted=$(burst)
drain
after=$(metric_sum sluice_events_delivered_total "")
delivered=$((${after%.*} - ${before%.*}))
if [ "$COUNT" = syscalls ]; then
  kill -INT "$PERF"
  wait "$PERF" || true
  n=$(awk '/raw_syscalls:sys_enter/ {gsub(",", "", $1); print $1}' "$WORK/perf.txt")
  echo "io=$IO bin=$BIN: $accepted requests in the burst, $delivered delivered; $n system calls;" \
    "syscalls_per_delivered_event=$(awk -v i="$n" -v d="$delivered" 'BEGIN {printf "%.3f", i / d}')"
  exit 0
fi
callgrind_control -d "$SLUICE" >/dev/null 2>&1
sleep 1
# The dump after the zeroing: the newest file with a part number (`cg.PID.N`).
dump=$(ls -t "$WORK"/cg."$SLUICE".* 2>/dev/null | head -1)
ir=$(awk '/^summary:/ {print $2}' "$dump")
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$dump" "$OUT/delivered${BATCH_N:+-batch$BATCH_N}.callgrind"
echo "io=$IO bin=$BIN: $accepted requests in the burst, $delivered delivered; $ir instructions;" \
  "instructions_per_delivered_event=$(awk -v i="$ir" -v d="$delivered" 'BEGIN {printf "%.0f", i / d}')"
