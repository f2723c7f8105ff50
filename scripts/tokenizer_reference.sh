#!/usr/bin/env bash
# Generates the tokenizer reference data (build/tokenizer-reference/) with the npm package
# `tiktoken`, installed into build/npm. Idempotent: skips the install when the package is there and
# the generation when the data is newer than the generator. Without node, or offline without the
# package, it says so and exits 0: the reference tests then skip.
set -euo pipefail
cd "$(dirname "$0")/.."
NPM_DIR=build/npm
OUT=build/tokenizer-reference
GEN=tests/tokenizer/reference/make_reference.mjs
TIKTOKEN_VERSION=1.0.22

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "tokenizer reference: node/npm not found; reference tests will skip"
  exit 0
fi
if [ ! -f "$NPM_DIR/node_modules/tiktoken/package.json" ]; then
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name":"k3-tokenizer-reference","private":true}' >"$NPM_DIR/package.json"
  if ! (cd "$NPM_DIR" && npm install --no-audit --no-fund --silent "tiktoken@$TIKTOKEN_VERSION"); then
    echo "tokenizer reference: could not install tiktoken@$TIKTOKEN_VERSION; reference tests will skip"
    exit 0
  fi
fi
if [ -f "$OUT/ids_all.bin" ] && [ "$OUT/ids_all.bin" -nt "$GEN" ]; then
  echo "tokenizer reference: up to date in $OUT"
  exit 0
fi
node "$GEN" "$NPM_DIR" "$OUT"
