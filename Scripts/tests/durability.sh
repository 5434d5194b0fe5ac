#!/usr/bin/env bash
# Durability across a SIGKILL: a worker (SQLite store) takes a burst of appends from a driver
# node and is SIGKILLed in the middle of it. Every append the driver saw acknowledged must be in
# the database afterwards, with its seq; seqs stay gapless; the restarted worker serves again.
#
#   Scripts/tests/durability.sh [PATH-TO-parley-node] [PATH-TO-parley-bench]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
BENCH="${2:-$(dirname "$NODE")/parley-bench}"
for binary in "$NODE" "$BENCH"; do
    [ -x "$binary" ] || { echo "no binary at $binary (build first)"; exit 2; }
done
read -r WORKER_PORT DRIVER_PORT OPS_PORT <<<"$(free_ports 3)"
DB="$WORK/parley.sqlite"
echo "durability test (work dir $WORK)"
"$NODE" certs init --dir "$WORK/tls" >/dev/null
"$NODE" certs issue worker-1 --dir "$WORK/tls" >/dev/null
"$NODE" certs issue driver --dir "$WORK/tls" >/dev/null

start_worker() {
    "$NODE" run --name worker-1 --tls-dir "$WORK/tls" --cluster-port "$WORKER_PORT" --ops-port "$OPS_PORT" \
        --store "sqlite:$DB" >>"$WORK/worker-1.log" 2>&1 &
    WORKER_PID=$!
    PIDS+=("$WORKER_PID")
}
messages_in_db() {
    python3 -c "import sqlite3,sys; c=sqlite3.connect('file:$DB?mode=ro', uri=True, timeout=5); print(c.execute('select count(*) from messages').fetchone()[0])" 2>/dev/null || echo 0
}
at_least_messages() { [ "$(messages_in_db)" -ge "$1" ]; }

start_worker
wait_until 30 "the worker is ready" bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$OPS_PORT/readyz)\" = 200 ]" \
    || { fail "worker-1 did not become ready"; summary; exit 1; }

"$BENCH" cluster-append --tls-dir "$WORK/tls" --name driver --port "$DRIVER_PORT" --seed "127.0.0.1:$WORKER_PORT" \
    --conversations 20 --appends 20000 --in-flight 32 --ack-log "$WORK/acks.jsonl" >"$WORK/driver.log" 2>&1 &
DRIVER_PID=$!
PIDS+=("$DRIVER_PID")
if wait_until 60 "500 messages are in the database" at_least_messages 500; then
    kill -KILL "$WORKER_PID"
    wait "$WORKER_PID" 2>/dev/null || true
    pass "worker-1 SIGKILLed in the middle of the burst ($(messages_in_db) messages stored)"
else
    fail "the burst did not get going"
fi
if wait_until 60 "the driver finishes" bash -c "! kill -0 $DRIVER_PID 2>/dev/null"; then
    wait "$DRIVER_PID" 2>/dev/null || true
    pass "the driver stopped: $(tail -1 "$WORK/driver.log")"
else
    fail "the driver did not finish"
fi

verdict="$(python3 - "$DB" "$WORK/acks.jsonl" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=5)
acks = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
missing = [a for a in acks if db.execute(
    "select 1 from messages where conversation_id=? and seq=? and client_message_id=?",
    (a["conversationId"], a["seq"], a["clientMessageId"])).fetchone() is None]
gaps = []
for (conversation,) in db.execute("select distinct conversation_id from messages"):
    seqs = [s for (s,) in db.execute("select seq from messages where conversation_id=? order by seq", (conversation,))]
    if seqs != list(range(1, len(seqs) + 1)):
        gaps.append(conversation)
print(f"{len(acks)} {len(missing)} {len(gaps)}")
PY
)"
read -r ACKED MISSING GAPS <<<"$verdict"
if [ "${ACKED:-0}" -ge 500 ] && [ "$MISSING" = 0 ]; then
    pass "all $ACKED acknowledged appends are in the database after the SIGKILL"
else
    fail "acknowledged: ${ACKED:-?}, missing from the database: ${MISSING:-?}"
fi
[ "$GAPS" = 0 ] && pass "seqs are gapless in every conversation" || fail "$GAPS conversations have seq gaps"

# The database recovers and the restarted worker serves again.
start_worker
if wait_until 30 "the restarted worker is ready" bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$OPS_PORT/readyz)\" = 200 ]"; then
    pass "worker-1 restarts on the same database"
else
    fail "worker-1 did not restart"
fi
kill -TERM "$WORKER_PID" 2>/dev/null || true
wait "$WORKER_PID" 2>/dev/null || true
summary
