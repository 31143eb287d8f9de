#!/usr/bin/env bash
# The test suite, from a fresh machine: a venv with envgen and its test extras, the Docker engine
# (installed and started when missing; needs root), the offline base image, the language toolchains
# (Go, Node, JDK, GCC/CMake, PHP; needs root), PostgreSQL and Docker's registry (need root), then pytest.
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ENVGEN_VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first and pinned: the CPU build; an unpinned torch (pulled in by the rl extra) is a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[test,rl,ray,search,serve,postgres]"
export PATH="$PWD/$VENV/bin:$PATH"
# the code family's language toolchains for its local tests (tests of a missing toolchain skip and say so)
bash .ci/setup-toolchains.sh || echo "scripts/test.sh: language toolchains could not be installed" >&2
# Debian's PostgreSQL for the store tests (each test session starts its own throwaway server)
bash .ci/setup-postgres.sh || echo "scripts/test.sh: PostgreSQL could not be installed" >&2
# Debian's docker-registry for the distributed-build tests (each starts its own on a free port)
bash .ci/setup-ray.sh || echo "scripts/test.sh: docker-registry could not be installed" >&2
if [ "${ENVGEN_SKIP_DOCKER:-0}" != 1 ]; then
  bash .ci/setup-docker.sh
fi
exec "$VENV/bin/python" -m pytest -ra "$@"
