#!/usr/bin/env python3
"""Webhooks end to end, through real parley-node processes (2 workers, 1 gateway, SQLite, TLS)
and a webhook receiver over HTTPS (webhook_receiver.py) that checks every delivery's Standard
Webhooks signature.

Every kind of event of a group and of a direct chat reaches the receiver, in the order it was
committed, signed; the receiver is then down (killed) for a minute while messages are sent and
the group's owner is SIGKILLed → once it is back every message is delivered, in order per
conversation, each event under one ID, every signature valid, and the store says nothing is owed;
a replay with the admin token sends messages again under the same IDs. A report reaches the
endpoint (verified with the standardwebhooks library) and the operator resolves it; a suspended
user's token and stream end at once, and the suspension is lifted.

    Scripts/tests/webhook_e2e.py PATH-TO-parley-node [DOWN-SECONDS]

Every process it starts is recorded and stopped by its PID.
"""
import base64
import json
import os
import secrets
import signal
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
import uuid

from e2e_lib import Checks, EventStream, Nodes, call, issue_certificates, start_webhook_receiver, wait_until

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
DOWN_SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60
WORK = tempfile.mkdtemp(prefix="parley-webhooks.")
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")
RECEIVED = os.path.join(WORK, "received.jsonl")
ADMIN = "webhook-e2e-admin-token-0123"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
check = Checks()
nodes = Nodes(NODE, WORK, TLS, ["worker-1", "worker-2", "gateway-1"], seeds=["worker-1", "worker-2"])
HOOKS = nodes.other_port()
receiver = {}


def start_receiver():
    receiver["proc"] = start_webhook_receiver(WORK, TLS, HOOKS, SECRET, RECEIVED)


def kill_receiver():
    proc = receiver.get("proc")
    if proc and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def received(conversation=None):
    if not os.path.exists(RECEIVED):
        return []
    with open(RECEIVED) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if conversation is None or r["conversationId"] == conversation]


def once(records):
    """The records with repeats (the same ID again) left out."""
    seen = set()
    return [r for r in records if not (r["id"] in seen or seen.add(r["id"]))]


def owing():
    with sqlite3.connect(f"file:{os.path.join(WORK, 'data', 'parley.sqlite')}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM webhook_cursors WHERE pending").fetchone()[0]


