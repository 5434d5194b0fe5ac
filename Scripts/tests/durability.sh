#!/usr/bin/env bash
# Durability across a SIGKILL: a worker takes a burst of appends from a driver node and is
# SIGKILLed in the middle of it. Every append the driver saw acknowledged must be in the database
# afterwards, with its seq; seqs stay gapless; the restarted worker serves again. Runs on SQLite,
# and on PostgreSQL too when PARLEY_TEST_POSTGRES_URL names one (Scripts/test starts one).
#
#   Scripts/tests/durability.sh [PATH-TO-parley-node] [PATH-TO-parley-bench]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
BENCH="${2:-$(dirname "$NODE")/parley-bench}"
for binary in "$NODE" "$BENCH"; do
    [ -x "$binary" ] || { echo "no binary at $binary (build first)"; exit 2; }
done
echo "durability test (work dir $WORK)"
DB="$WORK/parley.sqlite"
"$NODE" certs init --dir "$WORK/tls" >/dev/null
"$NODE" certs issue worker-1 --dir "$WORK/tls" >/dev/null
"$NODE" certs issue driver --dir "$WORK/tls" >/dev/null

# stored_rows STORE: every stored message as "conversation seq clientMessageId" lines.
stored_rows() {
    case "$1" in
        sqlite:*) python3 -c "
import sqlite3, sys
db = sqlite3.connect('file:${1#sqlite:}?mode=ro', uri=True, timeout=5)
for row in db.execute('select conversation_id, seq, client_message_id from message_log'): print(*row)" ;;
        postgres*) psql "$1" -At -F ' ' -c "select conversation_id, seq, client_message_id from messages" ;;
    esac
}
messages_stored() { stored_rows "$1" 2>/dev/null | wc -l; }
at_least_messages() { [ "$(messages_stored "$1")" -ge "$2" ]; }

scenario() {
    local store="$1" kind="${1%%:*}"
    read -r WORKER_PORT DRIVER_PORT OPS_PORT <<<"$(free_ports 3)"
    start_worker() {
        PARLEY_ADMIN_TOKEN="$(openssl rand -hex 16)" "$NODE" run --name worker-1 --tls-dir "$WORK/tls" --cluster-port "$WORKER_PORT" --ops-port "$OPS_PORT" \
            --store "$store" --data-dir "$WORK/data" >>"$WORK/worker-1-$kind.log" 2>&1 &
        WORKER_PID=$!
        PIDS+=("$WORKER_PID")
    }
    local ready="[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$OPS_PORT/readyz)\" = 200 ]"
    start_worker
    wait_until 30 "the worker is ready" bash -c "$ready" || { fail "[$kind] worker-1 did not become ready"; return; }
    local before
    before="$(messages_stored "$store")"
    "$BENCH" cluster-append --tls-dir "$WORK/tls" --name driver --port "$DRIVER_PORT" --seed "127.0.0.1:$WORKER_PORT" \
        --conversations 20 --appends 20000 --in-flight 32 --ack-log "$WORK/acks-$kind.jsonl" >"$WORK/driver-$kind.log" 2>&1 &
    local driver=$!
    PIDS+=("$driver")
    if wait_until 60 "500 more messages are stored" at_least_messages "$store" $((before + 500)); then
        kill -KILL "$WORKER_PID"
        wait "$WORKER_PID" 2>/dev/null || true
        pass "[$kind] worker-1 SIGKILLed in the middle of the burst"
    else
        fail "[$kind] the burst did not get going"
    fi
    if wait_until 60 "the driver finishes" bash -c "! kill -0 $driver 2>/dev/null"; then
        wait "$driver" 2>/dev/null || true
        pass "[$kind] the driver stopped: $(tail -1 "$WORK/driver-$kind.log")"
    else
        fail "[$kind] the driver did not finish"
    fi
    stored_rows "$store" >"$WORK/stored-$kind.txt"
    local verdict
    verdict="$(python3 - "$WORK/stored-$kind.txt" "$WORK/acks-$kind.jsonl" <<'PY'
import collections, json, sys
stored = set()
seqs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    conversation, seq, cmid = line.split()
    stored.add((conversation, int(seq), cmid))
    seqs[conversation].append(int(seq))
acks = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
missing = [a for a in acks if (a["conversationId"], a["seq"], a["clientMessageId"]) not in stored]
gaps = [c for c in {a["conversationId"] for a in acks} if sorted(seqs[c]) != list(range(1, len(seqs[c]) + 1))]
print(len(acks), len(missing), len(gaps))
PY
)"
    local acked missing gaps
    read -r acked missing gaps <<<"$verdict"
    if [ "${acked:-0}" -ge 500 ] && [ "$missing" = 0 ]; then
        pass "[$kind] all $acked acknowledged appends are stored after the SIGKILL"
    else
        fail "[$kind] acknowledged: ${acked:-?}, missing from the store: ${missing:-?}"
    fi
    [ "$gaps" = 0 ] && pass "[$kind] seqs are gapless in every conversation" || fail "[$kind] $gaps conversations have seq gaps"
    start_worker
    if wait_until 30 "the restarted worker is ready" bash -c "$ready"; then
        pass "[$kind] worker-1 restarts on the same store"
    else
        fail "[$kind] worker-1 did not restart"
    fi
    kill -TERM "$WORKER_PID" 2>/dev/null || true
    wait "$WORKER_PID" 2>/dev/null || true
}

scenario "sqlite:$DB"
if [ -n "${PARLEY_TEST_POSTGRES_URL:-}" ]; then
    scenario "$PARLEY_TEST_POSTGRES_URL"
else
    echo "SKIPPED: PostgreSQL durability — PARLEY_TEST_POSTGRES_URL is not set"
fi
summary
