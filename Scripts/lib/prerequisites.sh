# What Parley's scripts need on this machine, checked before they build or start anything.
# Sourced; then `parley_prerequisites run` (Scripts/cluster up: build and run a local cluster),
# `parley_prerequisites test` (Scripts/test: everything the tests use as well) or
# `parley_prerequisites bench` (what a benchmark needs beyond running a cluster).
#
# Missing Debian packages are installed when this runs as root with apt-get (a fresh CI machine);
# otherwise the exact command to run is printed and the caller stops. The Swift toolchain is not a
# Debian package: when it is missing or too old, where to get it is printed.
#
# `parley_python_tools` makes a virtual environment under .build/python with the PyPI tools the
# tests use (Schemathesis and openapi-spec-validator; h2 and cryptography for the push providers' stand-in; Selenium and axe
# for the web client's browser test), once, and prints
# the path of its bin folder.

PARLEY_SWIFT_MINIMUM="6.2"  # hummingbird-auth's tools version

# Whether Swift is at least $PARLEY_SWIFT_MINIMUM; prints what to do when not.
parley_check_swift() {
    if ! command -v swift >/dev/null 2>&1; then
        echo "prerequisites: no Swift toolchain on PATH. Install Swift $PARLEY_SWIFT_MINIMUM or later (https://www.swift.org/install) and run this again." >&2
        return 1
    fi
    local version
    version="$(swift --version 2>/dev/null | grep -oE 'Swift version [0-9]+\.[0-9]+' | head -n 1 | awk '{print $3}')"
    if [ -z "$version" ]; then
        echo "prerequisites: could not read the Swift version from 'swift --version'; Parley needs $PARLEY_SWIFT_MINIMUM or later." >&2
        return 1
    fi
    if [ "$(printf '%s\n%s\n' "$PARLEY_SWIFT_MINIMUM" "$version" | sort -V | head -n 1)" != "$PARLEY_SWIFT_MINIMUM" ]; then
        echo "prerequisites: Swift $version is too old; Parley needs $PARLEY_SWIFT_MINIMUM or later (https://www.swift.org/install)." >&2
        return 1
    fi
}

# The Debian packages PURPOSE needs that are missing, one per line.
parley_missing_packages() {
    local purpose="$1"
    # GRDB links the system SQLite: its header and library.
    [ -e /usr/include/sqlite3.h ] || echo libsqlite3-dev
    # Gateways make thumbnails with libvips, loaded when first asked for one. (grep reads the
    # whole list: with -q it stops at the match, and ldconfig, still writing 58 KB into the closed
    # pipe, dies of SIGPIPE — which pipefail turns into "missing".)
    ldconfig -p 2>/dev/null | grep 'libvips\.so\.42 ' >/dev/null || echo libvips42
    command -v curl >/dev/null 2>&1 || echo curl
    command -v openssl >/dev/null 2>&1 || echo openssl
    command -v python3 >/dev/null 2>&1 || echo python3
    if [ "$purpose" = bench ]; then
        # A stand-in HTTP/2 server fast enough not to be what a benchmark measures.
        command -v nghttpd >/dev/null 2>&1 || echo nghttp2-server
        command -v vips >/dev/null 2>&1 || echo libvips-tools  # bench-media's 12-megapixel photo
        return 0
    fi
    [ "$purpose" = test ] || return 0
    # The tests' Python tools live in a virtual environment.
    if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then echo python3-venv; fi
    command -v nghttp >/dev/null 2>&1 && command -v h2load >/dev/null 2>&1 || echo nghttp2-client  # independent HTTP/2 clients
    command -v ip >/dev/null 2>&1 || echo iproute2  # network namespaces: the chaos run's network cut
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || echo postgresql  # the PostgreSQL store's tests
    command -v exiftool >/dev/null 2>&1 || echo libimage-exiftool-perl  # writes and reads location in the media test's files
    command -v chromium >/dev/null 2>&1 || echo chromium  # the web client's tests, in a real browser
    command -v chromedriver >/dev/null 2>&1 || echo chromium-driver
}

# Checks (and where it can, installs) what PURPOSE (run or test) needs; returns 1 when something is
# still missing, having said what.
parley_prerequisites() {
    local purpose="${1:-run}"
    parley_check_swift || return 1
    local missing
    missing="$(parley_missing_packages "$purpose" | tr '\n' ' ' | sed 's/ *$//')"
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing $missing"
        if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; then
            missing="$(parley_missing_packages "$purpose" | tr '\n' ' ' | sed 's/ *$//')"
            [ -z "$missing" ] && return 0
            echo "prerequisites: still missing after apt-get install: $missing" >&2
            return 1
        fi
        echo "prerequisites: apt-get install $missing failed (see above)" >&2
        return 1
    fi
    if command -v apt-get >/dev/null 2>&1; then
        echo "prerequisites: missing $missing. Install them with: sudo apt-get install -y $missing" >&2
    else
        echo "prerequisites: missing $missing (Debian package names; install their equivalents with this system's package manager)" >&2
    fi
    return 1
}

# The bin folder of .build/python, a virtual environment with the tests' PyPI tools, made once.
parley_python_tools() {
    local root venv
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    venv="$root/.build/python"
    if [ ! -x "$venv/bin/st" ] || [ ! -x "$venv/bin/openapi-spec-validator" ] \
        || ! "$venv/bin/python" -c 'import h2, cryptography, selenium, axe_selenium_python, standardwebhooks' >/dev/null 2>&1; then
        echo "== installing Schemathesis, openapi-spec-validator, h2, cryptography, Selenium, axe and standardwebhooks into .build/python" >&2
        python3 -m venv "$venv" >&2 || return 1
        "$venv/bin/pip" install -q --disable-pip-version-check 'schemathesis>=4.3,<5' 'openapi-spec-validator>=0.7,<1' 'h2>=4.1,<5' 'cryptography>=41' 'selenium>=4.20,<5' \
            'axe-selenium-python>=2.1,<3' 'standardwebhooks>=1.0,<2' >&2 || return 1
    fi
    echo "$venv/bin"
}
