#!/usr/bin/env bash
# Parley on a highly available PostgreSQL, with real processes: Scripts/cluster up --postgres-ha
# (etcd, three Patroni members in strict synchronous mode, HAProxy; installed with apt when
# missing) with one node hosting actors and serving clients on HAProxy's address. A verified
# parley-load run (every user streaming) goes on while the leader's Patroni and PostgreSQL are
# SIGKILLed, the killed member restarted, and then the new leader killed the same way: every
# acknowledged message must reach every member's stream once, in order, and be in the store, and
# each killed member must come back as a replica. Prints the longest a send waited (the write
# outage, about the lease's 10 s) without judging it.
#
#   Scripts/tests/postgres-ha.sh [PATH-TO-parley-node]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
BIN_DIR="$(cd "$(dirname "$NODE")" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
echo "PostgreSQL failover test (work dir $WORK)"

# The members run as postgres, which must reach their folders under the work dir.
chmod 755 "$WORK"
git clone -q "$ROOT" "$WORK/clone"
# Uncommitted changes to the scripts under test count too.
cp "$ROOT/Scripts/cluster" "$WORK/clone/Scripts/cluster"
cp "$ROOT/Scripts/lib/postgres-ha.sh" "$WORK/clone/Scripts/lib/postgres-ha.sh"
CLUSTER="$WORK/clone/Scripts/cluster"
# The cluster's, operations' and client ports (8 each), and PostgreSQL's (100).
read -r CB OB GB PB <<<"$(free_port_ranges 8 8 8 100)"
export PARLEY_BIN="$BIN_DIR" PARLEY_CLUSTER_BASE="$CB" PARLEY_OPS_BASE="$OB" PARLEY_CLIENT_BASE="$GB" PGHA_PORT_BASE="$PB"
# Whatever happens, stop exactly what the cluster recorded: its nodes, then the members.
stop_recorded() { "$CLUSTER" down >/dev/null 2>&1 || true; }
trap 'stop_recorded; cleanup' EXIT

# As the other PostgreSQL tests do when it cannot be installed: say so loudly and go on.
if ! (source "$WORK/clone/Scripts/lib/postgres-ha.sh" && pgha_install); then
    echo "SKIPPED: PostgreSQL failover — patroni, etcd or haproxy could not be installed"
    exit 0
fi
if out="$("$CLUSTER" up --postgres-ha --workers 0 2>&1)"; then
    pass "Scripts/cluster up --postgres-ha started three members, HAProxy and a node on them"
else
    fail "Scripts/cluster up --postgres-ha failed: $out"
    summary
    exit 1
fi
members() { "$CLUSTER" status | sed -n '/^PostgreSQL/,/^$/p'; }
echo "$(members)"
if [ "$(members | grep -c ' Leader ')" = 1 ] && [ "$(members | grep -c ' Sync Standby ')" = 1 ]; then
    pass "status shows one Leader and one Sync Standby"
else
    fail "status: $(members)"
fi

