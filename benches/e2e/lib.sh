# Shared by the e2e scripts (sourced): CPU ticks of processes, and an nginx config writer.
# Callers set WORK (a temp dir) and HZ=$(getconf CLK_TCK).

cpu_ticks() { # sum utime+stime of processes (all their threads) listed by pid
  local total=0
  for p in "$@"; do
    if [ -r "/proc/$p/stat" ]; then
      read -r -a f < <(sed 's/.*) //' "/proc/$p/stat")
      total=$((total + f[11] + f[12]))
    fi
  done
  echo "$total"
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
