#!/usr/bin/env bash
# Make the Docker sandbox tests runnable for real (idempotent; run as root):
#   1. install docker.io and debootstrap when missing,
#   2. start dockerd in the background, in its own session, when no engine answers, and wait (bounded)
#      until it does,
#   3. build the default offline base image once (`envgen image base`; a present image is reused).
# Env: ENVGEN_PYTHON (the Python with envgen installed; default: `python` on PATH),
#      DOCKERD_WAIT_S (default 60), ENVGEN_SKIP_BASE=1 to stop after step 2.
set -euo pipefail

log() { echo "setup-docker: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
  log "need root for: $*"; return 1; fi; }

missing=()
command -v docker >/dev/null || missing+=(docker.io)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /tmp/dockerd.log)"
  # its own session (setsid -f: always a new process, never the caller's group leader) with no terminal
  # and stdin from /dev/null: Ctrl-C or a SIGTERM to the caller's process group (a test run) leaves it up
  as_root setsid -f dockerd </dev/null >/tmp/dockerd.log 2>&1
  wait_s=${DOCKERD_WAIT_S:-60}
  for ((i = 0; i < wait_s * 2; i++)); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    log "dockerd did not answer within ${wait_s}s; last lines of /tmp/dockerd.log:"
    tail -n 20 /tmp/dockerd.log >&2 || true
    exit 1
  fi
fi
log "engine: $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)"

if [ "${ENVGEN_SKIP_BASE:-0}" != 1 ]; then
  PY=${ENVGEN_PYTHON:-python}
  command -v "$PY" >/dev/null || PY=python3
  as_root env "PATH=$PATH" ${SSL_CERT_FILE:+"SSL_CERT_FILE=$SSL_CERT_FILE"} ${ENVGEN_CACHE:+"ENVGEN_CACHE=$ENVGEN_CACHE"} \
    "$PY" -m envgen image base
fi
