#!/usr/bin/env bash
# Uploads and downloads end to end through real processes, with curl as the client: see media_e2e.py.
# Bytes kept as files; then, when PARLEY_TEST_POSTGRES_URL names a PostgreSQL (Scripts/test
# starts one), again with it as the store and the uploads' bytes kept in it.
#   Scripts/tests/media.sh [PATH-TO-parley-node]
set -euo pipefail
here="$(dirname "$0")"
python3 "$here/media_e2e.py" "${1:-.build/debug/parley-node}"
if [ -n "${PARLEY_TEST_POSTGRES_URL:-}" ]; then
    python3 "$here/media_e2e.py" "${1:-.build/debug/parley-node}" "$PARLEY_TEST_POSTGRES_URL"
else
    echo "SKIPPED: media with PostgreSQL — PARLEY_TEST_POSTGRES_URL is not set"
fi
