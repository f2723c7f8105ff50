#!/usr/bin/env bash
# Installs the official OpenAI JavaScript client the server tests drive (tests/server/client) into
# .node/ (Node from the machine's package manager: scripts/setup.sh). 6.x: 7.x needs Node 22.
# Idempotent: does nothing when that version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
OPENAI_VERSION=6.49.0
if [ -f .node/node_modules/openai/package.json ] &&
   grep -q "\"version\": \"$OPENAI_VERSION\"" .node/node_modules/openai/package.json; then
  echo "setup_node: openai $OPENAI_VERSION present"
  exit 0
fi
mkdir -p .node
npm install --prefix .node --no-audit --no-fund --no-save "openai@$OPENAI_VERSION" >/dev/null
echo "setup_node: installed openai $OPENAI_VERSION into .node"
