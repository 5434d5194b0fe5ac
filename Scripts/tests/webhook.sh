#!/usr/bin/env bash
# Webhooks end to end through real processes and an HTTPS receiver that checks signatures: see webhook_e2e.py.
#   Scripts/tests/webhook.sh [PATH-TO-parley-node]
# PARLEY_WEBHOOK_E2E_DOWN sets how long the receiver is down, in seconds (default 60).
set -euo pipefail
exec python3 "$(dirname "$0")/webhook_e2e.py" "${1:-.build/debug/parley-node}" "${PARLEY_WEBHOOK_E2E_DOWN:-60}"
