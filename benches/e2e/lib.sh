# Shared by the e2e scripts (sourced): the common setup, CPU ticks of processes, and an nginx
# config writer.

e2e_init() { # NAME [BASE_DIR]: WORK (a temp dir), CPU pinning defaults, HZ, and at exit the
  # processes in `pids` are killed and WORK removed.
  WORK=$(mktemp -d "${2:-/tmp}/sluice-$1.XXXXXX")
  SERVER_CPU=${SERVER_CPU:-1}
  CLIENT_CPU=${CLIENT_CPU:-0}
  HZ=$(getconf CLK_TCK)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
}

cpu_ticks() { # sum utime+stime of processes (all their threads) listed by pid
  local u s
  read -r u s < <(cpu_ticks_split "$@")
  echo $((u + s))
}

cpu_ticks_split() { # "utime stime" (user, kernel) summed over processes listed by pid
  local user=0 sys=0
  for p in "$@"; do
    if [ -r "/proc/$p/stat" ]; then
      read -r -a f < <(sed 's/.*) //' "/proc/$p/stat")
      user=$((user + f[11]))
      sys=$((sys + f[12]))
    fi
  done
  echo "$user $sys"
}

per_unit_split() { # BEFORE AFTER N: "user_us=X kernel_us=Y" per unit, from two cpu_ticks_split readings
  awk -v b="$1" -v a="$2" -v n="$3" -v hz="$HZ" 'BEGIN {
    split(b, x, " "); split(a, y, " ");
    printf "user_us=%.2f kernel_us=%.2f", (y[1] - x[1]) * 1e6 / hz / n, (y[2] - x[2]) * 1e6 / hz / n }'
}

per_unit_total() { # BEFORE AFTER N [FORMAT]: user + kernel µs per unit (0 if N is 0), from two cpu_ticks_split readings
  awk -v b="$1" -v a="$2" -v n="$3" -v hz="$HZ" -v f="${4:-%.2f}" 'BEGIN {
    split(b, x, " "); split(a, y, " ");
    printf f, (n > 0 ? (y[1] + y[2] - x[1] - x[2]) * 1e6 / hz / n : 0) }'
}

nginx_conf() { # servers... ("PORT STATUS BODY" each): writes $WORK/nginx/nginx.conf
  mkdir -p "$WORK/nginx/logs"
  {
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $WORK/nginx/nginx.pid;"
    echo "error_log $WORK/nginx/logs/error.log;"
    echo "events { worker_connections 4096; }"
    echo "http {"
    echo "  access_log off;"
    echo "  client_body_buffer_size 16k;"
    echo "  keepalive_requests 1000000;"
    for s in "$@"; do
      read -r port status body <<<"$s"
      echo "  server { listen 127.0.0.1:$port; location / { return $status '$body'; } }"
    done
    echo "}"
  } >"$WORK/nginx/nginx.conf"
}

e2e_ports_free() { # waits (at most 30 s) until no server of a previous run listens on the e2e
  # scripts' ports (ingest 18080-18093, delivered 18180-18182, ab_switches 18190): a stopped
  # sluice drains before it closes its listener. Fails if they are still taken.
  for _ in $(seq 300); do
    ss -Hltn '( sport >= :18080 and sport <= :18093 ) or ( sport >= :18180 and sport <= :18190 )' | grep -q . || return 0
    sleep 0.1
  done
  echo "$(basename "$0"): the benchmark ports are still in use after 30 s" >&2
  exit 1
}

e2e_ingest_cpu() { # FILE NAME-PATTERN: "total user kernel" CPU µs per request of the
  # ingest_vs_nginx.sh run (in FILE, its output) whose heading contains NAME-PATTERN.
  awk -v pat="$2" '
    /^== / { on = index($0, pat) > 0 }
    on && /cpu_us_per_request=/ {
      match($0, /cpu_us_per_request=[0-9.]+/); t = substr($0, RSTART + 19, RLENGTH - 19)
      match($0, /user_us=[0-9.]+/); u = substr($0, RSTART + 8, RLENGTH - 8)
      match($0, /kernel_us=[0-9.]+/); k = substr($0, RSTART + 10, RLENGTH - 10)
      print t, u, k; exit }' "$1"
}

e2e_delivered_cpu() { # FILE: "total user kernel" CPU µs per delivered event of a
  # delivered_vs_nginx.sh run (FILE, its output).
  awk '/cpu_us_per_delivered_event=/ {
      match($0, /cpu_us_per_delivered_event=[0-9.]+/); t = substr($0, RSTART + 27, RLENGTH - 27)
      match($0, /user_us=[0-9.]+/); u = substr($0, RSTART + 8, RLENGTH - 8)
      match($0, /kernel_us=[0-9.]+/); k = substr($0, RSTART + 10, RLENGTH - 10)
      print t, u, k; exit }' "$1"
}

e2e_median() { # the median of the numbers on stdin, one a line ("" if none)
  sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.4f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

deliver_toml() { # [DESTINATION_EXTRA] [TOP_EXTRA]: $WORK/sluice.toml, one trigger `bench` whose
  # handler is nginx on 18181 (`max_in_flight = 64`, the extra destination keys), an unbounded
  # backlog, and TOP_EXTRA (tables) at the end
  cat >"$WORK/sluice.toml" <<TOML
[[triggers]]
id = "bench"
provider = "bench"
path = "/webhooks/bench"
handler = "http://127.0.0.1:18181/events"

[[destinations]]
uri = "http://127.0.0.1:18181/events"
max_in_flight = 64
${1:-}

${2:-}

[dispatch]
max_pending_events = 10000000
max_pending_bytes = 68719476736
TOML
}
