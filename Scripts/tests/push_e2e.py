#!/usr/bin/env python3
"""Push notifications end to end, through real parley-node processes (2 workers, 1 gateway, SQLite,
TLS) and a local APNs and FCM stand-in (push_server.py: h2 and cryptography, which verifies the
ES256 provider tokens and the RS256 OAuth assertions against the test keys).

A member with no event stream is told of a message on each of their devices (APNs and FCM); a
burst is one notification; a member who muted the conversation, or streams it, is told nothing
(but a mention reaches a member who muted it, and says so); a
429 with Retry-After is sent again after it; 410 Unregistered and FCM's UNREGISTERED remove the
device; a message deleted for everyone has its notification replaced by one saying so (same
collapse ID, a badge without it); the owner of the conversation SIGKILLed after its notification failed for 12 s (longer
than a new owner republishes recent messages) → the worker that takes the conversation over finds
what was owed in the store and sends it, and then the store says nothing is owed.

    Scripts/tests/push_e2e.py PATH-TO-parley-node PYTHON-WITH-h2

Every process it starts is recorded and stopped by its PID.
"""
import json
import os
import signal
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
import uuid

from e2e_lib import Checks, EventStream, Nodes, issue_certificates, wait_until
from e2e_lib import call as https_call

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
PYTHON = sys.argv[2] if len(sys.argv) > 2 else sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="parley-push.")
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")
check = Checks()
NODES = ["worker-1", "worker-2", "gateway-1"]
nodes = Nodes(NODE, WORK, TLS, NODES, seeds=["worker-1", "worker-2"])
PUSH = nodes.other_port()
PUSH_URL = f"https://localhost:{PUSH}"
CONTEXT = None
SERVER = {}


def call(method, path, body=None, token=None, port=None):
    return https_call(method, port or nodes.client["gateway-1"], path, body, token, CONTEXT)


def received():
    return call("GET", "/control/received", port=PUSH)[1]


def to(token):
    return [r for r in received() if r["token"] == token]


def script(answers):
    call("POST", "/control/script", answers, port=PUSH)


def owing():
    """Conversations whose owner owes push notifications, as the SQLite store has it."""
    with sqlite3.connect(f"file:{os.path.join(WORK, 'data', 'parley.sqlite')}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM conversations WHERE pushes_owed_from IS NOT NULL").fetchone()[0]


def apns_alert(record):
    return record["payload"]["aps"]["alert"]


