#!/usr/bin/env bash
# A/B of CPU per delivered event between two binaries, in alternated (ABBA) rounds: round 1 runs
# A then B, round 2 B then A, and so on, so a drift of the machine over the run weighs on both.
# Each run is `delivered_vs_nginx.sh DURATION` on backend IO; prints one line per run (CPU µs per
# delivered event, user / kernel, events delivered, the server core's steal ticks) and the
# median of the pairs' B ÷ A ratios. Bounded: ROUNDS × 2 runs of DURATION s plus drains.
#
# Usage: A=path/to/sluice B=path/to/sluice [IO=uring|mio] [ROUNDS=6] benches/e2e/ab_delivered.sh [DURATION_SECONDS]
# Needs: what delivered_vs_nginx.sh needs (wrk, nginx).
set -euo pipefail
DUR=${1:-5}
ROUNDS=${ROUNDS:-6}
IO=${IO:-uring}
SERVER_CPU=${SERVER_CPU:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${A:?A=path of the first binary}" "${B:?B=path of the second binary}"
port_free() { # a stopped sluice drains before it closes its listener: wait (≤ 20 s)
  for _ in $(seq 100); do ss -ltn | grep -qE ':1818[0-2] ' || return 0; sleep 0.2; done
}
steal() { awk -v c="cpu$SERVER_CPU" '$1 == c {print $9}' /proc/stat; }
ratios=()
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  declare -A cpu=()
  for which in $order; do
    port_free
    s0=$(steal)
    out=$(SLUICE_IO=$IO BIN=${!which} "$ROOT/benches/e2e/delivered_vs_nginx.sh" "$DUR" 2>&1)
    line=$(echo "$out" | grep -o 'cpu_us_per_delivered_event=[^ ]* ([^)]*)' || true)
    [ -n "$line" ] || { echo "run $which failed: $out" >&2; exit 1; }
    cpu[$which]=$(echo "$line" | sed 's/cpu_us_per_delivered_event=\([0-9.]*\).*/\1/')
    echo "round=$r bin=$which io=$IO $line $(echo "$out" | grep -o '[0-9]* delivered' | head -1) steal_ticks=$(($(steal) - s0))"
  done
  ratios+=("$(awk -v a="${cpu[A]}" -v b="${cpu[B]}" 'BEGIN {printf "%.4f", b / a}')")
  unset cpu
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1; s += $1}
  END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
       printf "B / A over %d pairs: median %.3f, mean %.3f, range %.3f-%.3f\n", NR, m, s / NR, v[1], v[NR]}'
