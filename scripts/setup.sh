#!/usr/bin/env bash
# Installs every Debian package k3 needs to build, test, benchmark and fuzz. Idempotent: when
# all packages are already present it does nothing (set K3_FORCE_SETUP=1 to reinstall anyway).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libomp-dev
  clang libclang-rt-14-dev
  libboost-dev nodejs
  python3-torch python3-numpy
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm comes with some nodejs builds; the Debian one is a package of its own.
command -v npm >/dev/null || missing+=(npm)

if [ "${#missing[@]}" -eq 0 ] && [ -z "${K3_FORCE_SETUP:-}" ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]:-${PACKAGES[*]}}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" \
  $(command -v npm >/dev/null || echo npm) >/dev/null
echo "setup: done"
