#!/usr/bin/env bash
# gateway-measure.sh - gateway.sh's checks and measurements (sourced, never run). A check proves a
# target routes as configured before its numbers count; each measure_* appends one CSV row with
# the proxy's, backend's and load generator's CPU per request.
# Uses WORK OUT CSV NOTES CLK LG_CPUS WRK_THREADS BPID PORT[] H2PORT[] P_B1 P_B2 and the load knobs;
# s4.sh and policy.sh reuse its accounting and measure_wrk (with WRK_CONNS).

# ------------------------------------------------------------- load generator inputs
cat > "$WORK/get.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRKRESULT %d %d %d %d %d %d %d %.1f %d %d %d %d %d %d\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
EOF
{ cat <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[{"user":{"id":12345,"name":"Alice Example","email":"alice@example.com","roles":["reader","writer"]},"items":[{"sku":"A-100","qty":2,"price":19.99},{"sku":"B-200","qty":1,"price":5.5}],"note":"S3 POST body: a small JSON document the gateway passes through untouched"}]]
EOF
  cat "$WORK/get.lua"; } > "$WORK/post.lua"
# one gRPC message: 5-byte frame header (uncompressed, length 7) + protobuf field 1 = "world"
printf '\x00\x00\x00\x00\x07\x0a\x05world' > "$WORK/grpc-req.bin"

# --------------------------------------------------------------------------- checks
hdr() { # header name -> its value in the last curl -D dump
  awk -v n="$1" 'BEGIN{n=tolower(n)} { l=$0; sub(/\r$/, "", l); i=index(l, ":")
    if (i && tolower(substr(l, 1, i-1)) == n) { v=substr(l, i+1); sub(/^[ \t]+/, "", v); print v; exit } }' "$WORK/h"
}
get() { curl -s -m 5 -D "$WORK/h" -o "$WORK/body" -w '%{http_code}' "$@"; }

check_s2() { # prefix rewrite keeps the rest of the path and the query; both endpoints get traffic
  local port=${PORT[$1]} i uri ports=""
  [[ $1 == direct ]] && return 0
  for ((i=1; i<=20; i++)); do
    [[ $(get "http://127.0.0.1:$port/auth-service/hello?x=$i") == 200 ]] || { echo "GET /auth-service/hello: no 200"; return 1; }
    uri=$(hdr X-Upstream-Uri)
    [[ $uri == "/hello?x=$i" ]] || { echo "/auth-service/hello?x=$i reached the backend as '$uri'"; return 1; }
    ports+=" $(hdr X-Upstream-Port)"
  done
  [[ $ports == *" $P_B1"* && $ports == *" $P_B2"* ]] || echo "WARN: 20 requests went to one endpoint only (ports:$ports)"
}

check_s3() { # /bare passes the request as is; /filtered adds foo=bar and X-Request-Source
  local port=${PORT[$1]} uri
  [[ $(get -X POST -H 'Content-Type: application/json' --data-binary '{"a":1}' "http://127.0.0.1:$port/bare/item") == 200 ]] ||
    { echo "POST /bare/item: no 200"; return 1; }
  [[ $1 == direct ]] && return 0
  [[ $(get "http://127.0.0.1:$port/bare/item?a=1") == 200 ]] || { echo "GET /bare/item: no 200"; return 1; }
  uri=$(hdr X-Upstream-Uri)
  [[ $uri == "/bare/item?a=1" && -z $(hdr X-Upstream-Source) ]] ||
    { echo "/bare/item?a=1 reached the backend as '$uri' with X-Request-Source '$(hdr X-Upstream-Source)'"; return 1; }
  [[ $(get "http://127.0.0.1:$port/filtered/item?a=1") == 200 ]] || { echo "GET /filtered/item: no 200"; return 1; }
  uri=$(hdr X-Upstream-Uri)
  [[ $uri == "/filtered/item?"* && "&${uri#*\?}&" == *"&a=1&"* && "&${uri#*\?}&" == *"&foo=bar&"* ]] ||
    { echo "/filtered/item?a=1 reached the backend as '$uri' (want a=1 and foo=bar)"; return 1; }
  [[ $(hdr X-Upstream-Source) == gateway ]] || { echo "/filtered: X-Request-Source not set"; return 1; }
  [[ $(get -X POST -H 'Content-Type: application/json' --data-binary '{"a":1}' "http://127.0.0.1:$port/filtered/item") == 200 ]] ||
    { echo "POST /filtered/item: no 200"; return 1; }
}

