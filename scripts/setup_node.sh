#!/usr/bin/env bash
# Installs the npm packages the tests drive into .node/ (Node from the machine's package manager:
# scripts/setup.sh): the official OpenAI JavaScript client for the server tests (tests/server/client;
# 6.x: 7.x needs Node 22) and the JSON Schema validator ajv with ajv-formats for the grammar tests
# (tests/grammar/ajv). Idempotent: does nothing when those versions are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
OPENAI_VERSION=6.49.0
AJV_VERSION=8.20.0
AJV_FORMATS_VERSION=3.0.1
have() { [ -f ".node/node_modules/$1/package.json" ] && grep -q "\"version\": \"$2\"" ".node/node_modules/$1/package.json"; }
if have openai "$OPENAI_VERSION" && have ajv "$AJV_VERSION" && have ajv-formats "$AJV_FORMATS_VERSION"; then
  echo "setup_node: openai $OPENAI_VERSION, ajv $AJV_VERSION, ajv-formats $AJV_FORMATS_VERSION present"
  exit 0
fi
mkdir -p .node
npm install --prefix .node --no-audit --no-fund --no-save "openai@$OPENAI_VERSION" "ajv@$AJV_VERSION" \
  "ajv-formats@$AJV_FORMATS_VERSION" >/dev/null
echo "setup_node: installed openai $OPENAI_VERSION, ajv $AJV_VERSION, ajv-formats $AJV_FORMATS_VERSION into .node"
