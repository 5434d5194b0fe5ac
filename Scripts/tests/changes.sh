#!/usr/bin/env bash
# Edits, deletions for everyone and reactions end to end through real processes while workers are
# SIGKILLed, streams on both gateways and an HTTPS webhook receiver that checks signatures with
# the standardwebhooks library (from PyPI, in .build/python): see changes_e2e.py.
#   Scripts/tests/changes.sh [PATH-TO-parley-node]
set -euo pipefail
cd "$(dirname "$0")/../.."
source Scripts/lib/prerequisites.sh
TOOLS="$(parley_python_tools)" || { echo "could not install the standardwebhooks library into .build/python"; exit 2; }
exec "$TOOLS/python" Scripts/tests/changes_e2e.py "${1:-.build/debug/parley-node}"
