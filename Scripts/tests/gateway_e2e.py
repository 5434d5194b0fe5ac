#!/usr/bin/env python3
"""The gateway end to end, through real parley-node processes (2 workers, 2 gateways, SQLite, TLS).

Two users register, open event streams on different gateways, talk in a direct conversation;
receipts, typing and presence arrive; the unread count follows the receipts, and the members are
looked up in one request; devices register per login (through the API and the `parley`
CLI) and go with its logout; a stream resumes by cursor; a gateway is SIGKILLed and its
client resumes on the other; a gateway paused past failure detection ends its streams when it runs
again; a worker owning the conversation is SIGKILLed while a client sends continuously; curl, nghttp and openssl speak h2 to it; a
connection error in raw h2 gets a GOAWAY and a closed connection, and so does an idle one (a third gateway
with a 2 s idle timeout); bad input gets API.md's errors; SIGTERM
ends streams cleanly. Python's standard library only (HTTP/1.1 for this driver; h2 is checked
with curl and nghttp).

    Scripts/tests/gateway_e2e.py PATH-TO-parley-node

Every process it starts is recorded and stopped by its PID.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from e2e_lib import free_ports, issue_certificates, read_websocket_frame, wait_until, websocket_frame

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
WORK = tempfile.mkdtemp(prefix="parley-gateway.")
SECRET = "e2e-token-secret-0123456789abcdef0123"
ADMIN = "e2e-admin-token-0123456789"
PROCS = {}
PASSED = 0
FAILED = 0


def check(condition, what, detail=""):
    global PASSED, FAILED
    if condition:
        PASSED += 1
        print(f"  ok    {what}", flush=True)
    else:
        FAILED += 1
        print(f"  FAIL  {what} {detail}", flush=True)
    return condition


NAMES = ["worker-1", "worker-2", "gateway-1", "gateway-2"]
ALL = NAMES + ["gateway-3"]  # gateway-3 runs only for the idle-timeout check
ports = free_ports(3 * len(ALL))
CLUSTER = {n: ports[i] for i, n in enumerate(ALL)}
OPS = {n: ports[len(ALL) + i] for i, n in enumerate(ALL)}
CLIENT = {n: ports[2 * len(ALL) + i] for i, n in enumerate(ALL)}
SEEDS = ",".join(f"127.0.0.1:{CLUSTER[n]}" for n in ["worker-1", "worker-2"])
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")


def start(name, **settings):
    roles = "gateway" if name.startswith("gateway") else "worker"
    log = open(os.path.join(WORK, f"{name}.log"), "ab")
    env = dict(os.environ, PARLEY_TOKEN_SECRET=SECRET, PARLEY_ADMIN_TOKEN=ADMIN, PARLEY_BCRYPT_COST="4",
               PARLEY_LOG_LEVEL=os.environ.get("E2E_LOG_LEVEL", "debug" if roles == "worker" else "info"), **settings)
    PROCS[name] = subprocess.Popen(
        [NODE, "run", "--name", name, "--roles", roles, "--tls-dir", TLS, "--cluster-port", str(CLUSTER[name]),
         "--ops-port", str(OPS[name]), "--client-port", str(CLIENT[name]), "--seeds", SEEDS,
         "--data-dir", os.path.join(WORK, "data")],
        stdout=log, stderr=subprocess.STDOUT, env=env)


def kill(name, sig=signal.SIGKILL):
    proc = PROCS.get(name)
    if proc and proc.poll() is None:
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait()


def cleanup():
    for name in list(PROCS):
        kill(name)


def log_tail(name, lines=40):
    try:
        with open(os.path.join(WORK, f"{name}.log"), "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def ready(name):
    conn = http.client.HTTPConnection("127.0.0.1", OPS[name], timeout=2)
    conn.request("GET", "/readyz")
    return conn.getresponse().status == 200


def metric(name, series):
    """The sum of `series` (without labels or with any) on node `name`'s /metrics; 0 when absent."""
    conn = http.client.HTTPConnection("127.0.0.1", OPS[name], timeout=5)
    conn.request("GET", "/metrics")
    total = 0.0
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith(series + " ") or line.startswith(series + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


CONTEXT = None


class Client:
    """One HTTP/1.1 keep-alive connection to a gateway."""

    def __init__(self, gateway, token=None):
        self.gateway = gateway
        self.token = token
        self.conn = None

    def call(self, method, path, body=None, token=None, raw=None, headers=None):
        token = token or self.token
        hdrs = {"Content-Type": "application/json"}
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        hdrs.update(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection("localhost", CLIENT[self.gateway], context=CONTEXT, timeout=15)
            try:
                self.conn.request(method, path, body=data, headers=hdrs)
                resp = self.conn.getresponse()
                payload = resp.read()
                try:
                    decoded = json.loads(payload) if payload else None
                except ValueError:
                    decoded = payload
                return resp.status, decoded, dict(resp.getheaders())
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")


class Stream(threading.Thread):
    """A user's event stream: every SSE event parsed into (event, id, data)."""

    def __init__(self, gateway, token, cursor=None):
        super().__init__(daemon=True)
        self.gateway, self.token, self.cursor = gateway, token, cursor
        self.events = []
        self.lock = threading.Lock()
        self.status = None
        self.ended = threading.Event()
        self.clean_end = False
        self.conn = None
        self.start()

    def run(self):
        try:
            self.conn = http.client.HTTPSConnection("localhost", CLIENT[self.gateway], context=CONTEXT, timeout=60)
            path = "/v1/events" + (f"?cursor={self.cursor}" if self.cursor else "")
            self.conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"})
            resp = self.conn.getresponse()
            self.status = resp.status
            if resp.status != 200:
                resp.read()
                return
            event, ident, data = None, None, None
            while True:
                line = resp.readline()
                if not line:
                    self.clean_end = True
                    return
                line = line.decode().rstrip("\n")
                if line == "":
                    if event:
                        with self.lock:
                            self.events.append((event, ident, json.loads(data) if data else None))
                    event, ident, data = None, None, None
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: "):
                    ident = line[4:]
                elif line.startswith("data: "):
                    data = line[6:]
        except Exception:
            pass
        finally:
            try:
                self.conn.close()
            except Exception:
                pass
            self.ended.set()

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        self.ended.wait(5)

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def messages(self, conversation):
        return [d["message"] for e, _, d in self.snapshot() if e == "message" and d["message"]["conversationId"] == conversation]

    def last_cursor(self):
        ids = [i for _, i, _ in self.snapshot() if i]
        return ids[-1] if ids else None

    def wait_for(self, seconds, predicate):
        return wait_until(seconds, lambda: predicate(self.snapshot()))


def h2_raw(port, after_preface=b"", wait=8.0):
    """Speaks raw HTTP/2 over TLS (ALPN h2): the preface and SETTINGS, then `after_preface`, then
    nothing. Returns the error code of the last GOAWAY the server sent (None if none) and the
    seconds until it closed the connection (None if it stayed open for `wait` seconds)."""
    frames, closed_after = h2_exchange(port, [after_preface], wait)
    goaways = [int.from_bytes(payload[4:8], "big") for ftype, _, _, payload in frames if ftype == 0x7]
    return (goaways[-1] if goaways else None), closed_after


def h2_frame(ftype, stream, payload=b"", flags=0):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(headers):
    """A header block of literal fields without indexing, names and values not Huffman-coded
    (RFC 7541 section 6.2.2): enough to send any request without an HPACK library."""
    def integer(n, prefix_bits=7):
        limit = (1 << prefix_bits) - 1
        if n < limit:
            return bytes([n])
        out, n = [limit], n - limit
        while n >= 128:
            out.append(n % 128 + 128)
            n //= 128
        return bytes(out + [n])
    block = b""
    for name, value in headers:
        name, value = name.encode(), value.encode()
        block += b"\x00" + integer(len(name)) + name + integer(len(value)) + value
    return block


def h2_exchange(port, frames, wait, settings=b"", until=lambda frame: False, after_settings=b""):
    """Raw HTTP/2 over TLS: the preface, SETTINGS (with `settings`), then `frames`; reads for up to
    `wait` seconds, until the server closes, or until `until(frame)`; `after_settings` goes once the
    server's SETTINGS are acknowledged (what an extended CONNECT waits for, RFC 8441). Returns the
    frames received as (type, flags, stream, payload) and the seconds until the server closed the
    connection (None if it did not)."""
    context = ssl.create_default_context(cafile=CA)
    context.set_alpn_protocols(["h2"])
    received, out, closed_after = b"", [], None
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="localhost") as tls:
        if tls.selected_alpn_protocol() != "h2":
            return out, closed_after
        tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, settings) + b"".join(frames))
        tls.settimeout(0.5)
        opened = time.time()
        while time.time() < opened + wait:
            try:
                chunk = tls.recv(65536)
            except socket.timeout:
                continue
            except (ssl.SSLError, OSError):
                chunk = b""
            if not chunk:
                closed_after = time.time() - opened
                break
            received += chunk
            while len(received) >= 9 and len(received) >= 9 + int.from_bytes(received[:3], "big"):
                length = int.from_bytes(received[:3], "big")
                out.append((received[3], received[4], int.from_bytes(received[5:9], "big") & 0x7FFFFFFF, received[9:9 + length]))
                if received[3] == 0x4 and not received[4] & 0x1:
                    try:
                        tls.sendall(h2_frame(0x4, 0, flags=0x1) + after_settings)  # SETTINGS ACK
                        after_settings = b""
                    except OSError:
                        pass  # the server has closed; what it sent is still read
                received = received[9 + length:]
                if until(out[-1]):
                    return out, closed_after
    return out, closed_after


def unread_download(port, path, token, protocol, hold):
    """Asks for `path` over HTTP/1.1 or h2 (`protocol`), with a 4 KiB receive buffer and, in h2,
    every window opened wide, then reads nothing for `hold` seconds; then reads for up to 10 s.
    Returns the bytes read and whether the server had closed the connection (read to its end)."""
    context = ssl.create_default_context(cafile=CA)
    context.set_alpn_protocols([protocol])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(5)
    raw.connect(("127.0.0.1", port))
    with context.wrap_socket(raw, server_hostname="localhost") as tls:
        if protocol == "http/1.1":
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        else:
            wide = (1 << 31) - 1
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, (0x4).to_bytes(2, "big") + wide.to_bytes(4, "big"))
                        + h2_frame(0x8, 0, (wide - 65535).to_bytes(4, "big"))
                        + h2_frame(0x1, 1, hpack_literal([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", path),
                                                          ("authorization", f"Bearer {token}")]), flags=0x5))
        time.sleep(hold)
        received, ended = b"", False
        tls.settimeout(1)
        until = time.time() + 10
        while time.time() < until:
            try:
                chunk = tls.recv(1 << 20)
            except socket.timeout:
                continue
            except (ssl.SSLError, OSError):
                chunk = b""
            if not chunk:
                ended = True
                break
            received += chunk
        return received, ended


def seqs(messages):
    return [m["seq"] for m in messages]


def dedup(messages):
    seen, out = set(), []
    for m in messages:
        if m["seq"] not in seen:
            seen.add(m["seq"])
            out.append(m)
    return out


def forge_token(user_id, expires_ms):
    """A token as a gateway makes it, with the test's copy of the shared secret."""
    import base64
    import hashlib
    import hmac
    payload = f"{user_id}|{uuid.uuid4()}|{expires_ms}".encode()
    mac = hmac.new(SECRET.encode(), payload, hashlib.sha256).digest()
    b64 = lambda data: base64.urlsafe_b64encode(data).decode().rstrip("=")
    return f"pt1.{b64(payload)}.{b64(mac)}"


def error_shape_ok(reply):
    """API.md: {"error": {"code": str, "message": str, "retryable": bool}}."""
    if not isinstance(reply, dict) or set(reply) != {"error"}:
        return False
    error = reply["error"]
    return (set(error) == {"code", "message", "retryable"} and isinstance(error["code"], str)
            and isinstance(error["message"], str) and error["message"] and isinstance(error["retryable"], bool))


