#!/usr/bin/env bash
# Scenario "HTTPS delivery cost" (issue 12): CPU per delivered event when the destination is
# https:// (rustls, ring provider) against http://, same downstream, same load; and the same with
# a downstream that closes every connection after one response (`-close`: every delivery pays a
# TCP connect and, for https, a TLS handshake, resumed from the destination's session cache).
#
# Downstream: nginx (apt-get install nginx; openssl for the test CA), one worker process pinned to
# CPU 0, two server blocks each listening plain and TLS on 127.0.0.1, `return 200 "ok"` for every
# request: one with keep-alive, one with `keepalive_timeout 0` (logging `$ssl_session_reused` to
# count resumed handshakes). The CA and the server certificate (P-256) are generated per run with
# openssl; sluice trusts the CA through `tls = { ca_file }`.
# sluice: 1 worker pinned to CPU 1, durability fsync, 64 permits. loadgen (1 thread, 64
# connections) pinned to CPU 0. Each run: 5 000 POSTs of 1 KiB at 2 500/s (open loop), then at
# most 15 s for the backlog to drain. CPU per event = sluice's utime+stime (all threads) from the
# load's start to the drain, divided by the events delivered. REPS (default 5) alternating runs of
# each scheme. The machine is shared: each row records the 1-minute load average.
# Bounded: 4 variants x REPS x (2 s load + <= 15 s drain + ~1 s); typically ~70 s for REPS=5.
#
# Usage: [REPS=N] [OUT_DIR=DIR] benches/scenarios/https.sh      Output: docs/scenarios/https/
source "$(dirname "$0")/lib.sh"
OUT=${OUT_DIR:-$ROOT/docs/scenarios/https}
mkdir -p "$OUT"
REPS=${REPS:-5}
EVENTS=5000
RATE=2500
WORKERS=1
for tool in nginx openssl python3 taskset; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install nginx openssl)" >&2; exit 2; }
done

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Test PKI: a CA and a server certificate for 127.0.0.1 it signs.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=sluice bench CA" \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$WORK/srv.key" -out "$WORK/srv.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$WORK/san.ext"
openssl x509 -req -in "$WORK/srv.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
  -days 2 -extfile "$WORK/san.ext" -out "$WORK/srv.pem" 2>/dev/null

HTTP_PORT=$(free_port); HTTPS_PORT=$(free_port); HTTP_CLOSE_PORT=$(free_port); HTTPS_CLOSE_PORT=$(free_port)
mkdir -p "$WORK/nginx/logs"
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$HTTP_PORT;
    listen 127.0.0.1:$HTTPS_PORT ssl;
    ssl_certificate $WORK/srv.pem;
    ssl_certificate_key $WORK/srv.key;
    ssl_session_cache shared:bench:1m;
    client_body_buffer_size 16k;
    location / { return 200 "ok"; }
  }
  log_format reuse '\$ssl_session_reused';
  server {
    listen 127.0.0.1:$HTTP_CLOSE_PORT;
    listen 127.0.0.1:$HTTPS_CLOSE_PORT ssl;
    keepalive_timeout 0;
    access_log $WORK/nginx/logs/close.log reuse;
    ssl_certificate $WORK/srv.pem;
    ssl_certificate_key $WORK/srv.key;
    ssl_session_cache shared:bench:1m;
    client_body_buffer_size 16k;
    location / { return 200 "ok"; }
  }
}
CONF
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.out" 2>&1 &
NGINX_PID=$!; PIDS+=("$NGINX_PID")
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$HTTP_PORT/" && break; sleep 0.1; done
curl -s --cacert "$WORK/ca.pem" "https://127.0.0.1:$HTTPS_PORT/" | grep -q ok || { echo "nginx TLS not up" >&2; cat "$WORK/nginx/logs/error.log" >&2; exit 1; }

