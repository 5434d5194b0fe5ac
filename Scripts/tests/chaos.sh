#!/usr/bin/env bash
# A short chaos run on every push: 3 workers + 2 gateways under parley-load while a worker and a
# gateway are SIGKILLed and restarted and a worker is paused past failure detection; it fails on
# any lost, doubled, reordered or gapped message (from the clients and from the store).
#
#   Scripts/tests/chaos.sh [PATH-TO-parley-node]
set -euo pipefail
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
PARLEY_BIN="$(cd "$(dirname "$NODE")" && pwd)" exec "$(dirname "$0")/../chaos" --seed "${PARLEY_CHAOS_SEED:-$RANDOM}" --kills 2 --pause --duration 25 --rate 30 --users 20
