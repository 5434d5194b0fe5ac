#!/usr/bin/env bash
# Edits, deletions for everyone, reactions, replies, mentions and pins end to end through real
# processes while workers are
# SIGKILLed, on SQLite and then on PostgreSQL (when Scripts/test started one): streams on both
# gateways, and an HTTPS webhook receiver that checks signatures with the standardwebhooks library
# (from PyPI, in .build/python). See changes_e2e.py.
#   Scripts/tests/changes.sh [PATH-TO-parley-node]
set -euo pipefail
cd "$(dirname "$0")/../.."
source Scripts/lib/prerequisites.sh
TOOLS="$(parley_python_tools)" || { echo "could not install the standardwebhooks library into .build/python"; exit 2; }
NODE="${1:-.build/debug/parley-node}"
status=0
"$TOOLS/python" Scripts/tests/changes_e2e.py "$NODE" || status=1
if [ -n "${PARLEY_TEST_POSTGRES_URL:-}" ]; then
    PARLEY_STORE="$PARLEY_TEST_POSTGRES_URL" "$TOOLS/python" Scripts/tests/changes_e2e.py "$NODE" || status=1
else
    echo "SKIPPED: changes to messages on PostgreSQL — PARLEY_TEST_POSTGRES_URL is not set"
fi
exit "$status"
