#!/usr/bin/env bash
# Account deletion end to end through real processes, a worker SIGKILLed at each step of it, and
# an HTTPS webhook receiver that checks signatures with the standardwebhooks library (from PyPI,
# in .build/python): see deletion_e2e.py.
#   Scripts/tests/deletion.sh [PATH-TO-parley-node]
set -euo pipefail
cd "$(dirname "$0")/../.."
source Scripts/lib/prerequisites.sh
TOOLS="$(parley_python_tools)" || { echo "could not install the standardwebhooks library into .build/python"; exit 2; }
exec "$TOOLS/python" Scripts/tests/deletion_e2e.py "${1:-.build/debug/parley-node}"
