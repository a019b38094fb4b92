#!/usr/bin/env bash
# Scenario "burst": a partner's batch run arrives at 6x the downstream's budget for 30 s, then
# calms. Downstream: 50 ms per call, at most 10 in service (200 calls/s), 503 past that (so any
# 503 it sends means sluice exceeded its permits). sluice: 10 permits, backlog bound 2 000
# events. Load: 100/s for 10 s, 1 200/s for 30 s, 100/s for 30 s; clients honour Retry-After.
# Bounded: 70 s of load + at most 15 s of drain + ~3 s of start/stop.
#
# Usage: benches/scenarios/burst.sh        Output: docs/scenarios/burst/
source "$(dirname "$0")/lib.sh"
OUT=$ROOT/docs/scenarios/burst
mkdir -p "$OUT"
PERMITS=10

start_mock --service-time 50ms --max-concurrency "$PERMITS" --over-capacity 503 --duration 100s
manifest "$WORK/manifest.toml" "http://$MOCK_ADDR/hook" "$PERMITS" 2000
cp "$WORK/manifest.toml" "$OUT/manifest.toml"
start_sluice "$WORK/manifest.toml"
T0=$(now)
start_sampler "$T0" "$WORK/samples.csv" 90
"$BIN" loadgen --url "http://$SLUICE_ADDR" --schedule 0s:100,10s:1200,40s:100 --duration 70s \
  --connections 256 --target /hooks/partner --body-size 1024 --on-refusal honor \
  --timeline-out "$WORK/loadgen.csv" >"$OUT/loadgen-summary.json"
wait_drained 15 || echo "burst: backlog not drained 15 s after the load" >&2
sleep 1.5
curl -s "http://$MOCK_ADDR/stats" >"$OUT/mock-stats.json"
curl -s "http://$SLUICE_ADDR/metrics" >"$OUT/metrics-final.txt"
stop "$SAMPLER_PID"; stop "$SLUICE_PID"; stop "$MOCK_PID"
cp "$WORK/samples.csv" "$OUT/samples.csv"

OFFSET=$(awk -v a="$T0" -v b="$MOCK_T0" 'BEGIN { printf "%d", a - b }')
"$REPORT" merge --samples "$WORK/samples.csv" --loadgen "$WORK/loadgen.csv" \
  --mock "$OUT/mock-stats.json" --mock-offset "$OFFSET" --out "$OUT/timeline.csv"
"$REPORT" plot --in "$OUT/timeline.csv" --out "$OUT/burst.svg" --mark 10,40 \
  --title "burst: 6x the downstream's budget for 30 s (downstream 200/s, 10 permits, backlog bound 2000)" \
  --panel "Arrivals and answers per second|lg_offered:offered,lg_sent:sent incl. retries,lg_2xx:202,lg_503:503|requests/s" \
  --panel "Durable backlog (committed, not delivered)|pending_events:pending events,pump_outstanding:pump outstanding|events" \
  --panel "Delivered per second (200s at the downstream)|mock_200:delivered/s|events/s" \
  --panel "Calls in flight to the downstream (the three lines coincide at 10)|permits:permits,mock_max_concurrency:peak in service at downstream (per second),in_flight:sluice in flight (sampled)|calls" \
  --panel "Refusals per second by reason|refused_queue_full:queue_full,refused_ingest_saturated:ingest_saturated,refused_wal_busy:wal_busy,refused_other:other|refusals/s" \
  --panel "Latency seen by the sender|lg_accepted_p99_ms:202 p99,lg_refused_p99_ms:503 p99|ms" \
  --panel "sluice resident memory|rss_kib:VmRSS|KiB" \
  --panel "CPU (100 ticks/s = one core busy)|cpu_ticks:sluice,machine_busy_ticks:whole machine (2 cores; shared)|ticks/s"
check_permits_json "$OUT/mock-stats.json" "$PERMITS"
check_inflight "$OUT/timeline.csv"
echo "burst: wrote $OUT"
