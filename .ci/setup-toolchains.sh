#!/usr/bin/env bash
# The language toolchains the code family's local tests run with (idempotent; run as root): Go, Node,
# JDK + Maven with Debian's offline Maven repository, GCC/CMake with GoogleTest and Catch2, PHP + PHPUnit.
# Only what is missing is installed, from this machine's apt sources. The Docker tests take the same
# toolchains from the base images' layers (envgen.sandbox.images.TOOLCHAINS), not from here.
set -euo pipefail

log() { echo "setup-toolchains: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
  log "need root for: $*"; return 1; fi; }

want=(golang-go golang-github-google-go-cmp-dev default-jdk-headless maven junit4 junit5 testng libsurefire-java
      libmaven-compiler-plugin-java libmaven-resources-plugin-java gradle
      gcc g++ make cmake libgtest-dev libgmock-dev catch2 autoconf automake libtool pkg-config php-cli php-xml php-mbstring phpunit composer)
command -v node >/dev/null && command -v npm >/dev/null || want+=(nodejs npm)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for c in go node npm java mvn cmake g++ php phpunit; do
  printf '%s ' "$c=$(command -v "$c" >/dev/null && echo ok || echo MISSING)" >&2
done
echo >&2
