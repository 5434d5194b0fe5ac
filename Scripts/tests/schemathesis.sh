#!/usr/bin/env bash
# The API against its description. First openapi-spec-validator checks that docs/openapi.yaml is
# valid OpenAPI; then Schemathesis (both from PyPI, in .build/python) generates requests
# from docs/openapi.yaml — valid ones and ones that break the schema — and sends them over real TLS
# to a live local cluster (1 worker, 1 gateway), into real users and conversations most of the
# time (examples, coverage, fuzzing and stateful phases, seeded); every answer must not be a 5xx, must have a status
# the description lists for that route, and must match the content type, headers and schema it
# names. The event and send streams (endless responses; the send stream needs HTTP/2) and logout (it would revoke the token the run
# uses) are left to the gateway's end-to-end test. Then a copy of the description that demands a
# field the server never sends must fail, so the check is known to bite.
#
#   Scripts/tests/schemathesis.sh [PATH-TO-parley-node]   (PARLEY_SCHEMATHESIS_EXAMPLES=N: examples per route, default 50)
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/Scripts/lib/prerequisites.sh"
TOOLS="$(parley_python_tools)" || { echo "could not install Schemathesis into .build/python"; exit 2; }
echo "schemathesis $("$TOOLS/st" --version 2>/dev/null | awk '{print $NF}') against docs/openapi.yaml (work dir $WORK)"

# First the description itself: a file that is not valid OpenAPI generates clients that are wrong
# or none, and Schemathesis would test what it guessed the file meant.
if "$TOOLS/openapi-spec-validator" "$ROOT/docs/openapi.yaml" >"$WORK/validate.txt" 2>&1; then
    pass "docs/openapi.yaml is valid OpenAPI (openapi-spec-validator)"
else
    fail "docs/openapi.yaml is not valid OpenAPI: $(tail -n 5 "$WORK/validate.txt" | tr '\n' ' ')"
    summary
    exit 1
fi

read -r CB OB GB <<<"$(free_ports 3)"
export PARLEY_BIN="$(cd "$(dirname "$NODE")" && pwd)" PARLEY_STATE="$WORK/cluster"
export PARLEY_CLUSTER_BASE="$CB" PARLEY_OPS_BASE="$OB" PARLEY_CLIENT_BASE="$GB"
# Generated requests come fast and from one address: the limits would answer most of them 429.
export PARLEY_SEND_RATE=100000 PARLEY_WRITE_RATE=100000 PARLEY_READ_RATE=100000 PARLEY_LOGIN_RATE=100000 PARLEY_REGISTRATION_RATE=100000 PARLEY_BCRYPT_COST=4
stop_recorded() { for f in "$WORK"/cluster/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done; true; }
trap 'stop_recorded; cleanup' EXIT
"$ROOT/Scripts/cluster" up --workers 1 --gateways 1 >"$WORK/up.log" 2>&1 || { fail "the cluster did not start: $(tail -n 5 "$WORK/up.log")"; summary; exit 1; }
eval "$("$ROOT/Scripts/cluster" env)"