check_grpc() { # a unary call comes back whole: 200, the reply message, then grpc-status 0 as a trailer
  # nghttp, not curl: curl 7.88 fails (error 92) on this backend's valid trailers once te: trailers is sent
  nghttp -v -d "$WORK/grpc-req.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:${H2PORT[$1]}/bench.Echo/Say" > "$WORK/trace" 2>&1
  grep -aq ':status: 200' "$WORK/trace" || { echo "gRPC call: no 200 ($(grep -a -m1 ':status' "$WORK/trace"))"; return 1; }
  awk '/recv DATA/{d=1} d && /recv .*grpc-status: 0/{ok=1} END{exit !ok}' "$WORK/trace" ||
    { echo "gRPC call: no reply message followed by a 'grpc-status: 0' trailer"; return 1; }
  grep -aq hello "$WORK/trace" || { echo "gRPC call: reply message missing"; return 1; }
}

checked() { # target phase - 0 when the target may be measured in the phase (warnings go to notes)
  local why
  if why=$("check_$2" "$1" 2>&1); then
    [[ -n $why ]] && { log "  $1 $2 check: $why"; echo "$1 $2: $why" >> "$NOTES"; }
    return 0
  fi
  log "!! $1 fails the $2 check: $why - $2 not measured for $1"
  echo "$1 $2: NOT MEASURED, check failed: $why" >> "$NOTES"
  return 1
}

# ---------------------------------------------------------------------- accounting
acct_begin() { # ppid
  A_P0=0; [[ -n $1 ]] && A_P0=$(cpu_ticks "$1")
  A_B0=$(cpu_ticks "$BPID"); A_L0=$(self_child_ticks); A_S0=$(sys_busy_ticks); A_W0=$(now)
}
acct_end() { # ppid
  A_W1=$(now); A_S1=$(sys_busy_ticks); A_L1=$(self_child_ticks); A_B1=$(cpu_ticks "$BPID")
  A_P1=0; [[ -n $1 ]] && A_P1=$(cpu_ticks "$1")
}
# one CSV row from the last acct_begin/acct_end window.
# args: mode run phase target conns requests secs errors timeouts mean p50 p90 p95 p99 p999 max ppid (ms)
emit_row() {
  local mem="0 0"; [[ -n ${17} ]] && mem=$(mem_kib "${17}")
  awk -v mode="$1" -v run="$2" -v ph="$3" -v t="$4" -v c="$5" -v req="$6" -v secs="$7" -v err="$8" -v to="$9" \
      -v lat="${10} ${11} ${12} ${14} ${15} ${16}" -v p95="${13}" -v clk="$CLK" -v mem="$mem" \
      -v dp=$((A_P1-A_P0)) -v db=$((A_B1-A_B0)) -v dl=$((A_L1-A_L0)) -v ds=$((A_S1-A_S0)) -v w0="$A_W0" -v w1="$A_W1" 'BEGIN{
    split(lat, a, " "); split(mem, m, " "); wall=w1-w0
    us = (req>0) ? 1e6/clk/req : 0
    printf "%s,%s,%s,%s,%s,,%d,%.2f,%.0f,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.2f,%.1f,%.1f,,,%.2f,%s,%d\n",
      mode, run, ph, t, c, req, secs, (secs>0)?req/secs:0, err, a[1], a[2], a[3], a[4], a[5], a[6],
      dp*us, db*us, dl*us, ds/clk/wall, m[1]/1024, m[2]/1024, (ds-dp-db-dl)/clk/wall, p95, to }' >> "$CSV"
  local row; row=$(tail -1 "$CSV")
  log "  $3 c=$5: $(cut -d, -f9 <<<"$row") req/s, p50=$(cut -d, -f12 <<<"$row")ms max=$(cut -d, -f16 <<<"$row")ms errors=$8 timeouts=$9 proxy=$(cut -d, -f17 <<<"$row")us/req"
}

