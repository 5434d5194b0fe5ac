#!/usr/bin/env bash
# A short chaos run on every push: 3 workers + 2 gateways under parley-load while a worker and a
# gateway are SIGKILLed and restarted, a worker and a gateway are paused past failure detection, and
# a worker is cut off the network and healed (network namespaces); it fails on any lost, doubled,
# reordered or gapped message (from the clients and from the store), or a paused or cut node that
# never rejoined. Its clients send a request each (the groups' chaos run sends on the send stream,
# ParleyClient's default), so that both ways of sending meet kills, pauses and cuts on every push.
#
#   Scripts/tests/chaos.sh [PATH-TO-parley-node]
set -euo pipefail
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
# The network cut needs root (network namespaces); without it the run says so and goes on without.
CUTS=(--cuts 1)
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "SKIPPED: the network-cut event of the chaos run (needs root and the ip command for network namespaces)"
    CUTS=()
fi
PARLEY_BIN="$(cd "$(dirname "$NODE")" && pwd)" exec "$(dirname "$0")/../chaos" --seed "${PARLEY_CHAOS_SEED:-$RANDOM}" \
    --kills 2 --pause "${CUTS[@]}" --sends-by-request --duration 35 --rate 30 --users 20