def main():
    print(f"webhook end-to-end test (work dir {WORK}, receiver down {DOWN_SECONDS:.0f} s)", flush=True)
    issue_certificates(NODE, TLS, nodes.names)
    subprocess.run([NODE, "certs", "issue", "hooks", "--client", "--dir", TLS, "--dns", "localhost"], check=True, stdout=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=CA)
    endpoints = os.path.join(WORK, "webhooks.json")
    with open(endpoints, "w") as f:
        json.dump({"endpoints": [{"name": "bots", "url": f"https://localhost:{HOOKS}/parley", "secret": SECRET, "events": ["*"]}]}, f)
    start_receiver()
    env = {"PARLEY_TOKEN_SECRET": "webhook-e2e-token-secret-0123456789abcdef", "PARLEY_ADMIN_TOKEN": ADMIN, "PARLEY_BCRYPT_COST": "4",
           "PARLEY_LOG_LEVEL": "debug", "PARLEY_WEBHOOKS": endpoints, "PARLEY_WEBHOOK_CA": CA, "PARLEY_WEBHOOK_RETRY_MAX": "3s"}
    for name in nodes.names:
        nodes.start(name, env)
    if not check(wait_until(40, lambda: all(nodes.ready(n) for n in nodes.names)), "2 workers and a gateway are ready, with a webhook endpoint"):
        return
    check(all(nodes.logged(n, b"webhooks on", b"bots") for n in ["worker-1", "worker-2"]), "the workers log the endpoint they deliver to")
    check(nodes.logged("gateway-1", b"webhook endpoints are left unused"), "the gateway says it leaves the endpoints to the workers")

    gateway = nodes.client["gateway-1"]

    def api(method, path, body=None, token=None):
        return call(method, gateway, path, body, token, context)

    token, uid = {}, {}
    for handle in ["alice", "bob", "carol", "dave"]:
        status, reply = api("POST", "/v1/users", {"handle": handle, "password": f"{handle}-password", "displayName": handle.capitalize()})
        token[handle], uid[handle] = reply["token"], reply["user"]["id"]

    def send(conversation, sender, text):
        body = {"clientMessageId": str(uuid.uuid4()), "text": text}
        deadline = time.time() + 30
        while True:
            status, reply = api("POST", f"/v1/conversations/{conversation}/messages", body, token[sender])
            if status in (200, 201) or time.time() > deadline:
                return reply["message"]
            time.sleep(0.2)  # a client's retry, same clientMessageId

    group = api("POST", "/v1/conversations", {"memberIds": [uid["bob"], uid["carol"]], "name": "team"}, token["alice"])[1]["conversation"]["id"]
    direct = api("POST", "/v1/conversations", {"memberIds": [uid["bob"]]}, token["alice"])[1]["conversation"]["id"]
    sent = {group: [], direct: []}
    for sender in ["alice", "bob", "carol"]:
        sent[group].append(send(group, sender, f"hello from {sender}"))
    for sender in ["bob", "alice"]:
        sent[direct].append(send(direct, sender, f"psst from {sender}"))
    api("POST", f"/v1/conversations/{group}/members", {"userIds": [uid["dave"]]}, token["alice"])
    api("POST", f"/v1/conversations/{group}/receipts", {"readSeq": 3}, token["bob"])
    api("PATCH", f"/v1/conversations/{group}", {"name": "team two"}, token["dave"])
    api("DELETE", f"/v1/conversations/{group}/members/{uid['carol']}", token=token["alice"])

    expected_group = ["conversation.created"] + ["message.created"] * 3 + [
        "conversation.member_added", "receipt.read", "conversation.updated", "conversation.member_removed"]
    check(wait_until(15, lambda: len(received(group)) >= len(expected_group) and len(received(direct)) >= 3),
          "the receiver gets the group's and the direct chat's events", [r["type"] for r in received()])
    time.sleep(0.5)
    got = received(group)
    check([r["type"] for r in got] == expected_group, "the group's events, in the order committed", [r["type"] for r in got])
    check([r["text"] for r in got if r["seq"]] == [m["text"] for m in sent[group]], "each message with its text")
    check(got[4]["userIds"] == [uid["dave"]] and got[5]["userId"] == uid["bob"] and got[5]["readSeq"] == 3 and got[6]["name"] == "team two"
          and got[7]["userIds"] == [uid["carol"]], "who joined, who read what, the new name, who left", got[4:])
    check([r["type"] for r in received(direct)] == ["conversation.created", "message.created", "message.created"], "the direct chat's events")
    everything = received()
    check(all(r["valid"] and r["fresh"] for r in everything), "every signature is valid and its timestamp fresh")
    check(all(r["contentType"] == "application/json" and r["path"] == "/parley" and r["id"].startswith("evt_") for r in everything),
          "JSON posted to the endpoint's path, each with a delivery ID")
    check(len({r["id"] for r in everything}) == len(everything), "no delivery ID twice")

    # The receiver goes down for a minute; meanwhile messages are sent and the group's owner dies.
    owner = next((n for n in ["worker-1", "worker-2"] if nodes.logged(n, b"conversation created", group.encode())
                  or nodes.logged(n, b"conversation activated", group.encode())), None)
    check(owner is not None, "the group's owner is found in the workers' logs")
    kill_receiver()
    down_at = time.time()
    for index in range(10):
        if index == 5 and owner:
            nodes.kill(owner)
        sent[group].append(send(group, ["alice", "bob", "dave"][index % 3], f"while down {index}"))
        if index % 2 == 0:
            sent[direct].append(send(direct, "bob", f"while down {index}"))
        time.sleep(DOWN_SECONDS / 20)
    check(len(received()) == len(everything), "nothing is received while the receiver is down")
    time.sleep(max(0, DOWN_SECONDS - (time.time() - down_at)))
    start_receiver()
    back_at = time.time()

    def caught_up():
        return all([r["seq"] for r in once(received(c)) if r["seq"]] == [m["seq"] for m in sent[c]] for c in sent)
    check(wait_until(60, caught_up), f"back after {DOWN_SECONDS:.0f} s down, the receiver gets every message, in order per conversation",
          {c: [r["seq"] for r in once(received(c)) if r["seq"]] for c in sent})
    print(f"  (caught up {time.time() - back_at:.1f} s after the receiver came back)", flush=True)
    everything = received()
    check(all(r["valid"] and r["fresh"] for r in everything), "every signature is valid, after the outage too")
    by_id = {}
    for r in everything:
        by_id.setdefault(r["id"], set()).add((r["type"], r["conversationId"], r["seq"]))
    check(all(len(facts) == 1 for facts in by_id.values()), "a delivery repeated after the failover carries the ID it had")
    survivor = "worker-2" if owner == "worker-1" else "worker-1"
    check(nodes.logged(survivor, b"resumed the webhooks owed"), f"{survivor} took the group over and resumed what its owner owed")
    check(wait_until(15, lambda: owing() == 0), "once delivered, the store says nothing is owed", owing())

    # Replay, with the admin token only.
    status, _ = api("POST", "/v1/webhooks/bots/replay", {"conversationId": group, "fromSeq": 12})
    check(status == 401, "a replay without the admin token is 401", status)
    status, _ = api("POST", "/v1/webhooks/nobody/replay", {"conversationId": group, "fromSeq": 12}, ADMIN)
    check(status == 404, "a replay to an endpoint no worker has is 404", status)
    status, _ = api("POST", "/v1/webhooks/bots/replay", {"conversationId": group, "fromSeq": 0}, ADMIN)
    check(status == 400, "a replay from seq 0 is 400", status)
    before = len(received(group))
    status, reply = api("POST", "/v1/webhooks/bots/replay", {"conversationId": group, "fromSeq": 12}, ADMIN)
    check(status == 202 and reply == {"conversationId": group, "fromSeq": 12}, "a replay with the admin token is accepted", f"{status} {reply}")
    check(wait_until(15, lambda: [r["seq"] for r in received(group)[before:]] == [12, 13]), "the messages from seq 12 on are delivered again",
          received(group)[before:])
    first = {r["seq"]: r["id"] for r in once(received(group)) if r["seq"]}
    check(all(r["id"] == first[r["seq"]] for r in received(group)[before:]), "under the IDs they had")

    # A translation bot: made with the admin token, added to the group, it reads the webhook of a
    # new message and answers as a member, annotating the message and replying.
    status, _ = api("POST", "/v1/bots", {"handle": "translator", "displayName": "Translator"})
    check(status == 401, "making a bot without the admin token is 401", status)
    status, made = api("POST", "/v1/bots", {"handle": "translator", "displayName": "Translator"}, ADMIN)
    check(status == 201 and made["user"]["bot"] is True and made["token"], "a bot made with the admin token gets a token", f"{status} {made}")
    bot, bot_token = made["user"]["id"], made["token"]
    token["translator"] = bot_token
    status, _ = api("POST", "/v1/sessions", {"handle": "translator", "password": "any-password-at-all"})
    check(status == 401, "a bot cannot sign in with a password", status)
    status, me = api("GET", "/v1/users/me", token=bot_token)
    check(status == 200 and me["bot"] is True and api("GET", "/v1/users/me", token=token["bob"])[1]["bot"] is False,
          "users say whether they are bots", me)
    api("POST", f"/v1/conversations/{group}/members", {"userIds": [bot]}, token["alice"])
    bob_stream = EventStream(gateway, token["bob"], context)
    bob_stream.start()
    check(bob_stream.ready.wait(15), "bob's event stream is open")
    cursor_before = bob_stream.of("ready")[0][1]["cursor"]
    question = send(group, "alice", "¿Dónde está la biblioteca?")
    check(wait_until(15, lambda: any(r["seq"] == question["seq"] for r in received(group))), "the bot's webhook tells it of the message")
    status, reply = api("PUT", f"/v1/conversations/{group}/messages/{question['seq']}/annotations/translation.en",
                        {"value": "Where is the library?"}, bot_token)
    check(status == 200 and reply["annotation"]["value"] == "Where is the library?" and reply["annotation"]["authorId"] == bot,
          "the bot annotates the message with its translation", f"{status} {reply}")
    answer = send(group, "translator", "Translated: Where is the library?")
    check(answer["senderId"] == bot, "the bot answers as a member")
    check(wait_until(10, lambda: any(d["annotation"]["seq"] == question["seq"] and d["annotation"]["key"] == "translation.en"
                                     and d["annotation"]["value"] == "Where is the library?" for _, d in bob_stream.of("message_annotated"))),
          "bob's stream gets message_annotated", bob_stream.events[-5:])
    check(wait_until(10, lambda: any(d["message"]["seq"] == answer["seq"] for _, d in bob_stream.of("message"))), "and the bot's reply")
    status, history = api("GET", f"/v1/conversations/{group}/messages?after={question['seq'] - 1}", token=token["dave"])
    check(status == 200 and history["messages"][0].get("annotations") == {"translation.en": "Where is the library?"}
          and "annotations" not in history["messages"][1], "history returns the message with its annotation, and the reply without", history)
    bob_stream.close()
    resumed = EventStream(gateway, token["bob"], context, cursor=cursor_before)
    resumed.start()
    check(resumed.ready.wait(15) and any(d["annotation"]["seq"] == question["seq"] for _, d in resumed.of("message_annotated")),
          "a stream resumed from before it replays the annotation", resumed.events)
    resumed.close()
    status, _ = api("PUT", f"/v1/conversations/{group}/messages/{question['seq']}/annotations/translation.fr", {"value": "Où est…"}, token["bob"])
    check(status == 403, "a person cannot annotate", status)
    for path, body, expected, what in [
        (f"/v1/conversations/{group}/messages/{question['seq']}/annotations/Bad Key", {"value": "x"}, 400, "a key outside a-z 0-9 . _ -"),
        (f"/v1/conversations/{group}/messages/{question['seq']}/annotations/summary", {"value": ""}, 400, "an empty value"),
        (f"/v1/conversations/{group}/messages/999/annotations/summary", {"value": "x"}, 404, "a message that does not exist"),
        (f"/v1/conversations/{direct}/messages/1/annotations/summary", {"value": "x"}, 404, "a conversation the bot is not in"),
    ]:
        status, _ = api("PUT", path.replace(" ", "%20"), body, bot_token)
        check(status == expected, f"annotating {what} is {expected}", status)
    status, renewed = api("POST", f"/v1/bots/{bot}/tokens", None, ADMIN)
    check(status == 201 and api("GET", "/v1/users/me", token=renewed["token"])[0] == 200, "the operator issues the bot a new token", f"{status} {renewed}")
    status, _ = api("POST", f"/v1/bots/{uid['bob']}/tokens", None, ADMIN)
    check(status == 404, "a person gets no bot token", status)

    # Reports: bob reports alice's message; the moderation endpoint hears of it with the message as
    # it was, signed (checked with the standardwebhooks library); the operator lists and resolves it.
    report_body = {"userId": uid["alice"], "conversationId": group, "seq": question["seq"], "reason": "spam", "note": "not a real question"}
    status, filed = api("POST", "/v1/reports", report_body, token["bob"])
    check(status == 201 and filed["report"]["message"]["text"] == question["text"] and filed["report"]["status"] == "open",
          "bob reports alice's message (201), the report keeping the message", f"{status} {filed}")
    report_id = filed.get("report", {}).get("id")
    status, again = api("POST", "/v1/reports", report_body, token["bob"])
    check(status == 200 and again["report"]["id"] == report_id, "reporting it again while open answers the same report (200)", f"{status} {again}")
    status, reply = api("POST", "/v1/reports", {"userId": uid["alice"], "conversationId": direct, "seq": 1, "reason": "spam"}, token["carol"])
    check(status == 404, "a report from outside the conversation is 404", f"{status} {reply}")

    def reports_received():
        return [r for r in received() if r["type"] == "report.created"]
    check(wait_until(15, lambda: any((r.get("report") or {}).get("id") == report_id for r in reports_received())),
          "the endpoint is told of the report (report.created)")
    told = [r for r in reports_received() if (r.get("report") or {}).get("id") == report_id]
    check(all(r["valid"] for r in told) and told[0]["report"]["message"]["text"] == question["text"] and told[0]["conversationId"] is None
          and len(once(told)) == 1, "signed (standardwebhooks verifies it), with the reported text, under one ID", told)
    status, _ = api("GET", "/v1/reports?status=open", token=token["bob"])
    check(status == 401, "listing reports without the admin token is 401", status)
    status, listed = api("GET", "/v1/reports?status=open", token=ADMIN)
    check(status == 200 and [r["id"] for r in listed["reports"]] == [report_id], "the operator lists the open reports", f"{status} {listed}")
    parley = os.path.join(os.path.dirname(NODE), "parley")
    cli = subprocess.run([parley, "admin", "reports", "--json", "--server", f"https://localhost:{gateway}", "--ca", CA],
                         env=dict(os.environ, PARLEY_ADMIN_TOKEN=ADMIN, PARLEY_CONFIG=os.path.join(WORK, "cli.json")),
                         capture_output=True, text=True, timeout=60)
    check(cli.returncode == 0 and [r["id"] for r in json.loads(cli.stdout or "{}").get("reports", [])] == [report_id],
          "parley admin reports lists it too", cli.stdout + cli.stderr)
    status, resolved = api("POST", f"/v1/reports/{report_id}/resolve", {"resolution": "alice was warned"}, ADMIN)
    check(status == 200 and resolved["report"]["status"] == "resolved" and resolved["report"]["resolution"] == "alice was warned"
          and api("GET", "/v1/reports?status=open", token=ADMIN)[1]["reports"] == [], "the operator resolves it", f"{status} {resolved}")

    # A suspension: dave's tokens stop working and his open stream ends before the 204; he cannot
    # sign in; lifted, his token works again.
    dave_stream = EventStream(gateway, token["dave"], context)
    dave_stream.start()
    check(dave_stream.ready.wait(15), "dave's event stream is open")
    check(api("POST", f"/v1/admin/users/{uid['dave']}/suspend", None, token["bob"])[0] == 401, "suspending without the admin token is 401")
    status, _ = api("POST", f"/v1/admin/users/{uid['dave']}/suspend", None, ADMIN)
    me_status, me_reply = api("GET", "/v1/users/me", token=token["dave"])
    check(status == 204 and me_status == 401 and me_reply["error"]["message"] == "this account is suspended",
          "a suspended user's token is refused at once (401, 'this account is suspended')", f"{status} {me_status} {me_reply}")
    dave_stream.join(10)
    check(not dave_stream.is_alive(), "and the event stream he had open ends")
    status, reply = api("POST", "/v1/sessions", {"handle": "dave", "password": "dave-password"})
    check(status == 403 and reply["error"]["message"] == "this account is suspended", "he cannot sign in (403)", f"{status} {reply}")
    check(api("GET", f"/v1/conversations/{group}/messages?limit=5", token=token["alice"])[0] == 200, "nothing of his is removed from the others' view")
    status, _ = api("POST", f"/v1/admin/users/{uid['dave']}/unsuspend", None, ADMIN)
    check(status == 204 and api("GET", "/v1/users/me", token=token["dave"])[0] == 200, "lifted, his token works again")


if __name__ == "__main__":
    try:
        main()
    finally:
        nodes.kill_all()
        kill_receiver()
    print(f"webhook end-to-end: {check.passed} passed, {check.failed} failed (logs in {WORK})", flush=True)
    sys.exit(1 if check.failed else 0)
