#!/usr/bin/env bash
# Scenario "returns" (issue 16's acceptance run): 1 200 new events/s for 30 s against a downstream
# of 10 permits x 50 ms (200/s), backlog bound 2 000, clients honouring Retry-After (x [1, 1.5),
# loadgen's default re-send cap of 10). Reports requests sent / offered (target <= 1.5) and the
# events accepted during the run (target >= 7 000), plus the promised-returns gauges at second 15.
# Bounded: 30 s of load + loadgen's 6 s tail + ~3 s of start/stop.
#
# Usage: benches/scenarios/returns.sh [OUT_DIR]     (default docs/scenarios/returns/)
# SLUICE_BIN selects the binary (e.g. a build of main for the "before" row).
source "$(dirname "$0")/lib.sh"
OUT=${1:-$ROOT/docs/scenarios/returns}
mkdir -p "$OUT"
PERMITS=10

start_mock --service-time 50ms --max-concurrency "$PERMITS" --over-capacity 503 --duration 60s
manifest "$WORK/manifest.toml" "http://$MOCK_ADDR/hook" "$PERMITS" 2000
cp "$WORK/manifest.toml" "$OUT/manifest.toml"
start_sluice "$WORK/manifest.toml"
(
  sleep 15
  curl -s --max-time 2 "http://$SLUICE_ADDR/metrics" >"$OUT/metrics-15s.txt" || true
) &
PIDS+=("$!")
"$BIN" loadgen --url "http://$SLUICE_ADDR" --rate 1200 --duration 30s \
  --connections 256 --target /hooks/partner --body-size 1024 --on-refusal honor \
  --timeline-out "$OUT/loadgen.csv" >"$OUT/loadgen-summary.json"
curl -s "http://$SLUICE_ADDR/metrics" >"$OUT/metrics-final.txt"
curl -s "http://$MOCK_ADDR/stats" >"$OUT/mock-stats.json"
stop "$SLUICE_PID"; stop "$MOCK_PID"
check_permits_json "$OUT/mock-stats.json" "$PERMITS"
jq -r '.totals | "offered \(.offered) sent \(.sent) sent/offered \(.sent / .offered * 1000 | round / 1000) accepted(2xx) \(."2xx") refused(503) \(."503") retries \(.retries) timeouts \(.timeouts) errors \(.errors)"' \
  "$OUT/loadgen-summary.json" | tee "$OUT/result.txt"
grep -E '^sluice_ingest_(promised_returns|early_returns_total)' "$OUT/metrics-15s.txt" >>"$OUT/result.txt" || true
echo "returns: wrote $OUT"
