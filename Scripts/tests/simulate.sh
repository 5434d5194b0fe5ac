#!/usr/bin/env bash
# The delivery simulation in CI: a thousand seeds must pass, and each guard of the contract,
# removed, must be caught by one of the first three hundred (Scripts/simulate, release build).
#
#   Scripts/tests/simulate.sh   (PARLEY_SIMULATE_SEEDS=N: seeds to run, default 1000)
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
seeds="${PARLEY_SIMULATE_SEEDS:-1000}"
echo "delivery simulation: $seeds seeds, then every guard removed"
if "$ROOT/Scripts/simulate" --seeds "$seeds" >"$WORK/seeds.txt" 2>&1; then
    pass "$(tail -n 1 "$WORK/seeds.txt")"
else
    fail "a seed failed (reproduce it with the command below):"
    cat "$WORK/seeds.txt" | tail -n 20
fi
if "$ROOT/Scripts/simulate" --check-guards --seeds 300 >"$WORK/guards.txt" 2>&1; then
    pass "each guard removed is caught: $(grep -o 'without [a-z-]*: caught by seed [0-9]*' "$WORK/guards.txt" | sed 's/without //; s/: caught by seed /@/' | tr '\n' ' ')"
else
    fail "a guard removed was not caught:"
    cat "$WORK/guards.txt"
fi
summary
