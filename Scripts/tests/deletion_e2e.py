#!/usr/bin/env python3
"""Account deletion end to end, through real parley-node processes (2 workers, 2 gateways,
SQLite, TLS) and a webhook receiver that checks signatures with the standardwebhooks library.

Round after round a fresh user with a group and two direct chats deletes their account with
`erase=true` while the other members stream on both gateways; in every round but the first the
workers are started with PARLEY_TEST_CRASH_AT set to one step of the deletion, so that the worker
that reaches it dies there by SIGKILL (the account marked deleted, the gateways told, the first
conversation left, the second erasure batch committed but not yet fanned out, the deletion marked
finished). Then it is started again without the fault. Every round must end the same way: the
deletion finished, the user's token refused on both gateways, every member's stream and history
holding each of the user's messages as a tombstone (each message once per connection), the
others' messages intact, the user gone from every conversation, its profile deleted, its handle
still taken, and `user.deleted` told once. A last round deletes without erasing: the messages stay.

    Scripts/tests/deletion_e2e.py PATH-TO-parley-node

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

from e2e_lib import Checks, EventStream, Nodes, ResumingStream, call, conclude, issue_certificates, start_webhook_receiver, wait_until

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
WORK = tempfile.mkdtemp(prefix="parley-deletion.")
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")
RECEIVED = os.path.join(WORK, "received.jsonl")
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
WORKERS = ["worker-1", "worker-2"]
GATEWAYS = ["gateway-1", "gateway-2"]
check = Checks()
nodes = Nodes(NODE, WORK, TLS, WORKERS + GATEWAYS, seeds=WORKERS)
HOOKS = nodes.other_port()
receiver = {}
# The steps a worker dies at, one round each (None: no fault). `erasure.batch:2`: after the second
# erasure transaction of one worker, before its events go out.
ROUNDS = [None, "deletion.begun", "deletion.announced", "erasure.batch:2", "deletion.left:1", "deletion.finished"]
# The victim's messages in the group: more than one erasure batch (200 messages read at a time).
GROUP_MESSAGES = 230


def received():
    if not os.path.exists(RECEIVED):
        return []
    with open(RECEIVED) as f:
        return [json.loads(line) for line in f if line.strip()]


def store(sql, *args):
    with sqlite3.connect(f"file:{os.path.join(WORK, 'data', 'parley.sqlite')}?mode=ro", uri=True, timeout=10) as db:
        return db.execute(sql, args).fetchall()


def main():
    print(f"account deletion end-to-end test (work dir {WORK})", flush=True)
    issue_certificates(NODE, TLS, nodes.names)
    subprocess.run([NODE, "certs", "issue", "hooks", "--client", "--dir", TLS, "--dns", "localhost"], check=True, stdout=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=CA)
    endpoints = os.path.join(WORK, "webhooks.json")
    with open(endpoints, "w") as f:
        json.dump({"endpoints": [{"name": "bots", "url": f"https://localhost:{HOOKS}/parley", "secret": SECRET,
                                  "events": ["user.deleted", "message.erased"]}]}, f)
    receiver["proc"] = start_webhook_receiver(WORK, TLS, HOOKS, SECRET, RECEIVED)
    env = {"PARLEY_TOKEN_SECRET": "deletion-e2e-token-secret-0123456789abcdef", "PARLEY_ADMIN_TOKEN": "deletion-e2e-admin-token-0123",
           "PARLEY_BCRYPT_COST": "4", "PARLEY_WEBHOOKS": endpoints, "PARLEY_WEBHOOK_CA": CA, "PARLEY_WEBHOOK_RETRY_MAX": "3s",
           "PARLEY_LOG_LEVEL": "debug"}
    for name in nodes.names:
        nodes.start(name, env)
    if not check(wait_until(60, lambda: all(nodes.ready(n) for n in nodes.names)), "2 workers and 2 gateways are ready"):
        return

    def api(method, path, body=None, token=None, gateway="gateway-1"):
        return call(method, nodes.client[gateway], path, body, token, context)

    def restart_workers(crash_at):
        for name in WORKERS:
            nodes.kill(name)
        for name in WORKERS:
            nodes.start(name, dict(env, PARLEY_TEST_CRASH_AT=crash_at) if crash_at else env)
        return wait_until(60, lambda: all(nodes.ready(n) for n in nodes.names))

    def dead_workers():
        return [n for n in WORKERS if nodes.procs[n].poll() is not None]

    for round_number, crash_at in enumerate(ROUNDS + ["keep"]):
        erase = crash_at != "keep"
        fault = crash_at if erase else None
        title = f"round {round_number + 1}: " + (f"a worker dies at {fault}" if fault else "no fault") + ("" if erase else ", without erasing")
        print(f"-- {title}", flush=True)
        if fault or round_number == len(ROUNDS):
            if not check(restart_workers(fault), f"{title}: the workers are up again" + (f", armed to die at {fault}" if fault else "")):
                return
        tag = uuid.uuid4().hex[:6]
        token, uid = {}, {}
        for who in ["victim", "bob", "cat"]:
            status, reply = api("POST", "/v1/users", {"handle": f"{who}-{tag}", "password": f"{who}-password", "displayName": who})
            if not check(status == 201, f"{title}: {who} registers", (status, reply)):
                return
            token[who], uid[who] = reply["token"], reply["user"]["id"]
        status, reply = api("POST", "/v1/conversations", {"memberIds": [uid["bob"], uid["cat"]], "name": "group"}, token["victim"])
        group = reply["conversation"]["id"]
        directs = [api("POST", "/v1/conversations", {"memberIds": [uid[other]]}, token["victim"])[1]["conversation"]["id"] for other in ["bob", "cat"]]
        streams = {"bob": ResumingStream(nodes.client["gateway-1"], token["bob"], context),
                   "cat": ResumingStream(nodes.client["gateway-2"], token["cat"], context)}
        for stream in streams.values():
            stream.start()
        check(all(s.ready.wait(20) for s in streams.values()), f"{title}: Bob streams on gateway-1, Cat on gateway-2")

        def send(conversation, who, text):
            body = {"clientMessageId": str(uuid.uuid4()), "text": text}
            deadline = time.time() + 30
            while time.time() < deadline:
                status, reply = api("POST", f"/v1/conversations/{conversation}/messages", body, token[who])
                if status in (200, 201):
                    return reply["message"]
                time.sleep(0.2)
            return None

        for index in range(GROUP_MESSAGES):
            send(group, "victim", f"victim {index}")
            if index % 40 == 0:
                send(group, "bob" if index % 80 == 0 else "cat", f"reply {index}")
        for conversation, other in zip(directs, ["bob", "cat"]):
            for index in range(3):
                send(conversation, "victim", f"to {other} {index}")
                send(conversation, other, f"from {other} {index}")
        shared = {"bob": [group, directs[0]], "cat": [group, directs[1]]}
        everything = {c: api("GET", f"/v1/conversations/{c}/messages?after=0&limit=200", token=token["victim"])[1]["messages"] for c in [group] + directs}
        for conversation in [group]:
            more = api("GET", f"/v1/conversations/{conversation}/messages?after=200&limit=200", token=token["victim"])[1]["messages"]
            everything[conversation] += more
        victims = {(m["conversationId"], m["seq"]) for c in everything for m in everything[c] if m["senderId"] == uid["victim"]}
        others = {(m["conversationId"], m["seq"]): m["text"] for c in everything for m in everything[c] if m["senderId"] != uid["victim"]}
        check(wait_until(20, lambda: all(len([k for k in s.messages() if k[0] in shared[w]]) == sum(len(everything[c]) for c in shared[w])
                                         for w, s in streams.items())), f"{title}: every message reached the members' streams")

        if round_number == 0:
            refused = [api("DELETE", "/v1/users/me", body, token["victim"])[0] for body in [{"password": "not-the-password"}, {}]]
            check(refused == [403, 400] and api("GET", "/v1/users/me", token=token["victim"])[0] == 200,
                  f"{title}: a wrong password is 403, none 400, and the account stays", refused)
            check(api("DELETE", "/v1/users/me?erase=maybe", {"password": "victim-password"}, token["victim"])[0] == 400, f"{title}: erase must be true or false")
        cursor_before = streams["bob"].cursor
        try:
            status, reply = api("DELETE", f"/v1/users/me?erase={'true' if erase else 'false'}", {"password": "victim-password"}, token["victim"])
        except Exception as error:
            status, reply = None, str(error)
        if fault:
            check(wait_until(30, lambda: dead_workers()), f"{title}: a worker died at the step", (status, reply))
        else:
            check(status == 204, f"{title}: the deletion answers 204", (status, reply))
        # What an operator does after a crash: start the node again (without the fault).
        def recovered():
            for name in dead_workers():
                nodes.start(name, env)
            return store("SELECT deletion_finished_at FROM users WHERE id = ?", uid["victim"])[0][0] is not None
        check(wait_until(120, recovered), f"{title}: the deletion is finished", store("SELECT deleted_at, deletion_finished_at FROM users WHERE id = ?", uid["victim"]))
        check(wait_until(60, lambda: all(nodes.ready(n) for n in nodes.names)), f"{title}: every node is ready again")

        refused = [api("GET", "/v1/users/me", token=token["victim"], gateway=g) for g in GATEWAYS]
        check(all(s == 401 and "deleted" in r["error"]["message"] for s, r in refused), f"{title}: the token is refused on both gateways", refused)
        check(api("POST", "/v1/sessions", {"handle": f"victim-{tag}", "password": "victim-password"})[0] == 401, f"{title}: the account cannot sign in")
        status, profile = api("GET", f"/v1/users/{uid['victim']}", token=token["bob"])
        check(status == 200 and profile.get("deleted") is True and profile["displayName"] == "" and profile["handle"] == "deleted",
              f"{title}: the profile reads as a deleted account", profile)
        check(api("POST", "/v1/users", {"handle": f"victim-{tag}", "password": "another-password", "displayName": "x"})[0] == 409,
              f"{title}: the handle stays taken")
        lists = {w: api("GET", "/v1/conversations?limit=100", token=token[w])[1]["conversations"] for w in ["bob", "cat"]}
        check(all(uid["victim"] not in [m["userId"] for m in c["members"]] for cs in lists.values() for c in cs),
              f"{title}: the user is in none of the members' conversations")
        group_now = next(c for c in lists["bob"] if c["id"] == group)
        check([m["userId"] for m in group_now["members"]] == [uid["bob"], uid["cat"]] and group_now["members"][0]["role"] == "owner",
              f"{title}: the group passed to Bob, the longest-standing member", group_now["members"])

        history = {}
        for conversation in [group] + directs:
            reader = "bob" if conversation != directs[1] else "cat"
            page = api("GET", f"/v1/conversations/{conversation}/messages?after=0&limit=200", token=token[reader])[1]["messages"]
            page += api("GET", f"/v1/conversations/{conversation}/messages?after=200&limit=200", token=token[reader])[1]["messages"]
            history.update({(m["conversationId"], m["seq"]): m for m in page})
        if erase:
            check(all(history[k].get("erased") is True and history[k]["text"] == "" for k in victims),
                  f"{title}: history holds each of the user's {len(victims)} messages as a tombstone")
        else:
            check(all(history[k].get("erased") is None and history[k]["text"] != "" for k in victims), f"{title}: history keeps the user's messages")
        check(all(history[k]["text"] == text and history[k].get("erased") is None for k, text in others.items()), f"{title}: the others' messages are intact")

        for who, stream in streams.items():
            mine = {k for k in victims if k[0] in shared[who]}
            if erase:
                ok = wait_until(30, lambda: all(stream.messages().get(k, {}).get("erased") is True for k in mine))
                held = stream.messages()
                check(ok, f"{title}: {who}'s stream ends with each of the user's {len(mine)} messages as a tombstone",
                      sorted(k for k in mine if not held.get(k, {}).get("erased"))[:5])
            removed = [d for events in stream.connections for e, d in list(events) if e == "conversation" and d["change"] == "member_removed"]
            check({d["conversation"]["id"] for d in removed} >= set(shared[who]), f"{title}: {who} hears the user left each shared conversation")
            check(not stream.repeated(), f"{title}: {who}'s stream wrote each message once per connection", stream.repeated()[:5])
            stream.close()
        if round_number == 0:
            # An app that was away resumes from before the deletion: the replay tells each erasure.
            resumed = EventStream(nodes.client["gateway-2"], token["bob"], context, cursor=cursor_before)
            resumed.start()
            replayed = resumed.ready.wait(30) and {(d["message"]["conversationId"], d["message"]["seq"]) for _, d in resumed.of("message_erased")}
            resumed.close()
            check(replayed and replayed >= {k for k in victims if k[0] in shared["bob"]},
                  f"{title}: a stream resumed from before the deletion replays a message_erased for each of the user's messages")
        told = [r for r in received() if r["type"] == "user.deleted" and r["userId"] == uid["victim"]]
        check(wait_until(30, lambda: len({r["id"] for r in received() if r["type"] == "user.deleted" and r["userId"] == uid["victim"]}) == 1),
              f"{title}: webhooks get user.deleted, under one ID", told)
        # A worker killed while it posted leaves a cut request, which fails the check and is sent again.
        check(all(r["valid"] for r in received() if r["type"]), f"{title}: every whole delivery is signed (standardwebhooks verifies it)")
        if crash_at is None:
            erased_told = lambda: {(r["conversationId"], r["seq"]) for r in received() if r["type"] == "message.erased"}
            check(wait_until(30, lambda: erased_told() >= victims), f"{title}: webhooks get message.erased for each erased message",
                  len(victims - erased_told()))

    print("-- the parley CLI", flush=True)
    parley = os.path.join(os.path.dirname(NODE), "parley")
    tag = uuid.uuid4().hex[:6]
    cli_env = dict(os.environ, PARLEY_CONFIG=os.path.join(WORK, "parley-cli.json"), PARLEY_CA=CA,
                   PARLEY_URLS=f"https://localhost:{nodes.client['gateway-1']}", PARLEY_PASSWORD="erin-password",
                   PARLEY_ADMIN_TOKEN=env["PARLEY_ADMIN_TOKEN"])

    def cli(*args):
        return subprocess.run([parley, *args], env=cli_env, capture_output=True, text=True, timeout=120)
    reg = cli("register", f"erin-{tag}", "--display-name", "Erin")
    status, friend = api("POST", "/v1/users", {"handle": f"fred-{tag}", "password": "fred-password", "displayName": "Fred"})
    new = cli("new", f"fred-{tag}", "--json")
    direct = json.loads(new.stdout)["id"] if new.returncode == 0 else "none"
    sent = [cli("send", direct, f"erin {index}") for index in range(3)]
    check(reg.returncode == 0 and new.returncode == 0 and all(r.returncode == 0 for r in sent), "Erin registers, starts a chat and sends with the CLI",
          reg.stderr + new.stderr + "".join(r.stderr for r in sent))
    erased = cli("admin", "erase", direct, "2")
    page = api("GET", f"/v1/conversations/{direct}/messages?after=0&limit=10", token=friend["token"])[1]["messages"]
    check(erased.returncode == 0 and [m.get("erased") for m in page] == [None, True, None] and page[1]["text"] == "",
          "parley admin erase makes one message a tombstone", erased.stdout + erased.stderr + str(page))
    unsure = cli("delete-account")
    check(unsure.returncode != 0 and "--yes" in unsure.stderr, "parley delete-account asks for --yes", unsure.stdout + unsure.stderr)
    deleted = cli("delete-account", "--yes", "--erase")
    page = api("GET", f"/v1/conversations/{direct}/messages?after=0&limit=10", token=friend["token"])[1]["messages"]
    check(deleted.returncode == 0 and "deleted" in deleted.stdout and all(m.get("erased") for m in page) and cli("sessions").returncode != 0,
          "parley delete-account --yes --erase deletes the account and erases its messages", deleted.stdout + deleted.stderr + str(page))

    print("-- a bot", flush=True)
    admin = env["PARLEY_ADMIN_TOKEN"]
    status, bot = api("POST", "/v1/bots", {"handle": f"bot-{uuid.uuid4().hex[:6]}", "displayName": "Bot"}, admin)
    refused = api("DELETE", "/v1/users/me", {"adminToken": "not-the-admin-token"}, bot["token"])[0]
    deleted = api("DELETE", "/v1/users/me", {"adminToken": admin}, bot["token"])[0]
    check(status == 201 and refused == 403 and deleted == 204 and api("GET", "/v1/users/me", token=bot["token"])[0] == 401,
          "a bot's account is deleted with the admin token, not without", (status, refused, deleted))


try:
    main()
finally:
    proc = receiver.get("proc")
    if proc and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    conclude(check, nodes, WORK, "account deletion end-to-end")