eval "$("$CLUSTER" env)"
# A client of its own (curl): a stream opened before the faults that must carry on through them,
# and a send made during the first outage.
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
C=(curl -s --http2 --cacert "$PARLEY_CA" -H 'Content-Type: application/json')
"${C[@]}" "$PARLEY_URL/v1/users" -d '{"handle":"ha-alice","password":"correct horse","displayName":"Alice"}' >"$WORK/alice.json"
"${C[@]}" "$PARLEY_URL/v1/users" -d '{"handle":"ha-bob","password":"battery staple","displayName":"Bob"}' >"$WORK/bob.json"
TOKEN="$(json 'd["token"]' <"$WORK/alice.json" 2>/dev/null || true)"
BOB_ID="$(json 'd["user"]["id"]' <"$WORK/bob.json" 2>/dev/null || true)"
BOB_TOKEN="$(json 'd["token"]' <"$WORK/bob.json" 2>/dev/null || true)"
CONV="$("${C[@]}" -H "Authorization: Bearer $TOKEN" "$PARLEY_URL/v1/conversations" -d "{\"memberIds\":[\"$BOB_ID\"]}" | json 'd["conversation"]["id"]' 2>/dev/null || true)"
[ -n "$CONV" ] && pass "curl registers two users and opens a conversation" || fail "curl setup: $(cat "$WORK/alice.json" "$WORK/bob.json")"
"${C[@]}" -N -m 150 -H "Authorization: Bearer $BOB_TOKEN" "$PARLEY_URL/v1/events" >"$WORK/events.txt" 2>/dev/null &
STREAM=$!
PIDS+=("$STREAM")
DURING_ID="$(python3 -c 'import uuid; print(uuid.uuid4())')"
# Sends alice's message with DURING_ID; prints the status and the Retry-After header if any.
send_during() {
    "${C[@]}" -D "$WORK/send-headers.txt" -o "$WORK/send-body.txt" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
        "$PARLEY_URL/v1/conversations/$CONV/messages" -d "{\"clientMessageId\":\"$DURING_ID\",\"text\":\"sent while the leader was gone\"}"
    printf ' %s' "$(grep -i '^retry-after:' "$WORK/send-headers.txt" | tr -d '\r' | awk '{print $2}')"
}
"$BIN_DIR/parley-load" run --users 60 --rate 50 --duration 55 --warmup 2 --prefix ha >"$WORK/load.log" 2>&1 &
LOAD=$!
PIDS+=("$LOAD")
leader_kill_and_restart() {
    local leader
    leader="$(members | awk '/ Leader / {print $1}')"
    "$CLUSTER" kill pg-leader >/dev/null
    echo "  ..    $(date +%T) SIGKILLed $leader (Patroni and PostgreSQL)"
    if [ "${1:-}" = send ]; then
        sleep 1
        local answer
        answer="$(send_during)"
        [[ "$answer" =~ ^503\ [0-9]+$ ]] && pass "a send during the outage answers 503 with Retry-After ($answer s)" \
            || fail "a send during the outage answered '$answer': $(cat "$WORK/send-body.txt")"
    fi
    # The lease runs out, the synchronous standby takes over; then the member comes back.
    for _ in $(seq 1 60); do
        members | grep ' Leader ' | grep -qv "$leader " && break
        sleep 1
    done
    local now
    now="$(members | awk '/ Leader / {print $1}')"
    [ -n "$now" ] && [ "$now" != "$leader" ] && pass "another member ($now) leads after $leader was killed" || fail "no new leader: $(members)"
    "$CLUSTER" restart "$leader" >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do
        members | grep "^  $leader " | grep -qE 'Replica|Sync Standby' && members | grep "^  $leader " | grep -qE 'running|streaming' && break
        sleep 1
    done
    members | grep "^  $leader " | grep -qE '(Replica|Sync Standby) +(running|streaming)' && pass "$leader came back as a replica" || fail "$leader did not come back: $(members)"
}
sleep 8
leader_kill_and_restart send
leader_kill_and_restart
if wait "$LOAD"; then
    pass "parley-load verified every acknowledged message on every stream and in the store (exit 0)"
else
    fail "parley-load: $(tail -n 12 "$WORK/load.log")"
fi
grep -q '^verified: every acknowledged message' "$WORK/load.log" && pass "$(grep '^verified:' "$WORK/load.log")" || fail "no verdict: $(tail -n 5 "$WORK/load.log")"
echo "  ..    $(grep -E '^[0-9]+ sends offered' "$WORK/load.log")"
echo "  ..    longest a send waited (the write outage): $(awk '$1 == "acknowledged" {print $(NF-1), $NF}' "$WORK/load.log" | tail -n 1)"
echo "  ..    sends that failed, by error: $(grep -oE 'errors \[[^]]*\]' "$WORK/load.log" | tail -n 1)"
# The send refused during the outage, retried with its clientMessageId, is stored and streamed once.
answer="$(send_during)"
[[ "$answer" =~ ^20[01]\  ]] && pass "its retry with the same clientMessageId is acknowledged ($answer)" || fail "the retry answered '$answer': $(cat "$WORK/send-body.txt")"
wait_until 10 "the retried send is on bob's stream" grep -q "sent while the leader was gone" "$WORK/events.txt" || true
if kill -0 "$STREAM" 2>/dev/null && [ "$(grep -c "sent while the leader was gone" "$WORK/events.txt")" = 1 ]; then
    pass "bob's stream, open since before the faults, is still open and carries the retried send once"
else
    fail "bob's stream: running=$(kill -0 "$STREAM" 2>/dev/null && echo yes || echo no), events: $(tail -c 600 "$WORK/events.txt")"
fi
# The store's own account: each failover noticed, and writes accepted again.
LOGS=("$WORK"/clone/.parley/*.log)
away="$(cat "${LOGS[@]}" | grep -c 'PostgreSQL is unavailable' || true)"
back="$(cat "${LOGS[@]}" | grep 'PostgreSQL accepts writes again' | grep -oE 'after_s=[0-9.]+' | tr '\n' ' ')"
[ "$away" -ge 2 ] && [ -n "$back" ] && pass "the node's store saw the server away $away times and accepting writes again ($back)" \
    || fail "the node's log: away $away times, back: '$back'"
summary
