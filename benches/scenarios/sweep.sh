#!/usr/bin/env bash
# Scenario "permits sweep": a downstream with a fixed service time (20 ms) and capacity (16 in
# service, i.e. 800 calls/s; 503 + Retry-After: 1 past it), sluice's permits (`max_in_flight`)
# from 1 to twice the capacity, a fixed open-loop load of 600 events/s (75% of the downstream's
# capacity) for 8 s per permit count; clients drop refusals, so the offered load stays fixed.
# Backlog bound 2 000 events. A fresh downstream, sluice and data dir per permit count.
# Bounded: 7 runs x (8 s load + 1.5 s settle + ~1 s start/stop) ~ 75 s.
#
# Usage: benches/scenarios/sweep.sh [PERMITS...]     Output: docs/scenarios/sweep/
source "$(dirname "$0")/lib.sh"
OUT=$ROOT/docs/scenarios/sweep
mkdir -p "$OUT"
RATE=600
LOAD_S=8
LIST=("$@")
[ ${#LIST[@]} -gt 0 ] || LIST=(1 2 4 8 16 24 32)

TABLE=$OUT/table.csv
echo "permits,offered_per_s,accepted_per_s,refused_503,delivered_per_s,downstream_503,timeouts,retryable_attempts,paused,downstream_peak_in_service,max_in_flight_sampled,ingest_mean_ms,ingest_p99_ms,attempt_mean_ms,e2e_age_mean_s,e2e_age_end_s,pending_end,dead_lettered,circuit_opened,rss_max_kib" >"$TABLE"
for P in "${LIST[@]}"; do
  rm -rf "$WORK/data"
  start_mock --service-time 20ms --max-concurrency 16 --over-capacity 503 --retry-after-secs 1 --duration 30s
  manifest "$WORK/manifest.toml" "http://$MOCK_ADDR/hook" "$P" 2000
  start_sluice "$WORK/manifest.toml"
  T0=$(now)
  start_sampler "$T0" "$WORK/samples.csv" $((LOAD_S + 3))
  "$BIN" loadgen --url "http://$SLUICE_ADDR" --rate "$RATE" --duration "${LOAD_S}s" --connections 64 \
    --target /hooks/partner --body-size 1024 --on-refusal drop --timeline-out "$WORK/loadgen.csv" \
    >"$WORK/loadgen-summary.json"
  sleep 1.5
  curl -s "http://$MOCK_ADDR/stats" >"$WORK/mock-stats.json"
  curl -s "http://$SLUICE_ADDR/metrics" >"$WORK/metrics-final.txt"
  stop "$SAMPLER_PID"; stop "$SLUICE_PID"; stop "$MOCK_PID"
  OFFSET=$(awk -v a="$T0" -v b="$MOCK_T0" 'BEGIN { printf "%d", a - b }')
  "$REPORT" merge --samples "$WORK/samples.csv" --loadgen "$WORK/loadgen.csv" \
    --mock "$WORK/mock-stats.json" --mock-offset "$OFFSET" --out "$OUT/timeline-p$P.csv"
  cp "$WORK/loadgen-summary.json" "$OUT/loadgen-p$P.json"
  cp "$WORK/mock-stats.json" "$OUT/mock-p$P.json"

  # Steady state: seconds 2..LOAD_S-1 of the load (skips the first two seconds of warm-up).
  row=$(awk -F, -v lo=2 -v hi=$((LOAD_S - 1)) '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $1 >= lo && $1 <= hi {
      n++; del += $c["delivered"]; m503 += $c["mock_503"]; age += $c["oldest_pending_age_s"]
      if ($c["in_flight"] > inf) inf = $c["in_flight"]
    }
    $1 == hi { ageend = $c["oldest_pending_age_s"]; pend = $c["pending_events"] }
    $c["rss_kib"] > rss { rss = $c["rss_kib"] }
    END { printf "%.0f,%d,%.2f,%.2f,%d,%d", del / n, inf, age / n, ageend, pend, rss }' "$OUT/timeline-p$P.csv")
  IFS=, read -r delivered inf age_mean age_end pend rss <<<"$row"
  dur_sum=$(awk '/^sluice_dispatch_duration_seconds_sum / {print $2}' "$WORK/metrics-final.txt")
  dur_n=$(awk '/^sluice_dispatch_duration_seconds_count / {print $2}' "$WORK/metrics-final.txt")
  retryable=$(awk '/^sluice_dispatch_attempts_total\{.*outcome="retryable"/ {s += $NF} END {print s + 0}' "$WORK/metrics-final.txt")
  paused=$(awk '/^harn_backpressure_events_total\{action="paused"/ {s += $NF} END {print s + 0}' "$WORK/metrics-final.txt")
  m503=$(jq '.per_status["503"] // 0' "$WORK/mock-stats.json")
  mnon2xx=$(jq '[.per_status | to_entries[] | select(.key != "200") | .value] | add // 0' "$WORK/mock-stats.json")
  peak=$(jq '.max_concurrency_seen' "$WORK/mock-stats.json")
  dlq=$(awk '/^harn_trigger_accepted_to_dlq_seconds_count/ {s += $NF} END {print s + 0}' "$WORK/metrics-final.txt")
  opened=$(awk '/^harn_backpressure_events_total\{action="opened"/ {s += $NF} END {print s + 0}' "$WORK/metrics-final.txt")
  # A retryable attempt the downstream did not answer with an error was a timeout or I/O error.
  timeouts=$((retryable > mnon2xx ? retryable - mnon2xx : 0))
  jq -r --arg p "$P" --arg d "$delivered" --arg m503 "$m503" --arg to "$timeouts" --arg r "$retryable" \
     --arg pa "$paused" --arg peak "$peak" --arg inf "$inf" --arg am "$age_mean" --arg ae "$age_end" \
     --arg pend "$pend" --arg dlq "$dlq" --arg op "$opened" --arg rss "$rss" --arg dm "$(awk -v s="$dur_sum" -v n="$dur_n" 'BEGIN { printf "%.1f", n ? s / n * 1000 : 0 }')" \
     --arg L "$LOAD_S" '
     [$p, (.totals.offered / ($L | tonumber) | floor), (.totals["2xx"] / ($L | tonumber) | floor),
      .totals["503"], $d, $m503, $to, $r, $pa, $peak, $inf, .accepted.mean_ms, .accepted.p99_ms, $dm, $am, $ae,
      $pend, $dlq, $op, $rss] | @csv' "$WORK/loadgen-summary.json" | tr -d '"' >>"$TABLE"
  check_inflight "$OUT/timeline-p$P.csv"
  tail -1 "$TABLE"
done
column -s, -t "$TABLE"
"$REPORT" plot --in "$TABLE" --out "$OUT/sweep.svg" --xlabel "permits (max_in_flight); downstream capacity = 16 in service" \
  --title "permits sweep: downstream 20 ms x 16 (800/s, 503 past capacity), offered 600 events/s" \
  --panel "Throughput (steady state, seconds 2-7)|offered_per_s:offered,accepted_per_s:202/s,delivered_per_s:delivered/s|events/s" \
  --panel "Downstream errors and pauses (whole run)|downstream_503:503 from downstream,paused:destination paused,circuit_opened:circuit opened|count" \
  --panel "Dead-lettered events (whole run; circuit open = fail fast)|dead_lettered:DLQ|events" \
  --panel "End-to-end: age of the oldest undelivered event (mean over seconds 2-7)|e2e_age_mean_s:mean age|s" \
  --panel "Ingest latency (202)|ingest_mean_ms:mean,ingest_p99_ms:p99|ms"
echo "sweep: wrote $OUT"
