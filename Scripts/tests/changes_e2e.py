#!/usr/bin/env python3
"""Changes to messages end to end — edits, deletions for everyone, reactions, replies, mentions,
pins — through real parley-node processes (2 workers, 2 gateways, TLS; SQLite, or the PostgreSQL
PARLEY_STORE names), while workers are SIGKILLed.

A group of six where every member streams (alternating gateways) and a direct chat whose two
members stream: three clients send (some replies, some mentioning a member), edit, delete, react
and pin (a third of their operations are changes), each retrying what failed with its idempotency
key, while a burst of kills takes both workers down one after the other and a later kill takes one
again. Then, for every member:

- every change came after the message it changes, on the stream as it went;
- each connection wrote each change once, in `changeSeq` order; together they miss none;
- what the stream said, folded, equals history (text, edits, tombstones, reactions and `me`,
  replies' quotes), and the pins folded equal the conversation's;
- no change to an acknowledged message is answered 404: every message stays found by its seq;
- every acknowledged change holds in history; every acknowledged reply is listed under its
  message, every acknowledged mention in the mentioned member's mentions;
- a search finds exactly the live messages that hold its words, each once: edits by their new
  text, nothing deleted;
- a stream resumed from its first cursor replays to the same state;
- webhooks were told each change once per ID, in `changeSeq` order, none missing.

    Scripts/tests/changes_e2e.py PATH-TO-parley-node

Every process it starts is recorded and stopped by its PID; the load is bounded in count and time.
"""
import base64
import json
import os
import random
import re
import secrets
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from urllib.parse import quote

from e2e_lib import Checks, Nodes, ResumingStream, call, conclude, issue_certificates, open_event_stream, server_sent_events, start_webhook_receiver, wait_until

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
WORK = tempfile.mkdtemp(prefix="parley-changes.")
TLS = os.path.join(WORK, "tls")
CA = os.path.join(TLS, "ca.pem")
RECEIVED = os.path.join(WORK, "received.jsonl")
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
WORKERS = ["worker-1", "worker-2"]
GATEWAYS = ["gateway-1", "gateway-2"]
CHANGE_EVENTS = ("message_edited", "message_deleted", "reaction_added", "reaction_removed", "message_pinned", "message_unpinned")
EMOJI = ["👍", "❤️", "😂", "🎉"]
OPERATIONS_PER_CLIENT = 200
# Between two operations of a client: the load lasts through the kills (about 20 s).
PAUSE = 0.05
SEED = int(os.environ.get("PARLEY_TEST_SEED", "7"))
STORE = "PostgreSQL" if os.environ.get("PARLEY_STORE", "").startswith("postgres") else "SQLite"
check = Checks()
nodes = Nodes(NODE, WORK, TLS, WORKERS + GATEWAYS, seeds=WORKERS)
HOOKS = nodes.other_port()


def fold(events, me):
    """What an app holds after applying `events` (event, data) in order: per (conversation, seq)
    the message, per conversation its pins, and the problems seen — a change before its message."""
    held, applied, problems, pinned = {}, set(), [], {}
    for event, data in events:
        if event == "message":
            m = data["message"]
            key = (m["conversationId"], m["seq"])
            if key not in held:
                held[key] = dict(m)
        elif event in CHANGE_EVENTS:
            c = data["change"]
            key = (c["conversationId"], c["seq"])
            if key not in held:
                problems.append(f"change {c['changeSeq']} of {key} before its message")
                continue
            if (c["conversationId"], c["changeSeq"]) in applied:
                continue
            applied.add((c["conversationId"], c["changeSeq"]))
            apply(held[key], c, me)
            for (conversation, _), m in held.items():
                if conversation == c["conversationId"] and m.get("replyTo", {}).get("seq") == c["seq"]:
                    requote(m["replyTo"], c)
            pins = [s for s in pinned.get(c["conversationId"], []) if s != c["seq"] or c["kind"] not in ("unpinned", "deleted")]
            if c["kind"] == "pinned" and c["seq"] not in pins:
                pins.insert(0, c["seq"])
            pinned[c["conversationId"]] = pins
    return held, applied, problems, pinned


def requote(q, c):
    """A reply's quote once its original changed."""
    if q.get("deleted"):
        return
    if c["kind"] == "edited":
        q["text"] = c["text"][:100]
    elif c["kind"] == "deleted":
        q.update(text="", attachments=False, deleted=True)


