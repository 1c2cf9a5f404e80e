#!/usr/bin/env bash
# gateway.sh - the gateway scenarios of BENCHMARKS.md that peers.sh lacks, against
# direct | nginx | haproxy | weir, with peers.sh's pinning and CPU accounting:
#   s2    route /auth-service/** with a prefix rewrite to 2 load-balanced endpoints, no client
#         keep-alive: ab -n AB_N at each concurrency of AB_CONNS (req/s, p50/p95/max, failures)
#   s3    route with no filter (/bare), then with AddQueryParameter + a set request header
#         (/filtered); GET, and POST with a JSON body: wrk -c S3_CONNS (req/s, errors, timeouts),
#         S3_ROUNDS times per run
# Every target runs for the whole mode and each row is measured target after target, in an
# order rotated every round, so that other tenants' load spreads over the targets alike.
#   grpc  unary gRPC over h2c: h2load, GRPC_CLIENTS connections x GRPC_STREAMS streams, a framed
#         protobuf POST body with content-type application/grpc and te: trailers
# Each proxy serves every phase from one config (gateway-conf.sh for nginx and HAProxy, weir.sh
# for weir). Before a phase, check_* proves the target rewrites, balances and filters as
# configured; a target that fails is not measured in that phase and the reason goes to notes.txt.
# "direct" sends the same load to the backend without a proxy (the rewritten path; S3 bare only).
#
# Results: $OUT/results.csv (peers.sh's 25 columns, then p95_ms and timeouts), notes.txt, raw/.
# Usage: WEIR_BIN=target/release/weir-proxy DURATION=10 AB_N=20000 ./gateway.sh
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=gateway-conf.sh
. "$HERE/gateway-conf.sh"

DURATION=${DURATION:-10}          # seconds per measured wrk/h2load window
WARMUP=${WARMUP:-3}               # seconds of discarded load before each window
RUNS=${RUNS:-1}
PIN_MODES=${PIN_MODES:-split}     # split | none, as in peers.sh
TARGETS=${TARGETS:-"direct nginx haproxy weir"}
PHASES=${PHASES:-"s2 s3 grpc"}
AB_N=${AB_N:-20000}               # requests per ab run (BENCHMARKS.md: 100000)
AB_CONNS=${AB_CONNS:-"10 50 100 200 500"}
S3_CONNS=${S3_CONNS:-500}
S3_ROUNDS=${S3_ROUNDS:-3}         # S3 rows per run, targets interleaved; the report takes the median
GRPC_CLIENTS=${GRPC_CLIENTS:-10}
GRPC_STREAMS=${GRPC_STREAMS:-20}
BASE_PORT=${BASE_PORT:-28500}
CPU_A=${CPU_A:-0}                 # split mode: load generator + backend
CPU_B=${CPU_B:-1}                 # split mode: proxy
OUT=${OUT:-/tmp/gateway-$(date +%Y%m%d-%H%M%S)}
WEIR_BIN=${WEIR_BIN:-}
WEIR_READY_S=${WEIR_READY_S:-20}
NO_INSTALL=${NO_INSTALL:-0}

P_B1=$BASE_PORT; P_B2=$((BASE_PORT+1)); P_GBE=$((BASE_PORT+2))
declare -A PORT=( [direct]=$P_B1 [nginx]=$((BASE_PORT+11)) [haproxy]=$((BASE_PORT+12)) [weir]=$((BASE_PORT+13)) )
# weir takes h2c prior knowledge on its one gateway listener; nginx needs a separate http2 server
declare -A H2PORT=( [direct]=$P_GBE [nginx]=$((BASE_PORT+21)) [haproxy]=$((BASE_PORT+22)) [weir]=$((BASE_PORT+13)) )
[[ " $TARGETS " == *" weir "* && ! -x $WEIR_BIN ]] && die "WEIR_BIN='$WEIR_BIN' is not an executable weir-proxy"

install_missing ab:apache2-utils wrk:wrk h2load:nghttp2-client nginx:nginx haproxy:haproxy \
  curl:curl taskset:util-linux

raise_fd_limit
NCPU=$(nproc)
CLK=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/gateway-work.XXXXXX)
chmod 755 "$WORK"  # nginx workers run unprivileged and serve the gRPC reply from here
mkdir -p "$OUT/raw" || die "cannot create $OUT"
init_results

declare -a STARTED=()  # PIDs this script started (stop_pid/forget_pid in lib.sh)
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=gateway-measure.sh
. "$HERE/gateway-measure.sh"

# start target; sets LAST_PID (root of its process tree). $1=target $2=workers $3=cpus
start_target() {
  local t=$1 w=$2 cpus=$3 d=$WORK/$1 pid
  case $t in
    nginx) start_peer nginx "$d" "$cpus"; pid=$! ;;
    haproxy) start_peer haproxy "$d" "$cpus"; pid=$! ;;
    weir) mkdir -p "$d/logs"
      LISTEN=127.0.0.1:${PORT[weir]} WORKERS=$w BACKEND=127.0.0.1:$P_B1 GRPC_BACKEND=127.0.0.1:$P_GBE \
        AUTH_BACKENDS="127.0.0.1:$P_B1 127.0.0.1:$P_B2" REGISTRY_FILE=$d/registry.yaml WEIR_BIN=$WEIR_BIN \
        taskset -c "$cpus" "$HERE/weir.sh" gateway >"$d/logs/stdout" 2>&1 & pid=$! ;;
    *) die "unknown target $t" ;;
  esac
  STARTED+=("$pid"); LAST_PID=$pid
}


