#!/usr/bin/env bash
# The simulations in CI (Scripts/simulate, release build): a thousand seeds of the delivery core
# must pass, each guard of the contract, removed, must be caught by one of the first three
# hundred, and thirty seeds of the whole-cluster simulation must pass.
#
#   Scripts/tests/simulate.sh   (PARLEY_SIMULATE_SEEDS=N: delivery seeds, default 1000;
#                                PARLEY_CLUSTER_SIMULATE_SEEDS=N: cluster seeds, default 30)
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
cluster_seeds="${PARLEY_CLUSTER_SIMULATE_SEEDS:-30}"
echo "whole-cluster simulation: $cluster_seeds seeds"
if "$ROOT/Scripts/simulate" --cluster --seeds "$cluster_seeds" >"$WORK/cluster.txt" 2>&1; then
    pass "$(tail -n 1 "$WORK/cluster.txt")"
else
    fail "a cluster seed failed (run it again with the command below; its interleaving may differ):"
    grep -A3 FAILED "$WORK/cluster.txt" | head -n 20
    tail -n 2 "$WORK/cluster.txt"
fi
summary
