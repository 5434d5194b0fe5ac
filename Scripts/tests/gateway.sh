#!/usr/bin/env bash
# The gateway end to end through real processes: see gateway_e2e.py.
#   Scripts/tests/gateway.sh [PATH-TO-parley-node]
set -euo pipefail
exec python3 "$(dirname "$0")/gateway_e2e.py" "${1:-.build/debug/parley-node}"
