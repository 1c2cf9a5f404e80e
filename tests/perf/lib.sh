#!/usr/bin/env bash
# lib.sh - helpers shared by peers.sh and gateway.sh (sourced, never run): logging, process
# bookkeeping of PIDs this script started, CPU ticks and memory of a process tree, h2load log
# percentiles, and the "wait until the shared machine is quiet / re-measure disturbed rows" loop.
# The caller defines STARTED=() and CSV (whose 25th column is foreign_cores) before measuring.

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

stop_pid() { # TERM, wait up to 5 s, then KILL - only PIDs we started
  local p=$1 i
  kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null
  for ((i=0; i<50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  return 0
}
forget_pid() { local p=$1 q; local -a keep=(); for q in "${STARTED[@]}"; do [[ $q == "$p" ]] || keep+=("$q"); done; STARTED=("${keep[@]}"); }

tree_pids() { # pid and all descendants
  local p=$1 c
  [[ -d /proc/$p ]] || return 0
  echo "$p"
  for c in $(pgrep -P "$p" 2>/dev/null); do tree_pids "$c"; done
}
cpu_ticks() { # utime+stime summed over a process tree (all threads)
  local t=0 p v
  for p in $(tree_pids "$1"); do
    v=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12+$13}') || v=0
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
self_child_ticks() { sed 's/^.*) //' /proc/$$/stat | awk '{print $14+$15}'; } # reaped children of this shell
mem_kib() { # "<pss_kib> <rss_kib>" summed over a process tree
  local pss=0 rss=0 p a b
  for p in $(tree_pids "$1"); do
    a=$(awk '/^Pss:/{s+=$2} END{print s+0}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    b=$(awk '/^VmRSS:/{print $2+0}' "/proc/$p/status" 2>/dev/null || echo 0)
    pss=$((pss + ${a:-0})); rss=$((rss + ${b:-0}))
  done
  echo "$pss $rss"
}
sys_busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; } # time the hypervisor ran others on our CPUs
now() { date +%s.%N; }
port_busy() { ss -ltnH "sport = :$1" 2>/dev/null | grep -q .; }

# raises the fd limit as far as allowed; sets FDLIM, NGX_CONNS (nginx worker_connections) and
# HAP_MAXCONN (HAProxy maxconn: two fds per proxied connection, 40,000 at most)
# installs the Debian packages of the commands (or, for a name with a slash, files) missing, as
# root unless NO_INSTALL=1; else fails naming them. args: command:package ... /a/file:package ...
install_missing() {
  local c need=()
  for c in "$@"; do
    if [[ ${c%%:*} == */* ]]; then [[ -e ${c%%:*} ]] || need+=("${c#*:}")
    else command -v "${c%%:*}" >/dev/null || need+=("${c#*:}"); fi
  done
  ((${#need[@]})) || return 0
  [[ ${NO_INSTALL:-0} != 1 && $(id -u) == 0 ]] || die "missing packages: ${need[*]}"
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${need[@]}" >/dev/null 2>&1; } ||
    die "apt-get install ${need[*]} failed"
}

# The CPU level weir-proxy's release builds target: WEIR_TARGET_CPU when set ("" for rustc's
# default, x86-64), else x86-64-v3 (AVX2, BMI2, FMA, MOVBE: every x86 server CPU since 2013-17)
# when this host has all of it, which callgrind put at 4.3% fewer instructions a request in S1.
weir_target_cpu() {
  if [[ -n ${WEIR_TARGET_CPU+set} ]]; then echo "$WEIR_TARGET_CPU"; return; fi
  [[ $(rustc -vV | sed -n 's/^host: //p') == x86_64-* ]] || return 0
  local want have
  want=$(rustc --print cfg -C target-cpu=x86-64-v3 | grep '^target_feature=' | sort)
  have=$(rustc --print cfg -C target-cpu=native | grep '^target_feature=' | sort)
  [[ -z $(comm -23 <(echo "$want") <(echo "$have")) ]] && echo x86-64-v3
  return 0
}
# RUSTFLAGS for that level. A micro-architecture level (x86-64-v2/v3/v4) is also written into the
# binary's ELF notes (GNU_PROPERTY_X86_ISA_1_NEEDED, by GNU ld: rust-lld does not write it), so on
# an older CPU glibc's loader (2.33 on) refuses to start it, "CPU ISA level is lower than
# required", instead of the process dying of SIGILL at its first AVX2 instruction.
target_cpu_rustflags() {
  local c; c=$(weir_target_cpu)
  [[ -n $c ]] || return 0
  printf '%s' "-Ctarget-cpu=$c"
  [[ $c == x86-64-v[234] ]] && printf ' %s' -Clinker-features=-lld "-Clink-arg=-Wl,-z,$c"
  echo
}

raise_fd_limit() {
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  FDLIM=$(ulimit -n); [[ $FDLIM == unlimited ]] && FDLIM=65536
  HAP_MAXCONN=$(( (FDLIM - 200) / 2 )); ((HAP_MAXCONN > 40000)) && HAP_MAXCONN=40000
  NGX_CONNS=$(( FDLIM / 2 ))
}

# the start of every nginx.conf of the benchmarks (peers and backends), up to and inside
# "http {": process, fds, logs off, temp paths under DIR, client keep-alive without limits
# The global and defaults sections of a peer's haproxy.cfg. args: mode (http|tcp) workers
haproxy_head() {
  cat <<EOF
global
  nbthread $2
  maxconn $HAP_MAXCONN
defaults
  mode $1
  timeout connect 5s
  timeout client 300s
  timeout server 300s
EOF
  if [[ $1 == http ]]; then printf '  timeout http-keep-alive 300s\n  http-reuse always\n'; fi
}

# Starts nginx or HAProxy in the background on its config in DIR (the caller reads $!).
# args: nginx|haproxy dir cpus
start_peer() {
  case $1 in
    nginx) taskset -c "$3" nginx -p "$2" -c "$2/nginx.conf" -g 'daemon off;' >"$2/logs/stdout" 2>&1 & ;;
    haproxy) taskset -c "$3" haproxy -db -f "$2/haproxy.cfg" >"$2/logs/stdout" 2>&1 & ;;
  esac
}

nginx_http_head() { # dir workers
  cat <<EOF
worker_processes $2;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
worker_rlimit_nofile $FDLIM;
events { worker_connections $NGX_CONNS; }
http {
  access_log off;
  client_body_temp_path $1/cb; proxy_temp_path $1/pt; fastcgi_temp_path $1/ft;
  uwsgi_temp_path $1/ut; scgi_temp_path $1/st;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
EOF
}

# polls URL up to TRIES times (100 ms apart) until its body is BODY
answers_with() { # url body tries
  local i; for ((i=0; i<$3; i++)); do [[ $(curl -s -m 2 "$1" 2>/dev/null) == "$2" ]] && return 0; sleep 0.1; done; return 1
}

# the gateway-style results file (gateway.sh, s4.sh, policy.sh): CSV with its header, NOTES empty
init_results() {
  CSV=$OUT/results.csv; rm -f "$OUT/results-attempts.csv"
  NOTES=$OUT/notes.txt; : > "$NOTES"
  echo "mode,run,phase,target,conns,rate,requests,secs,rps,errors,mean_ms,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,proxy_us_req,backend_us_req,loadgen_us_req,busy_cores,proxy_pss_mib,proxy_rss_mib,pss_before_mib,kib_per_conn,foreign_cores,p95_ms,timeouts" > "$CSV"
}

# stops every PID in STARTED and removes WORK: the EXIT trap of every benchmark script
cleanup() { local p; for p in "${STARTED[@]}"; do stop_pid "$p"; done; rm -rf "$WORK"; }

# percentiles from an h2load --log-file (col3 = us); prints "n ok mean p50 p90 p99 p999 max" (ms)
h2log_stats() {
  awk -F'\t' '{n++; if ($2>=200 && $2<400) ok++; print $3}
              END{print "N", n+0, ok+0 > "/dev/stderr"}' "$1" 2>"$1.n" | sort -n | awk -v nf="$1.n" '
    {v[NR]=$1; s+=$1}
    END{ getline line < nf; split(line, q, " "); n=NR; if(n==0){print "0 0 0 0 0 0 0 0"; exit}
      i50=int(n*0.50); i90=int(n*0.90); i99=int(n*0.99); i999=int(n*0.999)
      if(i50<1)i50=1; if(i90<1)i90=1; if(i99<1)i99=1; if(i999<1)i999=1
      printf "%d %d %.3f %.3f %.3f %.3f %.3f %.3f\n", q[2], q[3], s/n/1000, v[i50]/1000, v[i90]/1000, v[i99]/1000, v[i999]/1000, v[n]/1000 }'
}

# wait (up to QUIET_WAIT_S) until other processes use < QUIET_MAX_CORES of CPU,
# so that a shared machine does not silently skew one target more than another
QUIET_MAX_CORES=${QUIET_MAX_CORES:-0.25}
QUIET_WAIT_S=${QUIET_WAIT_S:-180}
FOREIGN_MAX=${FOREIGN_MAX:-0.15}     # a row whose foreign CPU exceeds this is re-measured ...
FOREIGN_RETRIES=${FOREIGN_RETRIES:-3} # ... up to this many times (the least disturbed attempt is
                                      # kept, flagged if still over)
# A latency row at a fixed low rate (peers.sh's rate phase) sets ROW_STEAL, the cores the
# hypervisor gave other tenants during its window; above STEAL_MAX it is re-measured like a
# foreign-loaded row. A few ms of a stolen vCPU are nothing to a throughput row and most of a
# p99 at 2,000 req/s: with at most 0.004 cores of steal p99 was 0.36-0.76 ms, at 0.006-0.014
# 0.85-1.6, at 0.02-0.05 1.6-4.3, at 0.07-0.18 4.7-11, whichever proxy it hit.
STEAL_MAX=${STEAL_MAX:-0.005}
# RETRY_BUDGET_S (optional) caps the seconds spent waiting for quiet and re-measuring over the
# whole script; once spent, rows are measured once, right away, and flagged by foreign_cores
EXTRA_USED_S=0
over_budget() { [[ -n ${RETRY_BUDGET_S:-} ]] && ((EXTRA_USED_S >= RETRY_BUDGET_S)); }
gt() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a>b)}'; } # numeric a > b (decimals too)
# How far a row went over its limits: the larger of foreign/FOREIGN_MAX and steal/STEAL_MAX
# (above 1: disturbed). args: foreign_cores steal_cores (either may be empty)
disturbance() {
  awk -v f="${1:-0}" -v s="${2:-0}" -v fm="$FOREIGN_MAX" -v sm="$STEAL_MAX" \
    'BEGIN{a=f/fm; b=s/sm; printf "%.4f", (a>b)?a:b}'
}
# Every attempt, the kept one and those measured again, also goes to results-attempts.csv: the
# report sets S5's p99 against each window's steal over all of them (report.py's S5 by steal).
record_attempt() {
  local all=${CSV%.csv}-attempts.csv
  [[ -s $all ]] || head -1 "$CSV" > "$all"
  tail -1 "$CSV" >> "$all"
}
measured() { # run one measurement function; redo it if other tenants disturbed it, and keep the
             # least disturbed attempt (judged by the load, never by the result)
  local tries=0 f n t0=-1 d best="" best_d=""
  while :; do
    n=$(wc -l < "$CSV"); ROW_STEAL=
    "$@"
    ((t0 >= 0)) && EXTRA_USED_S=$((EXTRA_USED_S + SECONDS - t0))
    ((n == $(wc -l < "$CSV"))) && break   # no row: nothing to judge (and the last row is not ours)
    record_attempt
    f=$(tail -1 "$CSV" | cut -d, -f25)
    d=$(disturbance "$f" "$ROW_STEAL")
    gt "$d" 1 &&
      log "  disturbed: foreign load $f cores (limit $FOREIGN_MAX), steal ${ROW_STEAL:--} cores (limit $STEAL_MAX)"
    if [[ -n $best ]] && gt "$d" "$best_d"; then
      sed -i '$ d' "$CSV"; printf '%s\n' "$best" >> "$CSV"; d=$best_d
      log "  keeping the earlier attempt, less disturbed"
    fi
    if gt "$d" 1 && ((tries < FOREIGN_RETRIES)) && ! over_budget; then
      tries=$((tries+1)); log "  re-measuring ($tries/$FOREIGN_RETRIES)"
      best=$(tail -1 "$CSV"); best_d=$d
      sed -i '$ d' "$CSV"; wait_quiet; t0=$SECONDS
    else break; fi
  done
}
QUIET_WINDOW_S=${QUIET_WINDOW_S:-3}
wait_quiet() {
  local t0=$SECONDS a b busy
  over_budget && return 0
  while :; do
    a=$(sys_busy_ticks); sleep "$QUIET_WINDOW_S"; b=$(sys_busy_ticks)
    busy=$(awk -v d=$((b-a)) -v clk="$CLK" -v w="$QUIET_WINDOW_S" 'BEGIN{printf "%.2f", d/clk/w}')
    awk -v x="$busy" -v m="$QUIET_MAX_CORES" 'BEGIN{exit !(x<m)}' && break
    if ((SECONDS - t0 >= QUIET_WAIT_S)) || over_budget; then log "  machine not quiet ($busy cores busy by others) after $((SECONDS - t0))s - measuring anyway"; break; fi
    ((SECONDS - t0 <= QUIET_WINDOW_S + 1)) && log "  waiting for machine to be quiet (others use $busy cores)"
    EXTRA_USED_S=$((EXTRA_USED_S + QUIET_WINDOW_S))
  done
  return 0
}

# Interleaved rounds (peers.sh, gateway.sh): the caller fills the array UP with the targets that
# are running and the associative array CAN with "<target>.<need>" for what each can serve, and
# sets MODE. Each round visits the targets in an order rotated by the round number, so none is
# always measured first.
rotated() { local k=$1 n=${#UP[@]} i; for ((i=0; i<n; i++)); do echo "${UP[(i+k)%n]}"; done; }
each() { # round need fn args... - "fn args... target" for every target (that has CAN[target.need]
         # unless need is empty) in rotated order, each after the machine is quiet
  local r=$1 need=$2 t; shift 2
  for t in $(rotated "$r"); do
    [[ -z $need || -n ${CAN[$t.$need]:-} ]] || continue
    wait_quiet
    log "--- mode=$MODE round=$r ${1%_row} ${*:2} target=$t (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
    "$@" "$t"
  done
}
