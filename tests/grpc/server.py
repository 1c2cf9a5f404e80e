"""Echo gRPC server for the end-to-end tests.

Usage: server.py --port PORT [--name NAME]. Prints `READY <port>` once serving. Every call sets
trailing metadata `x-trailer: yes`; a request with fail_code != 0 ends with that status.
"""

import argparse
import sys
from concurrent import futures

import grpc

import stubs

pb, pb_grpc = stubs.load()


def _authority(context):
    for key, value in context.invocation_metadata():
        if key == ":authority":
            return value
    return ""


class Echo(pb_grpc.EchoServicer):
    def __init__(self, name):
        self.name = name

    def _finish(self, context, req):
        context.set_trailing_metadata((("x-trailer", "yes"),))
        if req.fail_code:
            context.abort(_status(req.fail_code), req.fail_message or "requested failure")

    def _resp(self, context, message, index=0, payload=b""):
        return pb.EchoResponse(
            message=message, index=index, server=self.name, payload=payload,
            authority=_authority(context),
        )

    def Unary(self, req, context):
        self._finish(context, req)
        return self._resp(context, req.message, payload=req.payload)

    def ServerStream(self, req, context):
        for i in range(req.count):
            yield self._resp(context, f"{req.message}-{i}", index=i)
        self._finish(context, req)

    def ClientStream(self, reqs, context):
        parts = []
        last = pb.EchoRequest()
        for r in reqs:
            parts.append(r.message)
            last = r
        self._finish(context, last)
        return self._resp(context, ",".join(parts), index=len(parts))

    def Bidi(self, reqs, context):
        last = pb.EchoRequest()
        for i, r in enumerate(reqs):
            last = r
            yield self._resp(context, r.message, index=i)
        self._finish(context, last)


def _status(value):
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--name", default="grpc-echo")
    args = ap.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_EchoServicer_to_server(Echo(args.name), server)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        sys.exit(f"cannot bind {args.host}:{args.port}")
    server.start()
    print(f"READY {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
