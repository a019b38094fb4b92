#!/usr/bin/env bash
# A/B of one sluice's durable 202s between two binaries, with every thread's context switches:
# one `serve --workers 1 --durability fsync` (buckets raised, so the accept path is measured)
# pinned to SERVER_CPU (default 1), `wrk -t1 -cCONNS -dDURATION` with the 1 KiB POST pinned to
# CLIENT_CPU (default 0); binaries alternated (A B B A …), a fresh server and data dir per run.
# Per run it prints requests/s, CPU µs per request (user / kernel, all threads), group commits
# (`sluice_wal_sync_seconds_count`) and requests per commit, switches per request and beyond four
# per commit per request (issue 10's measure), and per thread name (sluice-core-K, sluice-sync-K,
# …) its voluntary and involuntary switches per commit, from /proc/PID/task/*/status before and
# after the load. At the end, per binary, the medians of requests/s, CPU per request and switches
# beyond four per commit per request.
#
# This is the rewrite of the script behind "Zeros ahead, the loop parked on its commit, the
# helper as SCHED_BATCH" (2026-12-01) in benches/LOG.md; the original was kept outside the
# repository and is lost.
#
# Bounded: ROUNDS × 2 runs of DURATION s, each with a start (≤ 10 s) and a stop (≤ 30 s).
#
# Usage: A=path/to/sluice B=path/to/sluice [IO=uring|mio] [ROUNDS=2] [CONNS=64] benches/e2e/ab_switches.sh [DURATION_SECONDS]
# Needs: wrk (Debian: apt-get install wrk), curl, two release builds.
set -euo pipefail
DUR=${1:-8}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-64}
IO=${IO:-uring}
PORT=18190
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${A:?A=path of the first binary}" "${B:?B=path of the second binary}"
source "$ROOT/benches/e2e/lib.sh"
e2e_init switches

thread_switches() { # PID: "tid name voluntary involuntary", one line per thread
  local d
  for d in /proc/"$1"/task/*; do
    awk -v t="${d##*/}" '/^Name:/ {n = $2} /^voluntary_ctxt_switches/ {v = $2}
      /^nonvoluntary_ctxt_switches/ {i = $2} END {if (n != "") print t, n, v + 0, i + 0}' "$d/status" 2>/dev/null || true
  done
}
wal_syncs() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^sluice_wal_sync_seconds_count/ {s += $2} END {print s + 0}'; }

start_server() { # BIN: one sluice on PORT; sets SLUICE
  e2e_ports_free
  rm -rf "$WORK/data"
  env SLUICE_IO="$IO" HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 \
    HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000 \
    taskset -c "$SERVER_CPU" "$1" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" \
    --workers 1 --durability fsync >"$WORK/sluice.out" 2>"$WORK/sluice.err" &
  SLUICE=$!
  pids=("$SLUICE")
  for _ in $(seq 100); do
    grep -q listening "$WORK/sluice.out" 2>/dev/null && return 0
    kill -0 "$SLUICE" 2>/dev/null || break
    sleep 0.1
  done
  echo "ab_switches.sh: sluice did not start: $(cat "$WORK/sluice.err")" >&2
  exit 1
}
stop_server() { # SIGTERM, then at most 30 s for the drain, then SIGKILL
  kill -TERM "$SLUICE" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$SLUICE" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SLUICE" 2>/dev/null || true
  wait "$SLUICE" 2>/dev/null || true
  pids=()
}

run() { # ROUND WHICH: one run; prints its lines and appends "which req_s cpu_us beyond4" to $WORK/sum
  local r=$1 which=$2 before after out reqs rps syncs0 syncs1 cpu
  start_server "${!which}"
  thread_switches "$SLUICE" >"$WORK/cs0"
  syncs0=$(wal_syncs)
  before=$(cpu_ticks_split "$SLUICE")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$PORT")
  after=$(cpu_ticks_split "$SLUICE")
  syncs1=$(wal_syncs)
  thread_switches "$SLUICE" >"$WORK/cs1"
  stop_server
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  cpu=$(per_unit_total "$before" "$after" "$reqs")
  # Per thread: the switches during the load (a thread started meanwhile counts from 0).
  awk -v s=$((syncs1 - syncs0)) -v r="$reqs" -v head="round=$r bin=$which io=$IO requests=$reqs req_per_s=$rps cpu_us_per_request=$cpu ($(per_unit_split "$before" "$after" "$reqs"))" -v out="$WORK/sum" -v w="$which" -v rps="$rps" -v cpu="$cpu" '
    NR == FNR {v0[$1] = $3; i0[$1] = $4; next}
    {dv = $3 - v0[$1]; di = $4 - i0[$1]; name[$2] = 1; vol[$2] += dv; inv[$2] += di; cs += dv + di}
    END {
      print head
      printf "  group_commits=%d requests_per_commit=%.1f cs_per_request=%.3f cs_beyond_4_per_commit_per_request=%.4f\n",
        s, (s > 0 ? r / s : 0), cs / r, (cs - 4 * s) / r
      line = "  per commit, voluntary/involuntary:"
      for (n in name) line = line sprintf(" %s %.2f/%.2f", n, (s > 0 ? vol[n] / s : 0), (s > 0 ? inv[n] / s : 0))
      print line
      printf "%s %s %s %.4f\n", w, rps, cpu, (cs - 4 * s) / r >> out
    }' "$WORK/cs0" "$WORK/cs1"
}

echo "machine: $(nproc) cores, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "one sluice --io $IO --workers 1 --durability fsync on CPU $SERVER_CPU, wrk -t1 -c$CONNS -d${DUR}s on CPU $CLIENT_CPU"
: >"$WORK/sum"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for which in $order; do run "$r" "$which"; done
done
for which in A B; do
  echo "$which (${!which}): medians over $ROUNDS runs: req/s $(awk -v w="$which" '$1 == w {print $2}' "$WORK/sum" | e2e_median)," \
    "CPU µs/request $(awk -v w="$which" '$1 == w {print $3}' "$WORK/sum" | e2e_median)," \
    "cs beyond 4 per commit per request $(awk -v w="$which" '$1 == w {print $4}' "$WORK/sum" | e2e_median)"
done
