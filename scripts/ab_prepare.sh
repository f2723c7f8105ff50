#!/usr/bin/env bash
# Source trees of several revisions for an A/B benchmark on a GPU machine (scripts/gpu_ab.sh): each
# REV exported with git archive into .variants/<name>, replacing what .variants held (git-ignored;
# carry `.variants` to the device, which gets no .git).
#
#   scripts/ab_prepare.sh main my-branch HEAD~1
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: scripts/ab_prepare.sh REV [REV...]" >&2
  exit 2
fi
rm -rf .variants
for rev in "$@"; do
  if ! git rev-parse --verify --quiet "$rev^{commit}" >/dev/null; then
    echo "ab_prepare.sh: unknown revision '$rev'" >&2
    exit 1
  fi
  name=$(printf '%s' "$rev" | tr -c 'A-Za-z0-9._-' '_')
  mkdir -p ".variants/$name"
  git archive "$rev" | tar -x -C ".variants/$name"
  echo "$rev ($(git rev-parse --short "$rev")) -> .variants/$name"
done
