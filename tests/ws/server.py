"""A WebSocket echo server on the `websockets` library (an independent implementation that checks
the HTTP/1.1 handshake: Sec-WebSocket-Key, Version, Connection, Upgrade). Prints `READY <port>`.

Each text message comes back as `echo:<message>`; the message `request?` is answered with the
handshake's path and headers as JSON. Offers the subprotocol `chat` when the client asks for it.
"""

import argparse
import asyncio
import json

from websockets.asyncio.server import serve


async def echo(ws):
    async for msg in ws:
        if msg == "request?":
            req = ws.request
            headers = [[k.lower(), v] for k, v in req.headers.raw_items()]
            await ws.send(json.dumps({"path": req.path, "headers": headers}))
        else:
            await ws.send("echo:" + msg)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    async with serve(echo, a.host, a.port, subprotocols=["chat"]) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"READY {port}", flush=True)
        await server.serve_forever()


asyncio.run(main())
