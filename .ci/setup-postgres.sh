#!/usr/bin/env bash
# Make the PostgreSQL store tests runnable for real (idempotent, quick when already installed; run as root):
#   install Debian's `postgresql` (initdb and pg_ctl under /usr/lib/postgresql/*/bin) and `util-linux`
#   (runuser) when missing. No server is started here and no cluster is created: the tests' fixture
#   (tests/postgres.py) runs its own throwaway server as an unprivileged user in a temporary directory,
#   since PostgreSQL refuses to run as root. The Python driver comes with envgen's `postgres` extra.
set -euo pipefail

log() { echo "setup-postgres: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
  log "need root for: $*"; return 1; fi; }

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v runuser >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  # the package would create and start a "main" cluster on port 5432: the tests need none
  as_root mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | as_root tee /etc/postgresql-common/createcluster.d/envgen.conf >/dev/null
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
initdb=$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1)
[ -x "$initdb" ] || { log "initdb not found after the install"; exit 1; }
log "$("$initdb" --version)"
