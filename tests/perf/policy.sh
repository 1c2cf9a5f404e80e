#!/usr/bin/env bash
# policy.sh - the cost of traffic policy (issue 4): S1's load (2-byte body, HTTP/1.1 keep-alive,
# wrk -c POLICY_CONNS=50) through one weir gateway, on routes that differ only in what they carry
# (weir.sh policy):
#   bare      no filter, service without policy
#   filters   RequestHeaderModifier + URLRewrite + AddQueryParameter
#   policy    the same filters + retry { attempts: 2 } + route circuitBreaker, to a service with a
#             policy (retryBudget, endpoint circuitBreaker): the issue's "policy" route
#   timeouts  policy + timeouts { request: 10s, backendRequest: 5s } (a timer per request)
# One proxy process serves every variant; each round measures each variant once, odd rounds in
# VARIANTS order and even rounds reversed (bare policy policy bare ...), so drift on the shared
# machine cancels out of the ratios. Before measuring, a check proves each route rewrites, adds the
# parameter and the header as configured.
#
# Then, when valgrind is installed (CALLGRIND=1, the default then), the same proxy runs under
# callgrind and each variant gets CG_REQUESTS requests (h2load, 10 keep-alive connections) between a
# reset and a dump of the counters: user-space instructions per request, which do not move with the
# load of other tenants (the kernel's share, about 60% of the CPU here, is not counted).
#
# Results: $OUT/results.csv (gateway.sh's columns; phase "policy-<variant>", run = round),
# $OUT/callgrind.csv (variant,requests,instructions), $OUT/cpu_split.csv (the proxy's user and
# system ticks over all wrk windows: the share of its CPU that callgrind's count stands for), raw/.
# Usage: WEIR_BIN=target/release/weir-proxy ROUNDS=4 ./policy.sh
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=gateway-conf.sh
. "$HERE/gateway-conf.sh"   # write_backend_conf: nginx answering "OK" and echoing what it got

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-2}
VARIANTS=${VARIANTS:-"bare filters policy timeouts"}
POLICY_CONNS=${POLICY_CONNS:-50}
PIN_MODES=${PIN_MODES:-split}
BASE_PORT=${BASE_PORT:-28800}
CPU_A=${CPU_A:-0}; CPU_B=${CPU_B:-1}
OUT=${OUT:-/tmp/policy-$(date +%Y%m%d-%H%M%S)}
WEIR_BIN=${WEIR_BIN:-}
WEIR_READY_S=${WEIR_READY_S:-20}
CALLGRIND=${CALLGRIND:-$(command -v valgrind >/dev/null && command -v h2load >/dev/null && echo 1 || echo 0)}
CG_REQUESTS=${CG_REQUESTS:-20000}

P_B1=$BASE_PORT; P_B2=$((BASE_PORT+1)); P_GBE=$((BASE_PORT+2))
declare -A PORT=( [weir]=$((BASE_PORT+13)) )
[[ -x $WEIR_BIN ]] || die "WEIR_BIN='$WEIR_BIN' is not an executable weir-proxy"
for c in wrk curl nginx taskset; do command -v $c >/dev/null || die "missing $c (tests/perf/run installs it)"; done
raise_fd_limit
NCPU=$(nproc); CLK=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/policy-work.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$OUT/raw" || die "cannot create $OUT"
init_results

declare -a STARTED=()
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=gateway-measure.sh
. "$HERE/gateway-measure.sh"   # acct_begin/acct_end/emit_row, hdr/get, measure_wrk and get.lua

check_variant() { # variant - what the backend received on that route
  local var=$1 port=${PORT[weir]} uri want_path=/rewritten/item want_src=gateway
  [[ $var == bare ]] && { want_path=/bare/item; want_src=""; }
  [[ $(get "http://127.0.0.1:$port/$var/item?a=1") == 200 ]] || { echo "GET /$var/item: no 200"; return 1; }
  uri=$(hdr X-Upstream-Uri)
  [[ ${uri%%\?*} == "$want_path" ]] || { echo "/$var/item?a=1 reached the backend as '$uri' (want $want_path)"; return 1; }
  if [[ $var == bare ]]; then
    [[ $uri == "/bare/item?a=1" ]] || { echo "/bare/item?a=1 reached the backend as '$uri'"; return 1; }
  else
    [[ "&${uri#*\?}&" == *"&a=1&"* && "&${uri#*\?}&" == *"&foo=bar&"* ]] ||
      { echo "/$var/item?a=1 reached the backend as '$uri' (want a=1 and foo=bar)"; return 1; }
  fi
  [[ $(hdr X-Upstream-Source) == "$want_src" ]] || { echo "/$var: X-Request-Source is '$(hdr X-Upstream-Source)', want '$want_src'"; return 1; }
}

user_system_ticks() { # pid - "utime stime" of the process (all its threads)
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12, $13}'
}

