#!/usr/bin/env bash
# The web client in a real browser (headless Chromium through WebDriver): see web_e2e.py.
#   Scripts/tests/web.sh [PATH-TO-parley-node]   (PARLEY_SCREENSHOTS=DIR keeps the screenshots there)
set -euo pipefail
cd "$(dirname "$0")/../.."
source Scripts/lib/prerequisites.sh
TOOLS="$(parley_python_tools)" || { echo "could not install Selenium into .build/python"; exit 2; }
"$TOOLS/python" Scripts/tests/web_e2e.py "${1:-.build/debug/parley-node}"
