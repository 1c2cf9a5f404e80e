"""A WebSocket client over HTTP/2 (RFC 8441 extended CONNECT) on the `h2` library, with frames
written by hand (RFC 6455 §5). Prints one JSON line:

  {"enable_connect_protocol": 0|1, "status": "200", "headers": [[k, v], ...],
   "replies": [...text frames received...], "close": code, "ended": bool, "error": str|null}

It sends each `--send` message as a masked text frame and reads one reply to each, then a close
frame (1000), reads the close answer and ends the stream. A non-200 answer stops after the head
(and its body, in "body").
"""

import argparse
import json
import os
import socket
import struct

import h2.config
import h2.connection
import h2.events
import h2.settings


def frame(opcode, payload):
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n <= 0xFFFF:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def parse(buf):
    """One frame off the front of buf, unmasked if it was masked (an echo of the client's own
    bytes): (opcode, payload, rest) or None."""
    if len(buf) < 2:
        return None
    opcode, masked, n, at = buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, at = struct.unpack("!Q", buf[2:10])[0], 10
    mask = b""
    if masked:
        mask, at = buf[at : at + 4], at + 4
    if len(buf) < at + n:
        return None
    payload = buf[at : at + n]
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return opcode, payload, buf[at + n :]


class Client:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()
        self.data = b""
        self.ended = False
        self.enable_connect = 0
        self.settings_seen = False
        self.reset = None

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def events(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        evs = self.conn.receive_data(chunk)
        for e in evs:
            if isinstance(e, h2.events.RemoteSettingsChanged):
                self.settings_seen = True
                s = e.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                if s is not None:
                    self.enable_connect = s.new_value
            elif isinstance(e, h2.events.DataReceived):
                self.data += e.data
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                self.ended = True
            elif isinstance(e, h2.events.StreamReset):
                # NO_ERROR after a whole answer: the server needs no more of the request
                # (RFC 9113 §8.1). Anything else fails, after this batch's events are read.
                self.ended = True
                if e.error_code != 0:
                    self.reset = e.error_code
        self.flush()
        if self.reset is not None and not any(
            isinstance(e, h2.events.ResponseReceived) for e in evs
        ):
            raise ConnectionError(f"stream reset: {self.reset!r}")
        return evs

    def until(self, done):
        while not done():
            self.events()

    def next_frame(self):
        while True:
            got = parse(self.data)
            if got:
                opcode, payload, self.data = got
                return opcode, payload
            if self.ended:
                raise ConnectionError("stream ended mid-frame")
            self.events()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--authority", required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--protocol", default="websocket")
    ap.add_argument("--subprotocol")
    ap.add_argument("--send", action="append", default=[])
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    out = {"error": None, "replies": [], "close": None, "ended": False}
    c = Client(host, int(port))
    try:
        # The server's SETTINGS, which must allow extended CONNECT (h2 refuses :protocol otherwise).
        c.until(lambda: c.settings_seen)
        headers = [
            (":method", "CONNECT"),
            (":protocol", a.protocol),
            (":scheme", "http"),
            (":path", a.path),
            (":authority", a.authority),
            ("sec-websocket-version", "13"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
        ]
        if a.subprotocol:
            headers.append(("sec-websocket-protocol", a.subprotocol))
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, headers)
        c.flush()
        resp = []
        while not resp:
            for e in c.events():
                if isinstance(e, h2.events.ResponseReceived):
                    resp = [(k.decode(), v.decode()) for k, v in e.headers]
        out["headers"] = [[k, v] for k, v in resp]
        out["status"] = dict(resp)[":status"]
        if out["status"] != "200":
            c.until(lambda: c.ended)
            out["body"] = c.data.decode(errors="replace")
            return
        for msg in a.send:
            c.conn.send_data(sid, frame(0x1, msg.encode()))
            c.flush()
            opcode, payload = c.next_frame()
            out["replies"].append(payload.decode())
        c.conn.send_data(sid, frame(0x8, struct.pack("!H", 1000)))
        c.flush()
        opcode, payload = c.next_frame()
        if opcode == 0x8 and len(payload) >= 2:
            out["close"] = struct.unpack("!H", payload[:2])[0]
        c.conn.end_stream(sid)
        c.flush()
        c.until(lambda: c.ended)
        out["ended"] = True
    except Exception as e:  # reported, not raised: the test reads the JSON
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        out["enable_connect_protocol"] = c.enable_connect
        print(json.dumps(out), flush=True)


main()
