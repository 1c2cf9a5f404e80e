#!/usr/bin/env python3
"""Sample echo service for the quickstart: answers every request with what it received."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        out = json.dumps({
            "server": f"echo@{self.server.server_address[1]}",
            "method": self.command,
            "path": self.path,
            "headers": dict(self.headers),
            "body_bytes": len(body),
        }, indent=2).encode() + b"\n"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
