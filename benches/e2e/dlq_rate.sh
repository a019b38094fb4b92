#!/usr/bin/env bash
# Dead-lettering rate with an open circuit in `dlq` mode (issue 12 item 3): one sluice worker
# pinned to one core, a trigger whose handler refuses connections (port 1) with
# `circuit = { failures = 1, open_for = "1h", on_open = "dlq" }`; one event opens the circuit,
# then a wrk burst of DURATION seconds (1 KiB POSTs, 64 keep-alive connections) into the trigger,
# and the drain until every accepted event has its outcome. Every event after the first is
# dead-lettered (`circuit_open`) by the core's commit helper, one DLQ batch file per commit.
#
# Reports: events accepted, entries dead-lettered during the burst and in all, the rate over the
# burst and over burst + drain (the number issue 12 asks to be >= 20,000/s on one core), how long
# the backlog took to empty after the burst (0 when the DLQ keeps up with ingest), and the mean
# entries per batch file (the group commit's size).
#
# Usage: benches/e2e/dlq_rate.sh [DURATION_SECONDS]
# Needs: wrk (Debian: apt-get install wrk), curl, a release build (built here).
set -euo pipefail
DUR=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/sluice-dlq.XXXXXX)
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
PORT=${PORT:-18190}
HZ=$(getconf CLK_TCK)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
source "$ROOT/benches/e2e/lib.sh"
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m {print $2; f=1} END {if (!f) print 0}'; }
now() { date +%s.%N; }

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"

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
circuit = { failures = 1, open_for = "1h", on_open = "dlq" }
retry = { max_attempts = 1, base = "1s", cap = "1s" }

[dispatch]
max_pending_events = 10000000
max_pending_bytes = 68719476736
max_dlq_entries = 10000000
TOML
env HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000 \
  HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000 \
  taskset -c "$SERVER_CPU" "$ROOT/target/release/sluice" serve --config "$WORK/sluice.toml" \
  --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --workers 1 >"$WORK/sluice.out" 2>"$WORK/sluice.err" &
pids+=($!)
SLUICE=$!
for _ in $(seq 100); do
  grep -q listening "$WORK/sluice.out" 2>/dev/null && break
  sleep 0.1
done
echo "machine: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg); sluice pinned to CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU; data dir on $(df -T "$WORK" | awk 'NR==2 {print $2}'); burst ${DUR}s"

# One event opens the circuit (its connect is refused; max_attempts = 1 dead-letters it).
curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"open":1}' "http://127.0.0.1:$PORT/webhooks/bench"
for _ in $(seq 100); do
  [ "$(metric sluice_dlq_entries_written_total)" = 1 ] && break
  sleep 0.1
done

w0=$(metric sluice_dlq_entries_written_total)
f0=$(metric sluice_dlq_batch_files_written_total)
cpu0=$(cpu_ticks "$SLUICE")
t0=$(now)
out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$PORT")
t1=$(now)
w1=$(metric sluice_dlq_entries_written_total)
requests=$(echo "$out" | awk '/requests in/ {print $1}')
non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
accepted=$((requests - ${non2xx:-0}))
for _ in $(seq 1200); do
  pending=$(metric sluice_wal_pending_events)
  [ "${pending%.*}" = 0 ] && break
  sleep 0.05
done
t2=$(now)
cpu1=$(cpu_ticks "$SLUICE")
w2=$(metric sluice_dlq_entries_written_total)
f2=$(metric sluice_dlq_batch_files_written_total)
bytes=$(metric sluice_dlq_bytes)
awk -v acc="$accepted" -v req="$requests" -v w0="$w0" -v w1="$w1" -v w2="$w2" -v f0="$f0" -v f2="$f2" \
  -v t0="$t0" -v t1="$t1" -v t2="$t2" -v cpu=$(( (cpu1 - cpu0) * 1000 / HZ )) -v bytes="$bytes" 'BEGIN {
  burst = t1 - t0; all = t2 - t0
  printf "accepted %d of %d requests in %.2fs (%.0f/s)\n", acc, req, burst, acc / burst
  printf "dead-lettered during the burst: %d (%.0f/s)\n", w1 - w0, (w1 - w0) / burst
  printf "dead-lettered in all: %d in %.2fs (%.0f/s); backlog empty %.2fs after the burst\n", w2 - w0, all, (w2 - w0) / all, t2 - t1
  printf "batch files: %d, mean %.1f entries per file; sluice CPU %d ms; DLQ bytes %d\n", f2 - f0, (w2 - w0) / (f2 - f0 > 0 ? f2 - f0 : 1), cpu, bytes
}'