def apply(m, c, me):
    kind = c["kind"]
    if m.get("deleted"):
        return
    if kind == "edited":
        m["text"], m["editedAt"] = c["text"], c["at"]
    elif kind == "deleted":
        for field in ("attachments", "reactions", "editedAt", "annotations", "replyTo", "mentions"):
            m.pop(field, None)
        m.update(text="", deleted=True, deletedBy=c["userId"])
    elif kind in ("pinned", "unpinned"):
        return
    else:
        reactions = {r["emoji"]: dict(r) for r in m.get("reactions", [])}
        mine = reactions.get(c["emoji"], {}).get("me", False)
        if c["userId"] == me:
            mine = kind == "reaction_added"
        if c["count"] > 0:
            reactions[c["emoji"]] = {"emoji": c["emoji"], "count": c["count"], "me": mine}
        else:
            reactions.pop(c["emoji"], None)
        m["reactions"] = list(reactions.values())


def shape(m):
    """A message as compared: what changes can change, reactions in no particular order."""
    return (m["text"], m.get("editedAt"), bool(m.get("deleted")), m.get("deletedBy"),
            sorted((r["emoji"], r["count"], r["me"]) for r in m.get("reactions", [])),
            json.dumps(m.get("replyTo"), sort_keys=True), m.get("mentions"))


def main():
    print(f"changes to messages end-to-end test on {STORE} (work dir {WORK}, seed {SEED})", flush=True)
    issue_certificates(NODE, TLS, nodes.names)
    subprocess.run([NODE, "certs", "issue", "hooks", "--client", "--dir", TLS, "--dns", "localhost"], check=True, stdout=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=CA)
    endpoints = os.path.join(WORK, "webhooks.json")
    with open(endpoints, "w") as f:
        json.dump({"endpoints": [{"name": "bots", "url": f"https://localhost:{HOOKS}/parley", "secret": SECRET,
                                  "events": ["message.edited", "message.deleted", "reaction.*", "message.pinned", "message.unpinned"]}]}, f)
    receiver = start_webhook_receiver(WORK, TLS, HOOKS, SECRET, RECEIVED)
    env = {"PARLEY_TOKEN_SECRET": "changes-e2e-token-secret-0123456789abcdef", "PARLEY_ADMIN_TOKEN": "changes-e2e-admin-token-0123", "PARLEY_BCRYPT_COST": "4",
           "PARLEY_WEBHOOKS": endpoints, "PARLEY_WEBHOOK_CA": CA, "PARLEY_WEBHOOK_RETRY_MAX": "2s"}
    for name in nodes.names:
        nodes.start(name, env)
    try:
        if check(wait_until(60, lambda: all(nodes.ready(n) for n in nodes.names)), "2 workers and 2 gateways are ready"):
            run(context, env)
    finally:
        os.kill(receiver.pid, 9)
        receiver.wait()
    conclude(check, nodes, WORK, f"changes to messages end-to-end on {STORE}")