start_weir() { # cpus workers [wrapper...] - weir.sh policy in the background; sets ppid
  local cpus=$1 w=$2 d=$WORK/weir i; shift 2
  mkdir -p "$d"
  LISTEN=127.0.0.1:${PORT[weir]} WORKERS=$w BACKEND=127.0.0.1:$P_B1 REGISTRY_FILE=$d/registry.yaml \
    WEIR_BIN=$WEIR_BIN WEIR_WRAP="$*" taskset -c "$cpus" "$HERE/weir.sh" policy >"$d/stdout" 2>&1 &
  ppid=$!; STARTED+=("$ppid")
  for ((i=0; i<WEIR_READY_S*10; i++)); do
    [[ $(curl -s -m 2 "http://127.0.0.1:${PORT[weir]}/bare/" 2>/dev/null) == OK ]] && return 0
    sleep 0.1
  done
  die "weir did not come up: $(tail -5 "$d/stdout")"
}

# Instructions per request under callgrind, per variant (after a warm-up of 2,000 requests).
measure_callgrind() { # cpus
  local v cg f n
  echo "variant,requests,instructions" > "$OUT/callgrind.csv"
  start_weir "$1" 1 valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg.%p" --dump-instr=no
  cg=$ppid  # taskset, weir.sh and valgrind exec each other: one process
  for v in $VARIANTS; do
    h2load --h1 -n 2000 -c 10 "http://127.0.0.1:${PORT[weir]}/$v/item" >/dev/null 2>&1
    callgrind_control -z "$cg" >/dev/null 2>&1
    n=$(h2load --h1 -n "$CG_REQUESTS" -c 10 "http://127.0.0.1:${PORT[weir]}/$v/item" 2>&1 |
      awk '/^requests:/{print $8}')
    callgrind_control -d "policy-$v" "$cg" >/dev/null 2>&1
    f=$(grep -l "^desc: Trigger: dump policy-$v\$" "$WORK"/cg.* 2>/dev/null | head -1)
    [[ -n $f ]] || { log "  callgrind: no dump for $v"; continue; }
    echo "$v,${n:-0},$(awk '/^summary:/{print $2}' "$f")" >> "$OUT/callgrind.csv"
    log "  callgrind $v: $(awk -F, -v v="$v" '$1==v && $2>0 {printf "%.0f instructions/request over %d requests", $3/$2, $2}' "$OUT/callgrind.csv")"
  done
  stop_pid "$ppid"; forget_pid "$ppid"
}

{
  echo "date: $(date -Is)"; echo "cpus: $NCPU x $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
  echo "wrk: $(wrk -v 2>&1 | head -1)"; echo "weir: $WEIR_BIN"
  echo "params: DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS VARIANTS='$VARIANTS' POLICY_CONNS=$POLICY_CONNS PIN_MODES='$PIN_MODES' CALLGRIND=$CALLGRIND CG_REQUESTS=$CG_REQUESTS"
  echo "other load at start (loadavg): $(cat /proc/loadavg)"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2
for p in $P_B1 $P_B2 $P_GBE ${PORT[weir]}; do port_busy "$p" && die "port $p already in use"; done

for mode in $PIN_MODES; do
  case $mode in
    split) LG_CPUS=$CPU_A; BE_CPUS=$CPU_A; PX_CPUS=$CPU_B; PX_W=1; BE_W=1; WRK_THREADS=1 ;;
    none)  LG_CPUS=0-$((NCPU-1)); BE_CPUS=$LG_CPUS; PX_CPUS=$LG_CPUS; PX_W=$NCPU; BE_W=$NCPU; WRK_THREADS=$NCPU ;;
    *) die "unknown PIN mode $mode" ;;
  esac
  log "=== policy mode=$mode: wrk+backend cpus=$LG_CPUS, weir cpus=$PX_CPUS (workers $PX_W), wrk -c$POLICY_CONNS"
  write_backend_conf "$BE_W"
  taskset -c "$BE_CPUS" nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" -g 'daemon off;' >"$WORK/backend/logs/stdout" 2>&1 &
  BPID=$!; STARTED+=("$BPID")
  start_weir "$PX_CPUS" "$PX_W"
  cp "$WORK/weir/registry.yaml" "$OUT/raw/weir-registry.yaml"
  for v in $VARIANTS; do
    why=$(check_variant "$v") || die "route /$v is not configured as it should be: $why"
  done
  wait_quiet
  split0=$(user_system_ticks "$ppid")
  for ((round=1; round<=ROUNDS; round++)); do
    order=$VARIANTS
    ((round % 2 == 0)) && order=$(echo "$VARIANTS" | tr ' ' '\n' | grep . | tac | tr '\n' ' ')
    log "--- round $round: $order (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
    for v in $order; do
      WRK_CONNS=$POLICY_CONNS measured measure_wrk "$mode" "$round" "policy-$v" weir "$ppid" "/$v/item" "$WORK/get.lua"
    done
  done
  read -r u0 s0 <<<"$split0"; read -r u1 s1 <<<"$(user_system_ticks "$ppid")"
  echo "mode,user_ticks,system_ticks" > "$OUT/cpu_split.csv"
  echo "$mode,$((u1 - u0)),$((s1 - s0))" >> "$OUT/cpu_split.csv"
  stop_pid "$ppid"; forget_pid "$ppid"
  if [[ $CALLGRIND == 1 && $mode == split ]]; then
    log "--- callgrind: $CG_REQUESTS requests per variant"
    measure_callgrind "$PX_CPUS"
  fi
  stop_pid "$BPID"; forget_pid "$BPID"
done
log "results: $CSV ; raw: $OUT/raw/"
