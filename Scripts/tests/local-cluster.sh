#!/usr/bin/env bash
# Scripts/cluster from a clean clone: up (3 workers, 1 gateway), a curl register / login / send /
# events round trip against the URL and CA it prints, short parley-load runs (each frame-level engine), add-worker (the new worker owns about a
# quarter of the ring), kill worker-2 and a send still succeeds, a frames run whose gateway is killed
# says so and ends, down, and no node remains. Then the one-machine layout (up --workers 0): one
# gateway hosting actors too serves a round trip and a verified load run, and a message it
# acknowledged is still there after the node is SIGKILLed and restarted.
# Uses the binaries next to PATH-TO-parley-node (PARLEY_BIN) instead of a release build.
#
#   Scripts/tests/local-cluster.sh [PATH-TO-parley-node]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
BIN_DIR="$(cd "$(dirname "$NODE")" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
echo "local cluster script test (work dir $WORK)"

git clone -q "$ROOT" "$WORK/clone"
# Uncommitted changes to the script under test count too (a developer runs this before committing).
cp "$ROOT/Scripts/cluster" "$WORK/clone/Scripts/cluster"
CLUSTER="$WORK/clone/Scripts/cluster"
read -r CB OB GB <<<"$(free_port_ranges 8 8 8)"
export PARLEY_BIN="$BIN_DIR" PARLEY_CLUSTER_BASE="$CB" PARLEY_OPS_BASE="$OB" PARLEY_CLIENT_BASE="$GB"
# Whatever happens, stop exactly the nodes the script recorded.
stop_recorded() { for f in "$WORK"/clone/.parley/*.pid "$WORK"/solo/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done; true; }
trap 'stop_recorded; cleanup' EXIT

if out="$("$CLUSTER" up --workers 3 --gateways 1 2>&1)"; then
    pass "Scripts/cluster up started 3 workers and 1 gateway and waited for /readyz"
else
    fail "Scripts/cluster up failed: $out"
    summary
    exit 1
fi
URL="$(echo "$out" | awk '/gateway URL/ {print $3}')"
CA="$(echo "$out" | awk '/  CA / {print $2}')"
[ -n "$URL" ] && [ -f "$CA" ] && pass "it printed the gateway URL ($URL) and the CA" || fail "no URL/CA in: $out"
# Four nodes share this machine's cores: each gets cores ÷ 4 event loops, at least one.
LOOPS=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))
if grep -q "loops=$LOOPS .*event loops" "$WORK/clone/.parley/worker-1.log" && grep -q "loops=$LOOPS .*event loops" "$WORK/clone/.parley/gateway-1.log"; then
    pass "each node runs $LOOPS event loop(s): the $(nproc) cores divided among 4 nodes"
else
    fail "event loops: $(grep -h "event loops" "$WORK"/clone/.parley/*.log | head -2)"
fi
bad="$("$BIN_DIR/parley-node" run --name x --tls-dir "$WORK" --event-loops 0 2>&1 || true)"
echo "$bad" | grep -q "event-loops 0 must be in 1…256" && pass "--event-loops 0 is refused with a clear error" || fail "--event-loops 0: $bad"
ready_line="$(grep -h "store ready" "$WORK/clone/.parley/worker-1.log" | head -n 1)"
echo "$ready_line" | grep -q "commit_interval=5ms " && pass "a worker on SQLite starts its commits at least 5 ms apart (its log says)" \
    || fail "commit interval: $ready_line"
bad="$("$BIN_DIR/parley-node" run --name x --tls-dir "$WORK" --commit-interval 101ms 2>&1 || true)"
echo "$bad" | grep -q "commit-interval 101ms must be from 0s to 100ms" && pass "--commit-interval 101ms is refused with a clear error" \
    || fail "--commit-interval 101ms: $bad"
bad="$("$BIN_DIR/parley-node" run --name x --tls-dir "$WORK" --commit-interval 5x 2>&1 || true)"
echo "$bad" | grep -q "commit-interval '5x' is not a duration" && pass "a duration without a known unit is refused, naming the flag" \
    || fail "--commit-interval 5x: $bad"
second="$("$CLUSTER" up 2>&1 || true)"
if echo "$second" | grep -q "already running"; then pass "up twice does not start a second cluster"; else fail "a second up was not refused: $second"; fi
eval "$("$CLUSTER" env)"
[ "$PARLEY_URL" = "$URL" ] && [ "$PARLEY_CA" = "$CA" ] && [ -n "$PARLEY_ADMIN_TOKEN" ] && pass "env prints PARLEY_URL, PARLEY_URLS, PARLEY_CA, PARLEY_ADMIN_TOKEN" \
    || fail "env printed URL=$PARLEY_URL CA=$PARLEY_CA"

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# A failed parley-load run: how many faults, the first 40 of them, then its last lines.
load_failure() {
    grep -E '^VERIFICATION FAILED|^ *(lost|duplicate|reorder|gap|conflict|attachment): ' "$1" | head -n 41 || true
    tail -n 15 "$1"
}
C=(curl -s --http2 --cacert "$CA" -H 'Content-Type: application/json')
A="$("${C[@]}" "$URL/v1/users" -d '{"handle":"alice","password":"correct horse","displayName":"Alice"}')"
B="$("${C[@]}" "$URL/v1/users" -d '{"handle":"bob","password":"battery staple","displayName":"Bob"}')"
TOKEN="$("${C[@]}" "$URL/v1/sessions" -d '{"handle":"alice","password":"correct horse"}' | json 'd["token"]')"
BOB_ID="$(echo "$B" | json 'd["user"]["id"]')"
BOB_TOKEN="$(echo "$B" | json 'd["token"]')"
[ -n "$TOKEN" ] && [ -n "$BOB_ID" ] && pass "curl registers and logs in" || fail "register/login: $A / $B"
CONV="$("${C[@]}" -H "Authorization: Bearer $TOKEN" "$URL/v1/conversations" -d "{\"memberIds\":[\"$BOB_ID\"]}" | json 'd["conversation"]["id"]')"
"${C[@]}" -N -m 6 -H "Authorization: Bearer $BOB_TOKEN" "$URL/v1/events" >"$WORK/events.txt" 2>/dev/null &
sleep 1.5
sent() { "${C[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$URL/v1/conversations/$CONV/messages" \
    -d "{\"clientMessageId\":\"$(python3 -c 'import uuid; print(uuid.uuid4())')\",\"text\":\"$1\"}"; }
[ "$(sent "hello through the script's cluster")" = 201 ] && pass "curl sends a message (201)" || fail "send failed"
wait_until 8 "the message is on bob's stream" grep -q "hello through the script's cluster" "$WORK/events.txt" \
    && pass "the message arrives on the other user's event stream" || fail "events: $(cat "$WORK/events.txt")"

# parley-load: a short run against the cluster verifies clean and reports deliveries, and its
# --timeline (what Scripts/chaos reads its unavailability windows from) has every acknowledged send.
# A third of the sends attach the sender's photo, which every delivery is checked to carry.
if "$BIN_DIR/parley-load" run --users 10 --rate 20 --duration 3 --warmup 1 --attach-share 0.3 --report "$WORK/load.json" \
        --timeline "$WORK/timeline.jsonl" >"$WORK/load.txt" 2>&1 \
    && [ "$(json 'd["deliveries"]' <"$WORK/load.json")" -gt 0 ] && [ "$(json 'd["verified"]' <"$WORK/load.json")" = True ] \
    && [ "$(json 'len(d["streamErrors"])' <"$WORK/load.json")" = 0 ] && grep -q "uploading a photo for each of 10 users" "$WORK/load.txt"; then
    pass "a short parley-load run with photos (--attach-share) verifies clean (exit 0) with $(json 'd["deliveries"]' <"$WORK/load.json") deliveries"
else
    fail "parley-load: $(load_failure "$WORK/load.txt")"
fi
acked="$(json 'd["acknowledged"]' <"$WORK/load.json" 2>/dev/null || echo none)"
lines="$(cat "$WORK/timeline.jsonl" 2>/dev/null | grep -c scheduledMs || true)"
[ "$lines" = "$acked" ] && [ "$lines" -gt 0 ] \
    && pass "parley-load --timeline has a line for each of the $acked acknowledged sends" \
    || fail "parley-load --timeline: $lines lines for $acked acknowledged sends"

# The frame-level engines, which the benchmarks load with, deliver and verify the same way —
# here past HTTP/2's initial 64 KiB flow-control window on every stream (4 users, two conversations,
# each stream gets ~270 events of ~300 bytes), which they must give back as they read; 'stream'
# sends every message, attachments too, as a line of the user's send stream, 'websocket' as a text
# message of its WebSocket over HTTP/2.
for engine in frames stream websocket; do
    if "$BIN_DIR/parley-load" run --engine "$engine" --users 4 --rate 60 --duration 8 --warmup 1 --attach-share 0.1 --prefix "$engine" --report "$WORK/$engine.json" >"$WORK/$engine.txt" 2>&1 \
        && [ "$(json 'd["deliveries"]' <"$WORK/$engine.json")" -gt 0 ] && [ "$(json 'd["verified"]' <"$WORK/$engine.json")" = True ] \
        && [ "$(json 'len(d["streamErrors"])' <"$WORK/$engine.json")" = 0 ]; then
        pass "parley-load --engine $engine verifies clean (exit 0) with $(json 'd["deliveries"]' <"$WORK/$engine.json") deliveries"
    else
        fail "parley-load --engine $engine: $(load_failure "$WORK/$engine.txt")"
    fi
done

if "$BIN_DIR/parley-load" idle --users 10 --hold 1 --prefix idle >"$WORK/idle.txt" 2>&1 && grep -q "KiB per stream" "$WORK/idle.txt"; then
    pass "parley-load idle reports the gateway's memory per idle stream: $(tail -n 1 "$WORK/idle.txt" | sed 's/.*→ //')"
else
    fail "parley-load idle: $(tail -n 5 "$WORK/idle.txt")"
fi

if "$CLUSTER" add-worker >/dev/null 2>&1; then
    # worker-4 is ready once it has joined; worker-1 hears of it by gossip a moment later.
    for _ in $(seq 1 50); do
        share="$(curl -s -H "Authorization: Bearer $PARLEY_ADMIN_TOKEN" "http://127.0.0.1:$OB/v1/cluster" | json 'd["ring"]["shares"].get("worker-4", 0)')"
        python3 -c "import sys; sys.exit(0 if $share > 0 else 1)" && break
        sleep 0.2
    done
    python3 -c "import sys; sys.exit(0 if 0.15 <= $share <= 0.35 else 1)" && pass "add-worker: worker-4 is on the ring with $share of the keys (≈ 1/4)" \
        || fail "worker-4's share is $share"
else
    fail "add-worker failed"
fi
"$CLUSTER" status >"$WORK/status.txt" 2>&1 && grep -q "worker-4" "$WORK/status.txt" && grep -q "share of keys" "$WORK/status.txt" \
    && pass "status lists the nodes and the ring shares" || fail "status: $(cat "$WORK/status.txt")"

"$CLUSTER" kill worker-2 >/dev/null
[ "$(sent "after worker-2 died")" = 201 ] && pass "after kill worker-2 a send still succeeds" || fail "a send failed after worker-2 was killed"

# The frame-level engine does not follow failures: when its gateway dies it says so (stream and
# send errors), and ends by itself, instead of resuming elsewhere. (stdbuf: parley-load's lines
# reach the file as they are printed.)
stdbuf -oL "$BIN_DIR/parley-load" run --engine frames --users 10 --rate 20 --duration 8 --warmup 1 --drain 5 --no-read-back --prefix dying >"$WORK/dying.txt" 2>&1 &
LOAD_PID=$!
wait_until 60 "the run is sending" grep -q "msg/s offered" "$WORK/dying.txt"
sleep 2
"$CLUSTER" kill gateway-1 >/dev/null
for _ in $(seq 1 600); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$LOAD_PID" 2>/dev/null; then
    kill -KILL "$LOAD_PID"
    fail "parley-load --engine frames did not end within 60 s of its gateway's death"
elif grep -q "stream errors: 10" "$WORK/dying.txt" && grep -q "connection_failed" "$WORK/dying.txt"; then
    pass "parley-load --engine frames reports its gateway's death (every stream failed, sends failed) and ends"
else
    fail "parley-load --engine frames after its gateway died: $(tail -n 20 "$WORK/dying.txt")"
fi
wait "$LOAD_PID" 2>/dev/null || true

PIDS_BEFORE="$(cat "$WORK"/clone/.parley/*.pid 2>/dev/null | tr '\n' ' ')"
"$CLUSTER" down >/dev/null
left=""
for pid in $PIDS_BEFORE; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
[ -z "$left" ] && pass "down stopped every node (pids $PIDS_BEFORE)" || fail "still running after down:$left"
[ -z "$(cd "$WORK/clone" && git status --porcelain --ignored=no | grep -v ' Scripts/cluster$' || true)" ] \
    && pass "nothing outside .parley/ was written" || fail "files changed: $(cd "$WORK/clone" && git status --porcelain)"

# One machine, one process: --workers 0 gives the gateway the worker role too (its own state
# folder, so its store starts empty).
export PARLEY_STATE="$WORK/solo"
if out="$("$CLUSTER" up --workers 0 --gateways 1 2>&1)" && echo "$out" | grep -q "1 gateway(s) hosting actors too"; then
    pass "up --workers 0 started one gateway that hosts actors too"
else
    fail "up --workers 0: $out"
fi
"$CLUSTER" status >"$WORK/solo-status.txt" 2>&1
grep -q "gateway-1 *worker,gateway" "$WORK/solo-status.txt" && grep -q "gateway-1 .*100.0 %" "$WORK/solo-status.txt" \
    && pass "status: gateway-1 runs as worker,gateway and owns the whole ring" || fail "status: $(cat "$WORK/solo-status.txt")"
eval "$("$CLUSTER" env)"
if "$BIN_DIR/parley-load" run --engine frames --users 10 --rate 30 --duration 3 --warmup 1 --prefix solo --report "$WORK/solo.json" >"$WORK/solo.txt" 2>&1 \
    && [ "$(json 'd["deliveries"]' <"$WORK/solo.json")" -gt 0 ] && [ "$(json 'd["verified"]' <"$WORK/solo.json")" = True ]; then
    pass "a parley-load run against the single node verifies clean with $(json 'd["deliveries"]' <"$WORK/solo.json") deliveries"
else
    fail "parley-load against the single node: $(load_failure "$WORK/solo.txt")"
fi
URL="$PARLEY_URL" CA="$PARLEY_CA"
C=(curl -s --http2 --cacert "$CA" -H 'Content-Type: application/json')
A="$("${C[@]}" "$URL/v1/users" -d '{"handle":"alice","password":"correct horse","displayName":"Alice"}')"
B="$("${C[@]}" "$URL/v1/users" -d '{"handle":"bob","password":"battery staple","displayName":"Bob"}')"
TOKEN="$(echo "$A" | json 'd["token"]')"
BOB_ID="$(echo "$B" | json 'd["user"]["id"]')"
CONV="$("${C[@]}" -H "Authorization: Bearer $TOKEN" "$URL/v1/conversations" -d "{\"memberIds\":[\"$BOB_ID\"]}" | json 'd["conversation"]["id"]')"
[ "$(sent "acknowledged before the crash")" = 201 ] && pass "curl sends a message to the single node (201)" || fail "send to the single node failed"
"$CLUSTER" kill gateway-1 >/dev/null
if "$CLUSTER" restart gateway-1 >"$WORK/solo-restart.txt" 2>&1; then
    history="$("${C[@]}" -H "Authorization: Bearer $TOKEN" "$URL/v1/conversations/$CONV/messages?limit=10")"
    echo "$history" | grep -q "acknowledged before the crash" \
        && pass "after SIGKILL and restart the single node still has the message it acknowledged" || fail "history after restart: $history"
    [ "$(sent "after the restart")" = 201 ] && pass "and takes sends again" || fail "a send after the restart failed"
else
    fail "restart of the single node: $(cat "$WORK/solo-restart.txt")"
fi
"$CLUSTER" down >/dev/null
summary
