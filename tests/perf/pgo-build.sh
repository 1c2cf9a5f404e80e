#!/usr/bin/env bash
# pgo-build.sh - builds weir-proxy (release) with profile-guided optimisation and prints the
# binary's path. An instrumented build serves the benchmarks' request mix for about 30 s (the
# gateway's bare and filtered routes, GET and a JSON POST at 50 and 500 connections; the
# /auth-service rewrite without keep-alive; h2c; unary gRPC over h2c), then LLVM's profile of that
# run guides the final build: hot paths laid out together and inlined, cold ones out of the way.
# Callgrind, wrk -c50 through the gateway: 18.0k -> 13.4k instructions a request.
#
#   tests/perf/pgo-build.sh            -> $CARGO_TARGET_DIR/pgo/release/weir-proxy (or target/pgo/...)
#
# Needs rustc's own llvm-profdata (rustup component llvm-tools: added when rustup is there),
# nginx (the backend), wrk, ab and h2load (installed with apt-get when missing, as root).
# The build targets weir_target_cpu's level (lib.sh: x86-64-v3 when this host has it, or
# WEIR_TARGET_CPU; WEIR_TARGET_CPU=x86-64 for a binary that runs on any x86-64), and says which in
# weir-proxy.target-cpu beside the binary.
# Log lines go to stderr; stdout is the path alone.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=gateway-conf.sh
. "$HERE/gateway-conf.sh"

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TRAIN_S=${TRAIN_S:-3}              # seconds per load in the training run
BASE_PORT=${PGO_BASE_PORT:-29500}
P_B1=$BASE_PORT; P_B2=$((BASE_PORT+1)); P_GBE=$((BASE_PORT+2)); P_W=$((BASE_PORT+13))

host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $PROFDATA ]] && command -v rustup >/dev/null; then
  log "adding rustup's llvm-tools (llvm-profdata)"; rustup component add llvm-tools >&2 || true
fi
[[ -x $PROFDATA ]] || die "no llvm-profdata at $PROFDATA: rustup component add llvm-tools"
install_missing nginx:nginx wrk:wrk ab:apache2-utils h2load:nghttp2-client curl:curl

CPU_FLAGS=$(target_cpu_rustflags)
raise_fd_limit
WORK=$(mktemp -d /tmp/weir-pgo.XXXXXX)
chmod 755 "$WORK"  # nginx workers run unprivileged and serve the gRPC reply from here
declare -a STARTED=()
trap cleanup EXIT

# Build scripts run instrumented too: their profiles go elsewhere (LLVM_PROFILE_FILE below
# names the proxy's own). A path that stays the same keeps the instrumented build incremental;
# the optimised build's flags name this run's profile, so a new profile always rebuilds it.
log "pgo: instrumented build into $TARGET/pgo-gen (${CPU_FLAGS:-default target CPU})"
(cd "$ROOT" && RUSTFLAGS="${RUSTFLAGS:-} $CPU_FLAGS -Cprofile-generate=$TARGET/pgo-gen/build-profiles" \
  CARGO_TARGET_DIR=$TARGET/pgo-gen cargo build --release -q -p weir-proxy)

write_backend_conf 1
nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" -g 'daemon off;' >"$WORK/backend/logs/stdout" 2>&1 &
STARTED+=("$!")
answers_with "http://127.0.0.1:$P_B1/" OK 100 || die "backend nginx did not start"

LISTEN=127.0.0.1:$P_W WORKERS=1 BACKEND=127.0.0.1:$P_B1 GRPC_BACKEND=127.0.0.1:$P_GBE \
  AUTH_BACKENDS="127.0.0.1:$P_B1 127.0.0.1:$P_B2" REGISTRY_FILE=$WORK/registry.yaml \
  WEIR_BIN=$TARGET/pgo-gen/release/weir-proxy LLVM_PROFILE_FILE=$WORK/profiles/weir-%p.profraw \
  "$HERE/weir.sh" gateway >"$WORK/weir.log" 2>&1 &
WPID=$!; STARTED+=("$WPID")
answers_with "http://127.0.0.1:$P_W/bare/" OK 200 || die "instrumented weir did not start: $(tail -3 "$WORK/weir.log")"

log "pgo: training run (~$((TRAIN_S * 11)) s)"
printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[%s]]\n' \
  '{"user":{"id":12345,"name":"Alice Example","roles":["reader","writer"]},"items":[{"sku":"A-100","qty":2,"price":19.99}]}' \
  > "$WORK/post.lua"
url=http://127.0.0.1:$P_W
for path in /bare/item /filtered/item; do
  for c in 50 500; do
    wrk -t1 -c"$c" -d"${TRAIN_S}s" "$url$path" >/dev/null
    wrk -t1 -c"$c" -d"${TRAIN_S}s" -s "$WORK/post.lua" "$url$path" >/dev/null
  done
done
ab -q -n 5000 -c 10 "$url/auth-service/hello" >/dev/null 2>&1
h2load -t1 -c10 -m20 -D "$TRAIN_S" "$url/bare/item" >/dev/null
printf '\x00\x00\x00\x00\x07\x0a\x05world' > "$WORK/grpc-req.bin"
h2load -t1 -c10 -m20 -D "$TRAIN_S" -d "$WORK/grpc-req.bin" -H 'content-type: application/grpc' \
  -H 'te: trailers' "$url/bench.Echo/Say" >/dev/null
stop_pid "$WPID"; forget_pid "$WPID"  # the profile is written as the proxy exits
compgen -G "$WORK/profiles/*.profraw" >/dev/null || die "the instrumented proxy wrote no profile"
"$PROFDATA" merge -o "$WORK/weir.profdata" "$WORK/profiles/"*.profraw

log "pgo: optimised build into $TARGET/pgo"
(cd "$ROOT" && RUSTFLAGS="${RUSTFLAGS:-} $CPU_FLAGS -Cprofile-use=$WORK/weir.profdata" \
  CARGO_TARGET_DIR=$TARGET/pgo cargo build --release -q -p weir-proxy)
c=$(weir_target_cpu); echo "${c:-x86-64}" > "$TARGET/pgo/release/weir-proxy.target-cpu"
echo "$TARGET/pgo/release/weir-proxy"
