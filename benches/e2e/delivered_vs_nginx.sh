#!/usr/bin/env bash
# CPU per *delivered* event (issue 10): one sluice worker pinned to one core, a trigger whose
# handler is nginx `return 200`; a wrk burst of DURATION seconds (1 KiB POSTs, 64 keep-alive
# connections) into the trigger, then the drain until every accepted event is delivered. All of
# sluice's CPU (every thread, ingest + WAL + dispatch) from the start of the burst until the
# backlog is empty, divided by the events delivered; beside it, nginx's CPU per `return 202`
# request under the same wrk load, measured in the same run.
#
# BATCH=N (issue 28): the destination takes batched calls, `batch = { max_events = N,
# linger = "5ms" }`, with `orchestrator.pumps.max_outstanding` = 16 × N so that batches can
# fill while earlier ones are in flight (the unbatched run keeps the default 64). Delivered events
# are then counted as the accepted ones (`sluice_ingest_accepted_total`) minus the dead letters
# once nothing is pending, since `sluice_dispatch_attempts_total` counts calls; the calls and
# their mean size come from `sluice_dispatch_batch_events`.
#
# Usage: [BIN=path/to/sluice] [BATCH=N] benches/e2e/delivered_vs_nginx.sh [DURATION_SECONDS]
# Needs: wrk and nginx (Debian: apt-get install wrk nginx-light), a release build.
set -euo pipefail
DUR=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/benches/e2e/lib.sh"
e2e_init deliver
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2; f=1} END {if (!f) print 0}'; }

# BIN=path runs that binary (an A/B of two builds); otherwise the tree's release build.
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
  BIN="$ROOT/target/release/sluice"
fi

# nginx: the downstream (200) on 18181 and the reference (202) on 18182, on the client's core.
nginx_conf '18181 200 ok' '18182 202 {"status":"accepted"}'
taskset -c "$CLIENT_CPU" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
pids+=($!)
NGINX_MASTER=$!
deliver_toml "$([ -n "${BATCH:-}" ] && echo "batch = { max_events = $BATCH, linger = \"5ms\" }")" \
  "$([ -n "${BATCH:-}" ] && printf '[orchestrator]\npumps = { max_outstanding = %d }\n' $((16 * BATCH)))"
env HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000 \
  HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000 \
  taskset -c "$SERVER_CPU" "$BIN" serve --config "$WORK/sluice.toml" \
  --listen 127.0.0.1:18180 --data-dir "$WORK/data" --workers 1 >"$WORK/sluice.out" 2>"$WORK/sluice.err" &
pids+=($!)
SLUICE=$!
for _ in $(seq 100); do
  grep -q listening "$WORK/sluice.out" 2>/dev/null && curl -s -o /dev/null http://127.0.0.1:18182/ && break
  sleep 0.1
done
if ! grep -q listening "$WORK/sluice.out" 2>/dev/null; then
  # e.g. the port still held by the previous run's server, draining: say so instead of a wrk error.
  echo "sluice did not start: $(cat "$WORK/sluice.err")" >&2
  exit 1
fi
NGINX_PIDS=$(pgrep -P "$NGINX_MASTER" | tr '\n' ' ')
echo "machine: $(nproc) cores, $(uname -r); sluice pinned to CPU $SERVER_CPU; wrk and nginx on CPU $CLIENT_CPU; burst ${DUR}s"

# The reference: nginx's CPU per `return 202` request (nginx alone on the client core with wrk;
# its CPU is read from its own process).
before=$(cpu_ticks_split "$NGINX_MASTER" $NGINX_PIDS)
out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" http://127.0.0.1:18182)
after=$(cpu_ticks_split "$NGINX_MASTER" $NGINX_PIDS)
nreq=$(echo "$out" | awk '/requests in/ {print $1}')
nginx_us=$(per_unit_total "$before" "$after" "$nreq")
echo "nginx return 202: $nreq requests, cpu_us_per_request=$nginx_us ($(per_unit_split "$before" "$after" "$nreq"))"

# The burst into sluice, then the drain.
start=$(date +%s.%N)
before=$(cpu_ticks_split "$SLUICE")
out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" http://127.0.0.1:18180)
accepted=$(echo "$out" | awk '/requests in/ {print $1}')
for _ in $(seq 600); do
  pending=$(metric 18180 sluice_wal_pending_events)
  [ "${pending%.*}" = 0 ] && break
  sleep 0.1
done
after=$(cpu_ticks_split "$SLUICE")
if [ -n "${BATCH:-}" ]; then
  delivered=$(curl -s http://127.0.0.1:18180/metrics | awk '/^sluice_ingest_accepted_total/ {a += $2} /^sluice_dlq_entries / {d += $2} END {print a - d}')
  calls=$(metric 18180 sluice_dispatch_batch_events_count)
  echo "batched: max_events=$BATCH, $calls calls, $(awk -v e="$delivered" -v c="$calls" 'BEGIN {printf "%.1f", (c > 0 ? e / c : 0)}') events per call"
else
  delivered=$(curl -s http://127.0.0.1:18180/metrics | awk '/^sluice_dispatch_attempts_total/ && /outcome="delivered"/ {s += $2} END {print s + 0}')
fi
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
sluice_us=$(per_unit_total "$before" "$after" "$delivered")
echo "sluice: $accepted requests in the burst, $delivered delivered, pending $(metric 18180 sluice_wal_pending_events) after ${elapsed}s; cpu_us_per_delivered_event=$sluice_us ($(per_unit_split "$before" "$after" "$delivered"))"
awk -v s="$sluice_us" -v n="$nginx_us" 'BEGIN {printf "ratio (sluice per delivered event / nginx per return 202) = %.2f\n", s / n}'
