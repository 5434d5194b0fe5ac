#!/usr/bin/env bash
# The simulations in CI (Scripts/simulate, release build): a thousand seeds of the delivery core
# must pass, each guard of the contract, removed, must be caught by one of the first three
# hundred, three hundred seeds of the whole-cluster simulation must pass, and each guard removed
# from its nodes must be caught by one of its first two hundred.
#
#   Scripts/tests/simulate.sh   (PARLEY_SIMULATE_SEEDS=N: delivery seeds, default 1000;
#                                PARLEY_CLUSTER_SIMULATE_SEEDS=N: cluster seeds, default 300)
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
cluster_seeds="${PARLEY_CLUSTER_SIMULATE_SEEDS:-300}"
echo "whole-cluster simulation: $cluster_seeds seeds"
if "$ROOT/Scripts/simulate" --cluster --seeds "$cluster_seeds" >"$WORK/cluster.txt" 2>&1; then
    pass "$(tail -n 1 "$WORK/cluster.txt")"
else
    fail "a cluster seed failed (the command below runs it again, the same way, with its trace):"
    grep -A3 FAILED "$WORK/cluster.txt" | head -n 20
    tail -n 2 "$WORK/cluster.txt"
fi
# The same seed is the same run: two runs of one seed leave the same trace, line for line.
# Seeds beyond the range above that found holes, each closed since: a rejoining node cut off from
# every seed (1366), a cluster formed alone by a restarted worker while the others were down
# (677), a node declared down keeping its fan-out directory's answers into its next incarnation
# (895), and those of the list in docs/TESTING.md found by a 10,000-seed run.
for seed in 1366 677 895 93 6135 2315 3190 8999 9452 7189 3621; do
    if "$ROOT/Scripts/simulate" --cluster --seed "$seed" >"$WORK/seed-$seed.txt" 2>&1; then
        pass "cluster seed $seed (a hole it found stays closed)"
    else
        fail "cluster seed $seed failed again:"
        grep FAILURE "$WORK/seed-$seed.txt" | head -n 5
    fi
done
if "$ROOT/Scripts/simulate" --cluster --check-guards --seeds 200 >"$WORK/cluster-guards.txt" 2>&1; then
    pass "each guard removed from the nodes is caught: $(grep -o 'without [a-z-]*: caught by seed [0-9]*' "$WORK/cluster-guards.txt" | sed 's/without //; s/: caught by seed /@/' | tr '\n' ' ')"
else
    fail "a guard removed from the nodes was not caught by the whole-cluster simulation:"
    cat "$WORK/cluster-guards.txt"
fi
"$ROOT/Scripts/simulate" --cluster --seed 7 --trace >"$WORK/trace-1.txt" 2>&1 || true
"$ROOT/Scripts/simulate" --cluster --seed 7 --trace >"$WORK/trace-2.txt" 2>&1 || true
if [ "$(wc -l <"$WORK/trace-1.txt")" -gt 100 ] && cmp -s "$WORK/trace-1.txt" "$WORK/trace-2.txt"; then
    pass "a cluster seed run twice leaves the same trace ($(wc -l <"$WORK/trace-1.txt") lines)"
else
    fail "two runs of cluster seed 7 differ (or left no trace):"
    diff "$WORK/trace-1.txt" "$WORK/trace-2.txt" | head -n 10
fi
summary
