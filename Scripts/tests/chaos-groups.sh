#!/usr/bin/env bash
# A short burst of kills on every push, with group conversations every member streams: 3 workers
# + 2 gateways under parley-load (direct pairs and groups of 8, most sends to the groups) while a
# node is SIGKILLed every few seconds and restarted 2–3 s later — all three workers one after
# another, then both gateways late in the run, so that streams resume while their groups are busy.
# It fails on any message acknowledged and not delivered to every member's stream once, in order,
# without gaps, or not stored once with its seq. The clients send on the gateways' send stream
# (ParleyClient's default): a kill ends it mid-line, and the outbox sends again on a new one.
#
# The gateways refuse resumes past 300 messages after the cursor (PARLEY_REPLAY_MAX; the default is
# 5,000): at this short run's rate a resume that counted the minute of margin before its cursor
# would pass that and be refused, and its client would miss what it was owed.
#
#   Scripts/tests/chaos-groups.sh [PATH-TO-parley-node]
set -euo pipefail
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
export PARLEY_REPLAY_MAX=300
PARLEY_BIN="$(cd "$(dirname "$NODE")" && pwd)" exec "$(dirname "$0")/../chaos" --seed "${PARLEY_CHAOS_SEED:-$RANDOM}" \
    --dense --kills 9 --duration 60 --rate 30 --users 12 --groups 4 --group-size 8 --group-share 0.75
