#!/usr/bin/env bash
# The docs cannot drift from the binary: every `parley-node run` flag and every PARLEY_* variable
# used in README.md, docs/ and Deploy/ exists in `parley-node run --help` (variables that belong to
# the clients and scripts must be listed as such in docs/OPERATIONS.md), and every option of
# `parley-node run --help` is documented in docs/OPERATIONS.md. Every script in Scripts/ answers
# --help with its header, at once (nothing built, nothing started).
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
mkdir -p "$WORK/mutant/Deploy" "$WORK/mutant/docs"
cp "$ROOT/docs/OPERATIONS.md" "$WORK/mutant/docs/"
printf '%s\n' 'parley-node run --made-up-flag 1' 'PARLEY_MADE_UP=1' >"$WORK/mutant/README.md"
mutant="$(python3 "$(dirname "$0")/docs_flags.py" "$WORK/mutant" "$WORK/help.txt")"
if echo "$mutant" | grep -q "PROBLEM.*--made-up-flag" && echo "$mutant" | grep -q "PROBLEM.*PARLEY_MADE_UP"; then pass "a made-up flag and variable in the docs would be caught"; else fail "the check cannot see a made-up flag: $mutant"; fi
# --help before anything runs: a script that built or started something would take seconds, or fail.
unhelpful=0
for script in "$ROOT"/Scripts/*; do
    [ -f "$script" ] && [ -x "$script" ] || continue
    name="$(basename "$script")"
    first="$(sed -n 2p "$script" | sed 's/^# \{0,1\}//')"
    if out="$(timeout 5 "$script" --help 2>&1)" && [ "$(echo "$out" | head -n 1)" = "$first" ]; then
        helped="${helped:-}${helped:+, }$name"
    else
        fail "Scripts/$name --help did not print its header and exit: $(echo "$out" | head -n 3)"
        unhelpful=1
    fi
done
[ "$unhelpful" = 0 ] && pass "--help prints the header and exits: $helped"
summary
