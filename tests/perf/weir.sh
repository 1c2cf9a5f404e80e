#!/usr/bin/env bash
# weir.sh - start weir-proxy's gateway as a benchmark target: write the registry the scenario
# needs, then exec weir-proxy in the foreground (so the caller's PID is the proxy's).
#
#   weir.sh plain    route / to BACKEND (HTTP/1.1 upstream; h2c clients are accepted on the
#                    same port): S1, S5, S6 h2c, S8, driven by peers.sh
#   weir.sh gateway  the gateway scenarios of gateway.sh on one listener:
#                    /auth-service/** -> ReplacePrefixMatch / -> AUTH_BACKENDS (2 endpoints, S2)
#                    /bare/**         -> BACKEND, no filter (S3 baseline)
#                    /filtered/**     -> BACKEND with AddQueryParameter foo=bar and
#                                        RequestHeaderModifier set X-Request-Source: gateway (S3)
#                    /bench.Echo/**   -> GRPC_BACKEND over h2c (S6 gRPC unary)
#   weir.sh policy   the policy-cost scenario of policy.sh on one listener, all to BACKEND:
#                    /bare/**     -> service backend, no filter, no policy
#                    /filters/**  -> backend: RequestHeaderModifier, URLRewrite (-> /rewritten),
#                                    AddQueryParameter
#                    /policy/**   -> backend-policy (same endpoint; service policy: retryBudget and
#                                    an endpoint circuitBreaker): the same filters, plus retry and a
#                                    route circuitBreaker
#                    /timeouts/** -> as /policy, plus timeouts { request, backendRequest }
#
# Environment: LISTEN (host:port of the gateway listener), WORKERS, BACKEND (host:port),
# AUTH_BACKENDS ("host:port host:port"), GRPC_BACKEND, WEIR_BIN (the release binary),
# REGISTRY_FILE (where to write the registry; default: a file beside WEIR_BIN's run dir),
# WEIR_WRAP (a command to run weir-proxy under, e.g. valgrind).
# The other listeners (admin, outbound, inbound) bind port 0: they are not measured.
set -euo pipefail

kind=${1:?usage: weir.sh plain|gateway|policy}
: "${LISTEN:?}" "${WORKERS:?}" "${BACKEND:?}" "${WEIR_BIN:?}"
REGISTRY_FILE=${REGISTRY_FILE:-$(mktemp /tmp/weir-perf-registry.XXXXXX.yaml)}

endpoints() { # "a b c" -> YAML flow list of endpoints
  local out="" a
  for a in "$@"; do out+="${out:+, }{ address: \"$a\" }"; done
  echo "[$out]"
}

case $kind in
plain) cat > "$REGISTRY_FILE" <<EOF
services:
  - name: backend
    appProtocol: http   # peers.sh's nginx/HAProxy/Caddy also speak HTTP/1.1 upstream, h2c in or not
    endpoints: $(endpoints "$BACKEND")
gateway:
  routes:
    - name: all
      matches: [{ path: { type: PathPrefix, value: / } }]
      backendRefs: [{ name: backend }]
EOF
;;
gateway)
  : "${AUTH_BACKENDS:?}" "${GRPC_BACKEND:?}"
  # shellcheck disable=SC2086 # AUTH_BACKENDS is a space-separated list
  cat > "$REGISTRY_FILE" <<EOF
services:
  - name: auth-service
    endpoints: $(endpoints $AUTH_BACKENDS)
  - name: backend
    endpoints: $(endpoints "$BACKEND")
  - name: echo-grpc
    appProtocol: grpc
    endpoints: $(endpoints "$GRPC_BACKEND")
gateway:
  routes:
    - name: auth
      matches: [{ path: { type: PathPrefix, value: /auth-service } }]
      filters:
        - type: URLRewrite
          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }
      backendRefs: [{ name: auth-service }]
    - name: bare
      matches: [{ path: { type: PathPrefix, value: /bare } }]
      backendRefs: [{ name: backend }]
    - name: filtered
      matches: [{ path: { type: PathPrefix, value: /filtered } }]
      filters:
        - type: AddQueryParameter
          addQueryParameter: { name: foo, value: bar }
        - type: RequestHeaderModifier
          requestHeaderModifier: { set: [{ name: X-Request-Source, value: gateway }] }
      backendRefs: [{ name: backend }]
    - name: grpc
      matches: [{ path: { type: PathPrefix, value: /bench.Echo } }]
      backendRefs: [{ name: echo-grpc }]
EOF
;;
policy)
  filters() { # the three filters of the policy-cost routes; the matched prefix becomes /rewritten
    cat <<EOT
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: { set: [{ name: X-Request-Source, value: gateway }] }
        - type: URLRewrite
          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /rewritten } }
        - type: AddQueryParameter
          addQueryParameter: { name: foo, value: bar }
EOT
  }
  cat > "$REGISTRY_FILE" <<EOF
services:
  - name: backend
    endpoints: $(endpoints "$BACKEND")
  - name: backend-policy
    endpoints: $(endpoints "$BACKEND")
    policy:
      retryBudget: { ratio: 0.2, minPerSecond: 10, ttl: 10s }
      circuitBreaker: { consecutiveFailures: 5, minEjection: 1s, maxEjection: 30s }
gateway:
  routes:
    - name: bare
      matches: [{ path: { type: PathPrefix, value: /bare } }]
      backendRefs: [{ name: backend }]
    - name: filters
      matches: [{ path: { type: PathPrefix, value: /filters } }]
$(filters)
      backendRefs: [{ name: backend }]
    - name: policy
      matches: [{ path: { type: PathPrefix, value: /policy } }]
$(filters)
      retry: { attempts: 2, codes: [502, 503], backoff: 25ms }
      circuitBreaker: { consecutiveFailures: 5, minEjection: 1s, maxEjection: 30s }
      backendRefs: [{ name: backend-policy }]
    - name: timeouts
      matches: [{ path: { type: PathPrefix, value: /timeouts } }]
$(filters)
      retry: { attempts: 2, codes: [502, 503], backoff: 25ms }
      circuitBreaker: { consecutiveFailures: 5, minEjection: 1s, maxEjection: 30s }
      timeouts: { request: 10s, backendRequest: 5s }
      backendRefs: [{ name: backend-policy }]
EOF
;;
*) echo "weir.sh: unknown kind '$kind'" >&2; exit 2 ;;
esac

export WEIR_PROXY_REGISTRY=$REGISTRY_FILE
export WEIR_PROXY_GATEWAY_LISTEN=$LISTEN
export WEIR_PROXY_ADMIN_LISTEN=127.0.0.1:0
export WEIR_PROXY_OUTBOUND_LISTEN=127.0.0.1:0
export WEIR_PROXY_INBOUND_LISTEN=127.0.0.1:0
export WEIR_PROXY_WORKERS=$WORKERS
export WEIR_PROXY_LOG=${WEIR_PROXY_LOG:-warn}
# WEIR_WRAP: a command to run the proxy under (policy.sh: valgrind --tool=callgrind ...)
# shellcheck disable=SC2086 # a command line, split on purpose
exec ${WEIR_WRAP:-} "$WEIR_BIN"