echo "rep,load1,scheme,events,delivered,tls_error,connections_opened,tls_resumed,drain_s,sluice_cpu_ms,cpu_us_per_event" >"$OUT/table.csv"
for REP in $(seq "$REPS"); do
  for SCHEME in http https http-close https-close; do
    rm -rf "$WORK/data"
    : >"$WORK/nginx/logs/close.log"
    case $SCHEME in
      http) manifest "$WORK/manifest.toml" "http://127.0.0.1:$HTTP_PORT/hook" 64 100000 ;;
      http-close) manifest "$WORK/manifest.toml" "http://127.0.0.1:$HTTP_CLOSE_PORT/hook" 64 100000 ;;
      https) manifest "$WORK/manifest.toml" "https://127.0.0.1:$HTTPS_PORT/hook" 64 100000 \
        "tls = { ca_file = \"$WORK/ca.pem\" }" ;;
      https-close) manifest "$WORK/manifest.toml" "https://127.0.0.1:$HTTPS_CLOSE_PORT/hook" 64 100000 \
        "tls = { ca_file = \"$WORK/ca.pem\" }" ;;
    esac
    start_sluice "$WORK/manifest.toml" 1
    sleep 0.3
    LOAD1=$(cut -d' ' -f1 /proc/loadavg)
    C0=$(cpu_ticks "$SLUICE_PID"); T0=$(now)
    taskset -c 0 "$BIN" loadgen --url "http://$SLUICE_ADDR" --rate "$RATE" --requests "$EVENTS" \
      --connections 64 --threads 1 --target /hooks/partner --body-size 1024 --on-refusal drop \
      >"$WORK/lg.json"
    wait_drained 15 || echo "https: $SCHEME not drained 15 s after the load" >&2
    T1=$(now); C1=$(cpu_ticks "$SLUICE_PID")
    curl -s "http://$SLUICE_ADDR/metrics" >"$WORK/metrics.txt"
    stop "$SLUICE_PID"
    delivered=$(awk '/^sluice_dispatch_attempts_total\{.*outcome="delivered"/ {s += $NF} END {print s + 0}' "$WORK/metrics.txt")
    tlserr=$(awk '/^sluice_dispatch_attempts_total\{.*outcome="tls_error"/ {s += $NF} END {print s + 0}' "$WORK/metrics.txt")
    opened=$(awk '/^sluice_destination_connections_opened_total\{/ {s += $NF} END {print s + 0}' "$WORK/metrics.txt")
    resumed=$(grep -c '^r$' "$WORK/nginx/logs/close.log" || true)
    awk -v rep="$REP" -v l="$LOAD1" -v s="$SCHEME" -v e="$EVENTS" -v d="$delivered" -v te="$tlserr" \
      -v o="$opened" -v r="$resumed" -v t0="$T0" -v t1="$T1" -v c="$((C1 - C0))" -v hz="$HZ" -v rate="$RATE" 'BEGIN {
        printf "%s,%s,%s,%d,%d,%d,%d,%d,%.2f,%.0f,%.1f\n", rep, l, s, e, d, te, o, r, t1 - t0 - e / rate,
          c * 1000 / hz, (d ? c * 1e6 / hz / d : 0) }' >>"$OUT/table.csv"
    tail -1 "$OUT/table.csv"
  done
done
column -s, -t "$OUT/table.csv"
awk -F, 'NR > 1 { n[$3]++; cpu[$3] += $11 } END {
  printf "scheme,mean_cpu_us_per_event\n"
  split("http https http-close https-close", k, " ")
  for (i = 1; i <= 4; i++) printf "%s,%.1f\n", k[i], cpu[k[i]] / n[k[i]]
  printf "https_minus_http,%.1f\n", cpu["https"] / n["https"] - cpu["http"] / n["http"]
  printf "https-close_minus_http-close,%.1f\n", cpu["https-close"] / n["https-close"] - cpu["http-close"] / n["http-close"] }' \
  "$OUT/table.csv" | tee "$OUT/summary.csv"
echo "https: wrote $OUT"
