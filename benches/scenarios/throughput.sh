#!/usr/bin/env bash
# Scenario "dispatch throughput" (issue 3): delivery to a fast local downstream, and the CPU one
# delivered event costs, against ingest alone at the same rates.
#
# Downstream: service time 0, no concurrency limit. sluice: 1 worker, pinned to CPU 1, durability
# fsync (202 after fdatasync), 64 permits, pump max_outstanding 64 (default), buckets raised, backlog
# bound 100 000 (default). Load generator (1 thread, 64 connections) and downstream pinned to CPU 0.
# For each rate, REPS times (default 2), the two modes back to back: 5 s of open-loop load with
# 1 KiB bodies, then at most 10 s for the backlog to drain.
# "dispatch" = the trigger has a handler; "ingest" = no handler (events are stored and marked done
# at once). CPU per event = sluice's utime+stime (all threads: worker, WAL writer, pump) from the
# load's start to the backlog's drain, divided by the events delivered (dispatch) or accepted
# (ingest); summary.csv has the mean over the repetitions and the difference (the dispatch
# overhead per event). The machine is shared: each row records the 1-minute load average.
# Bounded: 3 rates x 2 reps x 2 modes x (5 s + <= 10 s drain + ~1.5 s); typically ~85 s.
#
# Usage: [REPS=N] [OUT_DIR=DIR] benches/scenarios/throughput.sh [RATE...]   Output: docs/scenarios/throughput/
source "$(dirname "$0")/lib.sh"
OUT=${OUT_DIR:-$ROOT/docs/scenarios/throughput}
mkdir -p "$OUT"
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(5000 10000 20000)
REPS=${REPS:-2}
LOAD_S=5
WORKERS=1
MOCK_CPUS=0
echo "rep,load1,mode,rate,offered,accepted,refused,accepted_p50_ms,accepted_p99_ms,delivered,pending_at_load_end,drain_s,events_per_s,sluice_cpu_ms,cpu_us_per_event,downstream_peak_in_service,attempt_mean_ms" >"$OUT/table.csv"
for RATE in "${RATES[@]}"; do
 for REP in $(seq "$REPS"); do
  for MODE in dispatch ingest; do
    rm -rf "$WORK/data"
    start_mock --service-time 0ms --duration 40s
    if [ "$MODE" = dispatch ]; then
      manifest "$WORK/manifest.toml" "http://$MOCK_ADDR/hook" 64 100000
    else
      manifest "$WORK/manifest.toml" "" 64 100000
    fi
    start_sluice "$WORK/manifest.toml" 1
    sleep 0.3
    LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    C0=$(cpu_ticks "$SLUICE_PID"); T0=$(now)
    taskset -c 0 "$BIN" loadgen --url "http://$SLUICE_ADDR" --rate "$RATE" --duration "${LOAD_S}s" \
      --connections 64 --threads 1 --target /hooks/partner --body-size 1024 --on-refusal drop \
      >"$WORK/lg.json"
    PEND=$(curl -s "http://$SLUICE_ADDR/metrics" | awk '/^sluice_wal_pending_events / {print $2}')
    wait_drained 10 || echo "throughput: $MODE $RATE/s not drained 10 s after the load" >&2
    T1=$(now); C1=$(cpu_ticks "$SLUICE_PID")
    curl -s "http://$SLUICE_ADDR/metrics" >"$WORK/metrics.txt"
    curl -s "http://$MOCK_ADDR/stats" >"$WORK/mock.json"
    stop "$SLUICE_PID"; stop "$MOCK_PID"
    cp "$WORK/lg.json" "$OUT/loadgen-$MODE-$RATE.json"
    delivered=$(awk '/^sluice_dispatch_attempts_total\{.*outcome="delivered"/ {s += $NF} END {print s + 0}' "$WORK/metrics.txt")
    dur=$(awk '/^sluice_dispatch_duration_seconds_(sum|count) / {v[$1] = $2} END { n = v["sluice_dispatch_duration_seconds_count"]; printf "%.3f", n ? v["sluice_dispatch_duration_seconds_sum"] / n * 1000 : 0 }' "$WORK/metrics.txt")
    peak=$(jq '.max_concurrency_seen' "$WORK/mock.json")
    mock200=$(jq '.per_status["200"] // 0' "$WORK/mock.json")
    [ "$MODE" = ingest ] || [ "$mock200" = "$delivered" ] ||
      echo "throughput: sluice counted $delivered delivered, the downstream answered $mock200 x 200" >&2
    jq -r --arg rep "$REP" --arg load1 "$LOAD1" --arg L "$LOAD_S" --arg mode "$MODE" --arg rate "$RATE" --arg del "$delivered" --arg pend "${PEND:-}" \
      --arg t0 "$T0" --arg t1 "$T1" --arg c "$((C1 - C0))" --arg hz "$HZ" --arg peak "$peak" --arg dur "$dur" '
      (if $mode == "dispatch" then ($del | tonumber) else .totals["2xx"] end) as $events
      | (($t1 | tonumber) - ($t0 | tonumber) - 0.1) as $span
      | [$rep, $load1, $mode, $rate, .totals.offered, .totals["2xx"], (.totals["503"] + .totals["429"]),
         .accepted.p50_ms, .accepted.p99_ms, $del, $pend, (($span - ($L | tonumber)) * 100 | round / 100),
         ($events / $span | round), (($c | tonumber) * 1000 / ($hz | tonumber)),
         ((($c | tonumber) * 1e6 / ($hz | tonumber) / $events) * 100 | round / 100), $peak, $dur] | @csv' \
      "$WORK/lg.json" | tr -d '"' >>"$OUT/table.csv"
    tail -1 "$OUT/table.csv"
  done
 done
done
column -s, -t "$OUT/table.csv"
# Mean per (mode, rate); overhead = dispatch - ingest CPU per event at the same rate.
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  { k = $c["rate"]; n[$c["mode"], k]++; eps[$c["mode"], k] += $c["events_per_s"]
    cpu[$c["mode"], k] += $c["cpu_us_per_event"]; p99[$c["mode"], k] += $c["accepted_p99_ms"]
    if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END {
    print "rate,dispatch_delivered_per_s,ingest_accepted_per_s,dispatch_cpu_us_per_event,ingest_cpu_us_per_event,dispatch_overhead_us_per_event,dispatch_202_p99_ms,ingest_202_p99_ms"
    for (j = 1; j <= m; j++) { k = order[j]; nd = n["dispatch", k]; ni = n["ingest", k]
      printf "%s,%.0f,%.0f,%.1f,%.1f,%.1f,%.2f,%.2f\n", k, eps["dispatch", k] / nd, eps["ingest", k] / ni,
        cpu["dispatch", k] / nd, cpu["ingest", k] / ni, cpu["dispatch", k] / nd - cpu["ingest", k] / ni,
        p99["dispatch", k] / nd, p99["ingest", k] / ni } }' "$OUT/table.csv" >"$OUT/summary.csv"
column -s, -t "$OUT/summary.csv"
echo "throughput: wrote $OUT"
