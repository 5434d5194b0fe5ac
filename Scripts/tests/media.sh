#!/usr/bin/env bash
# Uploads and downloads end to end through real processes, with curl as the client: see media_e2e.py.
#   Scripts/tests/media.sh [PATH-TO-parley-node]
set -euo pipefail
exec python3 "$(dirname "$0")/media_e2e.py" "${1:-.build/debug/parley-node}"
