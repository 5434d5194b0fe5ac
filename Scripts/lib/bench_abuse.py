"""Abuse a running local cluster and measure what it costs the nodes (Scripts/bench-abuse runs it):

  downloads   CONNECTIONS connections, each a user of its own, each asking for STREAMS
              downloads of a 1 MiB file over h2 with every window opened wide, then reading
              nothing. Prints the gateway's open file descriptors and resident memory before,
              every few seconds while the connections are held (past the gateway's 60 s write
              deadline), and after the client lets them go.
  unknown-ids GETS requests for random conversation IDs (h2load, one user, its read limit
              raised by the script so that every request reaches a worker). Prints each
              worker's resident memory before, right after and 30 s after.

Both print the latency of a send meanwhile (a message POSTed every 100 ms between two users
of their own, from its request to its 201), before and during the abuse.
"""
import argparse
import http.client
import json
import os
import random
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import urlparse


def process(pid):
    """(open file descriptors, resident MiB) of process `pid`."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return fds, rss / 1024


class Gateway:
    """HTTP/1.1 keep-alive calls to a gateway, one connection per thread that calls."""

    def __init__(self, url, ca):
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.context = ssl.create_default_context(cafile=ca)
        self.local = threading.local()

    def call(self, method, path, body=None, token=None, content_type="application/json"):
        if not hasattr(self.local, "conn"):
            self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            headers["Content-Type"] = content_type
            if content_type == "application/json":
                body = json.dumps(body).encode()
        try:
            self.local.conn.request(method, path, body=body, headers=headers)
            reply = self.local.conn.getresponse()
            data = reply.read()
        except (OSError, http.client.HTTPException):
            del self.local.conn
            raise
        return reply.status, (json.loads(data) if data.startswith(b"{") else data)

    def register(self, handle):
        status, reply = self.call("POST", "/v1/users", {"handle": handle, "password": "correct horse battery", "displayName": handle})
        if status != 201:
            sys.exit(f"registering {handle}: {status} {reply}")
        return reply["user"]["id"], reply["token"]


class SendProbe(threading.Thread):
    """A message every 100 ms in a direct conversation of two users of its own; each send's
    latency (request to 201) is kept with the phase it was sent in."""

    def __init__(self, gateway, tag):
        super().__init__(daemon=True)
        self.gateway, self.phase, self.latencies, self.failed = gateway, "before", {}, {}
        _, self.token = gateway.register(f"probe-a-{tag}")
        peer, _ = gateway.register(f"probe-b-{tag}")
        status, reply = gateway.call("POST", "/v1/conversations", {"memberIds": [peer]}, token=self.token)
        if status not in (200, 201):
            sys.exit(f"the probe's conversation: {status} {reply}")
        self.conversation = reply["conversation"]["id"]
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            phase, started = self.phase, time.monotonic()
            try:
                status, _ = self.gateway.call("POST", f"/v1/conversations/{self.conversation}/messages",
                                              {"clientMessageId": str(uuid.uuid4()), "text": "probe"}, token=self.token)
            except Exception:
                status = None
            took = (time.monotonic() - started) * 1000
            if status == 201:
                self.latencies.setdefault(phase, []).append(took)
            else:
                self.failed[phase] = self.failed.get(phase, 0) + 1
            self.stopping.wait(max(0.0, 0.1 - took / 1000))

    def report(self):
        for phase, values in self.latencies.items():
            values = sorted(values)
            p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
            print(f"  send latency {phase}: p50 {statistics.median(values):.1f} ms, p99 {p99:.1f} ms, max {values[-1]:.1f} ms "
                  f"({len(values)} sends, {self.failed.get(phase, 0)} failed)")


def h2_frame(kind, stream, payload=b"", flags=0):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(headers):
    """Literal header fields without indexing, lengths under 127."""
    block = b""
    for name, value in headers:
        name, value = name.encode(), value.encode()
        block += b"\x00" + bytes([len(name)]) + name + _length(len(value)) + value
    return block


def _length(n):
    if n < 127:
        return bytes([n])
    out, n = bytearray([127]), n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    out.append(n)
    return bytes(out)


def downloads(args, gateway, gateway_pid):
    document = b"%PDF-1.4\n" + os.urandom((1 << 20) - 9)
    tag = uuid.uuid4().hex[:6]
    print(f"downloads: registering {args.connections} users, each uploading the same 1 MiB document (kept once)")
    users = []
    for index in range(args.connections):
        _, token = gateway.register(f"dl{index}-{tag}")
        status, reply = gateway.call("POST", "/v1/media", document, token=token, content_type="application/pdf")
        if status != 201:
            sys.exit(f"an upload: {status} {reply}")
        users.append((token, reply["media"]["id"]))
    probe = SendProbe(gateway, tag)
    probe.start()
    time.sleep(5)
    before = process(gateway_pid)
    print(f"  gateway before: {before[0]} fds, {before[1]:.1f} MiB resident")
    probe.phase = "while held"
    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["h2"])
    wide = (1 << 31) - 1
    held, refused = [], 0
    started = time.monotonic()
    for token, media in users:
        try:
            raw = socket.create_connection((gateway.host, gateway.port), timeout=10)
            tls = context.wrap_socket(raw, server_hostname=gateway.host)
            requests = b"".join(h2_frame(0x1, stream, hpack_literal([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"),
                                                                      (":path", f"/v1/media/{media}"), ("authorization", f"Bearer {token}")]),
                                         flags=0x5) for stream in range(1, 2 * args.streams, 2))
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, struct.pack(">HI", 0x4, wide))
                        + h2_frame(0x8, 0, struct.pack(">I", wide - 65535)) + requests)
            held.append(tls)  # and never read
        except OSError:
            refused += 1
    opened = time.monotonic() - started
    print(f"  {len(held)} connections opened in {opened:.1f} s ({refused} refused), {args.streams} downloads asked on each; nothing read")
    peak = before
    for second in range(1, args.hold + 1):
        time.sleep(1)
        now = process(gateway_pid)
        peak = (max(peak[0], now[0]), max(peak[1], now[1]))
        if second % 10 == 0 or second == args.hold:
            print(f"  gateway {second:3d} s after: {now[0]} fds, {now[1]:.1f} MiB resident")
    print(f"  gateway peak while held: {peak[0]} fds, {peak[1]:.1f} MiB resident")
    probe.phase = "after"
    for tls in held:
        try:
            tls.close()
        except OSError:
            pass
    time.sleep(10)
    after = process(gateway_pid)
    print(f"  gateway 10 s after the client let go: {after[0]} fds, {after[1]:.1f} MiB resident")
    probe.stopping.set()
    probe.join()
    probe.report()


def unknown_ids(args, gateway, worker_pids):
    tag = uuid.uuid4().hex[:6]
    _, token = gateway.register(f"ids-{tag}")
    probe = SendProbe(gateway, tag)
    probe.start()
    time.sleep(5)
    before = {pid: process(pid) for pid in worker_pids}
    print("unknown-ids: " + ", ".join(f"worker pid {pid} {rss:.1f} MiB" for pid, (_, rss) in before.items()) + " before")
    uris = os.path.join(args.work, "uris.txt")
    with open(uris, "w") as out:
        for _ in range(args.gets):
            out.write(f"{args.url}/v1/conversations/{uuid.UUID(int=random.getrandbits(128), version=4)}/messages\n")
    probe.phase = "during"
    started = time.monotonic()
    result = subprocess.run(["h2load", "-n", str(args.gets), "-c", "10", "-m", "10", "-i", uris, "-H", f"Authorization: Bearer {token}"],
                            capture_output=True, text=True)
    took = time.monotonic() - started
    codes = next((line.strip() for line in result.stdout.splitlines() if line.strip().startswith("status codes:")), result.stdout[-300:])
    print(f"  {args.gets} GETs of random conversation IDs in {took:.1f} s ({args.gets / took:.0f}/s); {codes}")
    right_after = {pid: process(pid) for pid in worker_pids}
    probe.phase = "after"
    time.sleep(30)
    later = {pid: process(pid) for pid in worker_pids}
    for pid in worker_pids:
        print(f"  worker pid {pid}: {before[pid][1]:.1f} → {right_after[pid][1]:.1f} MiB resident right after, {later[pid][1]:.1f} MiB 30 s later")
    probe.stopping.set()
    probe.join()
    probe.report()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["downloads", "unknown-ids"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--gateway-pid", type=int, required=True)
    parser.add_argument("--worker-pids", default="")
    parser.add_argument("--connections", type=int, default=700)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--hold", type=int, default=75, help="seconds the unread connections are held")
    parser.add_argument("--gets", type=int, default=200_000)
    args = parser.parse_args()
    gateway = Gateway(args.url, args.ca)
    if args.mode == "downloads":
        downloads(args, gateway, args.gateway_pid)
    else:
        unknown_ids(args, gateway, [int(pid) for pid in args.worker_pids.split(",") if pid])


if __name__ == "__main__":
    main()
