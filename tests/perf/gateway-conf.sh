#!/usr/bin/env bash
# gateway-conf.sh - the configurations gateway.sh runs (sourced, never run): one backend nginx and
# the nginx and HAProxy gateways set up the way weir.sh's "gateway" registry is, route for route.
# Uses WORK, FDLIM, NGX_CONNS, HAP_MAXCONN and the ports P_B1 P_B2 P_GBE PORT[] H2PORT[].

# The backend answers "OK" on two ports (the two auth-service endpoints; /bare and /filtered use the
# first) and echoes what it received in response headers, so check_target can prove each gateway
# really rewrote, balanced and filtered. The third port answers unary gRPC over h2c: a framed
# protobuf message and a grpc-status trailer. nginx's static module serves the answer, and refuses
# POST with 405, which error_page turns into the same answer (an internal redirect becomes a GET).
write_backend_conf() { # workers
  local d=$WORK/backend; mkdir -p "$d/logs" "$d/grpc"
  printf '\x00\x00\x00\x00\x07\x0a\x05hello' > "$d/grpc/reply.bin"
  chmod -R a+rX "$d/grpc"
  cat > "$d/nginx.conf" <<EOF
$(nginx_http_head "$d" "$1")
  server {
    listen 127.0.0.1:$P_B1 backlog=4096;
    listen 127.0.0.1:$P_B2 backlog=4096;
    location / {
      default_type text/plain;
      add_header X-Upstream-Uri \$request_uri;
      add_header X-Upstream-Port \$server_port;
      add_header X-Upstream-Source \$http_x_request_source;
      return 200 "OK";
    }
  }
  server {
    listen 127.0.0.1:$P_GBE http2 backlog=4096;
    location / { rewrite ^ /reply.bin last; }
    location = /reply.bin {
      root $d/grpc;
      default_type application/grpc;
      etag off;
      # without "always" the trailer is dropped from the error_page answer
      add_trailer grpc-status 0 always;
      error_page 405 =200 /reply.bin;
    }
  }
}
EOF
}

write_target_conf() { # target workers
  local t=$1 w=$2 d=$WORK/$1; mkdir -p "$d/logs"
  case $t in
  nginx) cat > "$d/nginx.conf" <<EOF
$(nginx_http_head "$d" "$w")
  upstream auth { server 127.0.0.1:$P_B1; server 127.0.0.1:$P_B2; keepalive 1024; keepalive_requests 100000000; keepalive_timeout 300s; }
  upstream be { server 127.0.0.1:$P_B1; keepalive 1024; keepalive_requests 100000000; keepalive_timeout 300s; }
  upstream grpcbe { server 127.0.0.1:$P_GBE; keepalive 1024; keepalive_requests 100000000; keepalive_timeout 300s; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  server {
    listen 127.0.0.1:${PORT[nginx]} backlog=4096;
    # ReplacePrefixMatch /auth-service -> /: proxy_pass with a URI swaps the matched prefix
    location = /auth-service { proxy_pass http://auth/; }
    location /auth-service/ { proxy_pass http://auth/; }
    location /bare { proxy_pass http://be; }
    location /filtered {
      # "?foo=bar" in a rewrite keeps the original arguments after the new one
      rewrite ^ \$uri?foo=bar break;
      # a proxy_set_header here replaces the inherited list, so Connection is set again
      proxy_set_header Connection "";
      proxy_set_header X-Request-Source gateway;
      proxy_pass http://be;
    }
  }
  server {
    listen 127.0.0.1:${H2PORT[nginx]} http2 backlog=4096;
    location /bench.Echo/ { grpc_pass grpc://grpcbe; }
  }
}
EOF
  ;;
  haproxy) cat > "$d/haproxy.cfg" <<EOF
$(haproxy_head http "$w")
frontend fe
  bind 127.0.0.1:${PORT[haproxy]}
  use_backend auth if { path /auth-service } || { path_beg /auth-service/ }
  use_backend filtered if { path_beg /filtered }
  default_backend bare
frontend fe_grpc
  bind 127.0.0.1:${H2PORT[haproxy]} proto h2
  default_backend grpc
backend auth
  balance roundrobin
  http-request replace-path ^/auth-service/?(.*) /\1
  server a1 127.0.0.1:$P_B1
  server a2 127.0.0.1:$P_B2
backend bare
  server b1 127.0.0.1:$P_B1
backend filtered
  http-request set-query %[query]&foo=bar if { query -m found }
  http-request set-query foo=bar unless { query -m found }
  http-request set-header X-Request-Source gateway
  server b1 127.0.0.1:$P_B1
backend grpc
  server g1 127.0.0.1:$P_GBE proto h2
EOF
  ;;
  esac
}
