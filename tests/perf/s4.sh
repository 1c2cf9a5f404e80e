#!/usr/bin/env bash
# s4.sh - BENCHMARKS.md S4: a backend that answers every request after DELAY_MS (50 ms), driven
# closed-loop by wrk at each concurrency of S4_CONNS (100 250 500 1000) through each target:
#   direct   wrk -> weir-slow-backend (the limit: connections / delay, less the round trip)
#   nginx    reverse proxy, upstream keep-alive (2,048 idle per worker), as in gateway.sh
#   haproxy  mode http, http-reuse always
#   weir     weir.sh plain (gateway listener, route / to the backend)
# With split pinning (the default) the proxy gets CPU_B alone with one worker; wrk and the backend
# share CPU_A. The backend is weir-slow-backend (tests/src/bin): one tokio task per connection and
# a timer per request, ~10 µs of CPU per request, so 1,000 connections (20,000 req/s) cost it
# ~0.2 core; each row records what the backend and wrk used, so a saturated CPU_A shows.
#
# Results: $OUT/results.csv (gateway.sh's columns; phase "s4", conns = wrk -c), raw/, env.txt.
# Usage: WEIR_BIN=target/release/weir-proxy SLOW_BIN=target/release/weir-slow-backend ./s4.sh
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-10}          # seconds per measured window
WARMUP=${WARMUP:-3}               # seconds of discarded load before each window (connections open)
RUNS=${RUNS:-1}                   # even runs visit the targets in reverse order
PIN_MODES=${PIN_MODES:-split}
TARGETS=${TARGETS:-"direct nginx haproxy weir"}
S4_CONNS=${S4_CONNS:-"100 250 500 1000"}
DELAY_MS=${DELAY_MS:-50}
BASE_PORT=${BASE_PORT:-28700}
CPU_A=${CPU_A:-0}; CPU_B=${CPU_B:-1}
OUT=${OUT:-/tmp/s4-$(date +%Y%m%d-%H%M%S)}
WEIR_BIN=${WEIR_BIN:-}; SLOW_BIN=${SLOW_BIN:-}
WEIR_READY_S=${WEIR_READY_S:-20}

P_BE=$BASE_PORT
declare -A PORT=( [direct]=$P_BE [nginx]=$((BASE_PORT+11)) [haproxy]=$((BASE_PORT+12)) [weir]=$((BASE_PORT+13)) )
[[ -x $SLOW_BIN ]] || die "SLOW_BIN='$SLOW_BIN' is not an executable weir-slow-backend"
[[ " $TARGETS " == *" weir "* && ! -x $WEIR_BIN ]] && die "WEIR_BIN='$WEIR_BIN' is not an executable weir-proxy"
for c in wrk curl taskset; do command -v $c >/dev/null || die "missing $c (tests/perf/run installs it)"; done
for t in nginx haproxy; do [[ " $TARGETS " == *" $t "* ]] && { command -v $t >/dev/null || die "missing $t"; }; done

# 1,000 client connections cost wrk 1,000 fds, the backend 1,000 and a proxy 2,000
raise_fd_limit
max_c=0; for c in $S4_CONNS; do ((c > max_c)) && max_c=$c; done
((FDLIM >= 2 * max_c + 200)) || die "fd limit $FDLIM is too low for $max_c connections (raise ulimit -Hn)"
NCPU=$(nproc); CLK=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/s4-work.XXXXXX)
mkdir -p "$OUT/raw" || die "cannot create $OUT"
init_results

declare -a STARTED=()
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=gateway-measure.sh
. "$HERE/gateway-measure.sh"   # acct_begin/acct_end/emit_row, measure_wrk and get.lua

write_conf() { # target workers
  local t=$1 w=$2 d=$WORK/$1; mkdir -p "$d/logs"
  case $t in
  nginx) cat > "$d/nginx.conf" <<EOF
$(nginx_http_head "$d" "$w")
  upstream slow { server 127.0.0.1:$P_BE; keepalive 2048; keepalive_requests 100000000; keepalive_timeout 300s; }
  server {
    listen 127.0.0.1:${PORT[nginx]} backlog=4096;
    location / { proxy_pass http://slow; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOF
  ;;
  haproxy) cat > "$d/haproxy.cfg" <<EOF
$(haproxy_head http "$w")
  maxconn $HAP_MAXCONN
frontend fe
  bind 127.0.0.1:${PORT[haproxy]}
  default_backend slow
backend slow
  server s1 127.0.0.1:$P_BE
EOF
  ;;
  esac
}

