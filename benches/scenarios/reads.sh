#!/usr/bin/env bash
# Scenario "operator reads beside ingest" (issue 39, items 1 and 2): a log of EVENTS events, an
# open-loop ingest of RATE/s, and in a second phase a closed loop of event lists
# (`?trigger=t&limit=5`, what the dashboard asks per trigger) and lookups of ids spread over the
# log. Reports the ingest's 202 latency (p50, p99, max) in both phases, `/healthz` probed every
# 10 ms on 4 connections, and the reads' latencies; checks the issue's bounds: ingest p99 with
# reads ≤ 2× without, `/healthz` max < 50 ms, lookup p99 ≤ 5 ms.
#
# The log is written first by examples/event_lookup (EVENTS 1 KiB events of trigger "t" in
# core-0, each delivered 1,000 events later); sluice (2 workers, durability fsync, trigger "t"
# without a handler) recovers it, outcome index included, and serves.
# Bounded: the log write (~20 s per 3M events), 2 × REPS × LOAD_S of load, ~10 s of set-up.
#
# The phases alternate REPS times (ingest alone, then with reads), so each pair is side by side;
# every row is reported (nothing pooled). DASH=1 adds a third phase to each rep: the real
# dashboard (`/ui`) open in headless Chromium for the phase, polling as an operator's browser
# does, and `/healthz` probed (no other reads); its row also gives the reads the readers served.
#
# The dashboard phase opens Chromium DASH_SETTLE s (default 10) before the load starts: the
# phase measures the page open and polling, not the browser's start-up (a few seconds of both
# cores here); the browser's CPU over the phase is in cpu.txt.
#
# CONTROL=1 adds a control phase to each rep: no reads, but a process that has nothing to do
# with sluice burning BURN_PCT % (default 80: the reads phase's reader + python, measured) of
# one core at normal priority, in 10 ms periods. It tells the reads' own cost to sluice apart
# from what any neighbour of that size costs ingest on this machine.
#
# Usage: [EVENTS=300000] [RATE=5000] [LOAD_S=20] [REPS=2] [DASH=0|1] [CONTROL=0|1] [OUT_DIR=DIR]
#        benches/scenarios/reads.sh
# Needs: cargo build --release --examples; python3; with DASH=1 chromium (Debian `chromium`).
# Output: OUT_DIR (default docs/scenarios/reads/)
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-300000}
RATE=${RATE:-5000}
LOAD_S=${LOAD_S:-20}
OUT=${OUT_DIR:-$ROOT/docs/scenarios/reads}
mkdir -p "$OUT"
: >"$OUT/cpu.txt"
LOOKUP=$ROOT/target/release/examples/event_lookup
[ -x "$LOOKUP" ] || { echo "no $LOOKUP: run cargo build --release --examples" >&2; exit 2; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 2; }
PROBE=$(dirname "$0")/reads_probe.py
DASH=${DASH:-0}
if [ "$DASH" = 1 ]; then
  command -v chromium >/dev/null || { echo "DASH=1 needs chromium (apt-get install chromium)" >&2; exit 2; }
fi

"$LOOKUP" "$WORK/data" "$EVENTS" 1024 1 >"$WORK/lookup.out" 2>&1
# The log's dirty pages written back now, not under the measured commits' fdatasyncs.
sync
# The example's events: received at 1_800_000_000_000 + i/10 ms.
FIRST_MS=1800000000000
LAST_MS=$((FIRST_MS + EVENTS / 10))
cat >"$WORK/sluice.toml" <<TOML
[server]
data_dir = "$WORK/data"
workers = 2
[ingest]
global_capacity = 100000
per_source_capacity = 100000
refill_per_sec = 100000
[[triggers]]
id = "t"
provider = "t"
path = "/hooks/t"
TOML
start_sluice "$WORK/sluice.toml"
grep -E "recovered" "$WORK/sluice.log" || true

