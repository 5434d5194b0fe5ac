"""What the end-to-end scripts share: free loopback ports, and waiting for a condition."""
import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib


def websocket_frame(opcode, payload, masked=True, final=True):
    """One WebSocket frame as a client writes it (masked, RFC 6455 section 5.3), or unmasked to
    break the rule."""
    head = bytes([(0x80 if final else 0) | opcode])
    mask_bit = 0x80 if masked else 0
    if len(payload) < 126:
        head += bytes([mask_bit | len(payload)])
    elif len(payload) < 65536:
        head += bytes([mask_bit | 126]) + struct.pack("!H", len(payload))
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", len(payload))
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_websocket_frame(buffer):
    """The first whole frame a server wrote (unmasked) at the start of `buffer`, as (opcode,
    payload, the bytes after it); None until it is whole."""
    if len(buffer) < 2:
        return None
    length, start = buffer[1] & 0x7F, {126: 4, 127: 10}.get(buffer[1] & 0x7F, 2)
    if len(buffer) < start:
        return None
    if start > 2:
        length = int.from_bytes(buffer[2:start], "big")
    if len(buffer) < start + length:
        return None
    return buffer[0] & 0x0F, buffer[start:start + length], buffer[start + length:]


def issue_certificates(node, tls, names, client_port=lambda name: name.startswith("gateway")):
    """A test CA in `tls` (`parley-node certs`), a certificate for each node of `names`, and a
    client-port certificate for those `client_port` picks."""
    subprocess.run([node, "certs", "init", "--dir", tls], check=True, stdout=subprocess.DEVNULL)
    for name in names:
        subprocess.run([node, "certs", "issue", name, "--dir", tls], check=True, stdout=subprocess.DEVNULL)
        if client_port(name):
            subprocess.run([node, "certs", "issue", name, "--client", "--dir", tls], check=True, stdout=subprocess.DEVNULL)


def free_ports(n):
    """N loopback ports free right now (bound at once, then released together)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def png(width, height, seed=0):
    """A real PNG, stored without compression so that its size follows its pixels."""
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3 + seed) % 256 for x in range(width * 3)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b""))


def wait_until(seconds, predicate):
    """Whether `predicate` came true within `seconds` (an exception counts as not yet)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


class Checks:
    """Counts checks and prints each as it is made."""

    def __init__(self):
        self.passed, self.failed = 0, 0

    def __call__(self, condition, what, detail=""):
        if condition:
            self.passed += 1
        else:
            self.failed += 1
        print(f"  {'ok  ' if condition else 'FAIL'}  {what}{'' if condition else ' ' + str(detail)}", flush=True)
        return condition


class Nodes:
    """parley-node processes on loopback: each node's cluster, operations and client ports, its
    log in `work`, and its PID, which is all that is ever signalled."""

    def __init__(self, node, work, tls, names, seeds):
        self.node, self.work, self.tls, self.names = node, work, tls, names
        ports = free_ports(3 * len(names))
        self.cluster = {n: ports[i] for i, n in enumerate(names)}
        self.ops = {n: ports[len(names) + i] for i, n in enumerate(names)}
        self.client = {n: ports[2 * len(names) + i] for i, n in enumerate(names)}
        self.seeds = ",".join(f"127.0.0.1:{self.cluster[n]}" for n in seeds)
        self.procs = {}

    def other_port(self):
        """A loopback port free now that is none of the nodes' (a second `free_ports` call may
        return one of theirs: it releases what it found)."""
        taken = {*self.cluster.values(), *self.ops.values(), *self.client.values()}
        return next(port for port in free_ports(len(taken) + 1) if port not in taken)

    def start(self, name, env):
        roles = "gateway" if name.startswith("gateway") else "worker"
        log = open(self.log_path(name), "ab")
        self.procs[name] = subprocess.Popen(
            [self.node, "run", "--name", name, "--roles", roles, "--tls-dir", self.tls, "--cluster-port", str(self.cluster[name]),
             "--ops-port", str(self.ops[name]), "--client-port", str(self.client[name]), "--seeds", self.seeds,
             "--data-dir", os.path.join(self.work, "data")],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env))

    def log_path(self, name):
        return os.path.join(self.work, f"{name}.log")

    def logged(self, name, *texts):
        """Whether one line of the node's log holds every one of `texts` (bytes)."""
        with open(self.log_path(name), "rb") as f:
            return any(all(text in line for text in texts) for line in f)

    def ready(self, name):
        conn = http.client.HTTPConnection("127.0.0.1", self.ops[name], timeout=2)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200

    def start_all(self, env, check, what):
        """Issues the nodes' certificates, starts every node and waits up to 60 s for all to be
        ready; the check says `what` and whether they were."""
        issue_certificates(self.node, self.tls, self.names)
        for name in self.names:
            self.start(name, env)
        return check(wait_until(60, lambda: all(self.ready(n) for n in self.names)), what)

    def kill(self, name):
        proc = self.procs.get(name)
        if proc and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill_all(self):
        for name in list(self.procs):
            self.kill(name)


