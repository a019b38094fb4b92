# Shared helpers of the scenario scripts (sourced, not run). See benches/scenarios/README.md.
#
# Every process is started here, recorded by PID, and stopped by PID from the EXIT trap; every
# wait has a timeout; every port is picked by the kernel (port 0) and read back from the line the
# process prints when it is ready. Everything listens on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${SLUICE_BIN:-$ROOT/target/release/sluice}
REPORT=${SLUICE_REPORT:-$ROOT/target/release/examples/scenario_report}
WORK=$(mktemp -d /tmp/sluice-scenario.XXXXXX)
HZ=$(getconf CLK_TCK)
PIDS=()

for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install $tool)" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "no $BIN: run cargo build --release" >&2; exit 2; }
[ -x "$REPORT" ] || { echo "no $REPORT: run cargo build --release --example scenario_report" >&2; exit 2; }

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }

# wait_for FILE REGEX SECONDS: prints the first matching line, fails after SECONDS.
wait_for() {
  local i
  for i in $(seq $(($3 * 20))); do
    if grep -m1 -E "$2" "$1" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for /$2/ in $1:" >&2; cat "$1" >&2; return 1
}

# stop PID: SIGTERM, wait up to 10 s, then SIGKILL. Only for PIDs this script started.
stop() {
  local p=$1 i
  kill -TERM "$p" 2>/dev/null || return 0
  for i in $(seq 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  echo "pid $p ignored SIGTERM for 10 s; killing" >&2
  kill -KILL "$p" 2>/dev/null || true
}

# start_mock ARGS...: sets MOCK_PID, MOCK_ADDR (host:port), MOCK_T0 (epoch seconds at start).
# MOCK_CPUS (optional): CPU list to pin the downstream to.
start_mock() {
  local pin=()
  [ -n "${MOCK_CPUS:-}" ] && pin=(taskset -c "$MOCK_CPUS")
  MOCK_T0=$(now)
  "${pin[@]}" "$BIN" mock-downstream --listen 127.0.0.1:0 "$@" >"$WORK/mock.out" 2>"$WORK/mock.err" &
  MOCK_PID=$!; PIDS+=("$MOCK_PID")
  MOCK_ADDR=$(wait_for "$WORK/mock.out" 'listening on http://' 10 | sed 's|.*http://||')
}

# start_sluice MANIFEST [taskset CPU list]: sets SLUICE_PID, SLUICE_ADDR.
start_sluice() {
  local manifest=$1 cpus=${2:-}
  local pin=()
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  "${pin[@]}" "$BIN" serve --config "$manifest" --listen 127.0.0.1:0 >"$WORK/sluice.log" 2>&1 &
  SLUICE_PID=$!; PIDS+=("$SLUICE_PID")
  SLUICE_ADDR=$(wait_for "$WORK/sluice.log" 'listening on http://' 10 | sed 's|.*http://||')
}

# manifest FILE HANDLER_URI|"" PERMITS MAX_PENDING [extra TOML]: writes a one-trigger manifest
# (trigger "partner", path /hooks/partner). Buckets are raised to 100k/s so that the limits
# under test (permits, backlog) are the ones that bind, not the ingest token buckets.
manifest() {
  local file=$1 handler=$2 permits=$3 pending=$4 extra=${5:-}
  {
    printf '[server]\ndata_dir = "%s"\nworkers = %s\n' "$WORK/data" "${WORKERS:-2}"
    printf '[ingest]\nglobal_capacity = 100000\nper_source_capacity = 100000\nrefill_per_sec = 100000\n'
    printf '[dispatch]\nmax_pending_events = %s\n' "$pending"
    printf '[[triggers]]\nid = "partner"\nprovider = "partner"\npath = "/hooks/partner"\n'
    if [ -n "$handler" ]; then
      printf 'handler = "%s"\n' "$handler"
      [ "$permits" = auto ] && permits='"auto"'  # adaptive permits (a TOML string)
      printf '[[destinations]]\nuri = "%s"\nmax_in_flight = %s\n' "$handler" "$permits"
    fi
    printf '%s\n' "$extra"
  } >"$file"
}

SAMPLE_HEADER="t,pump_outstanding,pending_events,oldest_pending_age_s,in_flight,permits,delivered_total,retryable_total,permanent_total,paused_total,refused_queue_full_total,refused_ingest_saturated_total,refused_wal_busy_total,refused_other_total,http_202_total,http_503_total,http_429_total,rss_kib,cpu_ticks_total,machine_busy_ticks_total,machine_steal_ticks_total"

# sample T0: one line of SAMPLE_HEADER for sluice now (t relative to epoch T0).
sample() {
  local t0=$1 t metrics rss cpu
  t=$(now)
  metrics=$(curl -s --max-time 0.8 "http://$SLUICE_ADDR/metrics" || true)
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$SLUICE_PID/status" 2>/dev/null || echo "")
  cpu=$(cpu_ticks "$SLUICE_PID")
  # Whole machine (all CPUs): busy = user+nice+system+irq+softirq+steal; HZ ticks per CPU-second.
  machine=$(awk '/^cpu / { printf "%d,%d", $2 + $3 + $4 + $7 + $8 + $9, $9 }' /proc/stat)
  awk -v t="$t" -v t0="$t0" -v rss="$rss" -v cpu="$cpu" -v machine="$machine" '
    function val() { return $NF + 0 }
    /^#/ { next }
    /^harn_orchestrator_pump_outstanding / { po = val() }
    /^sluice_wal_pending_events / { pe = val() }
    /^harn_trigger_oldest_pending_age_seconds / { age = val() }
    /^sluice_destination_in_flight\{/ { inf += val() }
    /^sluice_destination_permits\{/ { perm += val() }
    /^sluice_dispatch_attempts_total\{/ {
      if ($0 ~ /outcome="delivered"/) del += val()
      else if ($0 ~ /outcome="retryable"/) rty += val()
      else pf += val()
    }
    /^harn_backpressure_events_total\{action="paused"/ { paused += val() }
    /^sluice_ingest_refusals_total\{/ {
      if ($0 ~ /reason="queue_full"/) qf += val()
      else if ($0 ~ /reason="ingest_saturated"/) sat += val()
      else if ($0 ~ /reason="wal_busy"/) wb += val()
      else other += val()
    }
    /^sluice_http_requests_total\{/ {
      if ($0 ~ /status="202"/) h202 += val()
      else if ($0 ~ /status="503"/) h503 += val()
      else if ($0 ~ /status="429"/) h429 += val()
    }
    END {
      printf "%.3f,%d,%d,%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%s,%s\n", t - t0, po, pe, age,
        inf, perm, del, rty, pf, paused, qf, sat, wb, other, h202, h503, h429, rss, cpu, machine
    }' <<<"$metrics"
}

# cpu_ticks PID: utime + stime (all threads) in clock ticks.
cpu_ticks() {
  local f
  if [ -r "/proc/$1/stat" ]; then
    read -r -a f < <(sed 's/.*) //' "/proc/$1/stat")
    echo $((f[11] + f[12]))
  else
    echo ""
  fi
}

# start_sampler T0 OUT MAX_SECONDS: samples once per second into OUT (background, bounded).
start_sampler() {
  local t0=$1 out=$2 max=$3
  echo "$SAMPLE_HEADER" >"$out"
  (
    local k
    for k in $(seq 0 "$max"); do
      kill -0 "$SLUICE_PID" 2>/dev/null || break
      # Sample in the middle of second k after t0, so floor(t) = k.
      sleep "$(awk -v a="$t0" -v k="$k" -v n="$(now)" 'BEGIN { d = a + k + 0.5 - n; printf "%.3f", (d < 0 ? 0 : d) }')"
      sample "$t0" >>"$out"
    done
  ) &
  SAMPLER_PID=$!; PIDS+=("$SAMPLER_PID")
}

# wait_drained SECONDS: waits until sluice reports no pending events, at most SECONDS.
wait_drained() {
  local i p
  for i in $(seq $(($1 * 4))); do
    p=$(curl -s --max-time 0.8 "http://$SLUICE_ADDR/metrics" | awk '/^sluice_wal_pending_events / {print $2}')
    [ "${p:-1}" = 0 ] && return 0
    sleep 0.25
  done
  return 1
}

# check_permits_json MOCK_STATS_JSON PERMITS: fails loudly if the downstream ever had more calls
# in service than sluice's permits (the mock's capacity is set to the permits, so this also
# shows as 503s from the downstream).
check_permits_json() {
  local seen m503
  seen=$(jq '.max_concurrency_seen' "$1")
  m503=$(jq '.per_status["503"] // 0' "$1")
  if [ "$seen" -gt "$2" ] || [ "$m503" -gt 0 ]; then
    echo "INVARIANT BROKEN: downstream peak in service $seen, 503s $m503, permits = $2 ($1)" >&2
    return 1
  fi
}

# check_inflight TIMELINE_CSV: fails loudly if sluice's own sampled in-flight gauge ever exceeded
# its permits gauge.
check_inflight() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["in_flight"] != "" && $c["in_flight"] > $c["permits"] {
      printf "INVARIANT BROKEN: second %s: in flight %s > permits %s\n", $1, $c["in_flight"], $c["permits"] > "/dev/stderr"; bad = 1 }
    END { exit bad }' "$1"
}