# thread_ticks PID NAME: utime+stime ticks of PID's threads named NAME*.
thread_ticks() {
  local t sum=0
  for t in /proc/"$1"/task/*; do
    if grep -q "^$2" "$t/comm" 2>/dev/null; then
      sum=$((sum + $(awk '{print $14 + $15}' "$t/stat")))
    fi
  done
  echo "$sum"
}

# reads_served: the operator reads the readers have answered so far (`/metrics`).
reads_served() {
  curl -s "http://$SLUICE_ADDR/metrics" |
    awk '/^sluice_ops_reads_total\{result="served"/ {n += $2} END {print n + 0}'
}

# marked_ticks MARK: utime+stime ticks of every process whose command line contains MARK.
marked_ticks() {
  local p sum=0
  for p in /proc/[0-9]*; do
    if grep -qF -- "$1" "$p/cmdline" 2>/dev/null; then
      sum=$((sum + $(awk '{print $14 + $15}' "$p/stat" 2>/dev/null || echo 0)))
    fi
  done
  echo "$sum"
}

phase() {
  local name=$1; shift
  local chrome="" burn="" served0 chrome0=0
  if [ "${1:-}" = --dash ]; then
    shift
    # The dashboard as a browser shows it: the page's own script polls the state and lists.
    chromium --headless=new --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome-$name" \
      "http://$SLUICE_ADDR/ui" >"$WORK/chrome-$name.log" 2>&1 &
    chrome=$!; PIDS+=("$chrome")
    sleep "${DASH_SETTLE:-10}"
    chrome0=$(marked_ticks "chrome-$name")
  fi
  if [ "${1:-}" = --burn ]; then
    shift
    python3 -c '
import sys, time
end, duty = time.monotonic() + float(sys.argv[1]), float(sys.argv[2]) / 100
while time.monotonic() < end:
    t = time.monotonic()
    while time.monotonic() - t < 0.01 * duty:
        pass
    time.sleep(0.01 * (1 - duty))' "$((LOAD_S + 1))" "${BURN_PCT:-80}" &
    burn=$!; PIDS+=("$burn")
  fi
  served0=$(reads_served)
  "$BIN" loadgen --url "http://$SLUICE_ADDR" --rate "$RATE" --duration "${LOAD_S}s" \
    --target /hooks/t --body-size 1024 --connections 64 >"$WORK/lg-$name.json" &
  local lg=$!; PIDS+=("$lg")
  local ticks0 reader0 py
  ticks0=$(cpu_ticks "$SLUICE_PID")
  reader0=$(thread_ticks "$SLUICE_PID" sluice-reader)
  python3 "$PROBE" --addr "$SLUICE_ADDR" --seconds "$LOAD_S" "$@" \
    --first-ms "$FIRST_MS" --last-ms "$LAST_MS" >"$WORK/probe-$name.json" &
  py=$!; PIDS+=("$py")
  sleep "$LOAD_S"
  # CPU of the phase, in percent of one core: sluice, its reader thread, the probe's python.
  echo "$name: sluice $(( ($(cpu_ticks "$SLUICE_PID") - ticks0) * 100 / HZ / LOAD_S ))%," \
    "reader $(( ($(thread_ticks "$SLUICE_PID" sluice-reader) - reader0) * 100 / HZ / LOAD_S ))%," \
    "python $(( $(cpu_ticks "$py") * 100 / HZ / LOAD_S ))%," \
    "reads served $(( $(reads_served) - served0 ))" \
    ${chrome:+", chromium $(( ($(marked_ticks "chrome-$name") - chrome0) * 100 / HZ / LOAD_S ))%"} \
    ${burn:+", burner $(( $(cpu_ticks "$burn") * 100 / HZ / LOAD_S ))%"} | tee -a "$OUT/cpu.txt"
  [ -n "$chrome" ] && stop "$chrome"
  [ -n "$burn" ] && wait "$burn"
  wait "$py"
  wait "$lg"
  cp "$WORK/lg-$name.json" "$WORK/probe-$name.json" "$OUT/"
}
REPS=${REPS:-2}
for rep in $(seq "$REPS"); do
  phase "ingest$rep"
  phase "reads$rep" --reads
  [ "$DASH" = 1 ] && phase "dash$rep" --dash
  [ "${CONTROL:-0}" = 1 ] && phase "burn$rep" --burn
done

row() {
  jq -r --arg phase "$1" --slurpfile p "$WORK/probe-$1.json" \
    '[$phase, .totals.offered, .totals["2xx"], .accepted.p50_ms, .accepted.p99_ms,
      .accepted.max_ms, $p[0].healthz.max_ms, $p[0].lists.p99_ms, $p[0].lookups.p50_ms,
      $p[0].lookups.p99_ms] | @csv' "$WORK/lg-$1.json"
}
{
  echo "phase,offered,accepted,ingest_p50_ms,ingest_p99_ms,ingest_max_ms,healthz_max_ms,list_p99_ms,lookup_p50_ms,lookup_p99_ms"
  for rep in $(seq "$REPS"); do
    row "ingest$rep"
    row "reads$rep"
    [ "$DASH" = 1 ] && row "dash$rep"
    [ "${CONTROL:-0}" = 1 ] && row "burn$rep"
  done
} | tee "$OUT/table.csv"
