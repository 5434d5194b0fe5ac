#!/usr/bin/env python3
"""The driver of Scripts/bench-push: users who are all offline, each with an APNs device, in
groups; each group's sender sends two messages per push window, so that every other member is owed
one notification each window. What the stand-in APNs server accepted is counted by the server
(--push-url, --push-ca: Scripts/tests/push_server.py's /control/count) or by the workers
(--metrics: their /metrics URLs, parley_push_sent).

    bench_push.py --url URL --ca CA (--push-url URL --push-ca CA | --metrics URL,...) --groups G --members S --duration SECONDS --window SECONDS --pids PID,...
"""
import argparse
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

parser = argparse.ArgumentParser()
for flag in ["--url", "--ca", "--pids"]:
    parser.add_argument(flag, required=True)
parser.add_argument("--push-url")
parser.add_argument("--push-ca")
parser.add_argument("--metrics")
parser.add_argument("--groups", type=int, default=10)
parser.add_argument("--members", type=int, default=500)
parser.add_argument("--duration", type=float, default=30)
parser.add_argument("--window", type=float, default=1)
args = parser.parse_args()
if not args.metrics and not (args.push_url and args.push_ca):
    parser.error("count with --metrics, or with --push-url and --push-ca")
CONTEXT = ssl.create_default_context(cafile=args.ca)
gateway = urllib.parse.urlparse(args.url)
local = threading.local()


def call(method, path, body=None, token=None):
    if getattr(local, "conn", None) is None:
        local.conn = http.client.HTTPSConnection(gateway.hostname, gateway.port, context=CONTEXT, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        local.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = local.conn.getresponse()
        data = response.read()
    except (http.client.HTTPException, OSError):
        local.conn = None
        raise
    return response.status, (json.loads(data) if data else None)


def received_count():
    if args.metrics:
        total = 0
        for url in args.metrics.split(","):
            with urllib.request.urlopen(url, timeout=30) as response:
                text = response.read().decode()
            total += sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("parley_push_sent"))
        return int(total)
    push = urllib.parse.urlparse(args.push_url)
    conn = http.client.HTTPSConnection(push.hostname, push.port, context=ssl.create_default_context(cafile=args.push_ca), timeout=30)
    conn.request("GET", "/control/count")
    return json.loads(conn.getresponse().read())


def cpu_seconds(pids):
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def retried(method, path, body=None, token=None):
    """A call, again while the API says it may be retried (a node the cluster declared down a moment)."""
    for attempt in range(10):
        status, reply = call(method, path, body, token)
        if status < 500 or not (reply or {}).get("error", {}).get("retryable"):
            return status, reply
        time.sleep(0.5)
    return status, reply


def user(index):
    handle = f"p{index}-{uuid.uuid4().hex[:6]}"
    status, reply = retried("POST", "/v1/users", {"handle": handle, "password": "bench-password", "displayName": f"User {index}"})
    assert status == 201, (status, reply)
    token = reply["token"]
    status, reply2 = retried("POST", "/v1/devices", {"platform": "apns", "token": f"{index:064x}"}, token)
    assert status in (200, 201), (status, reply2)  # 200: a retry found it registered
    return reply["user"]["id"], token


total_users = args.groups * args.members
started = time.time()
with ThreadPoolExecutor(8) as pool:
    users = list(pool.map(user, range(total_users)))
print(f"{total_users} users with a device each, registered in {time.time() - started:.1f} s", flush=True)
groups = []
for g in range(args.groups):
    members = users[g * args.members:(g + 1) * args.members]
    sender_id, sender_token = members[0]
    status, reply = retried("POST", "/v1/conversations", {"memberIds": [m[0] for m in members[1:]], "name": f"group {g}"}, sender_token)
    assert status == 201, (status, reply)
    groups.append((reply["conversation"]["id"], sender_token))
# Past the presence shards' first lease: every member is known to be offline.
time.sleep(10)
pids = [int(p) for p in args.pids.split(",")]
base = received_count()
cpu_before = cpu_seconds(pids)
sent = 0
begin = time.time()
samples = []
next_round = begin
while time.time() - begin < args.duration:
    for conversation, token in groups:
        call("POST", f"/v1/conversations/{conversation}/messages", {"clientMessageId": str(uuid.uuid4()), "text": f"round {sent}"}, token)
    sent += 1
    # Two messages per window: each member is owed exactly one notification per window.
    next_round += args.window / 2
    samples.append((time.time() - begin, received_count() - base))
    time.sleep(max(0, next_round - time.time()))
# Let the last window's notifications go.
time.sleep(args.window + 2)
end_count = received_count() - base
cpu = cpu_seconds(pids) - cpu_before
elapsed = time.time() - begin
expected_rate = args.groups * (args.members - 1) / args.window
steady = [s for s in samples if s[0] >= 5]
rate = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) if len(steady) > 1 else float("nan")
print(json.dumps({
    "groups": args.groups, "members": args.members, "window_s": args.window, "rounds": sent,
    "pushes_per_s_owed": round(expected_rate), "pushes_per_s_accepted": round(rate), "accepted": end_count, "server_cpu_s": round(cpu, 2),
    "server_cpu_us_per_push": round(cpu / max(end_count, 1) * 1e6), "elapsed_s": round(elapsed, 1),
}), flush=True)
