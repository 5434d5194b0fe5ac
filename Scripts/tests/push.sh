#!/usr/bin/env bash
# Push notifications end to end through real processes and a local APNs/FCM stand-in: see push_e2e.py.
#   Scripts/tests/push.sh [PATH-TO-parley-node]
set -euo pipefail
source "$(dirname "$0")/../lib/prerequisites.sh"
TOOLS="$(parley_python_tools)" || { echo "could not install the Python test tools into .build/python"; exit 2; }
exec python3 "$(dirname "$0")/push_e2e.py" "${1:-.build/debug/parley-node}" "$TOOLS/python"