# ---------------------------------------------------------------------- measurements
measure_ab() { # mode run target conns ppid - S2: one new connection per request (ab sends no keep-alive)
  local mode=$1 run=$2 t=$3 c=$4 ppid=$5 path=/auth-service/hello
  [[ $t == direct ]] && path=/hello
  local url=http://127.0.0.1:${PORT[$t]}$path raw=$OUT/raw/$mode-r$run-s2-$t-c$c.txt
  local warm=$((AB_N / 10)); ((warm < c)) && warm=$c; ((warm > 5000)) && warm=5000
  taskset -c "$LG_CPUS" ab -q -r -s 10 -n "$warm" -c "$c" "$url" >/dev/null 2>&1
  acct_begin "$ppid"
  taskset -c "$LG_CPUS" ab -r -s 10 -n "$AB_N" -c "$c" "$url" >"$raw" 2>&1
  acct_end "$ppid"
  local st; st=$(awk '/^Complete requests:/{n=$3} /^Failed requests:/{f=$3} /^Non-2xx responses:/{x=$3}
    /^Time taken for tests:/{s=$5} /^Time per request:/ && m=="" {m=$4}
    /^ +50%/{p50=$2} /^ +90%/{p90=$2} /^ +95%/{p95=$2} /^ +99%/{p99=$2} /^ +100%/{mx=$2}
    END{ if (n=="") print "none"; else print n+0, s+0, f+x, m+0, p50+0, p90+0, p95+0, p99+0, mx+0 }' "$raw")
  if [[ $st == none ]]; then
    log "  s2 c=$c: ab gave no result ($(tail -2 "$raw" | tr '\n' ' '))"
    echo "$t s2 c=$c: ab aborted: $(grep -m1 -i 'apr_\|error' "$raw")" >> "$NOTES"
    st="0 $DURATION $AB_N 0 0 0 0 0 0"
  fi
  local -a v; read -ra v <<<"$st"
  # ab's percentiles are whole milliseconds and it has no p99.9: that column repeats p99
  emit_row "$mode" "$run" s2 "$t" "$c" "${v[0]}" "${v[1]}" "${v[2]}" 0 "${v[3]}" "${v[4]}" "${v[5]}" "${v[6]}" "${v[7]}" "${v[7]}" "${v[8]}" "$ppid"
}

measure_wrk() { # mode run phase target ppid path lua - keep-alive, WRK_CONNS (default S3_CONNS) connections
  local mode=$1 run=$2 ph=$3 t=$4 ppid=$5 path=$6 lua=$7 c=${WRK_CONNS:-$S3_CONNS}
  local url=http://127.0.0.1:${PORT[$t]}$path raw=$OUT/raw/$mode-r$run-$ph-$t-c$c.txt thr=$WRK_THREADS
  taskset -c "$LG_CPUS" wrk -t"$thr" -c"$c" -d"${WARMUP}s" -s "$lua" "$url" >/dev/null 2>&1
  acct_begin "$ppid"
  taskset -c "$LG_CPUS" wrk -t"$thr" -c"$c" -d"${DURATION}s" --timeout 5s -s "$lua" "$url" >"$raw" 2>&1
  acct_end "$ppid"
  local -a r; read -ra r <<<"$(grep '^WRKRESULT' "$raw" | tail -1)"
  if ((${#r[@]} < 15)); then log "  wrk produced no result ($raw)"; return; fi
  local ms=(); local i; for i in 8 9 10 11 12 13 14; do ms+=("$(awk -v u="${r[$i]}" 'BEGIN{printf "%.3f", u/1000}')"); done
  emit_row "$mode" "$run" "$ph" "$t" "$c" "${r[1]}" "$(awk -v u="${r[2]}" 'BEGIN{print u/1e6}')" \
    $((r[3]+r[4]+r[5]+r[7])) "${r[6]}" "${ms[@]}" "$ppid"
}

measure_grpc() { # mode run target ppid - S6 gRPC: unary calls over h2c
  local mode=$1 run=$2 t=$3 ppid=$4 c=$GRPC_CLIENTS
  local url=http://127.0.0.1:${H2PORT[$t]}/bench.Echo/Say raw=$OUT/raw/$mode-r$run-grpc-$t-c$c.txt lf=$WORK/grpc.log
  local -a args=(-t1 -c"$c" -m"$GRPC_STREAMS" -d "$WORK/grpc-req.bin" -H 'content-type: application/grpc' -H 'te: trailers')
  taskset -c "$LG_CPUS" h2load "${args[@]}" -D "$WARMUP" "$url" >/dev/null 2>&1
  acct_begin "$ppid"
  taskset -c "$LG_CPUS" h2load "${args[@]}" -D "$DURATION" --log-file="$lf" "$url" >"$raw" 2>&1
  acct_end "$ppid"
  local -a s; read -ra s <<<"$(h2log_stats "$lf")"; rm -f "$lf" "$lf.n"
  # h2log_stats has no p95: that column is left empty
  emit_row "$mode" "$run" grpc "$t" "$c" "${s[0]}" "$DURATION" $((s[0]-s[1])) 0 "${s[2]}" "${s[3]}" "${s[4]}" "" "${s[5]}" "${s[6]}" "${s[7]}" "$ppid"
}
