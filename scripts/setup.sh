#!/usr/bin/env bash
# Installs the Debian packages k3 needs. Usage: scripts/setup.sh [--cli]
#   (default)  everything to build, test, benchmark and fuzz (scripts/test.sh);
#   --cli      only what building the k3 CLI needs (scripts/run.sh).
# Idempotent: when all packages are already present it does nothing (set K3_FORCE_SETUP=1 to
# reinstall anyway).
set -euo pipefail

# The CLI: compilers and build tools, and the libraries the layers use (JSON, CLI11, PCRE2 for the
# tokenizer, Boost's header-only Beast/Asio for the server). OpenMP comes with GCC.
CLI_PACKAGES=(
  g++ cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libboost-dev
)
# Tests, benchmarks, fuzzing (clang), the OpenAI client test (Node.js), the PyTorch parity test,
# Open MPI (ranks in separate processes under mpirun).
MORE_PACKAGES=(
  build-essential git libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libomp-dev
  clang libclang-rt-14-dev
  nodejs
  python3-torch python3-numpy
  libopenmpi-dev openmpi-bin
)

case "${1:-}" in
  --cli) PACKAGES=("${CLI_PACKAGES[@]}") ;;
  "") PACKAGES=("${CLI_PACKAGES[@]}" "${MORE_PACKAGES[@]}") ;;
  *) echo "setup.sh: unknown option '$1' (--cli or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm comes with some nodejs builds; the Debian one is a package of its own.
extra=()
[ "${1:-}" = --cli ] || command -v npm >/dev/null || extra+=(npm)
missing+=("${extra[@]}")

if [ "${#missing[@]}" -eq 0 ] && [ -z "${K3_FORCE_SETUP:-}" ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]:-${PACKAGES[*]}}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" "${extra[@]}" >/dev/null
echo "setup: done"