{
  echo "date: $(date -Is)"; echo "cpus: $NCPU x $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
  echo "nginx: $(nginx -v 2>&1)"; echo "haproxy: $(haproxy -v | head -1)"; echo "ab: $(ab -V | head -1)"
  echo "wrk: $(wrk -v 2>&1 | head -1)"; echo "h2load: $(h2load --version 2>&1 | head -1)"; echo "weir: $WEIR_BIN"
  echo "params: DURATION=$DURATION WARMUP=$WARMUP RUNS=$RUNS PIN_MODES='$PIN_MODES' TARGETS='$TARGETS' PHASES='$PHASES' AB_N=$AB_N AB_CONNS='$AB_CONNS' S3_CONNS=$S3_CONNS S3_ROUNDS=$S3_ROUNDS GRPC=${GRPC_CLIENTS}x${GRPC_STREAMS}"
  echo "other load at start (loadavg): $(cat /proc/loadavg)"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2
for t in $TARGETS; do port_busy "${PORT[$t]}" && [[ $t != direct ]] && die "port ${PORT[$t]} ($t) already in use"; done
for p in $P_B1 $P_B2 $P_GBE; do port_busy "$p" && die "backend port $p already in use"; done

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
for mode in $PIN_MODES; do
  case $mode in
    split) LG_CPUS=$CPU_A; BE_CPUS=$CPU_A; PX_CPUS=$CPU_B; PX_W=1; BE_W=1; WRK_THREADS=1 ;;
    none)  LG_CPUS=0-$((NCPU-1)); BE_CPUS=$LG_CPUS; PX_CPUS=$LG_CPUS; PX_W=$NCPU; BE_W=$NCPU; WRK_THREADS=$NCPU ;;
    *) die "unknown PIN mode $mode" ;;
  esac
  log "=== mode=$mode: loadgen+backend cpus=$LG_CPUS, proxy cpus=$PX_CPUS (workers $PX_W)"
  write_backend_conf "$BE_W"
  taskset -c "$BE_CPUS" nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" -g 'daemon off;' >"$WORK/backend/logs/stdout" 2>&1 &
  BPID=$!; STARTED+=("$BPID")
  answers_with "http://127.0.0.1:$P_B1/" OK 100 || die "backend did not start: $(tail -5 "$WORK/backend/logs/"* 2>/dev/null)"
  # Every proxy runs for the whole mode, idle while another is measured, and each row is
  # measured target after target: a burst of other tenants' load then lands on one row of every
  # target, not on every row of one target (measured target by target, nginx's S3 CPU once went
  # from 20.3 to 32.0 us/request between two rows of the same run).
  declare -A PROXY_PID=() CAN=()
  UP=() MODE=$mode
  for t in $TARGETS; do
    if [[ $t == direct ]]; then PROXY_PID[$t]=""; UP+=("$t"); continue; fi
    write_target_conf "$t" "$PX_W"
    start_target "$t" "$PX_W" "$PX_CPUS"; PROXY_PID[$t]=$LAST_PID
    tries=100; [[ $t == weir ]] && tries=$((WEIR_READY_S*10))
    if ! answers_with "http://127.0.0.1:${PORT[$t]}/bare/" OK "$tries"; then
      log "!! $t did not come up on ${PORT[$t]}; log tail:"; tail -5 "$WORK/$t/logs/"* >&2 2>/dev/null
      echo "$mode $t: did not start" >> "$NOTES"; stop_pid "$LAST_PID"; forget_pid "$LAST_PID"; continue
    fi
    UP+=("$t")
  done
  for t in "${UP[@]}"; do
    for ph in $PHASES; do checked "$t" "$ph" && CAN[$t.$ph]=1; done
  done
  s2_row() { measured measure_ab "$mode" "$run" "$2" "$1" "${PROXY_PID[$2]}"; }
  s3_row() { # round variant method target
    [[ $4 == direct && $2 == filtered ]] && return
    measured measure_wrk "$mode" "$1" "s3-$3-$2" "$4" "${PROXY_PID[$4]}" "/$2/item" "$WORK/$3.lua"
  }
  grpc_row() { measured measure_grpc "$mode" "$run" "$1" "${PROXY_PID[$1]}"; }
  for ((run=1; run<=RUNS; run++)); do
    if has_phase s2; then
      for c in $AB_CONNS; do each "$run" s2 s2_row "$c"; done
    fi
    if has_phase s3; then
      for ((k=1; k<=S3_ROUNDS; k++)); do
        r=$(( (run-1)*S3_ROUNDS + k ))
        for v in bare filtered; do
          for m in get post; do each "$r" s3 s3_row "$r" "$v" "$m"; done
        done
      done
    fi
    if has_phase grpc; then each "$run" grpc grpc_row; fi
  done
  for t in "${UP[@]}"; do
    [[ $t == direct ]] && continue
    for f in "$WORK/$t/"*.conf "$WORK/$t/"*.cfg "$WORK/$t/"*.yaml; do [[ -e $f ]] && cp "$f" "$OUT/raw/$t-${f##*/}"; done
    stop_pid "${PROXY_PID[$t]}"; forget_pid "${PROXY_PID[$t]}"
  done
  cp "$WORK/backend/nginx.conf" "$OUT/raw/backend-nginx.conf"
  stop_pid "$BPID"; forget_pid "$BPID"
done
log "results: $CSV ; notes: $NOTES ; raw: $OUT/raw/"
