#!/usr/bin/env bash
# Scripts/bench-compare's verdict is computed right: three synthetic pairs of parley-load reports
# (B's server CPU per delivery 10 % lower, 10 % higher, 20 % lower than A's) give per-build
# medians and "median -10 %; B lower in 2 of 3"; a missing build folder is refused.
#
#   Scripts/tests/bench-compare.sh
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
echo "bench-compare: summary of A/B pairs"
report() {  # report FILE CPU P99-MICROS GATEWAY-CORES
    cat >"$1" <<JSON
{"serverCPUMicrosPerDelivery": $2, "delivery": {"p50": 2000, "p99": $3}, "achievedRate": 1000,
 "nodeCores": {"127.0.0.1:17701": 0.2, "127.0.0.1:17702": 0.2, "127.0.0.1:17703": 0.2, "127.0.0.1:17704": $4},
 "loadGeneratorCores": 0.5, "verified": true}
JSON
}
report "$WORK/run-1-A.json" 1000 20000 0.60; report "$WORK/run-1-B.json" 900 18000 0.50
report "$WORK/run-2-A.json" 900 30000 0.55; report "$WORK/run-2-B.json" 990 25000 0.58
report "$WORK/run-3-A.json" 1100 40000 0.65; report "$WORK/run-3-B.json" 880 22000 0.52
summary="$(python3 "$ROOT/Scripts/lib/compare-runs.py" "$WORK")"
echo "$summary" | sed 's/^/      /'
if echo "$summary" | grep -q "A: server CPU/delivery 1000 µs  delivery p50 2.0 ms  p99 30.0 ms  cores: gateway 0.60  workers 0.60"; then
    pass "A's medians"
else
    fail "A's medians are wrong"
fi
if echo "$summary" | grep -q "B: server CPU/delivery 900 µs  delivery p50 2.0 ms  p99 22.0 ms  cores: gateway 0.52"; then
    pass "B's medians"
else
    fail "B's medians are wrong"
fi
if echo "$summary" | grep -q -- "-10 %  +10 %  -20 %  (median -10 %; B lower in 2 of 3)"; then
    pass "pair by pair: -10 %, +10 %, -20 %, median -10 %"
else
    fail "the pair-by-pair comparison is wrong"
fi
if pair="$(python3 "$ROOT/Scripts/lib/compare-runs.py" "$WORK" --pair 2)" && echo "$pair" | grep -q "B: 1000 acked/s  server CPU/delivery  990 µs  delivery p50 2.0 ms  p99 25.0 ms"; then
    pass "one pair's lines"
else
    fail "one pair's lines are wrong: $pair"
fi
if "$ROOT/Scripts/bench-compare" --a "$WORK/nothing" --b "$WORK/nothing" >"$WORK/refused.txt" 2>&1; then
    fail "bench-compare ran without binaries"
else
    grep -q "must each name a folder with parley-node and parley-load" "$WORK/refused.txt" && pass "a folder without binaries is refused" || fail "refused without saying why: $(cat "$WORK/refused.txt")"
fi
summary
