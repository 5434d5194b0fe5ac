#!/usr/bin/env python3
"""The web client every gateway serves, in a real browser: headless Chromium (Debian's) driven
through WebDriver (Selenium with Debian's chromium-driver), against real parley-node processes
(2 workers, 2 gateways, TLS).

Two people, each in a browser of their own on a different gateway, register, start a direct
chat by handle, and talk: messages arrive live, in order, once; the sender's tick turns to read
when the reader has the conversation on screen; typing shows. The pages send on the send socket
(a WebSocket on their HTTP/2 connection), none of it by request, and an independent client (h2)
tries the socket frame by frame, broken frames too. One goes offline (DevTools network
emulation), types three messages, which wait in the outbox (IndexedDB), and comes back: they
arrive in order, once. A worker is SIGKILLed mid-conversation, then the gateway that served the
reader's page: both pages go on without a reload, his on the other gateway (the gateways allow
each other's pages: CORS). A reader scrolled up leaves the tick at delivered
until he scrolls down. A photo is attached and shown as a thumbnail on the other side. A group is
created, renamed, and gains and loses a member, live on the other page; a message in another chat
shows as unread in the list. A message is edited, reacted to and deleted for everyone, replied
to (its quote following its next edit), and a reply mentioning the other is pinned, live on the
other page. In the settings panel a session is signed out, the password
changed and the user's data downloaded; from a direct conversation a user is blocked (his sends refused) and unblocked, and
reported. Last, the user deletes her account from the settings panel, erasing her messages. axe-core (bundled by axe-selenium-python) finds nothing serious or
critical on the sign-in form, a conversation, the group panel, the settings panel and at phone width. A page away for longer than a resume replays gets 410
cursor_expired and reloads what it holds instead, missing nothing. Closing a browser turns its
user from online to last seen on the other page. A reloaded page pages
older history in on scroll. Screenshots of the main views are saved (PARLEY_SCREENSHOTS=DIR, else
the work directory).

    Scripts/tests/web_e2e.py PATH-TO-parley-node

Every process it starts is recorded and stopped by its PID (WebDriver ends its browsers).
"""
import http.client
import json
import os
import shutil
import ssl
import struct
import uuid
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.dirname(__file__))
from e2e_lib import Checks, Nodes, call, conclude, png, wait_until  # noqa: E402

NODE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/parley-node")
WORK = tempfile.mkdtemp(prefix="parley-web.")
TLS = os.path.join(WORK, "tls")
SHOTS = os.environ.get("PARLEY_SCREENSHOTS") or os.path.join(WORK, "screenshots")
NAMES = ["worker-1", "worker-2", "gateway-1", "gateway-2"]
nodes = Nodes(NODE, WORK, TLS, NAMES, seeds=["worker-1", "worker-2"])
ENV = {"PARLEY_TOKEN_SECRET": "web-e2e-token-secret-0123456789abcdef", "PARLEY_INSECURE_NO_ADMIN_TOKEN": "1",
       "PARLEY_REGISTRATION_RATE": "100", "PARLEY_EVENT_LOOPS": "1", "PARLEY_REPLAY_MAX": "20",
       "PARLEY_GATEWAY_URLS": ",".join(f"https://localhost:{nodes.client[g]}" for g in ["gateway-1", "gateway-2"])}
check = Checks()
browsers = []


def browser(gateway, width=1000, height=720):
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--ignore-certificate-errors",
                     f"--window-size={width},{height}", "--disable-gpu"]:
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    browsers.append(driver)
    driver.get(f"https://localhost:{nodes.client[gateway]}/")
    driver.execute_script("window.notReloaded = true")
    return driver


def el(driver, element_id):
    return driver.find_element(By.ID, element_id)


def texts(driver):
    """The message bubbles' texts in the open conversation, and which are still waiting."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#messages li')].map(li => [li.querySelector('.text').textContent, li.dataset.pending ? 'pending' : 'sent'])")


def register(driver, handle, name):
    wait_until(15, lambda: el(driver, "signin").is_displayed())
    el(driver, "signin-handle").send_keys(handle)
    el(driver, "signin-password").send_keys("correct horse battery")
    el(driver, "signin-name").send_keys(name)
    el(driver, "register").click()
    return wait_until(15, lambda: el(driver, "app").is_displayed() and el(driver, "me").text == name)


def send(driver, text):
    box = el(driver, "text")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def open_conversation(driver, title):
    def click():
        for item in driver.find_elements(By.CSS_SELECTOR, "#conversations li"):
            if item.find_element(By.CSS_SELECTOR, ".name").text == title:
                item.click()
                return True
        return False
    return wait_until(15, click) and wait_until(10, lambda: el(driver, "conversation-name").text == title)


def offline(driver, on):
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": on, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})


def user_id(handle, token, context):
    """The ID of the user with this handle, looked up as `token`'s user."""
    users = call("GET", nodes.client["gateway-1"], f"/v1/users?prefix={handle}", token=token, context=context)[1]["users"]
    return next(u["id"] for u in users if u["handle"] == handle)


