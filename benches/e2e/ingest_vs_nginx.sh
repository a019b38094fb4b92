#!/usr/bin/env bash
# End-to-end ingest throughput: sluice (fsync mode) vs nginx `return 202`, side by side, same
# pinning, same wrk load (1 KiB POST, keep-alive). Prints requests/s, latency and CPU µs per
# request for each. Bounded: each run lasts DURATION seconds.
#
# Usage: [BIN=path/to/sluice] benches/e2e/ingest_vs_nginx.sh [DURATION_SECONDS] [CONNECTIONS]
# Needs: wrk and nginx (Debian: apt-get install wrk nginx-light), a release build.
set -euo pipefail
DUR=${1:-10}
CONNS=${2:-64}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

source "$ROOT/benches/e2e/lib.sh"
e2e_init e2e

ctx_switches() { # voluntary + involuntary context switches of every thread of a process
  local total=0 n
  for f in /proc/"$1"/task/*/status; do
    n=$(awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}' "$f" 2>/dev/null || echo 0)
    total=$((total + n))
  done
  echo "$total"
}

wal_syncs() { # group commits so far (sluice_wal_sync_seconds_count), 0 for nginx
  curl -s "http://127.0.0.1:$1/metrics" 2>/dev/null | awk '/^sluice_wal_sync_seconds_count/ {print $2; f=1} END {if (!f) print 0}'
}

run_wrk() { # name port pids...
  local name=$1 port=$2; shift 2
  local before after out reqs cs_before cs_after syncs_before syncs_after
  cs_before=$(ctx_switches "$1")
  syncs_before=$(wal_syncs "$port")
  before=$(cpu_ticks_split "$@")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" --latency -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$port")
  after=$(cpu_ticks_split "$@")
  cs_after=$(ctx_switches "$1")
  syncs_after=$(wal_syncs "$port")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  local non2xx
  non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
  local cpu_us
  cpu_us=$(per_unit_total "$before" "$after" 1 "%d")
  echo "== $name"
  echo "$out" | grep -E 'Requests/sec|Latency|50%|99%|Non-2xx|requests in'
  echo "cpu_us_total=$cpu_us requests=$reqs non_2xx=${non2xx:-0} cpu_us_per_request=$(awk -v c="$cpu_us" -v r="$reqs" 'BEGIN{printf "%.2f", c/r}') ($(per_unit_split "$before" "$after" "$reqs"))"
  # Issue 10's measure: context switches of all threads beyond four per group commit, per request.
  awk -v cs=$((cs_after - cs_before)) -v s=$((syncs_after - syncs_before)) -v r="$reqs" 'BEGIN {
    printf "ctx_switches=%d group_commits=%d requests_per_commit=%.1f cs_per_request=%.3f cs_beyond_4_per_commit_per_request=%.4f\n",
      cs, s, (s > 0 ? r / s : 0), cs / r, (cs - 4 * s) / r }'

}

# BIN=path runs that binary (an A/B of two builds); otherwise the tree's release build.
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
  BIN="$ROOT/target/release/sluice"
fi

start_sluice() { # port durability [env...]
  local port=$1 durability=$2; shift 2
  env "$@" taskset -c "$SERVER_CPU" "$BIN" serve --listen "127.0.0.1:$port" \
    --data-dir "$WORK/data-$port" --workers 1 --durability "$durability" >"$WORK/sluice-$port.out" 2>"$WORK/sluice-$port.err" &
  pids+=($!)
}
# Buckets raised so these runs measure the accept path, not refusals.
BIG=(HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000
     HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000)
# Each sluice run on both I/O backends (io_uring: ports 1808x, mio: 1809x).
start_sluice 18080 fsync SLUICE_IO=uring "${BIG[@]}"; SLUICE_FSYNC=$!
start_sluice 18082 os SLUICE_IO=uring "${BIG[@]}"; SLUICE_OS=$!
start_sluice 18090 fsync SLUICE_IO=mio "${BIG[@]}"; SLUICE_FSYNC_MIO=$!
start_sluice 18092 os SLUICE_IO=mio "${BIG[@]}"; SLUICE_OS_MIO=$!
# The opt-in commit path: each core's own log written and fdatasynced on its io_uring ring.
start_sluice 18084 fsync SLUICE_IO=uring SLUICE_WAL_COMMIT=ring "${BIG[@]}"; SLUICE_RING=$!
# Buckets of 1 token, 1/s: nearly every request is refused with 503 (the cost of saying no).
REFUSE=(HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=1 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=1
        HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=1)
start_sluice 18083 fsync SLUICE_IO=uring "${REFUSE[@]}"; SLUICE_REFUSE=$!
start_sluice 18093 fsync SLUICE_IO=mio "${REFUSE[@]}"; SLUICE_REFUSE_MIO=$!

nginx_conf '18081 202 {"status":"accepted"}'
taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
pids+=($!)
NGINX_MASTER=$!
for _ in $(seq 50); do
  [ "$(cat "$WORK"/sluice-*.out 2>/dev/null | grep -c listening)" = 7 ] && curl -s -o /dev/null http://127.0.0.1:18081/ && break
  sleep 0.1
done
NGINX_PIDS=$(pgrep -P "$NGINX_MASTER" | tr '\n' ' ')

echo "machine: $(nproc) cores, $(uname -r); server pinned to CPU $SERVER_CPU, wrk to CPU $CLIENT_CPU; ${DUR}s, $CONNS connections"
echo "data dir filesystem: $(df -T "$WORK" | awk 'NR==2 {print $2}')"
run_wrk "nginx return 202" 18081 "$NGINX_MASTER" $NGINX_PIDS
run_wrk "sluice --io uring --durability fsync (202 after fdatasync)" 18080 "$SLUICE_FSYNC"
run_wrk "sluice --io mio --durability fsync (202 after fdatasync)" 18090 "$SLUICE_FSYNC_MIO"
run_wrk "sluice --io uring --durability fsync, wal.commit = ring (write + fdatasync on the core's ring)" 18084 "$SLUICE_RING"
run_wrk "sluice --io uring --durability os (202 after write to page cache)" 18082 "$SLUICE_OS"
run_wrk "sluice --io mio --durability os (202 after write to page cache)" 18092 "$SLUICE_OS_MIO"
run_wrk "sluice --io uring, buckets of 1 token (503 refusals)" 18083 "$SLUICE_REFUSE"
run_wrk "sluice --io mio, buckets of 1 token (503 refusals)" 18093 "$SLUICE_REFUSE_MIO"
