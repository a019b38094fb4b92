#!/usr/bin/env bash
# Dead-lettering rate with an open circuit in `dlq` mode (issue 12 item 3): one sluice worker
# pinned to one core, a trigger whose handler refuses connections (port 1) with
# `circuit = { failures = 1, open_for = "1h", on_open = "dlq" }`; one event opens the circuit,
# then a wrk burst of DURATION seconds (1 KiB POSTs, 64 keep-alive connections) into the trigger,
# and the drain until every accepted event has its outcome. Every event after the first is
# dead-lettered (`circuit_open`) by the core's commit helper, one DLQ batch file per commit.
#
# Part 1 ("live"): dead-lettering while ingesting. Reports events accepted, entries dead-lettered
# during the burst and in all, the rates, how long the backlog took to empty after the burst (~0
# when the DLQ keeps up with ingest) and the mean entries per batch file (the commit's size).
#
# Part 2 ("backlog", the rate alone): the same burst into a server whose circuit *holds*
# (`on_open = "hold"`: the events stay pending), then a restart with `on_open = "dlq"`: the
# pump reads the backlog back and every event is dead-lettered with no ingest competing. Reports
# entries / seconds from "listening" until the backlog is empty (the number issue 12 asks to be
# >= 20,000/s on one core), once with the default `pumps.max_outstanding` (64: dead letters hold
# a slot until durable, so a commit holds at most 64) and once with PUMP_MAX (default 1024).
#
# Usage: [WORK_BASE=DIR] [PUMP_MAX=N] benches/e2e/dlq_rate.sh [DURATION_SECONDS]
# Needs: wrk (Debian: apt-get install wrk), curl, a release build (built here).
set -euo pipefail
DUR=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# WORK_BASE=/dev/shm puts the data dir on tmpfs (syncs cost ~nothing): the software's rate.
PORT=${PORT:-18190}
PUMP_MAX=${PUMP_MAX:-1024}
source "$ROOT/benches/e2e/lib.sh"
e2e_init dlq "${WORK_BASE:-/tmp}"
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m {print $2; f=1} END {if (!f) print 0}'; }
now() { date +%s.%N; }

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"

config() { # on_open
  cat >"$WORK/sluice.toml" <<TOML
[[triggers]]
id = "bench"
provider = "bench"
path = "/webhooks/bench"
handler = "http://127.0.0.1:1/refused"

[[destinations]]
uri = "http://127.0.0.1:1/refused"
max_in_flight = 64
timeout = "1s"
circuit = { failures = 1, open_for = "1h", on_open = "$1" }
retry = { max_attempts = 1, base = "1s", cap = "1s" }

[dispatch]
max_pending_events = 10000000
max_pending_bytes = 68719476736
max_dlq_entries = 10000000
TOML
}
start() { # extra serve args...
  env HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000 \
    HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000 \
    taskset -c "$SERVER_CPU" "$ROOT/target/release/sluice" serve --config "$WORK/sluice.toml" \
    --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --workers 1 "$@" >"$WORK/sluice.out" 2>>"$WORK/sluice.err" &
  pids+=($!)
  SLUICE=$!
  for _ in $(seq 300); do
    grep -q listening "$WORK/sluice.out" 2>/dev/null && break
    sleep 0.02
  done
}
stop() {
  kill -TERM "$SLUICE"
  wait "$SLUICE" 2>/dev/null || true
}
open_circuit() { # one event opens the circuit (connect refused; max_attempts = 1)
  curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"open":1}' "http://127.0.0.1:$PORT/webhooks/bench"
  for _ in $(seq 100); do
    curl -s "http://127.0.0.1:$PORT/metrics" | grep -q '^harn_backpressure_events_total{.*opened' && break
    sleep 0.05
  done
}
burst() {
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$PORT")
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
  accepted=$((requests - ${non2xx:-0}))
}
wait_empty() {
  for _ in $(seq 2400); do
    pending=$(metric sluice_wal_pending_events)
    [ "${pending%.*}" = 0 ] && break
    sleep 0.025
  done
}
echo "machine: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg); sluice pinned to CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU; data dir on $(df -T "$WORK" | awk 'NR==2 {print $2}'); burst ${DUR}s"

# Part 1: live.
config dlq
start
open_circuit
w0=$(metric sluice_dlq_entries_written_total)
f0=$(metric sluice_dlq_batch_files_written_total)
cpu0=$(cpu_ticks "$SLUICE")
t0=$(now)
burst
t1=$(now)
w1=$(metric sluice_dlq_entries_written_total)
wait_empty
t2=$(now)
cpu1=$(cpu_ticks "$SLUICE")
w2=$(metric sluice_dlq_entries_written_total)
f2=$(metric sluice_dlq_batch_files_written_total)
awk -v acc="$accepted" -v req="$requests" -v w0="$w0" -v w1="$w1" -v w2="$w2" -v f0="$f0" -v f2="$f2" \
  -v t0="$t0" -v t1="$t1" -v t2="$t2" -v cpu=$(( (cpu1 - cpu0) * 1000 / HZ )) 'BEGIN {
  burst = t1 - t0; all = t2 - t0
  printf "live: accepted %d of %d requests in %.2fs (%.0f/s)\n", acc, req, burst, acc / burst
  printf "live: dead-lettered during the burst %d (%.0f/s); in all %d in %.2fs (%.0f/s); backlog empty %.2fs after the burst\n", w1 - w0, (w1 - w0) / burst, w2 - w0, all, (w2 - w0) / all, t2 - t1
  printf "live: %d batch files, mean %.1f entries per file; sluice CPU %d ms\n", f2 - f0, (w2 - w0) / (f2 - f0 > 0 ? f2 - f0 : 1), cpu
}'
stop

# Part 2: a held backlog, then dead-lettered alone after a restart in dlq mode.
for pump in 64 "$PUMP_MAX"; do
  rm -rf "$WORK/data"
  config hold
  start --pump-max-outstanding "$pump"
  open_circuit
  burst
  held=$(metric sluice_wal_pending_events)
  stop
  config dlq
  t0=$(now)
  start --pump-max-outstanding "$pump"
  t1=$(now)
  cpu0=$(cpu_ticks "$SLUICE")
  wait_empty
  t2=$(now)
  cpu1=$(cpu_ticks "$SLUICE")
  w=$(metric sluice_dlq_entries_written_total)
  f=$(metric sluice_dlq_batch_files_written_total)
  awk -v held="$held" -v w="$w" -v f="$f" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v pump="$pump" \
    -v cpu=$(( (cpu1 - cpu0) * 1000 / HZ )) 'BEGIN {
    printf "backlog (max_outstanding %d): %d events held; start took %.2fs; %d dead-lettered in %.2fs = %.0f/s; %d batch files (mean %.1f entries); sluice CPU %d ms (%.1f us/entry)\n", pump, held, t1 - t0, w, t2 - t1, w / (t2 - t1), f, w / (f > 0 ? f : 1), cpu, cpu * 1000 / (w > 0 ? w : 1)
  }'
  stop
done