def shot(driver, name):
    os.makedirs(SHOTS, exist_ok=True)
    driver.save_screenshot(os.path.join(SHOTS, f"{name}.png"))


def audit(driver, view):
    """axe-core's accessibility rules (the copy axe-selenium-python bundles) on the page as it is:
    a check that nothing serious or critical is found."""
    from axe_selenium_python import Axe
    axe = Axe(driver)
    axe.inject()
    results = axe.run()
    serious = [f"{v['id']}: {v['help']} ({len(v['nodes'])}×, e.g. {v['nodes'][0]['target']}: {v['nodes'][0].get('failureSummary', '')})" for v in results["violations"]
               if v.get("impact") in ("serious", "critical")]
    check(not serious, f"axe finds nothing serious or critical in {view}", serious)


def metric(gateway, series, matches=lambda line: True):
    """The sum of `series` on `gateway`'s /metrics over the label sets `matches` takes (0 when absent)."""
    conn = http.client.HTTPConnection("127.0.0.1", nodes.ops[gateway], timeout=5)
    conn.request("GET", "/metrics")
    lines = conn.getresponse().read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if (line.startswith(series + " ") or line.startswith(series + "{")) and matches(line))


def requests_on(gateway, method, route_end):
    """Requests `gateway` counted with this method and a route ending in `route_end`."""
    return metric(gateway, "hb_requests", lambda line: f'="{method}"' in line and f'{route_end}"' in line)


def send_socket_protocol(context):
    """The send socket frame by frame, from a client that is neither the browser nor Parley's (h2),
    as two users of their own (the pages' chats stay as they are)."""
    from h2_websocket import BINARY, PING, PONG, TEXT, H2WebSocket, frame
    port = nodes.client["gateway-1"]
    _, carol = call("POST", port, "/v1/users", {"handle": "carol", "password": "correct horse battery", "displayName": "Carol"}, context=context)
    _, dave = call("POST", port, "/v1/users", {"handle": "dave", "password": "correct horse battery", "displayName": "Dave"}, context=context)
    token = carol["token"]
    _, created = call("POST", port, "/v1/conversations", {"memberIds": [dave["user"]["id"]]}, token=token, context=context)
    direct = created["conversation"]["id"]

    socket = H2WebSocket(port)
    check(socket.connect_protocol and socket.status == 200, "the gateway offers extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL) and accepts the WebSocket",
          (socket.connect_protocol, socket.status))
    socket.send_text(json.dumps({"token": token}))
    hello = socket.receive()
    check(hello is not None and hello[0] == TEXT and json.loads(hello[1])["status"] == 200, "its first message, the token, is answered 200", hello)
    key = str(uuid.uuid4())
    command = {"type": "message", "conversationId": direct, "clientMessageId": key, "text": "over the socket", "id": "m1"}
    socket.send_text(json.dumps(command))
    socket.send(frame(PING, b"are you there"))
    socket.send_text(json.dumps(command | {"id": "m2"}))
    socket.send_text(json.dumps({"type": "typing", "conversationId": direct, "typing": False, "id": "t1"}))
    answers = [socket.receive() for _ in range(4)]
    parsed = [json.loads(a[1]) if a and a[0] == TEXT else a for a in answers]
    check([p["id"] if isinstance(p, dict) else p for p in parsed] == ["m1", (PONG, b"are you there"), "m2", "t1"],
          "each command is answered in order, the ping with a pong", parsed)
    first, again = parsed[0], parsed[2]
    check(first["status"] == 201 and again["status"] == 200 and first["message"]["seq"] == again["message"]["seq"] and parsed[3]["status"] == 204,
          "a message is committed once (201), its clientMessageId again answers the same message (200), typing 204", (first, again, parsed[3]))
    socket.send(frame(BINARY, b"\x00\x01"))
    check(socket.close_code() == 1003 and socket.ended, "a binary message is answered with close 1003, and the stream ends")
    socket.close()

    for name, payload, expected_answer, code in [
        ("a refused token", frame(TEXT, json.dumps({"token": "not-a-token"}).encode()), 401, 1008),
        ("a first message that is not a token", frame(TEXT, json.dumps(command).encode()), 401, 1008),
        ("an unmasked frame (RFC 6455 section 5.1)", frame(TEXT, json.dumps({"token": token}).encode(), masked=False), None, 1002),
        ("a message over the 64 KiB body limit", frame(TEXT, b"x" * (65 * 1024)), None, 1009),
    ]:
        socket = H2WebSocket(port)
        socket.send(payload)
        first = socket.receive()
        answered = json.loads(first[1])["status"] if first and first[0] == TEXT else None
        code_seen = socket.close_code() if answered is not None else (struct.unpack("!H", first[1][:2])[0] if first and len(first[1]) >= 2 else None)
        check(answered == expected_answer and code_seen == code, f"{name}: answered {expected_answer or 'nothing'}, then close {code}", (answered, code_seen))
        socket.close()
    # A user's send streams on a gateway are bounded (10, as event streams): the 11th socket's
    # token is answered 429, retryable, and the socket closed 1013 (try again later), not 1008.
    held = []
    for _ in range(10):
        held.append(H2WebSocket(port))
        held[-1].send_text(json.dumps({"token": dave["token"]}))
    named = [h.receive() for h in held]
    extra = H2WebSocket(port)
    extra.send_text(json.dumps({"token": dave["token"]}))
    first = extra.receive()
    refused = json.loads(first[1]) if first and first[0] == TEXT else first
    check(all(n and n[0] == TEXT and json.loads(n[1])["status"] == 200 for n in named) and isinstance(refused, dict)
          and refused["status"] == 429 and refused["error"]["code"] == "too_many_streams" and refused["error"]["retryable"] is True
          and extra.close_code() == 1013,
          "a user's 11th send socket on a gateway: its token answered 429 too_many_streams, retryable, then close 1013", (named, refused))
    for h in held + [extra]:
        h.close()
    _, history = call("GET", port, f"/v1/conversations/{direct}/messages?limit=50", token=token, context=context)
    check(sum(1 for m in history["messages"] if m["clientMessageId"] == key) == 1, "the history holds the socket's message once")


