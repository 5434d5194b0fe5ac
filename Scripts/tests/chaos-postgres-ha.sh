#!/usr/bin/env bash
# A short seeded chaos run on a highly available PostgreSQL, every node and member in a network
# namespace of its own as separate hosts: 3 workers + 2 gateways on Patroni (three members in strict
# synchronous mode, etcd, HAProxy) under parley-load with groups every member streams, while the
# leader is killed (Patroni and PostgreSQL, then PostgreSQL alone) and cut off the network, the
# synchronous standby and the other replica are killed, and a worker and a gateway are SIGKILLed
# among them. It fails on any message acknowledged and not delivered to every member's stream
# once, in order, without gaps, or not stored once with its seq; it prints each fault's write
# outage without judging it.
#
#   Scripts/tests/chaos-postgres-ha.sh [PATH-TO-parley-node]
set -euo pipefail
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
cd "$(dirname "$0")/../.."
# As the other PostgreSQL tests do when it cannot be installed: say so loudly and go on.
if ! (source Scripts/lib/postgres-ha.sh && pgha_install) >/dev/null 2>&1; then
    echo "SKIPPED: chaos on PostgreSQL — patroni, etcd or haproxy could not be installed"
    exit 0
fi
# As separate hosts when it can: every node and member in a network namespace of its own, and the
# leader's link cut as a fifth fault.
NETNS=(--netns) FAULTS=5
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "SKIPPED: network namespaces and the leader's cut (needs root and the ip command)"
    NETNS=() FAULTS=4
fi
export PARLEY_REPLAY_MAX=300
PARLEY_BIN="$(cd "$(dirname "$NODE")" && pwd)" exec Scripts/chaos --postgres-ha "${NETNS[@]}" --seed "${PARLEY_CHAOS_SEED:-$RANDOM}" \
    --pg-faults "$FAULTS" --kills 2 --duration 100 --rate 30 --users 12 --groups 4 --group-size 8 --group-share 0.75
