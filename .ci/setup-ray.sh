#!/bin/sh
# Set-up for the distributed-build tests (issue 19, "builds on Ray"): Debian's docker-registry (the
# registry images move through between build nodes). Ray itself comes from the `ray` extra. Idempotent:
# quick when already installed.
set -eu
if [ ! -x /usr/bin/docker-registry ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends docker-registry >/dev/null 2>&1 || {
        apt-get update >/dev/null && apt-get install -y --no-install-recommends docker-registry >/dev/null; }
    # the package starts a system-wide registry on :5000; the tests start their own on a free port
    (systemctl disable --now docker-registry || service docker-registry stop) >/dev/null 2>&1 || true
fi
/usr/bin/docker-registry --version