start_target() { # target workers cpus; sets LAST_PID
  local t=$1 w=$2 cpus=$3 d=$WORK/$1 pid
  case $t in
    nginx) start_peer nginx "$d" "$cpus"; pid=$! ;;
    haproxy) start_peer haproxy "$d" "$cpus"; pid=$! ;;
    weir) LISTEN=127.0.0.1:${PORT[weir]} WORKERS=$w BACKEND=127.0.0.1:$P_BE REGISTRY_FILE=$d/registry.yaml \
        WEIR_BIN=$WEIR_BIN taskset -c "$cpus" "$HERE/weir.sh" plain >"$d/logs/stdout" 2>&1 & pid=$! ;;
    *) die "unknown target $t" ;;
  esac
  STARTED+=("$pid"); LAST_PID=$pid
}


{
  echo "date: $(date -Is)"; echo "cpus: $NCPU x $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
  echo "nginx: $(nginx -v 2>&1)"; echo "haproxy: $(haproxy -v | head -1)"; echo "wrk: $(wrk -v 2>&1 | head -1)"
  echo "weir: $WEIR_BIN"; echo "backend: $SLOW_BIN (delay ${DELAY_MS} ms)"; echo "fd limit: $FDLIM"
  echo "params: DURATION=$DURATION WARMUP=$WARMUP RUNS=$RUNS PIN_MODES='$PIN_MODES' TARGETS='$TARGETS' S4_CONNS='$S4_CONNS' DELAY_MS=$DELAY_MS"
  echo "other load at start (loadavg): $(cat /proc/loadavg)"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2
for t in $TARGETS; do [[ $t != direct ]] && port_busy "${PORT[$t]}" && die "port ${PORT[$t]} ($t) already in use"; done
port_busy "$P_BE" && die "backend port $P_BE already in use"

for mode in $PIN_MODES; do
  case $mode in
    split) LG_CPUS=$CPU_A; BE_CPUS=$CPU_A; PX_CPUS=$CPU_B; PX_W=1; WRK_THREADS=1 ;;
    none)  LG_CPUS=0-$((NCPU-1)); BE_CPUS=$LG_CPUS; PX_CPUS=$LG_CPUS; PX_W=$NCPU; WRK_THREADS=$NCPU ;;
    *) die "unknown PIN mode $mode" ;;
  esac
  log "=== S4 mode=$mode: wrk+backend cpus=$LG_CPUS, proxy cpus=$PX_CPUS (workers $PX_W), delay ${DELAY_MS} ms"
  taskset -c "$BE_CPUS" "$SLOW_BIN" "127.0.0.1:$P_BE" "$DELAY_MS" >"$WORK/backend.log" 2>&1 &
  BPID=$!; STARTED+=("$BPID")
  answers_with "http://127.0.0.1:$P_BE/" ok 100 || die "backend did not start: $(tail -3 "$WORK/backend.log")"
  for ((run=1; run<=RUNS; run++)); do
    order=$TARGETS
    ((run % 2 == 0)) && order=$(echo "$TARGETS" | tr ' ' '\n' | grep . | tac | tr '\n' ' ')
    for t in $order; do
      ppid=""
      if [[ $t != direct ]]; then
        write_conf "$t" "$PX_W"
        start_target "$t" "$PX_W" "$PX_CPUS"; ppid=$LAST_PID
        if ! answers_with "http://127.0.0.1:${PORT[$t]}/" ok $((WEIR_READY_S * 10)); then
          log "!! $t did not come up on ${PORT[$t]}"; tail -5 "$WORK/$t/logs/"* >&2 2>/dev/null
          echo "$mode run $run $t: did not start" >> "$NOTES"; stop_pid "$ppid"; forget_pid "$ppid"; continue
        fi
      fi
      wait_quiet
      log "--- mode=$mode run=$run target=$t pid=${ppid:-none} (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
      for c in $S4_CONNS; do
        WRK_CONNS=$c measured measure_wrk "$mode" "$run" s4 "$t" "$ppid" /s4 "$WORK/get.lua"
      done
      if [[ -n $ppid ]]; then
        for f in "$WORK/$t/"*.conf "$WORK/$t/"*.cfg "$WORK/$t/"*.yaml; do [[ -e $f ]] && cp "$f" "$OUT/raw/$t-${f##*/}"; done
        stop_pid "$ppid"; forget_pid "$ppid"
      fi
    done
  done
  stop_pid "$BPID"; forget_pid "$BPID"
done
log "results: $CSV ; raw: $OUT/raw/"
