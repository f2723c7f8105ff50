#!/usr/bin/env bash
# Stages what a GPU machine without PCRE2's or Boost's development files needs to build k3 (the lent
# H200 image has the PCRE2 runtime but not its header, static library or pkg-config file, and no
# Boost headers). The Boost headers the HTTP server includes (the compiler's dependency list of
# src/server/http, a few MB of the header-only Beast/Asio) go to .deps/boost/include. PCRE2: copies them
# from this machine's libpcre2-dev into .deps/pcre2 with a relocatable .pc (prefix from the .pc's
# own location), copies ../shared's fixtures into .deps/shared (the device call sends the checkout
# only, and the fixture tests read ../shared), ignores .deps/ locally (.git/info/exclude) and prints
# its size. A device call then carries .deps and runs scripts/gpu.sh, which puts .deps/pcre2 on
# PKG_CONFIG_PATH and links ../shared to .deps/shared where the machine has no ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(dpkg -L libpcre2-dev | grep -E '/libpcre2-8\.a$' | head -n 1)
hdr=$(dpkg -L libpcre2-dev | grep -E '/pcre2\.h$' | head -n 1)
ver=$(dpkg-query -W -f='${Version}' libpcre2-dev | sed 's/-.*//')
rm -rf .deps/pcre2
mkdir -p .deps/pcre2/include .deps/pcre2/lib/pkgconfig
cp "$hdr" .deps/pcre2/include/
cp "$lib" .deps/pcre2/lib/
cat >.deps/pcre2/lib/pkgconfig/libpcre2-8.pc <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: libpcre2-8
Description: PCRE2 8-bit (static, staged by scripts/gpu_deps.sh)
Version: ${ver}
Libs: -L\${libdir} -lpcre2-8
Cflags: -I\${includedir} -DPCRE2_STATIC
PC
rm -rf .deps/boost
# A build tree's header folders when one exists (none is needed: the server's sources include by src/ path).
layers=$( (ls -d build/*/layers/* 2>/dev/null || true) | sed 's/^/-I/' | tr '\n' ' ')
{ for f in src/server/http/*.cpp; do g++ -std=c++20 -M $layers -Isrc "$f"; done; echo /usr/include/boost/version.hpp; } |
  tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u | while read -r h; do
    mkdir -p ".deps/boost/include/$(dirname "${h#/usr/include/}")"
    cp "$h" ".deps/boost/include/${h#/usr/include/}"
  done
rm -rf .deps/shared
mkdir -p .deps/shared
cp -r ../shared/fixtures .deps/shared/
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >>.git/info/exclude
du -sh .deps
