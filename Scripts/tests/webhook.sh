#!/usr/bin/env bash
# Webhooks end to end through real processes and an HTTPS receiver that checks signatures with the
# standardwebhooks library (from PyPI, in .build/python): see webhook_e2e.py.
#   Scripts/tests/webhook.sh [PATH-TO-parley-node]
# PARLEY_WEBHOOK_E2E_DOWN sets how long the receiver is down, in seconds (default 60).
set -euo pipefail
cd "$(dirname "$0")/../.."
source Scripts/lib/prerequisites.sh
TOOLS="$(parley_python_tools)" || { echo "could not install the standardwebhooks library into .build/python"; exit 2; }
# The receiver checks every delivery with the standardwebhooks library, as a receiver would.
exec "$TOOLS/python" Scripts/tests/webhook_e2e.py "${1:-.build/debug/parley-node}" "${PARLEY_WEBHOOK_E2E_DOWN:-60}"