def send(client, conversation, text, cmid=None):
    return client.call("POST", f"/v1/conversations/{conversation}/messages", {"clientMessageId": cmid or str(uuid.uuid4()), "text": text})


def read_answer(tls, until=None):
    """What comes on `tls` until it closes (or, with `until`, once that has come)."""
    answer = b""
    try:
        while until is None or until not in answer:
            chunk = tls.recv(4096)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    return answer


def main():
    global CONTEXT
    print(f"gateway end-to-end test (work dir {WORK})", flush=True)
    issue_certificates(NODE, TLS, ALL)
    CONTEXT = ssl.create_default_context(cafile=CA)
    for name in NAMES:
        start(name)
    if not check(wait_until(40, lambda: all(ready(n) for n in NAMES)), "2 workers and 2 gateways are ready"):
        for n in NAMES:
            print(log_tail(n))
        return

    # Accounts
    g1, g2 = Client("gateway-1"), Client("gateway-2")
    status, alice, _ = g1.call("POST", "/v1/users", {"handle": "alice", "password": "correct horse", "displayName": "Alice"})
    check(status == 201 and alice["user"]["handle"] == "alice" and alice["token"], "register answers 201 {user, token}", f"{status} {alice}")
    status, bob, _ = g2.call("POST", "/v1/users", {"handle": "bob", "password": "battery staple", "displayName": "Bob"})
    status_dup, dup, _ = g1.call("POST", "/v1/users", {"handle": "bob", "password": "whatever1", "displayName": "Bob 2"})
    check(status_dup == 409 and dup["error"]["code"] == "conflict", "a taken handle is 409 conflict", f"{status_dup} {dup}")
    s1, wrong, _ = g1.call("POST", "/v1/sessions", {"handle": "alice", "password": "wrong password"})
    s2, unknown, _ = g1.call("POST", "/v1/sessions", {"handle": "nobody", "password": "wrong password"})
    check(s1 == s2 == 401 and wrong == unknown, "an unknown handle and a wrong password get the same 401", f"{s1} {wrong} / {s2} {unknown}")
    status, login, _ = g2.call("POST", "/v1/sessions", {"handle": "alice", "password": "correct horse"})
    check(status == 200 and login["user"]["id"] == alice["user"]["id"], "login on the other gateway gives a token for the same user")
    a1 = Client("gateway-1", alice["token"])
    a2 = Client("gateway-2", login["token"])  # a token from gateway-2, used on both
    b1 = Client("gateway-1", bob["token"])
    b2 = Client("gateway-2", bob["token"])
    check(a1.call("GET", "/v1/users/me", token=login["token"])[0] == 200, "a token issued by one gateway works on another")
    alice_id, bob_id = alice["user"]["id"], bob["user"]["id"]

    # Live delivery across gateways
    bob_stream = Stream("gateway-2", bob["token"])
    alice_stream = Stream("gateway-1", alice["token"])
    check(bob_stream.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev)), "a stream without a cursor starts with ready")
    alice_stream.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    status, created, _ = a1.call("POST", "/v1/conversations", {"memberIds": [bob_id]})
    check(status == 201 and created["conversation"]["kind"] == "direct", "a direct conversation is created (201)", f"{status} {created}")
    conv = created["conversation"]["id"]
    status, again, _ = b2.call("POST", "/v1/conversations", {"memberIds": [alice_id]})
    check(status == 200 and again["conversation"]["id"] == conv, "creating the same direct conversation again returns it with 200", f"{status}")
    check(bob_stream.wait_for(10, lambda ev: any(e == "conversation" and d["change"] == "created" for e, _, d in ev)), "the other member's stream gets conversation created")
    for i in range(1, 6):
        status, sent, _ = a1.call("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": f"hello {i}"})
        if status != 201:
            check(False, "send answers 201", f"{status} {sent}")
    check(bob_stream.wait_for(10, lambda ev: len(bob_stream.messages(conv)) >= 5), "messages arrive live on the other gateway's stream")
    check(seqs(bob_stream.messages(conv)) == [1, 2, 3, 4, 5], "in seq order, each once", seqs(bob_stream.messages(conv)))
    check(alice_stream.wait_for(10, lambda ev: seqs(alice_stream.messages(conv)) == [1, 2, 3, 4, 5]), "and on the sender's own stream")
    status, unread, _ = b1.call("GET", "/v1/users/me/unread")
    check(status == 200 and unread == {"messages": 5, "conversations": 1}, "bob's unread count: 5 messages in 1 conversation", (status, unread))
    status, looked, _ = b2.call("GET", f"/v1/users?ids={bob_id},nobody,{alice_id}")
    check(status == 200 and [u["id"] for u in looked["users"]] == [bob_id, alice_id] and looked["users"][1]["displayName"] == "Alice",
          "the members looked up in one request, in the order asked, an unknown ID left out", (status, looked))
    check(b2.call("GET", f"/v1/users?ids={alice_id}&prefix=al")[0] == 400, "ids and prefix together are 400")
    check(b2.call("GET", "/v1/users?ids=" + ",".join(f"u{i}" for i in range(101)))[0] == 400, "more than 100 ids are 400")

    check(b2.call("POST", f"/v1/conversations/{conv}/receipts", {"readSeq": 4})[0] == 204, "receipts answer 204")
    check(alice_stream.wait_for(10, lambda ev: any(e == "receipt" and d["userId"] == bob_id and d["readSeq"] == 4 for e, _, d in ev)), "the receipt reaches the other member")
    check(b1.call("GET", "/v1/users/me/unread")[1] == {"messages": 1, "conversations": 1}, "read through 4 of 5: 1 unread")
    cmid = str(uuid.uuid4())
    s_first, first, _ = b2.call("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": cmid, "text": "once"})
    s_again, repeat, _ = b1.call("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": cmid, "text": "once"})
    check(s_first == 201 and s_again == 200 and repeat["message"]["seq"] == first["message"]["seq"] == 6,
          "the same clientMessageId through another gateway returns the original (200, same seq)", f"{s_first} {s_again}")

    check(a1.call("POST", f"/v1/conversations/{conv}/typing", {"typing": True})[0] == 204, "typing answers 204")
    check(bob_stream.wait_for(10, lambda ev: any(e == "typing" and d["userId"] == alice_id and d["typing"] for e, _, d in ev)), "typing reaches the other member")
    status, listing, _ = a2.call("GET", "/v1/conversations")
    check(status == 200 and listing["conversations"][0]["unreadCount"] == 1 and listing["conversations"][0]["lastMessage"]["seq"] == 6,
          "the conversation list has the unread count and last message", f"{listing}")

    # Apps' fields: public ones anyone reads, private ones never in anyone else's view.
    secret = "private-" + uuid.uuid4().hex
    status, me, _ = a2.call("PATCH", "/v1/users/me", {"metadata": {"bio": "hi", "tier": "pro"}, "privateMetadata": {"aiUsage": 3, "note": secret}})
    check(status == 200 and me.get("metadata") == {"bio": "hi", "tier": "pro"} and me.get("privateMetadata", {}).get("note") == secret,
          "PATCH /v1/users/me answers the caller with public and private fields", (status, me))
    check(a1.call("GET", "/v1/users/me")[1].get("privateMetadata", {}).get("aiUsage") == 3, "GET /v1/users/me has the private ones, on the other gateway")
    check(bob_stream.wait_for(10, lambda ev: any(e == "user" and d["user"]["id"] == alice_id and d["user"].get("metadata", {}).get("tier") == "pro" for e, _, d in ev)),
          "a contact's stream gets a user event with the public fields")
    seen_by_bob = [b2.call("GET", f"/v1/users/{alice_id}")[1], b1.call("GET", f"/v1/users?ids={alice_id}")[1], b1.call("GET", "/v1/users?prefix=alic")[1]]
    streamed = [d for e, _, d in bob_stream.events if e == "user"]
    check(seen_by_bob[0].get("metadata", {}).get("bio") == "hi" and all(secret not in json.dumps(x) for x in seen_by_bob + streamed),
          "the private fields are in nothing Bob is given: the user, a lookup, a search, his stream", seen_by_bob)
    status, settings, _ = b2.call("PUT", f"/v1/conversations/{conv}/settings", {"metadata": {"translateTo": "ja"}})
    check(status == 200 and settings == {"muted": False, "metadata": {"translateTo": "ja"}}, "a member sets their own fields for a conversation", (status, settings))
    mine = {m["userId"]: m.get("metadata") for m in b1.call("GET", f"/v1/conversations/{conv}")[1]["members"]}
    theirs = {m["userId"]: m.get("metadata") for m in a1.call("GET", f"/v1/conversations/{conv}")[1]["members"]}
    check(mine[bob_id] == {"translateTo": "ja"} and theirs[bob_id] is None, "Bob reads them; Alice, no bot, does not", (mine, theirs))
    group = a1.call("POST", "/v1/conversations", {"memberIds": [bob_id], "name": "voice notes"})[1]["conversation"]["id"]
    status, voice, _ = a1.call("POST", f"/v1/conversations/{group}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "🎤", "metadata": {"durationMs": 3250}})
    check(status == 201 and voice["message"].get("metadata") == {"durationMs": 3250}, "a message sent with fields carries them", (status, voice))
    check(bob_stream.wait_for(10, lambda ev: any(e == "message" and d["message"].get("metadata") == {"durationMs": 3250} for e, _, d in ev)),
          "and so does its event on the other gateway")
    status, refused, _ = a1.call("PATCH", "/v1/users/me", {"metadata": {"bell": "\u0007"}})
    check(status == 400 and "metadata.bell" in refused["error"]["message"], "a control character in a field is 400 naming where", (status, refused))

    # Presence: online, then offline with lastSeen after the stream closes; contacts are told.
    status, pres, _ = a1.call("GET", f"/v1/presence?userIds={bob_id}")
    check(status == 200 and pres["presence"][0]["status"] == "online", "a user with an open stream is online", f"{pres}")
    bob_cursor = bob_stream.last_cursor()
    bob_seen = bob_stream.messages(conv)
    bob_stream.close()

    def bob_offline():
        p = a1.call("GET", f"/v1/presence?userIds={bob_id}")[1]["presence"][0]
        return p["status"] == "offline" and p.get("lastSeenAt")
    check(wait_until(10, bob_offline), "after the stream closes the user is offline with lastSeenAt",
          str(a1.call("GET", f"/v1/presence?userIds={bob_id}")))
    check(alice_stream.wait_for(10, lambda ev: any(e == "presence" and d["presence"]["userId"] == bob_id and d["presence"]["status"] == "offline" for e, _, d in ev)),
          "a contact's stream gets the presence event")

    # Resume: missed messages, then ready, then live.
    for i in range(7, 10):
        send(a1, conv, f"while away {i}")
    resumed = Stream("gateway-2", bob["token"], cursor=bob_cursor)
    resumed.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    send(a1, conv, "live 10")
    check(resumed.wait_for(10, lambda ev: 10 in seqs(resumed.messages(conv))), "the resumed stream gets live messages")
    events = resumed.snapshot()
    ready_at = next(i for i, (e, _, _) in enumerate(events) if e == "ready")
    before_ready = [d["message"]["seq"] for e, _, d in events[:ready_at] if e == "message"]
    after_ready = [d["message"]["seq"] for e, _, d in events[ready_at:] if e == "message"]
    new_before = [s for s in before_ready if s > max(seqs(bob_seen))]
    check(new_before == list(range(max(seqs(bob_seen)) + 1, 10)) and after_ready == [10], "resume replays exactly the missed messages in order, then ready, then live",
          f"replayed {before_ready}, after ready {after_ready}")
    check(all(s in seqs(bob_seen) for s in before_ready if s <= 5), "anything else replayed is a duplicate the client already had")

    # A cursor can be ahead of an event the client never got: fan-out from different conversations
    # reaches a gateway out of commit order, so a stream may send an event committed at T+0.5 s
    # before one committed at T. Resuming from such a cursor must still replay the earlier one.
    from datetime import datetime
    seventh = next(m for m in resumed.messages(conv) if m["seq"] == 7)
    committed_ms = int(datetime.strptime(seventh["sentAt"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000)
    ahead = Stream("gateway-2", bob["token"], cursor=f"pc1.{committed_ms + 500}")
    ahead.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    ahead_events = ahead.snapshot()
    ahead_ready = next((i for i, (e, _, _) in enumerate(ahead_events) if e == "ready"), len(ahead_events))
    replayed_seqs = [d["message"]["seq"] for e, _, d in ahead_events[:ahead_ready] if e == "message" and d["message"]["conversationId"] == conv]
    check(7 in replayed_seqs, "a resume replays a message committed shortly before the cursor (events arrive out of commit order)",
          f"replayed {replayed_seqs}")
    ahead.close()

    # Gateway failover: bob streams from gateway-2; it is SIGKILLed; bob resumes on gateway-1.
    cursor = resumed.last_cursor()
    kill("gateway-2")
    resumed.ended.wait(10)
    for i in range(11, 14):
        send(a1, conv, f"during gateway failover {i}")
    failover = Stream("gateway-1", bob["token"], cursor=cursor)
    check(failover.wait_for(10, lambda ev: {11, 12, 13} <= set(seqs(failover.messages(conv)))), "after its gateway dies a client resumes on another and misses nothing")
    start("gateway-2")

    # A gateway paused past failure detection was declared down: once it runs again it ends its
    # streams, so that their clients resume by cursor at once (events may have passed it by).
    wait_until(60, lambda: ready("gateway-2"))
    paused = Stream("gateway-2", bob["token"])
    paused.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    kill("gateway-2", signal.SIGSTOP)
    time.sleep(4)
    kill("gateway-2", signal.SIGCONT)
    check(paused.ended.wait(15) and paused.clean_end, "a gateway that was declared down (paused 4 s) ends its streams when it runs again",
          log_tail("gateway-2", 5))
    check(wait_until(30, lambda: ready("gateway-2")), "and it serves again as a new incarnation", log_tail("gateway-2", 5))

    # Owner failover during sends: the worker hosting the conversation is SIGKILLed mid-stream.
    def owner():
        # The worker whose log shows the conversation's latest activation or creation.
        latest = ("", "worker-1")
        for w in ["worker-1", "worker-2"]:
            with open(os.path.join(WORK, f"{w}.log"), "rb") as f:
                for line in f.read().decode(errors="replace").splitlines():
                    if f"conversation.id={conv}" in line and ("conversation activated" in line or "conversation created" in line):
                        latest = max(latest, (line[:24], w))
        return latest[1]
    victim = owner()
    acked, failures, retried, ack_times = {}, [], {}, []
    stop = threading.Event()

    def sender():
        client = Client("gateway-1", alice["token"])
        n = 0
        while not stop.is_set() and n < 400:
            n += 1
            cmid = str(uuid.uuid4())
            deadline = time.time() + 30
            while time.time() < deadline:  # the outbox: same clientMessageId until acknowledged
                try:
                    status, body, _ = send(client, conv, f"burst {n}", cmid)
                except Exception as error:
                    status, body = 0, str(error)
                if status in (200, 201):
                    acked[cmid] = body["message"]["seq"]
                    ack_times.append(time.time())
                    break
                retried[status] = retried.get(status, 0) + 1
                time.sleep(0.2)
            else:
                failures.append(cmid)
    t = threading.Thread(target=sender)
    t.start()
    time.sleep(1.5)
    kill(victim)
    killed_at = len(acked)
    time.sleep(6)
    stop.set()
    t.join(60)
    check(len(acked) > killed_at + 5 and not failures, f"sends continue after the owner ({victim}) is SIGKILLed",
          f"acked {len(acked)} ({killed_at} before the kill), failed {len(failures)}, client retries by status {retried}")
    longest_gap = max((b - a for a, b in zip(ack_times, ack_times[1:])), default=0)
    check(longest_gap < 10, "the gap in acknowledgements around the owner's death is bounded (detection + the gateway's retry)",
          f"longest gap {longest_gap:.2f} s")
    print(f"        (longest gap between acknowledgements: {longest_gap:.2f} s)")
    history = []
    after = 0
    while True:
        status, page, _ = a1.call("GET", f"/v1/conversations/{conv}/messages?after={after}&limit=200")
        if status != 200 or not page["messages"]:
            break
        history += page["messages"]
        after = page["messages"][-1]["seq"]
    by_cmid = {}
    for m in history:
        by_cmid.setdefault(m["clientMessageId"], []).append(m["seq"])
    check(seqs(history) == list(range(1, len(history) + 1)), "history is gapless and ordered after the owner's death", seqs(history)[-5:])
    check(all(by_cmid.get(c) == [s] for c, s in acked.items()), "every acknowledged message is stored exactly once with its acknowledged seq")
    check(failover.wait_for(20, lambda ev: seqs(dedup(failover.messages(conv)))[-1:] == [len(history)]), "the live stream caught up")
    live = seqs(dedup(failover.messages(conv)))
    check(live == list(range(live[0], len(history) + 1)), "the live stream saw every message in seq order, gaps filled", f"{live[:3]}…{live[-3:]} of {len(history)}")
    print(f"        ({len(acked)} acknowledged sends; client-side retries by status: {retried} — 429 is the per-user send rate,"
          " 503 a send the gateway could not place within its 5 s retry window)")
    start(victim)

    # Interoperability with independent clients
    wait_until(30, lambda: ready("gateway-2"))
    out = subprocess.run(["curl", "-s", "--http2", "--cacert", CA, "-o", "/dev/null", "-w", "%{http_version}",
                          "-H", f"Authorization: Bearer {bob['token']}", f"https://localhost:{CLIENT['gateway-1']}/v1/users/me"],
                         capture_output=True, text=True)
    check(out.stdout == "2", "curl --http2 negotiates h2", out.stdout)
    reg = subprocess.run(["curl", "-s", "--http2", "--cacert", CA, "-H", "Content-Type: application/json", "-d",
                          json.dumps({"handle": "carol", "password": "carol-password", "displayName": "Carol"}),
                          f"https://localhost:{CLIENT['gateway-2']}/v1/users"], capture_output=True, text=True)
    carol = json.loads(reg.stdout)
    check("token" in carol, "curl registers over h2")
    curl_send = subprocess.run(["curl", "-s", "--http2", "--cacert", CA, "-w", " %{http_version}", "-H", f"Authorization: Bearer {bob['token']}",
                                "-H", "Content-Type: application/json", "-d", json.dumps({"clientMessageId": str(uuid.uuid4()), "text": "sent by curl"}),
                                f"https://localhost:{CLIENT['gateway-1']}/v1/conversations/{conv}/messages"], capture_output=True, text=True)
    check('"text":"sent by curl"' in curl_send.stdout and curl_send.stdout.endswith(" 2"), "curl sends a message over h2", curl_send.stdout)
    curl_events = subprocess.run(["curl", "-s", "-N", "--http2", "--cacert", CA, "-m", "3", "-H", f"Authorization: Bearer {bob['token']}",
                                  f"https://localhost:{CLIENT['gateway-1']}/v1/events?cursor={cursor}"], capture_output=True, text=True)
    check("event: ready" in curl_events.stdout and "sent by curl" in curl_events.stdout, "curl reads the event stream over h2 (replay, then ready)",
          curl_events.stdout[-300:])
    if shutil.which("nghttp"):
        proc = subprocess.Popen(["nghttp", "-v", "--no-verify-peer", "-H", f"authorization: Bearer {bob['token']}",
                                 f"https://localhost:{CLIENT['gateway-2']}/v1/events"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output = []
        reader = threading.Thread(target=lambda: output.extend(iter(proc.stdout.readline, b"")), daemon=True)
        reader.start()
        wait_until(10, lambda: b"event: ready" in b"".join(output))
        send(a1, conv, "to nghttp")
        # A worker restarted just before: the conversation may be moving back to it, so the
        # message is waited for rather than given a fixed time.
        wait_until(20, lambda: b"to nghttp" in b"".join(output))
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        reader.join(timeout=10)
        text = b"".join(output).decode(errors="replace")
        check("h2" in text and ":status: 200" in text and "event: message" in text and "to nghttp" in text,
              "nghttp reads the event stream over h2", text[-600:])
        body_file = os.path.join(WORK, "nghttp-body.json")
        with open(body_file, "w") as f:
            json.dump({"clientMessageId": str(uuid.uuid4()), "text": "sent by nghttp"}, f)
        nghttp_send = subprocess.run(["nghttp", "--no-verify-peer", "-H", f"authorization: Bearer {bob['token']}", "-H", "content-type: application/json",
                                      "-d", body_file, f"https://localhost:{CLIENT['gateway-1']}/v1/conversations/{conv}/messages"],
                                     capture_output=True, text=True)
        check('"text":"sent by nghttp"' in nghttp_send.stdout, "nghttp sends a message", nghttp_send.stdout + nghttp_send.stderr)
        with open(body_file, "w") as f:
            json.dump({"handle": "erin", "password": "erin-password", "displayName": "Erin"}, f)
        nghttp_reg = subprocess.run(["nghttp", "-v", "--no-verify-peer", "-H", "content-type: application/json", "-d", body_file,
                                     f"https://localhost:{CLIENT['gateway-2']}/v1/users"], capture_output=True, text=True)
        check(":status: 201" in nghttp_reg.stdout and '"handle":"erin"' in nghttp_reg.stdout, "nghttp registers over h2", nghttp_reg.stdout[-300:])
    else:
        check(False, "nghttp is installed (Debian nghttp2-client)")
    s_client = subprocess.run(["openssl", "s_client", "-alpn", "h2", "-CAfile", CA, "-connect", f"127.0.0.1:{CLIENT['gateway-1']}", "-servername", "localhost"],
                              input="", capture_output=True, text=True, timeout=10)
    check("ALPN protocol: h2" in s_client.stdout and "Verify return code: 0" in s_client.stdout, "openssl s_client negotiates ALPN h2 with a verified certificate")
    # A DATA frame on stream 0 is a connection error: GOAWAY, then the connection must close.
    goaway_code, closed_after = h2_raw(CLIENT['gateway-1'], h2_frame(0x0, 0, b"x"), wait=4.0)
    check(goaway_code == 1 and closed_after is not None, "an h2 connection error (DATA on stream 0) gets GOAWAY PROTOCOL_ERROR, then the gateway closes the connection",
          f"GOAWAY error code {goaway_code}, closed after {closed_after}")

    # The send stream: one request whose body is lines and whose answers come line by line, while
    # it stays open — with curl, which sends its stdin as the body as it comes. curl reads stdin
    # with a blocking read and takes in what arrived only between reads, so the test nudges it with
    # empty lines (which the stream skips) until the answer shows.
    status, login_b, _ = b1.call("POST", "/v1/sessions", {"handle": "bob", "password": "battery staple"})
    stream_token = login_b["token"]
    proc = subprocess.Popen(["curl", "-sN", "--http2", "--cacert", CA, "-X", "POST", "-T", "-", "-H", f"Authorization: Bearer {stream_token}",
                             "-H", "Content-Type: application/x-ndjson", "-w", "%{http_version} %{response_code}\n",
                             f"https://localhost:{CLIENT['gateway-1']}/v1/sends"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    answers = []
    reader = threading.Thread(target=lambda: answers.extend(iter(proc.stdout.readline, b"")), daemon=True)
    reader.start()

    def ask(line, wait=15):
        """Writes one line; its answer, parsed (None if none came within `wait` seconds)."""
        count = len(answers)
        proc.stdin.write(line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode())
        proc.stdin.flush()

        def answered():
            if len(answers) > count:
                return True
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            return False
        if not wait_until(wait, answered):
            return None
        try:
            return json.loads(answers[count])
        except ValueError:
            return answers[count]
    stream_cmid = str(uuid.uuid4())
    first = ask({"type": "message", "conversationId": conv, "clientMessageId": stream_cmid, "text": "over the send stream"})
    check(isinstance(first, dict) and first.get("status") == 201 and first["message"]["text"] == "over the send stream",
          "curl: a line of the send stream is answered 201 with the message while the request stays open", first)
    again = ask({"type": "message", "conversationId": conv, "clientMessageId": stream_cmid, "text": "over the send stream", "id": "again"})
    check(isinstance(again, dict) and again.get("status") == 200 and again.get("id") == "again" and again["message"]["seq"] == first["message"]["seq"],
          "the same clientMessageId again on the stream answers 200 with the original seq, and the line's id", again)
    check(alice_stream.wait_for(10, lambda ev: any(d["message"]["clientMessageId"] == stream_cmid for e, _, d in ev if e == "message")),
          "the streamed message reaches the other member's event stream")
    # A sender has read its own messages: the receipt is for one of Alice's.
    read_to = a1.call("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "for bob to read"})[1]["message"]["seq"]
    receipt = ask({"type": "receipts", "conversationId": conv, "readSeq": read_to, "id": "r1"})
    typing = ask({"type": "typing", "conversationId": conv, "typing": True, "id": "t1"})
    check(receipt == {"id": "r1", "status": 204} and typing == {"id": "t1", "status": 204}, "receipts and typing lines answer 204 with their ids", (receipt, typing))
    check(alice_stream.wait_for(10, lambda ev: any(e == "receipt" and d["userId"] == bob_id and d["readSeq"] == read_to for e, _, d in ev)),
          "the streamed receipt reaches the other member")
    malformed = ask(b'{"type": "message", "conversationId": \n')
    unknown = ask({"type": "message", "conversationId": "c_nowhere", "clientMessageId": str(uuid.uuid4()), "text": "x", "id": "u"})
    blank = ask({"type": "message", "conversationId": conv, "clientMessageId": str(uuid.uuid4()), "text": " \n ", "id": "b"})
    check(isinstance(malformed, dict) and malformed.get("status") == 400 and malformed["error"]["code"] == "invalid_request"
          and unknown.get("status") == 404 and unknown.get("id") == "u" and blank.get("status") == 400 and blank.get("clientMessageId"),
          "bad lines are answered with the REST route's errors, and the stream goes on", (malformed, unknown, blank))
    after_bad = ask({"type": "message", "conversationId": conv, "clientMessageId": str(uuid.uuid4()), "text": "after the bad lines"})
    check(isinstance(after_bad, dict) and after_bad.get("status") == 201 and after_bad["message"]["seq"] == read_to + 1,
          "a good line after them is sent, next in the conversation's order", after_bad)
    # Logging out ends the stream at its next line, as it refuses the next request.
    check(b1.call("DELETE", "/v1/sessions/current", token=stream_token)[0] == 204, "the stream's session logs out")
    refused = ask({"type": "message", "conversationId": conv, "clientMessageId": str(uuid.uuid4()), "text": "after logout"})
    # The stream is over: a line after the refused one is not answered. (curl notices the
    # response's end only when it next writes: then it prints its -w line, and exits 92 — its
    # upload met the RST_STREAM NO_ERROR that ends the request's half, RFC 9113 section 8.1.)
    after = ask({"type": "message", "conversationId": conv, "clientMessageId": str(uuid.uuid4()), "text": "after the end"}, wait=3)
    ended_by_gateway = not isinstance(after, dict)
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    proc.wait(timeout=15)
    reader.join(timeout=5)
    check(isinstance(refused, dict) and refused.get("status") == 401 and ended_by_gateway and answers[-1].strip() == b"2 200" and proc.returncode in (0, 92),
          "after a logout the next line is answered 401 and the gateway ends the response (curl: h2, 200)", (refused, after, answers[-2:], proc.returncode))
    status, over_h1, _ = b1.call("POST", "/v1/sends", raw=b"")
    check(status == 400 and over_h1["error"]["code"] == "http2_required", "over HTTP/1.1 the send stream is refused: 400 http2_required", (status, over_h1))
    status, upgrade, _ = b1.call("GET", "/v1/sends", headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                                                             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    check(status == 400 and upgrade["error"]["code"] == "http2_required", "and so is its WebSocket as an HTTP/1.1 upgrade: 400 http2_required", (status, upgrade))

    # Bad input: the documented errors, and everyone else keeps being served.
    def error_of(status, body):
        return status, body["error"]["code"] if isinstance(body, dict) and "error" in body else body
    cases = [
        ("malformed JSON", ("POST", f"/v1/conversations/{conv}/messages", None, b'{"text": '), (400, "invalid_request")),
        ("wrong types", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": 5, "text": []}, None), (400, "invalid_request")),
        ("not a UUID", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": "abc", "text": "x"}, None), (400, "invalid_request")),
        ("only whitespace", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": " \n "}, None), (400, "invalid_request")),
        ("4,001 scalars", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "é" * 4001}, None), (400, "invalid_request")),
        ("invalid UTF-8", ("POST", f"/v1/conversations/{conv}/messages", None, b'{"clientMessageId":"' + str(uuid.uuid4()).encode() + b'","text":"\xff\xfe"}'), (400, "invalid_request")),
        ("a huge body", ("POST", f"/v1/conversations/{conv}/messages", None, b'{"text":"' + b"x" * 200_000 + b'"}'), (413, "payload_too_large")),
        ("deep nesting", ("POST", "/v1/conversations", None, b"[" * 60_000), (400, "invalid_request")),
        ("an unknown route", ("GET", "/v1/nothing/here", None, None), (404, "not_found")),
        ("a non-member", ("GET", f"/v1/conversations/{conv}", None, None, carol["token"]), (404, "not_found")),
        ("a missing token", ("GET", "/v1/users/me", None, None, "-"), (401, "unauthorized")),
        ("a forged token", ("GET", "/v1/users/me", None, None, alice["token"][:-4] + "AAAA"), (401, "unauthorized")),
        ("history limit 201", ("GET", f"/v1/conversations/{conv}/messages?limit=201", None, None), (400, "invalid_request")),
        ("a receipt past lastSeq", ("POST", f"/v1/conversations/{conv}/receipts", {"readSeq": 10_000_000}, None), (400, "invalid_request")),
        ("a garbage cursor", ("GET", "/v1/events?cursor=zzz", None, None), (400, "invalid_request")),
        ("an expired cursor", ("GET", "/v1/events?cursor=pc1.1000", None, None), (410, "cursor_expired")),
    ]
    status, group, _ = a1.call("POST", "/v1/conversations", {"memberIds": [bob_id, carol["user"]["id"]], "name": "trio"})
    group_id = group["conversation"]["id"]
    # Muting is each member's own setting: only they see it, and nobody else hears of it.
    status, muted, _ = b1.call("PUT", f"/v1/conversations/{group_id}/settings", {"muted": True})
    check(status == 200 and muted == {"muted": True, "metadata": {}}, "a member mutes a group (200 {muted, metadata})", f"{status} {muted}")
    mine, theirs = b1.call("GET", f"/v1/conversations/{group_id}")[1], a1.call("GET", f"/v1/conversations/{group_id}")[1]
    check(mine.get("muted") is True and theirs.get("muted") is False, "each member sees only their own setting",
          f"{mine.get('muted')} {theirs.get('muted')}")
    listed = b1.call("GET", "/v1/conversations")[1]["conversations"]
    check([c.get("muted") for c in listed if c["id"] == group_id] == [True], "the conversation list shows the setting", f"{listed}")
    check(b1.call("PUT", f"/v1/conversations/{group_id}/settings", {"muted": False})[1] == {"muted": False, "metadata": {}}
          and b1.call("GET", f"/v1/conversations/{group_id}")[1].get("muted") is False, "and unmutes it")
    cases += [
        ("muting a conversation one is not in", ("PUT", f"/v1/conversations/{conv}/settings", {"muted": True}, None, carol["token"]), (404, "not_found")),
        ("a muted setting that is not a boolean", ("PUT", f"/v1/conversations/{group_id}/settings", {"muted": "yes"}, None), (400, "invalid_request")),
        ("renaming a direct conversation", ("PATCH", f"/v1/conversations/{conv}", {"name": "x"}, None), (403, "forbidden")),
        ("removing another member without being the owner", ("DELETE", f"/v1/conversations/{group_id}/members/{alice_id}", None, None, bob["token"]), (403, "forbidden")),
        ("an expired token", ("GET", "/v1/users/me", None, None, forge_token(alice_id, expires_ms=int(time.time() * 1000) - 1000)), (401, "unauthorized")),
        ("a handle taken", ("POST", "/v1/users", {"handle": "alice", "password": "whatever1", "displayName": "A"}, None, "-"), (409, "conflict")),
    ]
    check(forge_token(alice_id, expires_ms=int(time.time() * 1000) + 60_000) is not None
          and a1.call("GET", "/v1/users/me", token=forge_token(alice_id, expires_ms=int(time.time() * 1000) + 60_000))[0] == 200,
          "a token made with the shared secret by hand is accepted (so the expired case tests expiry, not the format)")
    def run_case(request):
        """(method, path, body, raw[, token]) as alice on gateway-1; token "-" sends none."""
        method, path, body, raw = request[:4]
        token = request[4] if len(request) > 4 else None
        client = Client("gateway-1", alice["token"])
        if token == "-":
            client.token, token = None, None
        status, reply, _ = client.call(method, path, body, token=token, raw=raw)
        return status, reply
    for what, request, expected in cases:
        status, reply = run_case(request)
        check(error_of(status, reply) == expected and error_shape_ok(reply), f"{what} → {expected[0]} {expected[1]}", f"got {status} {reply}")
    # Hostile input that once took a worker down or changed a message: each is refused with 400
    # naming what is wrong, and afterwards every worker is up and others are served.
    hostile = [
        ("a conversation-list cursor past Int64's milliseconds", ("GET", "/v1/conversations?cursor=9223372036854775807.x", None, None), "cursor"),
        ("a conversation-list cursor before 1970", ("GET", "/v1/conversations?cursor=-5.x", None, None), "cursor"),
        ("an event-stream cursor past year 9999", ("GET", "/v1/events?cursor=pc1.9223372036854775807", None, None), "cursor"),
        ("history after Int64.max + 1", ("GET", f"/v1/conversations/{conv}/messages?after=9223372036854775808", None, None), "after"),
        ("history before a huge number", ("GET", f"/v1/conversations/{conv}/messages?before=99999999999999999999999", None, None), "before"),
        ("a receipt of 2^63", ("POST", f"/v1/conversations/{conv}/receipts", None, b'{"readSeq": 9223372036854775808}'), "readSeq"),
        ("a text holding U+0000", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "before\u0000after"}, None), "U+0000"),
        ("a group name holding U+001B", ("POST", "/v1/conversations", {"memberIds": [bob_id, carol["user"]["id"]], "name": "esc\u001b[31m"}, None), "U+001B"),
        ("a rename holding U+0000", ("PATCH", f"/v1/conversations/{group_id}", {"name": "a\u0000b"}, None), "U+0000"),
        ("a display name holding U+0007", ("PATCH", "/v1/users/me", {"displayName": "bell\u0007"}, None), "U+0007"),
        ("an avatarURL that is not https", ("PATCH", "/v1/users/me", {"avatarURL": "javascript:alert(1)"}, None), "https"),
        ("a registration whose display name holds U+0000", ("POST", "/v1/users", {"handle": "nulname", "password": "whatever1", "displayName": "x\u0000"}, None, "-"), "U+0000"),
    ]
    hostile += [(f"a text holding U+{c:04X}", ("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": f"x{chr(c)}y"}, None), f"U+{c:04X}")
                for c in range(1, 0x20) if c not in (0x09, 0x0A, 0x0D)]
    refused = []
    for what, request, named in hostile:
        status, reply = run_case(request)
        if not (error_of(status, reply) == (400, "invalid_request") and error_shape_ok(reply) and named in reply["error"]["message"]):
            refused.append(f"{what}: {status} {reply}")
    check(not refused, f"{len(hostile)} hostile requests are each refused with 400 invalid_request naming what is wrong", "; ".join(refused))
    check(all(ready(n) for n in ["worker-1", "worker-2"]), "every worker is still up after them")
    kept = "tab\tnewline\ncarriage return\r\nemoji 👩‍👩‍👧‍👦 RTL שלום combining e\u0301"
    status, sent_kept, _ = send(b1, conv, kept)
    status_hist, hist, _ = b1.call("GET", f"/v1/conversations/{conv}/messages?after={sent_kept['message']['seq'] - 1}&limit=1") if status == 201 else (0, {}, {})
    check(status == 201 and sent_kept["message"]["text"] == kept and hist.get("messages", [{}])[0].get("text") == kept,
          "another user's send is served, and tab, newline, CR, ZWJ, RTL and combining marks come back exactly", f"{status} {status_hist}")
    # Secrets: passwords bcrypt would cut are refused; the cluster view and metrics are not on the
    # client port; a stranger learns nothing of a user's presence.
    for what, password, named in [("holding U+0000", "correct\u0000horse", "U+0000"), ("of 73 bytes", "x" * 73, "72 bytes")]:
        status, reply, _ = Client("gateway-1").call("POST", "/v1/users", {"handle": f"pw{uuid.uuid4().hex[:8]}", "password": password, "displayName": "P"})
        check(status == 400 and named in reply["error"]["message"], f"a password {what} is refused at registration (400 naming it)", f"{status} {reply}")
    status, reply, _ = Client("gateway-1").call("POST", "/v1/sessions", {"handle": "alice", "password": "correct horse\u0000anything"})
    check(status == 401, "a login whose password holds U+0000 does not match the password before it", f"{status} {reply}")
    # A handle no account can have is never a limiter's key: six logins with the same 60 KB
    # "handle" are each 401, where a key it held would be out of tokens (5 per handle) by the sixth.
    statuses = [Client("gateway-2").call("POST", "/v1/sessions", {"handle": "H" * 60_000, "password": "wrong password"})[0] for _ in range(6)]
    check(statuses == [401] * 6, "logins with a handle no account can have are 401 without being counted under it", statuses)
    for path in ["/v1/cluster", "/metrics"]:
        status, _, _ = Client("gateway-1").call("GET", path, token=alice["token"])
        check(status == 404, f"GET {path} is not served on the client port (only on the operations port)", f"{status}")
    status, eve, _ = Client("gateway-1").call("POST", "/v1/users", {"handle": f"eve{uuid.uuid4().hex[:6]}", "password": "whatever1", "displayName": "Eve"})
    eve_stream = Stream("gateway-1", eve["token"])
    eve_stream.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    status, seen, _ = Client("gateway-2", eve["token"]).call("GET", f"/v1/presence?userIds={bob_id},{eve['user']['id']}")
    stranger, own = seen["presence"][0], seen["presence"][1]
    status_b, seen_b, _ = b1.call("GET", f"/v1/presence?userIds={alice_id}")
    check(status == 200 and stranger == {"userId": bob_id, "status": "offline"} and own["status"] == "online"
          and status_b == 200 and seen_b["presence"][0]["status"] in ("online", "offline"),
          "a user who shares no conversation sees another's presence only as a user never seen (offline, no lastSeen)", f"{seen} / {seen_b}")
    eve_stream.close()
    # A GET of an unknown conversation writes nothing to the store.
    import sqlite3
    def conversation_rows():
        db = sqlite3.connect(f"file:{os.path.join(WORK, 'data', 'parley.sqlite')}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute("SELECT count(*), coalesce(sum(epoch), 0) FROM conversations").fetchone()
        finally:
            db.close()
    before = conversation_rows()
    unknown = [a1.call("GET", f"/v1/conversations/c_{uuid.uuid4().hex}")[0] for _ in range(5)]
    check(unknown == [404] * 5 and conversation_rows() == before, "a GET of an unknown conversation is 404 and writes nothing to the store", f"{unknown} {before} {conversation_rows()}")
    # The owner who leaves hands the group to the longest-standing member, who may then add members.
    status, team, _ = a1.call("POST", "/v1/conversations", {"memberIds": [bob_id, carol["user"]["id"]], "name": "handover"})
    team_id = team["conversation"]["id"]
    left = a1.call("DELETE", f"/v1/conversations/{team_id}/members/{alice_id}")[0]
    status, after, _ = b1.call("GET", f"/v1/conversations/{team_id}")
    roles = {m["userId"]: m["role"] for m in after.get("members", [])}
    added = b1.call("POST", f"/v1/conversations/{team_id}/members", {"userIds": [alice_id]})[0]
    check(left == 204 and roles == {bob_id: "owner", carol["user"]["id"]: "member"} and added == 200,
          "a group's owner who leaves hands it to the longest-standing member, who may add members", f"{left} {roles} {added}")

    # HTTP at the edges, with independent clients: HEAD wherever GET is served (no body), and a body
    # over the limit answered 413 whatever its size, on both protocols, the connection going on.
    url = f"https://localhost:{CLIENT['gateway-1']}"
    auth = ["-H", f"Authorization: Bearer {alice['token']}"]
    for proto in ["--http2", "--http1.1"]:
        head = subprocess.run(["curl", "-sS", "--max-time", "30", "-I", proto, "--cacert", CA, *auth, f"{url}/v1/users/me"], capture_output=True, text=True, timeout=20)
        check(head.returncode == 0 and head.stdout.split(" ")[1:2] == ["200"] and "content-length" in head.stdout.lower(),
              f"curl -I {proto}: HEAD of a GET route answers 200 with its headers and no body", head.stdout + head.stderr)
    sizes = {"64 KiB + 1 byte": 65_537, "120 KB": 120_000, "10 MB": 10_000_000}
    for proto in ["--http2", "--http1.1"]:
        for label, size in sizes.items():
            body_path = os.path.join(WORK, f"body-{size}")
            if not os.path.exists(body_path):
                with open(body_path, "wb") as f:
                    f.write(b"x" * size)
            big = subprocess.run(["curl", "-sS", "--max-time", "30", proto, "--cacert", CA, *auth, "-H", "Content-Type: application/json", "-X", "POST",
                                  "--data-binary", f"@{body_path}", "-w", "\n%{http_code}", f"{url}/v1/conversations"], capture_output=True, text=True, timeout=60)
            lines = big.stdout.strip().split("\n")
            check(big.returncode == 0 and lines[-1] == "413" and '"payload_too_large"' in lines[0],
                  f"curl {proto}: a body of {label} gets 413 payload_too_large", f"exit {big.returncode}: {big.stdout[-200:]} {big.stderr[-200:]}")
    if shutil.which("nghttp") and shutil.which("h2load"):
        ng = subprocess.run(["timeout", "30", "nghttp", "-v", "-d", os.path.join(WORK, "body-10000000"), "-H", f"authorization: Bearer {alice['token']}",
                             f"{url}/v1/conversations"], capture_output=True, text=True, timeout=60)
        check(":status: 413" in ng.stdout and "error_code=NO_ERROR" in ng.stdout,
              "nghttp: a 10 MB body gets 413, then RST_STREAM NO_ERROR so that it stops sending", ng.stdout[-400:])
        # Eight over-limit bodies one after another on one connection: the flow-control window the
        # discarded parts used is given back, so the connection never stalls.
        h2 = subprocess.run(["timeout", "30", "h2load", "-n", "8", "-c", "1", "-m", "1", "-d", os.path.join(WORK, "body-120000"), "-H", f"authorization: Bearer {alice['token']}",
                             f"{url}/v1/conversations"], capture_output=True, text=True, timeout=60)
        check("8 done" in h2.stdout and "8 4xx" in h2.stdout, "h2load: eight 120 KB bodies on one connection each get their 413", h2.stdout[-300:])
    # Devices for push notifications: registered per login; the logout below removes its own.
    apns_token = "a1b2" * 16
    status, phone, _ = a2.call("POST", "/v1/devices", {"platform": "apns", "token": apns_token, "topic": "app.parley.example"})
    check(status == 201 and phone["device"]["platform"] == "apns" and phone["device"]["environment"] == "production"
          and phone["device"]["id"].startswith("d_"), "a device registers (201), APNs production by default", f"{status} {phone}")
    status, again, _ = a2.call("POST", "/v1/devices", {"platform": "apns", "token": apns_token, "topic": "app.parley.example"})
    check(status == 200 and again["device"]["id"] == phone["device"]["id"], "the same token again keeps its device (200, same ID)", f"{status} {again}")
    status, tablet, _ = a1.call("POST", "/v1/devices", {"platform": "fcm", "token": "fcm:token-of-the-tablet"})
    check(status == 201 and "environment" not in tablet["device"], "an FCM device registers through the other login", f"{status} {tablet}")
    for body, what in [({"platform": "apns", "token": "not hex"}, "an APNs token that is not hex"),
                       ({"platform": "fcm", "token": ""}, "an empty FCM token"),
                       ({"platform": "pigeon", "token": "abcd"}, "an unknown platform"),
                       ({"platform": "fcm", "token": "x", "environment": "sandbox"}, "an environment for FCM"),
                       ({"platform": "apns", "token": apns_token, "environment": "staging"}, "an unknown APNs environment")]:
        status, reply, _ = a1.call("POST", "/v1/devices", body)
        check(status == 400 and reply["error"]["code"] == "invalid_request" and error_shape_ok(reply), f"{what} is 400", f"{status} {reply}")
    status, listed, _ = a1.call("GET", "/v1/devices")
    check(status == 200 and [d["id"] for d in listed["devices"]] == [phone["device"]["id"], tablet["device"]["id"]],
          "GET /v1/devices lists the user's devices, oldest first", f"{status} {listed}")
    check(b1.call("DELETE", f"/v1/devices/{tablet['device']['id']}")[0] == 404, "another user's device is 404 to delete")
    check(b1.call("GET", "/v1/devices")[1]["devices"] == [], "and is not in another user's list")
    # gateway-1 remembers a token it found valid (for a lease): the logout on gateway-2 must reach it.
    check(a1.call("GET", "/v1/conversations", token=login["token"])[0] == 200, "the second token works on gateway-1")
    logout_client = Client("gateway-2", login["token"])
    check(logout_client.call("DELETE", "/v1/sessions/current")[0] == 204, "logout answers 204")
    status, listed, _ = a1.call("GET", "/v1/devices")
    check([d["id"] for d in listed["devices"]] == [tablet["device"]["id"]], "the logout removed the device its login registered, and only it", f"{listed}")
    check(a1.call("DELETE", f"/v1/devices/{tablet['device']['id']}")[0] == 204, "deleting one's own device answers 204")
    check(a1.call("GET", "/v1/devices")[1]["devices"] == [] and a1.call("DELETE", f"/v1/devices/{tablet['device']['id']}")[0] == 404,
          "a deleted device is gone, and deleting it again is 404")
    check(a1.call("GET", "/v1/conversations", token=login["token"])[0] == 401
          and a1.call("GET", "/v1/users/me", token=login["token"])[0] == 401, "a revoked token is refused on every gateway at once")
    check(a1.call("GET", "/v1/users/me")[0] == 200, "the user's other token still works, and the node still serves")

    # Sessions and passwords, across both gateways: each token a session, listed and revocable by
    # its owner; a password change revokes every other token on every gateway before its 204, and
    # ends the event streams they opened.
    status, pat, _ = Client("gateway-2").call("POST", "/v1/users", {"handle": "pat", "password": "pat-password-1", "displayName": "Pat"},
                                             headers={"User-Agent": "Parley-Mac/1.0 (laptop)"})
    laptop = Client("gateway-1", pat.get("token") if status == 201 else None)
    logins = [Client("gateway-2").call("POST", "/v1/sessions", {"handle": "pat", "password": "pat-password-1"}, headers={"User-Agent": ua})
              for ua in ("Parley-iOS/2.1 (phone)", "Parley-iOS/2.1 (tablet)")]
    phone_token, tablet_token = (reply.get("token") for _, reply, _ in logins)
    for token in (phone_token, tablet_token):  # both gateways now remember both tokens for a lease
        for gateway in ("gateway-1", "gateway-2"):
            Client(gateway, token).call("GET", "/v1/users/me")
    status, listed, _ = laptop.call("GET", "/v1/sessions")
    sessions = listed.get("sessions", []) if status == 200 else []
    check([(s["userAgent"], s["current"]) for s in sessions]
          == [("Parley-iOS/2.1 (tablet)", False), ("Parley-iOS/2.1 (phone)", False), ("Parley-Mac/1.0 (laptop)", True)]
          and all(set(s) >= {"id", "createdAt", "lastUsedAt", "expiresAt"} and "token" not in s for s in sessions),
          "GET /v1/sessions lists the user's sessions newest first, with their User-Agent, the current one marked", f"{status} {listed}")
    tablet_id = next((s["id"] for s in sessions if "tablet" in s["userAgent"]), "none")
    check(Client("gateway-2", bob["token"]).call("DELETE", f"/v1/sessions/{tablet_id}")[0] == 404, "another user's session is 404 to revoke")
    tablet_stream = Stream("gateway-2", tablet_token)
    tablet_ready = tablet_stream.wait_for(15, lambda ev: any(e == "ready" for e, _, _ in ev))
    check(laptop.call("DELETE", f"/v1/sessions/{tablet_id}")[0] == 204, "revoking one session answers 204")
    check(tablet_ready and tablet_stream.ended.wait(10), "the event stream the revoked session opened (on the other gateway) ends", f"ready={tablet_ready}")
    check(all(Client(g, tablet_token).call("GET", "/v1/users/me")[0] == 401 for g in ("gateway-1", "gateway-2")),
          "the revoked session's token is refused on both gateways at once")
    check(laptop.call("DELETE", f"/v1/sessions/{tablet_id}")[0] == 404, "and revoking it again is 404")
    phone_stream = Stream("gateway-2", phone_token)
    phone_ready = phone_stream.wait_for(15, lambda ev: any(e == "ready" for e, _, _ in ev))
    status, reply, _ = laptop.call("PUT", "/v1/users/me/password", {"current": "not-the-password", "new": "pat-password-2"})
    check(status == 403 and reply["error"]["code"] == "forbidden" and "current password" in reply["error"]["message"],
          "a password change with the wrong current password is 403", f"{status} {reply}")
    status, reply, _ = laptop.call("PUT", "/v1/users/me/password", {"current": "pat-password-1", "new": "short"})
    check(status == 400 and "new" in reply["error"]["message"], "a new password that registration would refuse is 400, naming it", f"{status} {reply}")
    status, _, _ = laptop.call("PUT", "/v1/users/me/password", {"current": "pat-password-1", "new": "pat-password-2"})
    check(status == 204, "a password change answers 204", f"{status}")
    check(all(Client(g, phone_token).call("GET", "/v1/users/me")[0] == 401 for g in ("gateway-1", "gateway-2")),
          "every other token of the user is refused on both gateways once the change answered")
    check(phone_ready and phone_stream.ended.wait(10), "the event stream the phone's token opened ends", f"ready={phone_ready}")
    check(laptop.call("GET", "/v1/users/me")[0] == 200 and Client("gateway-2", pat.get("token")).call("GET", "/v1/users/me")[0] == 200,
          "the token that changed the password keeps working on both gateways")
    old = Client("gateway-1").call("POST", "/v1/sessions", {"handle": "pat", "password": "pat-password-1"})[0]
    new = Client("gateway-1").call("POST", "/v1/sessions", {"handle": "pat", "password": "pat-password-2"})[0]
    check(old == 401 and new == 200, "the old password no longer signs in; the new one does", f"old {old}, new {new}")
    check([s["current"] for s in laptop.call("GET", "/v1/sessions")[1]["sessions"]] == [False, True],
          "the sessions left: the new login and the one that changed the password")

    # Blocking, across both gateways: in effect everywhere before its 204.
    quinn = Client("gateway-2").call("POST", "/v1/users", {"handle": "quinn", "password": "quinn-password", "displayName": "Quinn"})[1]
    rex = Client("gateway-2").call("POST", "/v1/users", {"handle": "rex", "password": "rex-password", "displayName": "Rex"})[1]
    q1, r1, r2 = Client("gateway-1", quinn["token"]), Client("gateway-1", rex["token"]), Client("gateway-2", rex["token"])
    status, made, _ = r2.call("POST", "/v1/conversations", {"memberIds": [quinn["user"]["id"]]})
    qr = made["conversation"]["id"] if status == 201 else "c_none"
    check(send(r2, qr, "hello quinn")[0] == 201, "rex writes to quinn")
    check(q1.call("PUT", f"/v1/users/me/blocks/{rex['user']['id']}")[0] == 204, "quinn blocks rex on gateway-1 (204)")
    refused = [send(client, qr, "let me in") for client in (r2, r1)]
    check(all(status == 403 and reply["error"]["code"] == "forbidden" and reply["error"]["message"] == "this user does not accept your messages"
              for status, reply, _ in refused),
          "rex's sends are refused at once on both gateways: 403, 'this user does not accept your messages'", f"{refused}")
    status, reply, _ = send(q1, qr, "bye")
    check(status == 403 and "unblock" in reply["error"]["message"], "quinn cannot write to rex either while she blocks him", f"{status} {reply}")
    blocks = q1.call("GET", "/v1/users/me/blocks")[1]
    check([b["userId"] for b in blocks["blocks"]] == [rex["user"]["id"]] and r1.call("GET", "/v1/users/me/blocks")[1] == {"blocks": []},
          "quinn's block list names rex; rex's own list is empty (the list is its owner's alone)", f"{blocks}")
    check(q1.call("PUT", f"/v1/users/me/blocks/{quinn['user']['id']}")[0] == 400 and q1.call("PUT", "/v1/users/me/blocks/u_nobody")[0] == 404,
          "blocking oneself is 400, an unknown user 404")
    check(q1.call("DELETE", f"/v1/users/me/blocks/{rex['user']['id']}")[0] == 204 and send(r2, qr, "friends again")[0] == 201,
          "unblocked on gateway-1, rex writes again through gateway-2")
    reports = [q1.call("POST", "/v1/reports", {"userId": rex["user"]["id"], "conversationId": qr, "seq": 1, "reason": "harassment"}) for _ in range(11)]
    statuses = [status for status, _, _ in reports]
    check(statuses[0] == 201 and set(statuses[1:10]) == {200} and statuses[10] == 429 and reports[10][2].get("Retry-After")
          and len({reply["report"]["id"] for status, reply, _ in reports[:10]}) == 1,
          "a report, retried, is one report; the eleventh in a row is 429 with Retry-After", f"{statuses}")
    # Export: rex's data, his messages only, written as it is read; a few a day.
    send(q1, qr, "from quinn")
    status, exported, headers = r1.call("GET", "/v1/users/me/export")
    texts = [m["message"]["text"] for m in exported.get("messages", [])] if status == 200 else []
    check(status == 200 and "attachment" in headers.get("Content-Disposition", "") and exported["user"]["id"] == rex["user"]["id"]
          and [c["id"] for c in exported["conversations"]] == [qr]
          and {m["userId"] for m in exported["conversations"][0]["members"]} == {quinn["user"]["id"], rex["user"]["id"]}
          and texts == ["hello quinn", "friends again"] and exported["blocks"] == [] and "exportedAt" in exported,
          "GET /v1/users/me/export: the profile, the conversations with their members, and only the messages he sent", f"{status} {texts}")
    more = [r1.call("GET", "/v1/users/me/export")[0] for _ in range(3)]
    check(more == [200, 200, 429], "three exports, then 429", f"{more}")
    burst = [send(b1, conv, f"flood {i}") for i in range(120)]
    limited = [(reply, headers) for status, reply, headers in burst if status == 429]
    reply, headers = limited[0] if limited else ({}, {})
    check(limited and reply["error"]["code"] == "rate_limited" and reply["error"]["retryable"] and error_shape_ok(reply)
          and headers.get("Retry-After"), "sending faster than the per-user rate gets 429 rate_limited with Retry-After", f"{len(limited)} of 120 limited")

    # ParleyClient, through the `parley` CLI: its event stream survives the SIGKILL of its gateway.
    parley = os.path.join(os.path.dirname(NODE), "parley")
    cli_env = dict(os.environ, PARLEY_CONFIG=os.path.join(WORK, "parley-cli.json"), PARLEY_CA=CA,
                   PARLEY_URLS=f"https://localhost:{CLIENT['gateway-2']},https://localhost:{CLIENT['gateway-1']}", PARLEY_PASSWORD="dave-password")

    def cli(*args):
        return subprocess.run([parley, *args], env=cli_env, capture_output=True, text=True, timeout=60)
    reg = cli("register", "dave", "--display-name", "Dave")
    check(reg.returncode == 0 and "signed in as dave" in reg.stdout, "parley register signs in and keeps the token", reg.stdout + reg.stderr)
    added = cli("devices", "add", "apns", "0f" * 32, "--topic", "app.parley.example", "--sandbox", "--json")
    device = json.loads(added.stdout)["device"] if added.returncode == 0 else {}
    check(device.get("environment") == "sandbox" and device.get("topic") == "app.parley.example", "parley devices add registers a device", added.stdout + added.stderr)
    listed = cli("devices", "--json")
    check(listed.returncode == 0 and [d["id"] for d in json.loads(listed.stdout)["devices"]] == [device.get("id")], "parley devices lists it", listed.stdout + listed.stderr)
    removed = cli("devices", "remove", device.get("id", "d_none"))
    gone = cli("devices", "--json")
    check(removed.returncode == 0 and gone.returncode == 0 and json.loads(gone.stdout)["devices"] == [], "parley devices remove removes it", removed.stdout + removed.stderr)
    bad = cli("devices", "add", "apns", "not-hex")
    check(bad.returncode != 0 and "hex" in bad.stderr, "parley devices add says why a token is refused", bad.stdout + bad.stderr)
    new = cli("new", "alice", "--json")
    dave_conv = json.loads(new.stdout)["id"] if new.returncode == 0 else None
    check(dave_conv is not None, "parley new starts a direct conversation by handle", new.stdout + new.stderr)
    wait_until(30, lambda: ready("gateway-2"))
    tail = subprocess.Popen([parley, "tail", "--json", "--count", "6", "--for", "60s"], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    for i in range(1, 4):
        send(a1, dave_conv, f"to dave {i}")
    time.sleep(1)
    kill("gateway-2")
    for i in range(4, 7):
        send(a1, dave_conv, f"to dave {i}")
    try:
        out, err = tail.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(tail.pid, signal.SIGKILL)
        out, err = tail.communicate()
    got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    dave_seqs = [int(e["seq"]) for e in got if e["event"] == "message" and e["conversationId"] == dave_conv]
    check(tail.returncode == 0 and dave_seqs == [1, 2, 3, 4, 5, 6], "ParleyClient's stream moves to the other gateway after a SIGKILL and misses nothing, each once",
          f"rc={tail.returncode} seqs={dave_seqs} {err[-300:]}")
    sent = cli("send", dave_conv, "hi", "alice", "--json")
    check(sent.returncode == 0 and json.loads(sent.stdout)["message"]["seq"] == 7, "parley send goes through the remaining gateway", sent.stdout + sent.stderr)
    hist = cli("history", dave_conv, "--limit", "3")
    check(hist.returncode == 0 and "hi alice" in hist.stdout and "to dave 6" in hist.stdout, "parley history prints the last messages", hist.stdout + hist.stderr)
    bad = cli("send", "c_nope", "x")
    check(bad.returncode != 0 and "404 not_found" in bad.stderr, "a CLI error is one clear line and a non-zero exit", bad.stderr)
    exported = cli("export", "--output", os.path.join(WORK, "dave-export.json"))
    dave_export = json.load(open(os.path.join(WORK, "dave-export.json"))) if exported.returncode == 0 else {}
    check(dave_export.get("user", {}).get("handle") == "dave"
          and [m["message"]["text"] for m in dave_export.get("messages", [])] == ["hi alice"],
          "parley export writes the user's data: the messages they sent", exported.stdout + exported.stderr)
    blocked = cli("block", "alice")
    listed = cli("blocks", "--json")
    refused = cli("send", dave_conv, "are you there?")
    unblocked = cli("unblock", "alice")
    check(blocked.returncode == 0 and [b["userId"] for b in json.loads(listed.stdout or "{}").get("blocks", [])] == [alice_id]
          and refused.returncode != 0 and "403 forbidden" in refused.stderr and unblocked.returncode == 0
          and cli("send", dave_conv, "unblocked").returncode == 0,
          "parley block / blocks / unblock: a blocked user's conversation refuses sends until unblocked",
          blocked.stderr + listed.stdout + listed.stderr + refused.stderr + unblocked.stderr)
    start("gateway-2")

    # Bounded per client: at most 10 event streams per user on a gateway (the 11th is 429, and one
    # closed makes room), and registrations from one address are rate-limited.
    carol_streams = [Stream("gateway-1", carol["token"]) for _ in range(10)]
    all_ready = all(s.wait_for(15, lambda ev: any(e == "ready" for e, _, _ in ev)) for s in carol_streams)
    status, reply, headers = Client("gateway-1", carol["token"]).call("GET", "/v1/events")
    check(all_ready and status == 429 and reply["error"]["code"] == "too_many_streams" and error_shape_ok(reply) and headers.get("Retry-After"),
          "a user's 11th event stream on a gateway is 429 too_many_streams with Retry-After", f"ready={all_ready} {status} {reply}")
    carol_streams[0].close()
    # Over HTTP/1.1 the gateway sees a client gone at its next write (a ping within 3 s).
    opened = []

    def another_opens():
        attempt = Stream("gateway-1", carol["token"])
        opened.append(attempt)
        return attempt.wait_for(3, lambda ev: any(e == "ready" for e, _, _ in ev))
    check(wait_until(20, another_opens), "once one of them closed, another opens", f"{len(opened)} attempts")
    for s in carol_streams[1:] + opened:
        s.close()
    flood = [Client("gateway-1").call("POST", "/v1/users", {"handle": f"flood{i}", "password": "whatever1", "displayName": "F"}) for i in range(25)]
    limited = [(reply, headers) for status, reply, headers in flood if status == 429]
    check(limited and all(r["error"]["code"] == "rate_limited" and h.get("Retry-After") for r, h in limited)
          and sum(1 for status, _, _ in flood if status == 201) >= 5,
          "registrations from one address past the limit get 429 rate_limited with Retry-After", f"{len(limited)} of 25 limited")

    # Every method on every route, over HTTP/1.1 and h2 (curl): never a 5xx, an error always in
    # API.md's shape, and the connection still serves the next request. A throwaway user, whose
    # session is revoked last.
    # (Registered on gateway-2: gateway-1's registrations from this address were used up above.)
    status, thrown, _ = Client("gateway-2").call("POST", "/v1/users", {"handle": f"m{uuid.uuid4().hex[:8]}", "password": "whatever1", "displayName": "M"})
    if status == 201:
        t_id, t_token = thrown["user"]["id"], thrown["token"]
        status, t_conv, _ = Client("gateway-1", t_token).call("POST", "/v1/conversations", {"memberIds": [alice_id, bob_id], "name": "methods"})
        t_conv = t_conv["conversation"]["id"] if status == 201 else "c_none"
        paths = ["/v1/users", "/v1/sessions", "/v1/users/me", f"/v1/users/{alice_id}", "/v1/conversations", f"/v1/conversations/{t_conv}",
                 f"/v1/conversations/{t_conv}/members", f"/v1/conversations/{t_conv}/members/{bob_id}", f"/v1/conversations/{t_conv}/messages",
                 f"/v1/conversations/{t_conv}/receipts", f"/v1/conversations/{t_conv}/typing", "/v1/presence", "/v1/events", "/healthz", "/readyz",
                 "/v1/sessions/current", "/v1/sessions/s_none", "/v1/users/me/password", "/v1/users/me/blocks", f"/v1/users/me/blocks/{bob_id}",
                 "/v1/reports", "/v1/reports/r_none/resolve", "/v1/users/me/export", f"/v1/admin/users/{bob_id}/suspend", f"/v1/admin/users/{bob_id}/unsuspend"]
        methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
        bad = []
        h1 = Client("gateway-1", t_token)
        for path in paths:
            for method in methods:
                if path == "/v1/events" and method in ("GET", "HEAD"):
                    continue  # the event stream, tested above
                if path == "/v1/sessions/current" and method == "DELETE":
                    continue  # last: it ends the session
                body = b"{}" if method in ("POST", "PUT", "PATCH") else None
                try:
                    status, reply, _ = h1.call(method, path, raw=body)
                except Exception as error:
                    bad.append(f"h1 {method} {path}: {type(error).__name__}")
                    continue
                if status >= 500 or (method != "HEAD" and status >= 400 and not error_shape_ok(reply)):
                    bad.append(f"h1 {method} {path}: {status} {reply}")
                curl = ["curl", "-sS", "--http2", "--max-time", "10", "--cacert", CA, "-H", f"Authorization: Bearer {t_token}",
                        "-o", "/dev/null", "-w", "%{http_code}"]
                curl += ["-I"] if method == "HEAD" else ["-X", method]
                if body:
                    curl += ["-H", "Content-Type: application/json", "--data-binary", "{}"]
                h2 = subprocess.run(curl + [f"https://localhost:{CLIENT['gateway-1']}{path}"], capture_output=True, text=True, timeout=20)
                if h2.returncode != 0 or not h2.stdout.isdigit() or int(h2.stdout) >= 500:
                    bad.append(f"h2 {method} {path}: exit {h2.returncode} {h2.stdout} {h2.stderr[-120:]}")
        last = h1.call("DELETE", "/v1/sessions/current")[0]
        check(not bad and last == 204 and h1.call("GET", "/v1/users/me")[0] == 401,
              f"every method on every route ({len(paths)} routes × {len(methods)} methods, HTTP/1.1 and h2): no 5xx, errors in API.md's shape, the connection kept",
              "; ".join(bad[:8]))
    else:
        check(False, "a throwaway user for the method matrix registers", f"{status} {thrown}")

    # Downloads nobody reads: sixteen on a connection whose streams have no room to receive in
    # (SETTINGS_INITIAL_WINDOW_SIZE 0) each hold a slot of their user's (16 at most), so a
    # seventeenth, on another connection, is 429 too_many_downloads; after the write deadline
    # (60 s) each of the sixteen is reset, and its slot given back.
    photo = bytes(range(256)) * 2048  # 512 KiB: written as it is read, not collected whole
    status, uploaded, _ = a1.call("POST", "/v1/media", raw=b"%PDF-1.4\n" + photo, headers={"Content-Type": "application/pdf"})
    if check(status == 201, "a 512 KiB document uploads", f"{status} {uploaded}"):
        media_path = f"/v1/media/{uploaded['media']['id']}"
        requests = [h2_frame(0x1, stream, hpack_literal([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", media_path),
                                                           ("authorization", f"Bearer {alice['token']}")]), flags=0x5) for stream in range(1, 33, 2)]
        result, reset = {}, set()
        started = time.time()
        stalled = threading.Thread(target=lambda: result.update(frames=h2_exchange(
            CLIENT["gateway-1"], requests, wait=90, settings=(0x4).to_bytes(2, "big") + (0).to_bytes(4, "big"),
            until=lambda f: f[0] == 0x3 and (reset.add(f[2]) or len(reset) == 16))))
        stalled.start()
        # Meanwhile, a client that reads nothing at all of its connection, over HTTP/1.1 and over
        # h2: no reset can reach it, so after the deadline its connection is closed.
        status, large, _ = b1.call("POST", "/v1/media", raw=b"%PDF-1.4\n" + os.urandom(8 << 20), headers={"Content-Type": "application/pdf"})
        unread = {}
        readers = [threading.Thread(target=lambda protocol=protocol: unread.update({protocol: unread_download(
            CLIENT["gateway-1"], f"/v1/media/{large['media']['id']}", bob["token"], protocol, hold=70)})) for protocol in ("http/1.1", "h2")]
        if check(status == 201, "an 8 MiB document uploads", f"{status} {large}"):
            for reader in readers:
                reader.start()
        closed_before = metric("gateway-1", "parley_gateway_connections_stalled_closed")
        time.sleep(3)
        status, reply, headers = a1.call("GET", media_path)
        check(status == 429 and reply["error"]["code"] == "too_many_downloads" and headers.get("Retry-After"),
              "a seventeenth download while sixteen are stalled is 429 too_many_downloads", f"{status} {reply}")
        time.sleep(40)
        closed_early = metric("gateway-1", "parley_gateway_connections_stalled_closed") - closed_before
        stalled.join()
        frames, _ = result.get("frames", ([], None))
        resets = sorted({stream for ftype, _, stream, payload in frames if ftype == 0x3 and payload == (8).to_bytes(4, "big")})
        took = time.time() - started
        check(resets == list(range(1, 33, 2)) and 55 <= took <= 90,
              "downloads whose client takes nothing are reset (CANCEL) after the 60 s write deadline", f"{resets} after {took:.0f} s")
        check(wait_until(10, lambda: a1.call("GET", media_path)[0] == 200), "their slots given back, the download is served")
        for reader in readers:
            if reader.is_alive() or reader.ident is not None:
                reader.join()
        size = 9 + (8 << 20)
        cut = {protocol: (len(got), ended) for protocol, (got, ended) in unread.items()}
        closed = metric("gateway-1", "parley_gateway_connections_stalled_closed") - closed_before
        check(set(cut) == {"http/1.1", "h2"} and all(ended and length < size for length, ended in cut.values()) and closed_early == 0 and closed == 2,
              "connections whose client reads nothing, HTTP/1.1 and h2, are closed after the 60 s deadline (not before), their downloads cut short",
              f"{cut}; closed after 46 s: {closed_early}, in all: {closed}")

    # Connections that hold a gateway: a gateway with short timeouts and small limits.
    start("gateway-3", PARLEY_CLIENT_IDLE_TIMEOUT="2", PARLEY_CLIENT_CONNECTIONS_MAX="6", PARLEY_CLIENT_CONNECTIONS_PER_ADDRESS="5", PARLEY_CLIENT_HANDSHAKE_TIMEOUT="3",
          PARLEY_CLIENT_REQUEST_TIMEOUT="1", PARLEY_WRITE_RATE="1", PARLEY_SEND_RATE="100000", PARLEY_READ_RATE="2")
    if wait_until(30, lambda: ready("gateway-3")):
        port = CLIENT["gateway-3"]
        code, closed_after = h2_raw(port)
        check(code == 0 and closed_after is not None and 1.5 <= closed_after <= 6,
              "an h2 connection with no stream is sent GOAWAY NO_ERROR and closed after the idle timeout (--client-idle-timeout 2)",
              f"GOAWAY {code}, closed after {closed_after}")
        # A send socket that names no token holds a stream for nothing: reset after the request
        # timeout, once the gateway has accepted it (HEADERS 200 first).
        connect = hpack_literal([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/v1/sends"),
                                 (":authority", f"localhost:{port}"), ("sec-websocket-version", "13")])
        opened = time.time()
        frames, _ = h2_exchange(port, [], 6, after_settings=h2_frame(0x1, 1, connect, flags=0x4), until=lambda frame: frame[0] == 0x3 and frame[2] == 1)
        waited = time.time() - opened
        on_stream = [ftype for ftype, _, stream, _ in frames if stream == 1]
        check(on_stream[:1] == [0x1] and on_stream[-1:] == [0x3] and 0.9 <= waited <= 5,
              "a send socket (CONNECT /v1/sends) that sends no token is accepted, then reset after the request timeout (--client-request-timeout 1)",
              f"frames on its stream {on_stream} after {waited:.1f}s")
        # Each address has a share (--client-connections-per-address 5): five TCP connections from
        # 127.0.0.2 that never start TLS take it, and a sixth from there is closed at once; one
        # from 127.0.0.3 takes the last slot (--client-connections-max 6), and a seventh, from
        # any address, is closed at once; once one of them goes, a new one is served.
        def served_from(source):
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=CONTEXT, timeout=5, source_address=(source, 0))
                conn.request("GET", "/healthz")
                status = conn.getresponse().status
                conn.close()
                return f"served {status}"
            except Exception as error:
                return f"refused ({type(error).__name__})"
        holders = [socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)) for _ in range(5)]
        time.sleep(0.3)
        sixth_same = served_from("127.0.0.2")
        holders.append(socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.3", 0)))
        time.sleep(0.3)
        seventh = served_from("127.0.0.1")
        holders.pop(0).close()
        # The gateway sees the close at its next read: on a busy machine, not at once.
        after_one = wait_until(5, lambda: served_from("127.0.0.1") == "served 200")
        check(sixth_same.startswith("refused") and seventh.startswith("refused") and after_one,
              "one address holds at most its share (--client-connections-per-address), and at --client-connections-max a new connection is closed at once; served once one has gone",
              f"sixth from one address {sixth_same}, seventh {seventh}, then {after_one}")
        for h in holders:
            h.close()
        wait_until(5, lambda: Client("gateway-3").call("GET", "/healthz")[0] == 200)  # below the limit again
        # A connection that never starts its TLS handshake is closed after --client-handshake-timeout.
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        opened = time.time()
        try:
            eof = silent.recv(1) == b""
        except OSError:
            eof = True
        waited = time.time() - opened
        silent.close()
        check(eof and 1.5 <= waited <= 8, "a connection that sends nothing is closed after the TLS handshake timeout (3 s)", f"closed={eof} after {waited:.1f}s")
        # Slowloris on HTTP/1.1: headers that never end get 408 and a closed connection.
        context = ssl.create_default_context(cafile=CA)
        context.set_alpn_protocols(["http/1.1"])
        with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost") as tls:
            tls.sendall(b"GET /v1/users/me HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            opened = time.time()
            answer = read_answer(tls)
            waited = time.time() - opened
        check(answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer and 0.5 <= waited <= 8,
              "HTTP/1.1 headers that never end get 408 request_timeout and a closed connection (--client-request-timeout 1)", f"{answer[:120]!r} after {waited:.1f}s")
        # An HTTP/1.1 upload may take longer than the request timeout while its bytes keep coming;
        # one that stops for longer gets 408.
        def trickled_upload(pieces, pause, stall=0.0):
            body = b"%PDF-1.4\n" + b"0" * 20_000 + b"\n%%EOF\n"
            head = (f"POST /v1/media HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {alice['token']}\r\n"
                    f"Content-Type: application/pdf\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost") as tls:
                tls.sendall(head)
                size = len(body) // pieces + 1
                for i in range(pieces):
                    time.sleep(stall if i == pieces // 2 and stall else pause)
                    try:
                        tls.sendall(body[i * size:(i + 1) * size])
                    except OSError:
                        break
                return read_answer(tls, until=b"\r\n\r\n")
        started = time.time()
        answer = trickled_upload(pieces=10, pause=0.3)
        check(answer.startswith(b"HTTP/1.1 201") and time.time() - started > 2.5,
              "an HTTP/1.1 upload taking 3 s, its bytes never 1 s apart, is kept (201) past the 1 s request timeout", answer[:80])
        answer = trickled_upload(pieces=10, pause=0.05, stall=3)
        check(answer.startswith(b"HTTP/1.1 408"), "one whose bytes stop for 3 s gets 408", answer[:80])
        # The same on HTTP/2: headers of a POST, then no body.
        block = hpack_literal([(":method", "POST"), (":scheme", "https"), (":authority", "localhost"), (":path", "/v1/conversations"),
                               ("authorization", f"Bearer {alice['token']}"), ("content-type", "application/json")])
        frames, _ = h2_exchange(port, [h2_frame(0x1, 1, block, flags=0x4)], wait=8, until=lambda f: f[0] == 0x3 and f[2] == 1)
        on_stream = [(t, p) for t, f, sid, p in frames if sid == 1]
        check([t for t, _ in on_stream] == [0x1, 0x0, 0x3] and b"request_timeout" in on_stream[1][1] and on_stream[2][1] == b"\x00\x00\x00\x00",
              "an HTTP/2 request whose body never comes gets 408 request_timeout, then RST_STREAM NO_ERROR", f"{[(t, p[:60]) for t, p in on_stream]}")
        # Writes other than sends are limited per user (--write-rate 1: a burst of 5).
        typing = [Client("gateway-3", alice["token"]).call("POST", f"/v1/conversations/{conv}/typing", {"typing": True}) for _ in range(8)]
        limited = [(r, h) for st, r, h in typing if st == 429]
        check(limited and all(r["error"]["code"] == "rate_limited" and h.get("Retry-After") for r, h in limited) and typing[0][0] == 204,
              "typing faster than the per-user write rate gets 429 rate_limited with Retry-After", f"{[st for st, _, _ in typing]}")
        # Reads are limited per user too (--read-rate 2: a burst of 10): asking about random
        # conversations is a read like any other.
        reads = [Client("gateway-3", carol["token"]).call("GET", f"/v1/conversations/c_{uuid.uuid4().hex}") for _ in range(14)]
        limited = [(r, h) for st, r, h in reads if st == 429]
        check(limited and all(r["error"]["code"] == "rate_limited" and h.get("Retry-After") for r, h in limited) and reads[0][0] == 404,
              "reading faster than the per-user read rate gets 429 rate_limited with Retry-After", f"{[st for st, _, _ in reads]}")
        # An event stream whose client holds its HTTP/2 window at 0 is ended once what the gateway
        # holds for it passes the bound (2 MiB), not buffered without end.
        block = hpack_literal([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", "/v1/events"),
                               ("authorization", f"Bearer {bob['token']}")])
        zero_window = (0x4).to_bytes(2, "big") + (0).to_bytes(4, "big")  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        result = {}
        reader = threading.Thread(target=lambda: result.update(frames=h2_exchange(
            port, [h2_frame(0x1, 1, block, flags=0x5)], wait=60, settings=zero_window, until=lambda f: f[0] == 0x3 and f[2] == 1)))
        reader.start()
        time.sleep(1.5)
        sender = Client("gateway-3", alice["token"])
        sent_ok = 0
        for i in range(800):
            if send(sender, conv, f"{i} " + "w" * 3990)[0] == 201:
                sent_ok += 1
            if i % 20 == 0 and not reader.is_alive():
                break
        reader.join(60)
        frames, _ = result.get("frames", ([], False))
        resets = [p for t, f, sid, p in frames if sid == 1 and t == 0x3]
        check(resets and sent_ok >= 300, "an event stream whose client keeps its window at 0 is reset once 2 MiB wait for it, and sends go on",
              f"{sent_ok} sent, frames on the stream: {[t for t, f, sid, p in frames if sid == 1][:10]}")
        check(all(ready(n) for n in ["worker-1", "worker-2", "gateway-3"]) and send(a1, conv, "after the slow clients")[0] == 201,
              "every node is still up after them, and another send is served")
    else:
        check(False, "gateway-3 (short timeouts, small limits) became ready", log_tail("gateway-3"))
    kill("gateway-3", signal.SIGTERM)
    wait_until(8, lambda: PROCS["gateway-3"].poll() is not None)

    # Graceful shutdown: SIGTERM ends open streams cleanly and the process exits. A send socket
    # open then is closed with 1001 (going away): its client may connect again, elsewhere.
    stream = Stream("gateway-1", alice["token"])
    stream.wait_for(10, lambda ev: any(e == "ready" for e, _, _ in ev))
    port = CLIENT["gateway-1"]
    connect = hpack_literal([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/v1/sends"),
                             (":authority", f"localhost:{port}"), ("sec-websocket-version", "13")])
    hello = websocket_frame(0x1, json.dumps({"token": alice["token"]}).encode())
    sockets_before = metric("gateway-1", "parley_gateway_send_sockets_opened")
    socket_frames = {}
    socket_reader = threading.Thread(target=lambda: socket_frames.update(frames=h2_exchange(
        port, [], 20, after_settings=h2_frame(0x1, 1, connect, flags=0x4) + h2_frame(0x0, 1, hello),
        until=lambda f: f[2] == 1 and (f[0] == 0x3 or (f[0] == 0x0 and f[1] & 0x1)))[0]))
    socket_reader.start()
    socket_named = wait_until(10, lambda: metric("gateway-1", "parley_gateway_send_sockets_opened") > sockets_before)
    started = time.time()
    kill("gateway-1", signal.SIGTERM)
    exited = wait_until(8, lambda: PROCS["gateway-1"].poll() is not None)
    check(exited and stream.ended.wait(1) and stream.clean_end, "SIGTERM ends the event streams cleanly and the gateway exits",
          f"exited={exited} after {time.time() - started:.1f}s, clean={stream.clean_end}")
    socket_reader.join(10)
    on_socket = [f for f in socket_frames.get("frames", []) if f[2] == 1]
    received, messages = b"".join(payload for ftype, _, _, payload in on_socket if ftype == 0x0), []
    while (read := read_websocket_frame(received)) is not None:
        messages.append(read[:2])
        received = read[2]
    check(socket_named and len(messages) == 2 and messages[0] == (0x1, b'{"status":200}') and messages[1][0] == 0x8
          and messages[1][1][:2] == (1001).to_bytes(2, "big") and on_socket[-1][0] == 0x0 and on_socket[-1][1] & 0x1,
          "SIGTERM closes an open send socket with 1001 (going away), after its hello's answer, and ends its stream",
          f"named={socket_named}, messages {messages}, frames on its stream {[(t, fl) for t, fl, _, _ in on_socket]}")

    # No worker at all: a send is retried for the gateway's window, then 503, retryable.
    started = time.time()
    survivor = Client("gateway-2", alice["token"])
    wait_until(30, lambda: ready("gateway-2"))
    for w in ["worker-1", "worker-2"]:
        kill(w)
    status, reply, headers = survivor.call("POST", f"/v1/conversations/{conv}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "nobody home"})
    check(status == 503 and reply["error"]["code"] == "unavailable" and reply["error"]["retryable"] is True and error_shape_ok(reply)
          and headers.get("Retry-After"), "with every worker gone a send answers 503 unavailable, retryable, with Retry-After",
          f"{status} {reply} after {time.time() - started:.1f} s")
    check(survivor.call("GET", "/healthz")[0] == 200, "the gateway keeps running")


try:
    main()
except Exception as error:  # a crash of the driver is a failure, with its cause
    import traceback
    traceback.print_exc()
    check(False, f"the test driver failed: {error}")
finally:
    cleanup()
    if FAILED:
        for name in [n for n in ALL if n in PROCS]:
            print(f"----- {name}.log (last 30 lines)")
            print(log_tail(name, 30))
    if FAILED and os.environ.get("PARLEY_KEEP_FAILED"):
        print(f"kept {WORK} for inspection")
    else:
        shutil.rmtree(WORK, ignore_errors=True)
print(f"gateway end-to-end: {PASSED} passed, {FAILED} failed")
sys.exit(1 if FAILED else 0)
