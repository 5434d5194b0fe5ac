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
"$BIN_DIR/parley-load" run --users 60 --rate 50 --duration 55 --warmup 2 --prefix ha >"$WORK/load.log" 2>&1 &
LOAD=$!
PIDS+=("$LOAD")
leader_kill_and_restart() {
    local leader
    leader="$(members | awk '/ Leader / {print $1}')"
    "$CLUSTER" kill pg-leader >/dev/null
    echo "  ..    $(date +%T) SIGKILLed $leader (Patroni and PostgreSQL)"
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
leader_kill_and_restart
leader_kill_and_restart
if wait "$LOAD"; then
    pass "parley-load verified every acknowledged message on every stream and in the store (exit 0)"
else
    fail "parley-load: $(tail -n 12 "$WORK/load.log")"
fi
grep -q '^verified: every acknowledged message' "$WORK/load.log" && pass "$(grep '^verified:' "$WORK/load.log")" || fail "no verdict: $(tail -n 5 "$WORK/load.log")"
echo "  ..    $(grep -E '^[0-9]+ sends offered' "$WORK/load.log")"
echo "  ..    longest a send waited (the write outage): $(awk '$1 == "acknowledged" {print $(NF-1), $NF}' "$WORK/load.log" | tail -n 1)"
summary