register() {
    curl -s --cacert "$PARLEY_CA" -H 'Content-Type: application/json' "$PARLEY_URL/v1/users" \
        -d "{\"handle\":\"$1\",\"password\":\"correct horse\",\"displayName\":\"$1\"}"
}
field() { python3 -c 'import json, sys
v = json.load(sys.stdin)
for key in sys.argv[1:]: v = v[key]
print(v)' "$@"; }
TOKEN="$(register schemathesis | field token)"
# Real users and conversations, so that generated requests reach past 404 to the routes' work:
# Schemathesis puts these IDs in paths and member lists most of the time (the rest are its own).
OTHER="$(register other | field user id)"
THIRD="$(register third | field user id)"
conversation() {
    curl -s --cacert "$PARLEY_CA" -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" "$PARLEY_URL/v1/conversations" -d "$1" | field conversation id
}
# A second login of the same user: its session is the one generated revocations may hit (the
# run's own session is never named: its ID is a random UUID nobody generates).
SECOND="$(curl -s --cacert "$PARLEY_CA" -H 'Content-Type: application/json' "$PARLEY_URL/v1/sessions" \
    -d '{"handle":"schemathesis","password":"correct horse"}' | field token)"
SESSION="$(curl -s --cacert "$PARLEY_CA" -H "Authorization: Bearer $SECOND" "$PARLEY_URL/v1/sessions" | python3 -c 'import json, sys
print(next(s["id"] for s in json.load(sys.stdin)["sessions"] if s["current"]))')"
GROUP="$(conversation "{\"memberIds\":[\"$OTHER\",\"$THIRD\"],\"name\":\"a group\"}")"
DIRECT="$(conversation "{\"memberIds\":[\"$OTHER\"]}")"
cat >"$WORK/schemathesis.toml" <<EOF
[dictionaries.conversations]
values = ["$GROUP", "$DIRECT"]
[dictionaries.users]
values = ["$OTHER", "$THIRD"]
[dictionaries.sessions]
values = ["$SESSION"]
[parameters]
"path.sessionId" = { dictionary = "sessions", probability = 0.5 }
"path.conversationId" = { dictionary = "conversations", probability = 0.7 }
"path.userId" = { dictionary = "users", probability = 0.5 }
"body.memberIds[*]" = { dictionary = "users", probability = 0.7 }
"body.userIds[*]" = { dictionary = "users", probability = 0.7 }
EOF

run_schemathesis() {
    local schema="$1"; shift
    # From the work folder: Schemathesis and Hypothesis keep their caches in the current one.
    (cd "$WORK" && "$TOOLS/st" --config-file "$WORK/schemathesis.toml" run "$schema" --url "$PARLEY_URL" --tls-verify "$PARLEY_CA" \
        --header "Authorization: Bearer $TOKEN" \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
        --exclude-operation-id events --exclude-operation-id sendStream --exclude-operation-id logout \
        --seed 1 --workers 1 --request-timeout 10 --no-color "$@")
}

examples="${PARLEY_SCHEMATHESIS_EXAMPLES:-50}"
if run_schemathesis "$ROOT/docs/openapi.yaml" --max-examples "$examples" >"$WORK/run.txt" 2>&1; then
    pass "every answer to $(grep -oE '[0-9]+ generated' "$WORK/run.txt" | tail -n 1 | awk '{print $1}') generated requests matches docs/openapi.yaml: no 5xx, listed statuses, content types, headers and schemas"
else
    fail "Schemathesis found answers that do not match docs/openapi.yaml:"
    sed -n '/FAILURES/,$p' "$WORK/run.txt" | head -n 120
fi
status="$(curl -s -o /dev/null -w '%{http_code}' --cacert "$PARLEY_CA" -H "Authorization: Bearer $TOKEN" "$PARLEY_URL/v1/users/me")"
[ "$status" = 200 ] && pass "the run's own token still works after it (the generated requests reached past 401)" \
    || fail "the run's own token answers $status after it: a generated request revoked it, and what came after tested only 401"

# The check must be able to fail: a description whose user demands a field no answer carries.
python3 - "$ROOT/docs/openapi.yaml" "$WORK/mutant.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
needle = "      required: [id, handle, displayName, createdAt, bot]"
assert needle in text, "the User schema's required line moved; update the mutant"
open(sys.argv[2], "w").write(text.replace(needle, "      required: [id, handle, displayName, createdAt, bot, email]"))
PY
if run_schemathesis "$WORK/mutant.yaml" --include-operation-id me --max-examples 3 >"$WORK/mutant.txt" 2>&1; then
    fail "a description demanding a field the server never sends passed: the check cannot fail"
else
    grep -qi "email" "$WORK/mutant.txt" && pass "a description demanding a field the server never sends (user.email) is caught" \
        || fail "the mutant failed, but not on user.email: $(tail -n 20 "$WORK/mutant.txt")"
fi
"$ROOT/Scripts/cluster" down >/dev/null 2>&1 || true
summary