def main():
    if not nodes.start_all(ENV, check, "2 workers and 2 gateways are ready"):
        return
    alice, bob = browser("gateway-1"), browser("gateway-2")
    check(alice.title == "Parley" and el(alice, "signin").is_displayed(), "gateway-1 serves the web client at /: the sign-in form", alice.title)
    shot(alice, "sign-in")
    audit(alice, "the sign-in form")
    check(register(alice, "alice", "Alice") and register(bob, "bob", "Bob"), "Alice registers on gateway-1's page, Bob on gateway-2's")

    print("cross-origin")
    context = ssl.create_default_context(cafile=os.path.join(TLS, "ca.pem"))

    def preflight(origin):
        conn = http.client.HTTPSConnection("localhost", nodes.client["gateway-1"], context=context, timeout=10)
        conn.request("OPTIONS", "/v1/conversations", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                              "Access-Control-Request-Headers": "authorization, content-type"})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("access-control-allow-origin"), response.getheader("access-control-allow-headers") or ""
    other = f"https://localhost:{nodes.client['gateway-2']}"
    status, allowed, headers = preflight(other)
    check(status == 204 and allowed == other and "authorization" in headers, "gateway-1 allows the page gateway-2 served to call its API", (status, allowed, headers))
    status, allowed, _ = preflight("https://elsewhere.example")
    check(allowed is None, "and no other site's page", (status, allowed))

    print("a direct chat")
    el(alice, "new-chat-handle").send_keys("bob")
    el(alice, "start-chat").click()
    check(wait_until(15, lambda: el(alice, "conversation-name").text == "Bob"), "Alice starts a chat with Bob by his handle")
    send(alice, "hello Bob")
    check(wait_until(15, lambda: texts(alice) == [["hello Bob", "sent"]]), "her message is sent", texts(alice))
    check(open_conversation(bob, "Alice"), "the chat appears on Bob's page, live, and he opens it")
    check(wait_until(15, lambda: texts(bob) == [["hello Bob", "sent"]]), "Bob sees her message", texts(bob))
    check(wait_until(15, lambda: alice.execute_script("return document.querySelector('#messages li .tick')?.title") == "read"),
          "Alice's tick turns to read once Bob has it on screen",
          alice.execute_script("return document.querySelector('#messages li .tick')?.title"))
    el(bob, "text").send_keys("typing…")
    check(wait_until(10, lambda: "Bob is typing" in el(alice, "typing").text), "Alice sees Bob typing", el(alice, "typing").text)
    el(bob, "text").clear()
    send(bob, "hi Alice")
    check(wait_until(15, lambda: [t for t, _ in texts(alice)] == ["hello Bob", "hi Alice"]), "Bob's answer arrives on Alice's page", texts(alice))
    shot(alice, "conversation")
    audit(alice, "the conversation view")

    print("the send socket")
    sockets = {g: metric(g, "parley_gateway_send_sockets_opened") for g in ["gateway-1", "gateway-2"]}
    check(all(count >= 1 for count in sockets.values()),
          "each page opened its send socket: a WebSocket on its HTTP/2 connection (CONNECT /v1/sends, RFC 8441)", sockets)
    by_request = {g: sum(requests_on(g, "POST", f"/{kind}") for kind in ["messages", "receipts", "typing"]) for g in ["gateway-1", "gateway-2"]}
    check(by_request == {"gateway-1": 0, "gateway-2": 0}, "and sent its messages, receipts and typing on it, none by request", by_request)
    send_socket_protocol(context)

    print("offline")
    offline(bob, True)
    check(wait_until(10, lambda: bob.execute_script("return navigator.onLine") is False), "Bob's browser goes offline")
    for text in ["one", "two", "three"]:
        send(bob, text)
    check(wait_until(10, lambda: [s for t, s in texts(bob)][-3:] == ["pending"] * 3), "the three messages he types wait, shown as sending", texts(bob))
    check(bob.execute_script("""return new Promise(done => { const open = indexedDB.open(Object.keys(localStorage).includes('parley.me')
              ? 'parley-outbox-' + JSON.parse(localStorage.getItem('parley.me')).id : '');
              open.onsuccess = () => { const get = open.result.transaction('messages').objectStore('messages').getAll();
              get.onsuccess = () => done(get.result.sort((a, b) => a.order - b.order).map(m => m.text)); }; })""") == ["one", "two", "three"],
          "kept in IndexedDB, in order")
    time.sleep(2)
    check([t for t, _ in texts(alice)] == ["hello Bob", "hi Alice"], "nothing reaches Alice meanwhile", texts(alice))
    shot(bob, "offline-outbox")
    offline(bob, False)
    check(wait_until(30, lambda: [t for t, _ in texts(alice)] == ["hello Bob", "hi Alice", "one", "two", "three"]),
          "back online: the three arrive at Alice in order, once", texts(alice))
    check(wait_until(15, lambda: all(s == "sent" for _, s in texts(bob)) and len(texts(bob)) == 5), "and show as sent on Bob's page", texts(bob))

    print("nodes killed")
    nodes.kill("worker-1")
    send(alice, "after a worker died")
    check(wait_until(40, lambda: [t for t, _ in texts(bob)][-1:] == ["after a worker died"]), "a worker SIGKILLed: Alice's next message reaches Bob", texts(bob))
    nodes.start("worker-1", ENV)
    nodes.kill("gateway-2")
    send(alice, "after his gateway died")
    check(wait_until(40, lambda: [t for t, _ in texts(bob)][-1:] == ["after his gateway died"]),
          "Bob's gateway, which served his page, SIGKILLed: his page resumes its stream on gateway-1 and gets the next message", texts(bob))
    send(bob, "still here")
    check(wait_until(40, lambda: [t for t, _ in texts(alice)][-1:] == ["still here"]), "and his own send goes through", texts(alice))
    check(alice.execute_script("return window.notReloaded") and bob.execute_script("return window.notReloaded"), "neither page was reloaded")
    seqs = bob.execute_script("return [...document.querySelectorAll('#messages li[data-seq]')].map(li => Number(li.dataset.seq))")
    check(seqs == list(range(1, len(seqs) + 1)) and len(seqs) == 8, "Bob's page holds seq 1…8, each once", seqs)

    print("read when seen")
    token = alice.execute_script("return localStorage.getItem('parley.token')")
    _, listing = call("GET", nodes.client["gateway-1"], "/v1/conversations", token=token, context=context)
    direct = next(c["id"] for c in listing["conversations"] if c["kind"] == "direct")
    for k in range(60):
        call("POST", nodes.client["gateway-1"], f"/v1/conversations/{direct}/messages", {"clientMessageId": str(uuid.uuid4()), "text": f"filler {k}"},
             token=token, context=context)
    check(wait_until(30, lambda: [t for t, _ in texts(bob)][-1:] == ["filler 59"]), "sixty more messages reach Bob's open chat", texts(bob)[-1:])
    bob.execute_script("document.getElementById('messages').scrollTop = 0")
    time.sleep(0.5)
    send(alice, "are you there?")
    last_tick = "return [...document.querySelectorAll('#messages li .tick')].pop()?.title"
    check(wait_until(15, lambda: alice.execute_script(last_tick) == "delivered"), "Bob's page, scrolled up, reports it delivered", alice.execute_script(last_tick))
    time.sleep(2)
    check(alice.execute_script(last_tick) == "delivered", "and not read while he is not at the bottom", alice.execute_script(last_tick))
    bob.execute_script("const list = document.getElementById('messages'); list.scrollTop = list.scrollHeight")
    check(wait_until(15, lambda: alice.execute_script(last_tick) == "read"), "he scrolls down: Alice's tick turns to read", alice.execute_script(last_tick))

    print("changing messages")

    def bubble_of(driver, text):
        for item in driver.find_elements(By.CSS_SELECTOR, "#messages li[data-seq]"):
            if item.find_element(By.CSS_SELECTOR, ".text").text == text:
                return item
        return None

    def press(driver, text, label):
        item = bubble_of(driver, text)
        buttons = [b for b in item.find_elements(By.CSS_SELECTOR, "button") if label in (b.text, b.get_attribute("aria-label"))] if item else []
        if buttons:
            buttons[0].click()
        return bool(buttons)

    check(press(alice, "are you there?", "Edit") and el(alice, "text").get_attribute("value") == "are you there?" and el(alice, "editing").is_displayed(),
          "Alice presses Edit on her message: the composer holds its text")
    el(alice, "text").clear()
    send(alice, "are you still there?")
    check(wait_until(15, lambda: bubble_of(bob, "are you still there?") is not None and "edited" in bubble_of(bob, "are you still there?").text),
          "she saves the edit: Bob's page shows the new text, marked edited, live", texts(bob)[-2:])
    check(bubble_of(alice, "are you there?") is None, "her own page shows the edit in place of the old text")
    check(press(bob, "are you still there?", "React 👍"), "Bob reacts 👍 to it")
    check(wait_until(15, lambda: alice.execute_script(
        "return [...document.querySelectorAll('#messages li .reaction')].map(b => b.textContent + ':' + b.getAttribute('aria-pressed'))") == ["👍 1:false"]),
          "Alice's page shows 👍 1, not hers", alice.execute_script("return [...document.querySelectorAll('#messages li .reaction')].map(b => b.textContent)"))
    check(wait_until(5, lambda: bob.execute_script("return document.querySelector('#messages li .reaction')?.getAttribute('aria-pressed')") == "true"),
          "on Bob's page it is pressed: his")
    alice.execute_script("window.confirm = () => true")
    check(press(alice, "hello Bob", "Delete"), "Alice deletes her first message for everyone")
    check(wait_until(15, lambda: bubble_of(bob, "This message was deleted") is not None and bubble_of(bob, "hello Bob") is None),
          "on Bob's page it becomes a tombstone, live", texts(bob)[:2])
    check(bubble_of(alice, "You deleted this message") is not None, "her page says she deleted it")
    shot(alice, "changed messages")
    # Pressing Delete on her first message scrolled her page up to it: back down, as she would.
    alice.execute_script("const list = document.getElementById('messages'); list.scrollTop = list.scrollHeight")

    quote_on = "return [...document.querySelectorAll('#messages li')].find(li => li.querySelector('.text').textContent === 'yes, @alice')?.querySelector('.quote')?.textContent"
    check(press(bob, "are you still there?", "Reply") and el(bob, "replying").is_displayed(), "Bob presses Reply on it: the composer says what he answers")
    send(bob, "yes, @alice")
    check(wait_until(15, lambda: alice.execute_script(quote_on) == "Alice: are you still there?"),
          "his reply reaches Alice's page quoting her message", alice.execute_script(quote_on))
    check(wait_until(5, lambda: "mentioned" in (bubble_of(alice, "yes, @alice").get_attribute("class") or "")), "and marked as mentioning her")
    check(press(alice, "are you still there?", "Edit"), "Alice edits the message he answered")
    el(alice, "text").clear()
    send(alice, "are you still there? (asked twice)")
    check(wait_until(15, lambda: bob.execute_script(quote_on) == "Alice: are you still there? (asked twice)"),
          "the quote on Bob's page follows the edit, live", bob.execute_script(quote_on))
    check(press(alice, "yes, @alice", "Pin"), "Alice pins Bob's reply")
    pinned_bar = "const bar = document.getElementById('pinned'); return bar.hidden ? null : bar.textContent"
    check(wait_until(15, lambda: bob.execute_script(pinned_bar) == "📌 Bob: yes, @alice"), "Bob's page shows it pinned, live", bob.execute_script(pinned_bar))
    check(press(bob, "yes, @alice", "Unpin"), "Bob unpins it (either member of a direct chat may)")
    check(wait_until(15, lambda: alice.execute_script(pinned_bar) is None), "and it leaves Alice's pinned bar, live", alice.execute_script(pinned_bar))
    shot(bob, "reply and pin")
    el(alice, "search-q").send_keys("ASKED twi")
    el(alice, "search-q").send_keys(Keys.ENTER)
    found = "return [...document.querySelectorAll('#search-results li[data-seq]')].map(li => [li.querySelector('.where').textContent, [...li.querySelectorAll('mark')].map(m => m.textContent)])"
    check(wait_until(15, lambda: alice.execute_script(found) == [["Bob · Alice", ["asked", "twice"]]]),
          "Alice searches her messages: the edited one is found by its new words, marked", alice.execute_script(found))
    el(alice, "search-q").clear()
    el(alice, "search-q").send_keys("hello Bob")
    el(alice, "search-q").send_keys(Keys.ENTER)
    check(wait_until(15, lambda: "Nothing found" in el(alice, "search-status").text), "a message deleted for everyone is not found", el(alice, "search-status").text)
    shot(alice, "search")
    el(alice, "search-close").click()
    for driver in (alice, bob):
        driver.execute_script("const list = document.getElementById('messages'); list.scrollTop = list.scrollHeight")

    print("a photo")
    photo = os.path.join(WORK, "photo.png")
    with open(photo, "wb") as f:
        f.write(png(64, 48))
    el(bob, "photo").send_keys(photo)
    send(bob, "a photo")
    check(wait_until(30, lambda: alice.execute_script(
        "const img = [...document.querySelectorAll('#messages li img')].pop(); return !!img && img.src.startsWith('blob:') && img.complete && img.naturalWidth === 64")),
          "Bob attaches a photo; Alice's page shows its thumbnail, fetched with her token")
    shot(alice, "photo")

    print("profile photos")
    face = os.path.join(WORK, "face.png")
    with open(face, "wb") as f:
        f.write(png(96, 96, seed=3))
    el(bob, "open-settings").click()
    el(bob, "avatar-file").send_keys(face)
    check(wait_until(15, lambda: "profile photo was changed" in el(bob, "settings-result").text), "Bob chooses a profile photo in his settings",
          el(bob, "settings-result").text + el(bob, "settings-error").text)
    el(bob, "close-settings").click()

    def pictured(title, width):
        return ("return (() => { const li = [...document.querySelectorAll('#conversations li')].find(li => li.querySelector('.name').textContent === "
                f"{json.dumps(title)}); const img = li?.querySelector('.avatar img'); "
                f"return !!img && img.src.startsWith('blob:') && img.complete && img.naturalWidth === {width} }})()")
    check(wait_until(15, lambda: alice.execute_script(pictured("Bob", 96))), "Alice's page shows it beside his chat, live (a user event)")
    check(wait_until(5, lambda: bob.execute_script("return !!document.querySelector('#me-avatar img')")), "and his own page beside his name")

    print("a group")
    el(alice, "new-group-name").send_keys("trip")
    el(alice, "new-group-handles").send_keys("bob")
    el(alice, "create-group").click()
    check(wait_until(15, lambda: el(alice, "conversation-name").text == "trip"), "Alice creates a group with Bob")
    check(open_conversation(bob, "trip"), "it appears on Bob's page")
    bob_token = bob.execute_script("return localStorage.getItem('parley.token')")
    call("POST", nodes.client["gateway-1"], f"/v1/conversations/{direct}/messages", {"clientMessageId": str(uuid.uuid4()), "text": "unread?"},
         token=bob_token, context=context)
    unread = "return [...document.querySelectorAll('#conversations li')].find(li => li.querySelector('.name').textContent === 'Bob')?.querySelector('.unread')?.textContent"
    check(wait_until(15, lambda: alice.execute_script(unread) == "1"), "a message in the chat Alice is not looking at shows as 1 unread in her list",
          alice.execute_script(unread))
    el(alice, "info").click()
    name = el(alice, "rename-name")
    name.clear()
    name.send_keys("summer trip")
    name.send_keys(Keys.ENTER)
    check(wait_until(15, lambda: el(bob, "conversation-name").text == "summer trip"), "she renames it; Bob's page shows the new name")
    group_picture = os.path.join(WORK, "group.png")
    with open(group_picture, "wb") as f:
        f.write(png(80, 60, seed=9))
    el(alice, "group-photo").send_keys(group_picture)
    check(wait_until(15, lambda: bob.execute_script(pictured("summer trip", 80))), "she gives the group a photo; Bob's list shows it, live")
    check(not bob.execute_script("return document.getElementById('group-photo-row').offsetParent !== null"), "only the owner is offered to change it")
    call("POST", nodes.client["gateway-1"], "/v1/users", {"handle": "carol", "password": "correct horse battery", "displayName": "Carol"}, context=context)
    el(alice, "add-member-handle").send_keys("carol")
    el(alice, "add-member-handle").send_keys(Keys.ENTER)
    check(wait_until(15, lambda: el(bob, "conversation-status").text == "3 members"), "she adds Carol by handle; Bob's page counts 3 members",
          el(bob, "conversation-status").text)
    remove = [b for b in alice.find_elements(By.CSS_SELECTOR, "#members button") if b.get_attribute("aria-label") == "Remove Carol"]
    if remove:
        remove[0].click()
    check(remove and wait_until(15, lambda: el(bob, "conversation-status").text == "2 members"), "and removes her again", el(bob, "conversation-status").text)
    shot(alice, "group")
    audit(alice, "a group with its members panel open")
    bob.set_window_size(390, 844)
    shot(bob, "phone")
    audit(bob, "a conversation at phone width")

    print("a reload")
    nodes.start("gateway-2", ENV)
    check(wait_until(60, lambda: nodes.ready("gateway-2")), "Bob's gateway started again")
    # Without its cursor the stream replays nothing: what the page shows is the history it pages.
    bob.execute_script("Object.keys(localStorage).filter(k => k.startsWith('parley.cursor.')).forEach(k => localStorage.removeItem(k))")
    bob.refresh()
    check(open_conversation(bob, "Alice"), "Bob reloads his page, still signed in, and opens the chat")
    check(wait_until(15, lambda: len(texts(bob)) == 50), "its last 50 messages load", len(texts(bob)))
    bob.execute_script("document.getElementById('messages').scrollTop = 0")
    total = 8 + 60 + 1 + 1 + 1 + 1  # before, fillers, "are you there?", Bob's reply, the photo, "unread?"
    check(wait_until(15, lambda: bob.execute_script("return [...document.querySelectorAll('#messages li[data-seq]')].map(li => Number(li.dataset.seq))")
                     == list(range(1, total + 1))), f"scrolled to the top, the older ones page in: seq 1…{total}, each once")

    print("a long absence")
    # Bob offline, his gateway gone, while 30 messages come: more than a resume replays (20 here),
    # so his stream is refused 410 cursor_expired and the page reloads what it holds instead.
    offline(bob, True)
    nodes.kill("gateway-2")
    for k in range(30):
        call("POST", nodes.client["gateway-1"], f"/v1/conversations/{direct}/messages", {"clientMessageId": str(uuid.uuid4()), "text": f"missed {k}"},
             token=token, context=context)
    offline(bob, False)
    missed = [f"missed {k}" for k in range(30)]
    check(wait_until(40, lambda: [t for t, _ in texts(bob)][-30:] == missed), "back, Bob's page shows the 30 he missed, in order", texts(bob)[-3:])
    check(bob.execute_script("return [...document.querySelectorAll('#messages li[data-seq]')].map(li => Number(li.dataset.seq))") == list(range(1, total + 31)),
          f"seq 1…{total + 30}, each once")
    metrics = http.client.HTTPConnection("127.0.0.1", nodes.ops["gateway-1"], timeout=5)
    metrics.request("GET", "/metrics")
    lines = metrics.getresponse().read().decode().splitlines()
    check(any(line.startswith("hb_requests") and 'status_code="410"' in line and '"/v1/events"' in line for line in lines),
          "(his stream's resume was refused 410 on gateway-1: the page reloaded rather than replayed)")

    print("last seen")
    item = next(li for li in alice.find_elements(By.CSS_SELECTOR, "#conversations li") if li.find_element(By.CSS_SELECTOR, ".name").text == "Bob")
    item.send_keys(Keys.ENTER)
    check(wait_until(15, lambda: el(alice, "conversation-name").text == "Bob" and el(alice, "conversation-status").text == "online"),
          "Alice opens her chat with Bob from the keyboard (Enter on it in the list): he is online", el(alice, "conversation-status").text)
    bob.quit()
    browsers.remove(bob)
    check(wait_until(30, lambda: el(alice, "conversation-status").text.startswith("last seen")),
          "he closes his browser: it says when he was last seen", el(alice, "conversation-status").text)

    print("settings")
    port = nodes.client["gateway-1"]  # gateway-2 is down since Bob's page was away
    _, phone = call("POST", port, "/v1/sessions", {"handle": "alice", "password": "correct horse battery"}, context=context)
    el(alice, "open-settings").click()

    def sessions():
        return alice.execute_script("return [...document.querySelectorAll('#sessions li')].map(li => [li.dataset.id, !!li.querySelector('.here')])")
    check(wait_until(10, lambda: len(sessions()) == 2 and [here for _, here in sessions()].count(True) == 1),
          "the settings panel lists Alice's two sessions, this browser's marked", sessions())
    shot(alice, "settings")
    audit(alice, "the settings panel")
    alice.find_element(By.CSS_SELECTOR, "#sessions li .revoke").click()
    check(wait_until(10, lambda: len(sessions()) == 1) and call("GET", port, "/v1/users/me", token=(phone or {}).get("token"), context=context)[0] == 401,
          "she signs the other session out from the panel: its token is refused", sessions())
    el(alice, "password-current").send_keys("correct horse battery")
    el(alice, "password-new").send_keys("a new horse battery")
    el(alice, "password-change").click()
    check(wait_until(10, lambda: "Password changed" in el(alice, "settings-result").text), "she changes her password in the panel",
          el(alice, "settings-result").text + el(alice, "settings-error").text)
    el(alice, "export").click()
    check(wait_until(15, lambda: "downloaded" in el(alice, "settings-result").text), "she downloads her data from the panel",
          el(alice, "settings-result").text + el(alice, "settings-error").text)
    old = call("POST", port, "/v1/sessions", {"handle": "alice", "password": "correct horse battery"}, context=context)[0]
    new = call("POST", port, "/v1/sessions", {"handle": "alice", "password": "a new horse battery"}, context=context)[0]
    check(old == 401 and new == 200, "the old password no longer signs in, the new one does", f"old {old}, new {new}")
    el(alice, "close-settings").click()
    send(alice, "after the new password")
    check(wait_until(15, lambda: texts(alice)[-1:] == [["after the new password", "sent"]]) and alice.execute_script("return window.notReloaded"),
          "her page stays signed in and sends", texts(alice)[-1:])

    print("blocking")
    _, bobs = call("POST", port, "/v1/sessions", {"handle": "bob", "password": "correct horse battery"}, context=context)

    def bob_sends(text):
        return call("POST", port, f"/v1/conversations/{direct}/messages", {"clientMessageId": str(uuid.uuid4()), "text": text},
                    token=(bobs or {}).get("token"), context=context)
    check(el(alice, "block").is_displayed() and el(alice, "block").text == "Block", "a direct conversation offers to block the other member")
    el(alice, "block").click()
    check(wait_until(10, lambda: el(alice, "block").text == "Unblock"), "Alice blocks Bob from the conversation", el(alice, "block").text)
    status, reply = bob_sends("let me explain")
    check(status == 403 and reply["error"]["message"] == "this user does not accept your messages", "Bob's send is refused", f"{status} {reply}")
    el(alice, "block").click()
    check(wait_until(10, lambda: el(alice, "block").text == "Block") and bob_sends("thanks")[0] == 201
          and wait_until(15, lambda: [t for t, _ in texts(alice)][-1:] == ["thanks"]),
          "she unblocks him: his next message reaches her page", texts(alice)[-1:])

    print("reporting")
    el(alice, "report").click()
    check(wait_until(5, lambda: el(alice, "report-dialog").is_displayed()), "the conversation offers to report Bob: a dialog asks why")
    audit(alice, "the report dialog")
    from selenium.webdriver.support.ui import Select
    Select(el(alice, "report-reason")).select_by_value("harassment")
    el(alice, "report-note").send_keys("he keeps writing at night")
    el(alice, "report-send").click()
    check(wait_until(10, lambda: not el(alice, "report-dialog").is_displayed() and "Reported" in el(alice, "conversation-status").text),
          "she sends the report", el(alice, "report-error").text)
    alice_token = alice.execute_script("return localStorage.getItem('parley.token')")
    status, reply = call("POST", port, "/v1/reports", {"userId": user_id("bob", alice_token, context), "conversationId": direct, "reason": "harassment"},
                         token=alice_token, context=context)
    check(status == 200 and reply["report"]["note"] == "he keeps writing at night" and reply["report"]["reason"] == "harassment",
          "the server holds her report, with her note (the same report, asked again, answers 200)", f"{status} {reply}")


    print("deleting the account")
    alice_id = user_id("alice", alice_token, context)
    el(alice, "open-settings").click()
    check(wait_until(5, lambda: el(alice, "delete-account").is_displayed()), "the settings panel offers to delete the account")
    el(alice, "delete-password").send_keys("a new horse battery")
    el(alice, "delete-erase").click()
    el(alice, "delete-account").click()
    check(el(alice, "settings").is_displayed() and not alice.execute_script("return document.getElementById('delete-confirm').checkValidity()"),
          "nothing is deleted until she ticks that it cannot be undone")
    el(alice, "delete-confirm").click()
    el(alice, "delete-account").click()
    check(wait_until(30, lambda: el(alice, "signin").is_displayed() and "deleted" in el(alice, "signin-error").text),
          "she deletes her account, erasing her messages: the page is back at the sign-in form and says so",
          el(alice, "settings-error").text + el(alice, "signin-error").text)
    check(alice.execute_script("return localStorage.getItem('parley.token')") is None, "the page forgot her token")
    check(call("GET", port, "/v1/users/me", token=alice_token, context=context)[0] == 401, "her token is refused")
    status, history = call("GET", port, f"/v1/conversations/{direct}/messages?after=0&limit=200", token=(bobs or {}).get("token"), context=context)
    hers = [m for m in (history or {}).get("messages", []) if m["senderId"] == alice_id]
    # The one she deleted for everyone earlier stays as that tombstone; every other is erased.
    check(status == 200 and hers and all(m.get("deleted") is True and m["text"] == "" and (m.get("erased") or m.get("deletedBy") == alice_id) for m in hers)
          and sum(1 for m in hers if not m.get("erased")) == 1,
          "Bob's history of their chat holds each of her messages as a tombstone", f"{status} {hers[:2]}")
    status, profile = call("GET", port, f"/v1/users/{alice_id}", token=(bobs or {}).get("token"), context=context)
    check(status == 200 and profile.get("deleted") is True, "her profile reads as a deleted account", profile)


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # a browser that could not start, a WebDriver error: a failure, said
        check(False, "the browser test ran to its end", repr(error))
    finally:
        for driver in browsers:
            try:
                driver.quit()
            except Exception:
                pass
        conclude(check, nodes, WORK, "web client end to end")
