#!/usr/bin/env bash
# The docs cannot drift from the binary: every `parley-node run` flag and every PARLEY_* variable
# used in Deploy/ and README.md exists in `parley-node run --help` (variables that belong to the
# clients and scripts must be listed as such in Deploy/CONFIG.md), and every option of
# `parley-node run --help` is documented in Deploy/CONFIG.md.
#
#   Scripts/tests/docs-flags.sh [PATH-TO-parley-node]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
echo "docs vs parley-node run --help"
"$NODE" run --help >"$WORK/help.txt" 2>&1
report="$(python3 "$(dirname "$0")/docs_flags.py" "$ROOT" "$WORK/help.txt")"
echo "  $(echo "$report" | head -n 1)"
if echo "$report" | grep -q '^PROBLEM'; then
    fail "the docs and the binary disagree:"
    echo "$report" | grep '^PROBLEM' | sed 's/^PROBLEM /        /'
else
    pass "every documented flag and variable exists, and every option is documented"
fi
# The check itself must be able to fail: a made-up flag in a copy of the docs is caught.
mkdir -p "$WORK/mutant/Deploy"
cp "$ROOT/Deploy/CONFIG.md" "$WORK/mutant/Deploy/"
printf '%s\n' 'parley-node run --made-up-flag 1' 'PARLEY_MADE_UP=1' >"$WORK/mutant/README.md"
mutant="$(python3 "$(dirname "$0")/docs_flags.py" "$WORK/mutant" "$WORK/help.txt")"
if echo "$mutant" | grep -q "PROBLEM.*--made-up-flag" && echo "$mutant" | grep -q "PROBLEM.*PARLEY_MADE_UP"; then pass "a made-up flag and variable in the docs would be caught"; else fail "the check cannot see a made-up flag: $mutant"; fi
summary