def main():
    global CONTEXT
    print(f"push end-to-end test (work dir {WORK})", flush=True)
    issue_certificates(NODE, TLS, NODES)
    # The stand-in's certificate, from the same test CA, for localhost.
    subprocess.run([NODE, "certs", "issue", "push", "--client", "--dir", TLS, "--dns", "localhost"], check=True, stdout=subprocess.DEVNULL)
    CONTEXT = ssl.create_default_context(cafile=CA)
    apns_key, fcm_key = os.path.join(WORK, "AuthKey_TESTKEY123.p8"), os.path.join(WORK, "fcm-key.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", apns_key], check=True, capture_output=True)
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", fcm_key], check=True, capture_output=True)
    account = os.path.join(WORK, "service-account.json")
    with open(fcm_key) as f, open(account, "w") as out:
        json.dump({"type": "service_account", "project_id": "parley-test", "client_email": "pusher@parley-test.iam.gserviceaccount.com",
                   "private_key": f.read(), "token_uri": f"{PUSH_URL}/token"}, out)
    server_log = open(os.path.join(WORK, "push-server.log"), "ab")
    SERVER["proc"] = subprocess.Popen(
        [PYTHON, os.path.join(HERE, "push_server.py"), "--port", str(PUSH), "--cert", os.path.join(TLS, "push-client.pem"),
         "--key", os.path.join(TLS, "push-client-key.pem"), "--apns-key", apns_key, "--apns-key-id", "TESTKEY123", "--apns-team-id", "TEAM123456",
         "--fcm-key", fcm_key, "--fcm-email", "pusher@parley-test.iam.gserviceaccount.com", "--fcm-token-url", f"{PUSH_URL}/token"],
        stdout=server_log, stderr=subprocess.STDOUT)
    env = {"PARLEY_TOKEN_SECRET": "push-e2e-token-secret-0123456789abcdef", "PARLEY_ADMIN_TOKEN": "push-e2e-admin-token-0123", "PARLEY_BCRYPT_COST": "4",
           "PARLEY_LOG_LEVEL": "debug", "PARLEY_APNS_KEY": apns_key, "PARLEY_APNS_KEY_ID": "TESTKEY123", "PARLEY_APNS_TEAM_ID": "TEAM123456",
           "PARLEY_APNS_TOPIC": "app.parley.example", "PARLEY_APNS_TOPICS": "app.parley.dave", "PARLEY_APNS_URL": PUSH_URL, "PARLEY_APNS_SANDBOX_URL": f"{PUSH_URL}/sandbox",
           "PARLEY_FCM_SERVICE_ACCOUNT": account, "PARLEY_FCM_URL": PUSH_URL, "PARLEY_PUSH_CA": CA, "PARLEY_PUSH_WINDOW": "1s"}
    for name in NODES:
        nodes.start(name, env)
    if not check(wait_until(40, lambda: all(nodes.ready(n) for n in NODES)), "2 workers and a gateway are ready, with push providers"):
        return
    started = time.time()
    check(any(nodes.logged(n, b"push notifications on") for n in ["worker-1", "worker-2"]),
          "the workers log that push notifications are on")

    users = {}
    for handle in ["alice", "bob", "carol", "dave"]:
        status, reply = call("POST", "/v1/users", {"handle": handle, "password": f"{handle}-password", "displayName": handle.capitalize()})
        users[handle] = reply
    token = {h: u["token"] for h, u in users.items()}
    uid = {h: u["user"]["id"] for h, u in users.items()}
    status, group = call("POST", "/v1/conversations", {"memberIds": [uid["bob"], uid["carol"], uid["dave"]], "name": "trio"}, token["alice"])
    group_id = group["conversation"]["id"]
    call("PUT", f"/v1/conversations/{group_id}/settings", {"muted": True}, token["carol"])
    phones = {h: f"{i:02x}" * 32 for i, h in enumerate(["bob", "carol", "dave"], start=11)}
    tablet = "fcm-token-of-bobs-tablet"
    for handle, body in [("bob", {"platform": "apns", "token": phones["bob"]}), ("bob", {"platform": "fcm", "token": tablet}),
                         ("carol", {"platform": "apns", "token": phones["carol"], "environment": "sandbox"}),
                         ("dave", {"platform": "apns", "token": phones["dave"], "topic": "app.parley.dave"})]:
        status, reply = call("POST", "/v1/devices", body, token[handle])
        check(status == 201, f"{handle} registers a device ({body['platform']})", f"{status} {reply}")
    status, reply = call("POST", "/v1/devices", {"platform": "apns", "token": "ee" * 32, "topic": "com.example.another-app"}, token["bob"])
    check(status == 400 and "app.parley.dave" in reply["error"]["message"],
          "a topic that is none of the server's apps is refused (the team key would sign for it)", f"{status} {reply}")
    dave_stream = EventStream(nodes.client["gateway-1"], token["dave"], CONTEXT)
    dave_stream.start()
    check(dave_stream.ready.wait(15), "dave's event stream is open")
    # A presence shard names every live gateway for a session lease (6 s) after it starts.
    time.sleep(max(0, 7 - (time.time() - started)))

    def send(text, conversation=group_id, sender="alice"):
        status, reply = call("POST", f"/v1/conversations/{conversation}/messages", {"clientMessageId": str(uuid.uuid4()), "text": text}, token[sender])
        return reply["message"]

    send("hello")
    check(wait_until(10, lambda: len(to(phones["bob"])) == 1 and len(to(tablet)) == 1), "bob's phone (APNs) and tablet (FCM) are told of the message",
          received())
    phone = to(phones["bob"])[0]
    check(apns_alert(phone) == {"title": "trio", "body": "Alice: hello"} and phone["payload"]["aps"]["badge"] == 1
          and phone["payload"]["aps"]["thread-id"] == group_id and phone["collapseId"] == group_id and phone["topic"] == "app.parley.example"
          and phone["environment"] == "production" and phone["payload"]["seq"] == 1,
          "APNs got the conversation's name, the sender and text, the badge, the thread and collapse IDs, the default topic", phone)
    tab = to(tablet)[0]["payload"]
    check(tab["notification"] == {"title": "trio", "body": "Alice: hello"} and tab["android"]["collapse_key"] == group_id
          and tab["data"] == {"conversationId": group_id, "seq": "1"}, "FCM got the same, with the collapse key and data", tab)

    for text in ["one", "two", "three"]:
        send(text)
    check(wait_until(10, lambda: len(to(phones["bob"])) == 2), "a burst is told of")
    time.sleep(2)
    burst = to(phones["bob"])
    check(len(burst) == 2 and apns_alert(burst[1]) == {"title": "trio", "subtitle": "3 new messages", "body": "Alice: three"}
          and burst[1]["payload"]["aps"]["badge"] == 4, "in one notification: 3 new messages, the latest's text, badge 4", burst)
    check(to(phones["carol"]) == [], "carol muted the conversation: nothing for her")
    check(to(phones["dave"]) == [], "dave streams the conversation: nothing for him")

    # 429 with Retry-After: the notification goes again after it.
    script({phones["bob"]: [[429, "TooManyRequests", 2]], tablet: [[404, "UNREGISTERED", None]]})
    sent_at = time.time()
    send("again")
    check(wait_until(15, lambda: len(to(phones["bob"])) == 3), "after a 429 the notification is sent again")
    retried = to(phones["bob"])[-1]
    check(retried["at"] - sent_at >= 2 and retried["payload"]["seq"] == 5, "no sooner than its Retry-After (2 s)", retried["at"] - sent_at)
    check(wait_until(10, lambda: [d["platform"] for d in call("GET", "/v1/devices", token=token["bob"])[1]["devices"]] == ["apns"]),
          "FCM's UNREGISTERED removed bob's tablet")

    # 410 Unregistered removes the device.
    dave_stream.close()
    script({phones["dave"]: [[410, "Unregistered", None]]})
    time.sleep(0.5)
    send("dave?")
    check(wait_until(10, lambda: call("GET", "/v1/devices", token=token["dave"])[1]["devices"] == []),
          "dave's stream closed: he is owed the next message, and APNs' 410 Unregistered removed his phone")

    # A message deleted for everyone: the notification that showed it is replaced at once (the
    # same collapse ID) by one that says it was deleted, and the badge leaves it out.
    check(wait_until(15, lambda: to(phones["bob"])[-1]["payload"]["seq"] == 6), "bob is told of \"dave?\" too", to(phones["bob"])[-1:])
    shown = len(to(phones["bob"]))
    status, _ = call("DELETE", f"/v1/conversations/{group_id}/messages/6", token=token["alice"])
    check(status == 200, "alice deletes it for everyone", status)
    check(wait_until(10, lambda: len(to(phones["bob"])) == shown + 1), "bob's phone gets a notification in its place", to(phones["bob"])[shown:])
    replaced = to(phones["bob"])[-1]
    check(apns_alert(replaced) == {"title": "trio", "body": "Alice: Message deleted"} and replaced["collapseId"] == group_id
          and replaced["payload"]["seq"] == 6 and replaced["payload"]["aps"]["badge"] == 5,
          "it says the message was deleted, under the same collapse ID, and the badge counts 5 unread (the tombstone left out)", replaced)

    # A mention reaches a member who muted the conversation, and says so.
    status, reply = call("POST", f"/v1/conversations/{group_id}/messages",
                         {"clientMessageId": str(uuid.uuid4()), "text": "carol, look", "mentions": [uid["carol"]]}, token["alice"])
    check(status == 201 and reply["message"]["mentions"] == [uid["carol"]], "alice mentions carol", (status, reply))
    check(wait_until(10, lambda: len(to(phones["carol"])) == 1), "carol muted the conversation, but a mention reaches her phone", received()[-3:])
    check(apns_alert(to(phones["carol"])[0]) == {"title": "trio", "subtitle": "Alice mentioned you", "body": "Alice: carol, look"}
          and to(phones["carol"])[0]["environment"] == "sandbox", "and says she was mentioned", to(phones["carol"]))
    check(wait_until(15, lambda: to(phones["bob"])[-1]["payload"]["seq"] == 7), "bob (not muted, not mentioned) is told of it as of any message",
          to(phones["bob"])[-1:])
    time.sleep(1)
    check(len(to(phones["carol"])) == 1, "carol is told of it once")

    # The conversation's owner is SIGKILLed while bob's notification has been failing (500) for
    # longer than a new owner republishes recent messages (10 s): the worker that takes the
    # conversation over finds in the store what was owed, and sends it.
    def activated(name):
        return nodes.logged(name, b"conversation activated", group_id.encode()) or nodes.logged(name, b"conversation created", group_id.encode())
    owner = next((n for n in ["worker-1", "worker-2"] if activated(n)), None)
    script({phones["bob"]: [[500, "InternalServerError", None]] * 6})
    before = len(to(phones["bob"]))
    last = send("while the owner dies")
    time.sleep(12)
    check(len(to(phones["bob"])) == before, "while APNs answers 500 nothing is accepted (12 s)")
    check(owner is not None, "the conversation's owner is found in the workers' logs")
    if owner:
        nodes.kill(owner)
        survivor = "worker-2" if owner == "worker-1" else "worker-1"
        check(wait_until(30, lambda: any(r["payload"]["seq"] == last["seq"] for r in to(phones["bob"])[before:])),
              f"after {owner} was SIGKILLed, bob is told of the message it owed him", to(phones["bob"])[before:])
        check(nodes.logged(survivor, b"resumed the push notifications owed"), f"{survivor} took the conversation over and owed what its owner had owed")
        check(wait_until(15, lambda: owing() == 0), "once told, nothing is owed any more in the store", owing())


if __name__ == "__main__":
    try:
        main()
    finally:
        nodes.kill_all()
        if SERVER.get("proc") and SERVER["proc"].poll() is None:
            os.kill(SERVER["proc"].pid, signal.SIGKILL)
            SERVER["proc"].wait()
    print(f"push end-to-end: {check.passed} passed, {check.failed} failed (logs in {WORK})", flush=True)
    sys.exit(1 if check.failed else 0)
