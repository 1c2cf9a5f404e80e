"""Echo gRPC client for the end-to-end tests.

Usage: client.py --target HOST:PORT [--authority NAME] [--count N] [--payload-bytes N]
Runs unary, server-streaming, client-streaming and bidi calls plus one call that must fail with
NOT_FOUND, checks every message and trailer, prints one JSON object and exits 0 only if every
check passed:
  {"ok": true, "unary": "ok", "server_stream": N, "client_stream": N, "bidi": N,
   "trailers": {"x-trailer": "yes"}, "error_status": "NOT_FOUND", "server": NAME,
   "authority": SEEN, "failures": []}
"""

import argparse
import json
import sys

import grpc

import stubs

pb, pb_grpc = stubs.load()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--authority")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--payload-bytes", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args()

    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    if args.authority:
        options.append(("grpc.default_authority", args.authority))
    out = {"failures": []}
    fail = out["failures"].append
    n, t = args.count, args.timeout

    def check(name, cond, detail):
        if not cond:
            fail(f"{name}: {detail}")

    with grpc.insecure_channel(args.target, options=options) as channel:
        stub = pb_grpc.EchoStub(channel)
        try:
            payload = bytes(i % 251 for i in range(args.payload_bytes))
            resp, call = stub.Unary.with_call(pb.EchoRequest(message="hello", payload=payload), timeout=t)
            check("unary", resp.message == "hello" and resp.payload == payload, f"got {resp.message!r}")
            out["unary"] = "ok" if resp.message == "hello" else resp.message
            out["server"], out["authority"] = resp.server, resp.authority
            out["trailers"] = {k: v for k, v in call.trailing_metadata() if not k.startswith("grpc-")}
            check("trailers", out["trailers"].get("x-trailer") == "yes", out["trailers"])

            got = [r.message for r in stub.ServerStream(pb.EchoRequest(message="s", count=n), timeout=t)]
            check("server_stream", got == [f"s-{i}" for i in range(n)], got)
            out["server_stream"] = len(got)

            msgs = [f"c{i}" for i in range(n)]
            resp = stub.ClientStream(iter(pb.EchoRequest(message=m) for m in msgs), timeout=t)
            check("client_stream", resp.message == ",".join(msgs) and resp.index == n, resp.message)
            out["client_stream"] = resp.index

            got = [r.message for r in stub.Bidi(iter(pb.EchoRequest(message=m) for m in msgs), timeout=t)]
            check("bidi", got == msgs, got)
            out["bidi"] = len(got)

            try:
                stub.Unary(pb.EchoRequest(message="x", fail_code=5, fail_message="nope"), timeout=t)
                fail("error_status: call succeeded, expected NOT_FOUND")
            except grpc.RpcError as e:
                out["error_status"] = e.code().name
                out["error_message"] = e.details()
                trailers = {k: v for k, v in (e.trailing_metadata() or ())}
                check("error_status", e.code() == grpc.StatusCode.NOT_FOUND, e.code())
                check("error_trailers", trailers.get("x-trailer") == "yes", trailers)
        except grpc.RpcError as e:
            fail(f"rpc error: {e.code().name}: {e.details()}")

    out["ok"] = not out["failures"]
    print(json.dumps(out))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