def run(context, env):
    def api(method, path, body=None, token=None, gateway="gateway-1"):
        try:
            return call(method, nodes.client[gateway], path, body, token, context)
        except (OSError, ValueError) as error:
            return 0, {"error": str(error)}

    def retried(method, path, body, token, gateway):
        """A request tried again (same body, same idempotency key) until 2xx, or a 4xx, or 40 s."""
        deadline = time.time() + 40
        while True:
            status, reply = api(method, path, body, token, gateway)
            if 200 <= status < 300 or 400 <= status < 500 and status != 429 or time.time() > deadline:
                return status, reply
            time.sleep(0.2)

    names = [f"m{i}" for i in range(6)]
    token, uid = {}, {}
    for name in names:
        status, reply = api("POST", "/v1/users", {"handle": f"{name}-{uuid.uuid4().hex[:6]}", "password": "changes-password", "displayName": name})
        if not check(status == 201, f"{name} registers", (status, reply)):
            return
        token[name], uid[name] = reply["token"], reply["user"]["id"]
    status, reply = api("POST", "/v1/conversations", {"memberIds": [uid[n] for n in names[1:]], "name": "changes"}, token["m0"])
    group = reply["conversation"]["id"]
    status, reply = api("POST", "/v1/conversations", {"memberIds": [uid["m2"]]}, token["m1"])
    direct = reply["conversation"]["id"]
    members = {group: names, direct: ["m1", "m2"]}
    streams = {n: ResumingStream(nodes.client[GATEWAYS[i % 2]], token[n], context) for i, n in enumerate(names)}
    for stream in streams.values():
        stream.start()
    if not check(all(s.ready.wait(20) for s in streams.values()), "every member streams (three on each gateway)"):
        return
    first_cursor = {n: streams[n].cursor for n in names}

    # What was acknowledged, for the checks: per message its sender, the latest acknowledged
    # text, whether its deletion was; per (message, user, emoji) whether the user holds it.
    lock = threading.Lock()
    sent, texts, deleted, held, uncertain = {}, {}, set(), {}, set()
    replies, mentioned = {}, {}
    counts = {"send": 0, "reply": 0, "mention": 0, "edit": 0, "delete": 0, "react": 0, "unreact": 0, "pin": 0, "unpin": 0, "failed": 0, "not found": 0}

    def client(who, seed):
        r = random.Random(seed)
        for index in range(OPERATIONS_PER_CLIENT):
            time.sleep(PAUSE)
            conversation = direct if who in members[direct] and r.random() < 0.3 else group
            gateway = GATEWAYS[r.randrange(2)]
            with lock:
                mine = [k for k, s in sent.items() if s == who and k[0] == conversation and k not in deleted]
                theirs = [k for k in sent if k[0] == conversation and k not in deleted]
            roll = r.random()
            base = f"/v1/conversations/{conversation}/messages"
            if roll < 0.66 or not theirs:
                body = {"clientMessageId": str(uuid.uuid4()), "text": f"{who} {index}"}
                if theirs and r.random() < 0.25:
                    body["replyTo"] = r.choice(theirs)[1]
                if r.random() < 0.2:
                    body["mentions"] = [uid[r.choice([n for n in members[conversation] if n != who])]]
                status, reply = retried("POST", base, body, token[who], gateway)
                if status in (200, 201):
                    with lock:
                        key = (conversation, reply["message"]["seq"])
                        sent[key], texts[key] = who, body["text"]
                        counts["send"] += 1
                        if "replyTo" in body:
                            replies[key] = body["replyTo"]
                            counts["reply"] += 1
                        if "mentions" in body:
                            mentioned[key] = body["mentions"][0]
                            counts["mention"] += 1
                else:
                    # A reply to a message deleted meanwhile is refused (400).
                    counts["failed"] += 1
                continue
            may_pin = conversation == direct or who == "m0"
            if roll < 0.76 and mine:
                key = r.choice(mine)
                text = f"{who} {index} edited"
                status, reply = retried("PATCH", f"{base}/{key[1]}", {"clientChangeId": str(uuid.uuid4()), "text": text}, token[who], gateway)
                what = "edit"
            elif roll < 0.8 and mine:
                key = r.choice(mine)
                status, reply = retried("DELETE", f"{base}/{key[1]}", None, token[who], gateway)
                what = "delete"
            elif roll < 0.86 and may_pin:
                key = r.choice(theirs)
                pinning = r.random() < 0.7
                status, reply = retried("PUT" if pinning else "DELETE", f"{base}/{key[1]}/pin", None, token[who], gateway)
                what = "pin" if pinning else "unpin"
            else:
                key, emoji = r.choice(theirs), r.choice(EMOJI)
                adding = r.random() < 0.7
                status, reply = retried("PUT" if adding else "DELETE", f"{base}/{key[1]}/reactions/{quote(emoji)}", None, token[who], gateway)
                what = "react" if adding else "unreact"
            with lock:
                if status != 200:
                    # A deletion that raced ours (409), or an outcome not known: not checked. A
                    # message acknowledged is never not found.
                    counts["failed"] += 1
                    counts["not found"] += status == 404
                    uncertain.add(key)
                    continue
                counts[what] += 1
                if what == "edit":
                    texts[key] = text
                elif what == "delete":
                    deleted.add(key)
                elif what in ("react", "unreact"):
                    held[(key, who, emoji)] = adding

    clients = [threading.Thread(target=client, args=(who, SEED * 10 + i), daemon=True) for i, who in enumerate(["m0", "m1", "m2"])]
    for thread in clients:
        thread.start()
    # A burst: both workers SIGKILLed a second apart and started again; later one more, alone.
    time.sleep(3)
    for name in WORKERS:
        nodes.kill(name)
        time.sleep(1)
    for name in WORKERS:
        nodes.start(name, env)
    check(wait_until(60, lambda: all(nodes.ready(n) for n in nodes.names)), "a burst: both workers SIGKILLed and back")
    time.sleep(5)
    nodes.kill("worker-2")
    nodes.start("worker-2", env)
    check(any(t.is_alive() for t in clients), "the load was still running when the last kill came")
    check(wait_until(60, lambda: nodes.ready("worker-2")), "a kill on its own: worker-2 SIGKILLed and back")
    for thread in clients:
        thread.join(timeout=300)
    check(not any(t.is_alive() for t in clients), "the clients finished their operations", counts)
    check(counts["not found"] == 0, "no change to an acknowledged message was answered 404", counts)
    changes_made = counts["edit"] + counts["delete"] + counts["react"] + counts["unreact"] + counts["pin"] + counts["unpin"]
    check(changes_made * 4 >= counts["send"], f"a third of the operations were changes ({changes_made} changes, {counts['send']} sends)", counts)
    print(f"   operations: {counts}", flush=True)

    def history(who, conversation):
        messages, after = [], 0
        while True:
            status, reply = retried("GET", f"/v1/conversations/{conversation}/messages?after={after}&limit=200", None, token[who], "gateway-2")
            if status != 200 or not reply["messages"]:
                return messages
            messages += reply["messages"]
            after = messages[-1]["seq"]

    histories = {(n, c): history(n, c) for c in members for n in members[c]}
    total = {c: len(histories[(members[c][0], c)]) for c in members}

    def converged():
        for c in members:
            for n in members[c]:
                events = [e for events in streams[n].connections for e in list(events)]
                held_now, _, _, _ = fold(events, uid[n])
                if len([k for k in held_now if k[0] == c]) < total[c]:
                    return False
        return True
    check(wait_until(30, converged), "every stream holds every message")
    histories = {(n, c): history(n, c) for c in members for n in members[c]}
    pins = {c: retried("GET", f"/v1/conversations/{c}", None, token[members[c][0]], "gateway-1")[1].get("pinned") for c in members}
    for c, who in members.items():
        kind = "group" if c == group else "direct chat"
        numbers = set()
        for n in who:
            connections = streams[n].connections
            events = [e for events in connections for e in list(events)]
            state, applied, problems, pinned = fold(events, uid[n])
            check(pinned.get(c, []) == pins[c], f"{kind}, {n}: the pins folded are the conversation's ({pins[c]})", pinned.get(c))
            numbers |= {s for (conv, s) in applied if conv == c}
            check(not problems, f"{kind}, {n}: every change came after its message", problems[:5])
            disorder = []
            for events in connections:
                last = 0
                for event, data in list(events):
                    if event in CHANGE_EVENTS and data["change"]["conversationId"] == c:
                        if data["change"]["changeSeq"] <= last:
                            disorder.append((last, data["change"]["changeSeq"]))
                        last = data["change"]["changeSeq"]
            check(not disorder, f"{kind}, {n}: each connection wrote each change once, in changeSeq order", disorder[:5])
            theirs = {m["seq"]: shape(m) for m in histories[(n, c)]}
            folded = {k[1]: shape(m) for k, m in state.items() if k[0] == c}
            differ = [(seq, folded.get(seq), theirs[seq]) for seq in theirs if folded.get(seq) != theirs[seq]]
            check(not differ and len(folded) == len(theirs), f"{kind}, {n}: the stream folded equals history ({len(theirs)} messages)", differ[:3])
        top = max(numbers, default=0)
        check(numbers == set(range(1, top + 1)), f"{kind}: the streams together miss no change (1…{top})", sorted(set(range(1, top + 1)) - numbers)[:10])

    # Every acknowledged change holds in history (as its sender's reader sees it).
    wrong = []
    for (key, who, emoji), holds in held.items():
        if key in deleted or key in uncertain:
            continue
        message = next(m for m in histories[(who, key[0])] if m["seq"] == key[1])
        mine = any(r["emoji"] == emoji and r["me"] for r in message.get("reactions", []))
        if mine != holds:
            wrong.append(("reaction", key, who, emoji, holds))
    for key, text in texts.items():
        message = next(m for m in histories[(sent[key], key[0])] if m["seq"] == key[1])
        if key in deleted:
            if not (message.get("deleted") and message["text"] == ""):
                wrong.append(("deleted", key))
        elif key not in uncertain and message["text"] != text:
            wrong.append(("text", key, text, message["text"]))
    check(not wrong, f"every acknowledged change holds in history ({len(held)} reactions, {len(texts)} texts, {len(deleted)} deletions)", wrong[:5])

    # Every acknowledged reply quotes its message and is listed under it; every acknowledged
    # mention is in the mentioned member's mentions.
    wrong = []
    for key, original in replies.items():
        if key in deleted:
            continue
        message = next(m for m in histories[(sent[key], key[0])] if m["seq"] == key[1])
        if message.get("replyTo", {}).get("seq") != original:
            wrong.append(("quote", key, message.get("replyTo")))
        status, reply = retried("GET", f"/v1/conversations/{key[0]}/messages/{original}/replies?limit=200", None, token[sent[key]], "gateway-2")
        if status != 200 or key[1] not in [m["seq"] for m in reply.get("messages", [])]:
            wrong.append(("replies", key, original, status))
    check(not wrong, f"every acknowledged reply quotes its message and is listed under it ({len(replies)} replies)", wrong[:5])
    listed = {}
    for n in names:
        before, found = None, set()
        while True:
            status, reply = retried("GET", "/v1/mentions?limit=100" + (f"&before={quote(before)}" if before else ""), None, token[n], "gateway-1")
            if status != 200:
                break
            found |= {(m["conversationId"], m["seq"]) for m in reply["mentions"]}
            before = reply.get("next")
            if not before:
                break
        listed[uid[n]] = found
    missing = [(key, user) for key, user in mentioned.items() if key not in deleted and key not in listed[user]]
    check(not missing, f"every acknowledged mention is listed for its member ({len(mentioned)} mentions)", missing[:5])

    # Search finds what history holds, each once: the live messages with every word (by each
    # word's beginning, a one-letter word only itself), edits by their new text, no deleted one —
    # after the kills, on both stores.
    def searched(n, q):
        found, cursor = [], None
        while True:
            status, reply = retried("GET", f"/v1/search?q={quote(q)}&limit=50" + (f"&cursor={cursor}" if cursor else ""), None, token[n], "gateway-2")
            if status != 200:
                return None
            found += [(r["message"]["conversationId"], r["message"]["seq"]) for r in reply["results"]]
            cursor = reply.get("next")
            if not cursor:
                return found

    def expected(n, q):
        wanted = q.lower().split()
        return {(c, m["seq"]) for c in members if n in members[c] for m in histories[(n, c)]
                if not m.get("deleted") and all(any(w.startswith(x) if len(x) > 1 else w == x for w in re.findall(r"[a-z0-9]+", m["text"].lower()))
                                                for x in wanted)}
    wrong, sizes = [], []
    for n in ["m1", "m4"]:
        for q in ["edited", f"{n} 1", "M2 EDITED", "m0 19"]:
            got = searched(n, q)
            sizes.append(len(got or []))
            if got is None or len(got) != len(set(got)) or set(got) != expected(n, q):
                wrong.append((n, q, None if got is None else sorted(set(got) ^ expected(n, q))[:5]))
    check(not wrong and sum(sizes) > 0, f"search finds exactly the live messages holding the words, each once ({sizes} found)", wrong[:3])

    # A stream resumed from its first cursor replays everything to the same state.
    for n in ["m1", "m4"]:
        conn, response = open_event_stream(nodes.client["gateway-1"], token[n], context, first_cursor[n], timeout=60)
        replayed = []
        for event, _, data in server_sent_events(response):
            if event == "ready":
                break
            replayed.append((event, data))
        conn.close()
        state, _, problems, _ = fold(replayed, uid[n])
        for c in [c for c in members if n in members[c]]:
            theirs = {m["seq"]: shape(m) for m in histories[(n, c)]}
            folded = {k[1]: shape(m) for k, m in state.items() if k[0] == c}
            check(folded == theirs and not problems, f"{n}: a resume from the first cursor replays {c[:8]}… to history's state", problems[:3])

    # Webhooks: each change once per ID, in changeSeq order per conversation, none missing.
    def deliveries():
        if not os.path.exists(RECEIVED):
            return []
        with open(RECEIVED) as f:
            return [json.loads(line) for line in f if line.strip()]
    tops = {c: max((d["change"]["changeSeq"] for e in (streams[n].connections for n in members[c]) for events in e
                    for ev, d in list(events) if ev in CHANGE_EVENTS and d["change"]["conversationId"] == c), default=0) for c in members}

    def told():
        seen = {}
        for delivery in deliveries():
            change = delivery["change"]
            seen.setdefault(change["conversationId"], {}).setdefault(delivery["id"], change["changeSeq"])
        return seen
    check(all(d["valid"] for d in deliveries()), "every webhook's signature checks out (standardwebhooks)")
    check(wait_until(60, lambda: all(set(told().get(c, {}).values()) >= set(range(1, tops[c] + 1)) for c in members)),
          "webhooks were told every change", {c: sorted(set(range(1, tops[c] + 1)) - set(told().get(c, {}).values()))[:10] for c in members})
    for c in members:
        order, first = [], set()
        for delivery in deliveries():
            change = delivery["change"]
            if change["conversationId"] == c and delivery["id"] not in first:
                first.add(delivery["id"])
                order.append(change["changeSeq"])
        check(order == sorted(order) and len(order) == len(set(order)), f"webhooks: {c[:8]}…'s changes first told in changeSeq order, one ID each",
              [x for x, y in zip(order, order[1:]) if y <= x][:5])
    for stream in streams.values():
        stream.close()


if __name__ == "__main__":
    main()
