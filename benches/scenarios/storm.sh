#!/usr/bin/env bash
# Scenario "retry storm": 10x overload, clients that honour Retry-After vs clients that retry at
# once. Downstream: 50 ms per call, at most 10 in service (200 calls/s), 503 past that. sluice:
# 10 permits, backlog bound 2 000. Load: 2 000 new events/s (10x) for 20 s, each refused request
# re-sent at most 10 times, either after Retry-After x [1, 1.5) (honor) or at once (immediate).
# Shows arrival amplification (sent incl. retries vs offered) and that sluice's RSS and refusal
# latency stay bounded either way. Bounded: 2 runs x (20 s load + <= 6 s tail + 1.5 s) ~ 60 s.
#
# Usage: benches/scenarios/storm.sh        Output: docs/scenarios/storm/
source "$(dirname "$0")/lib.sh"
OUT=$ROOT/docs/scenarios/storm
mkdir -p "$OUT"
PERMITS=10
echo "mode,offered,sent,amplification,accepted,refused_503,timeouts,errors,dropped_client,refused_p50_ms,refused_p99_ms,refused_max_ms,accepted_p99_ms,delivered,downstream_peak_in_service,downstream_503,rss_start_kib,rss_max_kib,sluice_cpu_s" >"$OUT/table.csv"
for MODE in honor immediate; do
  rm -rf "$WORK/data"
  start_mock --service-time 50ms --max-concurrency "$PERMITS" --over-capacity 503 --duration 60s
  manifest "$WORK/manifest.toml" "http://$MOCK_ADDR/hook" "$PERMITS" 2000
  start_sluice "$WORK/manifest.toml"
  T0=$(now)
  start_sampler "$T0" "$WORK/samples.csv" 30
  "$BIN" loadgen --url "http://$SLUICE_ADDR" --rate 2000 --duration 20s --connections 256 \
    --target /hooks/partner --body-size 1024 --on-refusal "$MODE" --max-retries 10 --timeout 5s \
    --timeline-out "$WORK/loadgen.csv" >"$OUT/loadgen-$MODE.json"
  sleep 1.5
  curl -s "http://$MOCK_ADDR/stats" >"$OUT/mock-$MODE.json"
  stop "$SAMPLER_PID"; stop "$SLUICE_PID"; stop "$MOCK_PID"
  OFFSET=$(awk -v a="$T0" -v b="$MOCK_T0" 'BEGIN { printf "%d", a - b }')
  "$REPORT" merge --samples "$WORK/samples.csv" --loadgen "$WORK/loadgen.csv" \
    --mock "$OUT/mock-$MODE.json" --mock-offset "$OFFSET" --out "$OUT/timeline-$MODE.csv"
  read -r rss0 rssmax cpu < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["rss_kib"] != "" { if (!r0) r0 = $c["rss_kib"]; if ($c["rss_kib"] > m) m = $c["rss_kib"]; cpu += $c["cpu_ticks"] }
    END { print r0, m, cpu }' "$OUT/timeline-$MODE.csv")
  jq -r --arg m "$MODE" --arg r0 "$rss0" --arg rm "$rssmax" --arg cpu "$(awk -v c="$cpu" -v hz="$HZ" 'BEGIN { printf "%.2f", c / hz }')" \
    --slurpfile mock "$OUT/mock-$MODE.json" '
    [$m, .totals.offered, .totals.sent, ((.totals.sent / .totals.offered * 100 | round) / 100),
     .totals["2xx"], .totals["503"], .totals.timeouts, .totals.errors, .totals.dropped_client,
     .refused.p50_ms, .refused.p99_ms, .refused.max_ms, .accepted.p99_ms,
     $mock[0].per_status["200"], $mock[0].max_concurrency_seen, ($mock[0].per_status["503"] // 0),
     $r0, $rm, $cpu] | @csv' "$OUT/loadgen-$MODE.json" | tr -d '"' >>"$OUT/table.csv"
  check_permits_json "$OUT/mock-$MODE.json" "$PERMITS"
  check_inflight "$OUT/timeline-$MODE.csv"
done
column -s, -t "$OUT/table.csv"
"$REPORT" join --in "honor=$OUT/timeline-honor.csv" --in "immediate=$OUT/timeline-immediate.csv" --out "$WORK/joined.csv"
"$REPORT" plot --in "$WORK/joined.csv" --out "$OUT/storm.svg" \
  --title "retry storm: 2000 new events/s (10x a 200/s downstream) for 20 s; honor vs immediate retries" \
  --panel "Requests sent per second, retries included (offered = 2000/s)|honor_lg_sent:honor,immediate_lg_sent:immediate,honor_lg_offered:offered|requests/s" \
  --panel "Accepted (202) per second|honor_lg_2xx:honor,immediate_lg_2xx:immediate|events/s" \
  --panel "Refusal latency p99 (as the sender sees it)|honor_lg_refused_p99_ms:honor,immediate_lg_refused_p99_ms:immediate|ms" \
  --panel "Durable backlog|honor_pending_events:honor,immediate_pending_events:immediate|events" \
  --panel "sluice resident memory|honor_rss_kib:honor,immediate_rss_kib:immediate|KiB" \
  --panel "sluice CPU (100 = one core)|honor_cpu_ticks:honor,immediate_cpu_ticks:immediate,immediate_machine_busy_ticks:machine (immediate run)|ticks/s"
echo "storm: wrote $OUT"