def conclude(check, nodes, work, title):
    """Stops every node, keeps the work folder (logs) only when a check failed, prints the tally
    and exits with it."""
    nodes.kill_all()
    if check.failed:
        print(f"logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{title}: {check.passed} passed, {check.failed} failed")
    sys.exit(1 if check.failed else 0)


def call(method, port, path, body=None, token=None, context=None):
    """A JSON request over HTTPS to localhost:`port`: (status, parsed body or None)."""
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=15)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, (json.loads(data) if data else None)


def server_sent_events(response):
    """The (event, id, data) of each server-sent event of `response` as it comes, until it ends;
    `data` parsed as JSON, `id` None for an event without one."""
    event, event_id, data = None, None, []
    while True:
        line = response.fp.readline()
        if not line:
            return
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and event:
            yield event, event_id, json.loads("\n".join(data)) if data else None
            event, event_id, data = None, None, []


def open_event_stream(port, token, context, cursor=None, timeout=120):
    """`GET /v1/events` on localhost:`port` as `token`, resumed from `cursor` if given: the
    connection (its socket is how a reader cuts it) and the response to read with
    ``server_sent_events``."""
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=timeout)
    conn.connect()
    headers = {"Authorization": f"Bearer {token}"}
    if cursor:
        headers["Last-Event-ID"] = cursor
    conn.request("GET", "/v1/events", headers=headers)
    return conn, conn.getresponse()


def start_webhook_receiver(work, tls, port, secret, out):
    """webhook_receiver.py on `port` (HTTPS with the `hooks` client certificate of `tls`), checking
    signatures under `secret` and appending what it gets to `out`; its output goes to
    `work`/receiver.log. Returns the process, for its PID."""
    here = os.path.dirname(os.path.abspath(__file__))
    log = open(os.path.join(work, "receiver.log"), "ab")
    return subprocess.Popen(
        [sys.executable, os.path.join(here, "webhook_receiver.py"), "--port", str(port), "--cert", os.path.join(tls, "hooks-client.pem"),
         "--key", os.path.join(tls, "hooks-client-key.pem"), "--secret", secret, "--out", out],
        stdout=log, stderr=subprocess.STDOUT)


class EventStream(threading.Thread):
    """A user's event stream on a gateway, read in the background: `events` holds each
    (event, id, data) as it comes, `ready` is set at `ready`. Resumes from `cursor` if given."""

    def __init__(self, port, token, context, cursor=None):
        super().__init__(daemon=True)
        self.port, self.token, self.context, self.cursor = port, token, context, cursor
        self.sock, self.ready, self.events = None, threading.Event(), []

    def run(self):
        try:
            conn, response = open_event_stream(self.port, self.token, self.context, self.cursor)
            self.sock = conn.sock
            for event, event_id, data in server_sent_events(response):
                self.events.append((event, event_id, data))
                if event == "ready":
                    self.ready.set()
        except Exception:
            return

    def of(self, name):
        return [(event_id, data) for event, event_id, data in self.events if event == name]

    def close(self):
        """As an app that is closed: the connection goes, without a word."""
        if self.sock:
            self.sock.shutdown(socket.SHUT_RDWR)


class ResumingStream(threading.Thread):
    """A member's event stream on a gateway, as an app keeps it: on any break it reconnects with
    the last cursor it read. `connections` holds, per connection, the (event, data) it read."""

    def __init__(self, port, token, context):
        super().__init__(daemon=True)
        self.port, self.token, self.context = port, token, context
        self.cursor, self.sock, self.stopped = None, None, False
        self.ready, self.connections = threading.Event(), []

    def run(self):
        while not self.stopped:
            events = []
            self.connections.append(events)
            try:
                conn, response = open_event_stream(self.port, self.token, self.context, self.cursor, timeout=60)
                self.sock = conn.sock
                for event, event_id, data in server_sent_events(response):
                    if self.stopped:
                        break
                    events.append((event, data))
                    if event_id:
                        self.cursor = event_id
                    if event == "ready":
                        self.ready.set()
            except Exception:
                pass
            time.sleep(0.5)

    def messages(self):
        """What the app holds: each message by (conversation, seq), the latest word on it."""
        held = {}
        for events in self.connections:
            for event, data in list(events):
                if event in ("message", "message_erased"):
                    m = data["message"]
                    key = (m["conversationId"], m["seq"])
                    if event == "message_erased" or key not in held or not held[key].get("erased"):
                        held[key] = m
        return held

    def repeated(self):
        """(conversation, seq) of `message` events written twice on one connection."""
        repeats = []
        for events in self.connections:
            seen = set()
            for event, data in list(events):
                if event == "message":
                    key = (data["message"]["conversationId"], data["message"]["seq"])
                    if key in seen:
                        repeats.append(key)
                    seen.add(key)
        return repeats

    def close(self):
        self.stopped = True
        if self.sock:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
