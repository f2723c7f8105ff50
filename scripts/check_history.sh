#!/usr/bin/env bash
# Fails when docs or code comments carry work history instead of reference: issue numbers
# ("issue 6", "issue #6"), work sessions ("ninth session", "this session", "sessions"), rounds of
# work ("round 3 of work"), and branch names of the shape s<N>-<name> ("s10-foo"). The history lives
# in git; docs and comments say what is true now. Prints every hit as file:line: text, exit 1 if any.
#
#   scripts/check_history.sh            checks src/ tests/ bench/ fuzz/ scripts/ docs/ README.md
#   scripts/check_history.sh PATH...    checks only these paths
set -uo pipefail
cd "$(dirname "$0")/.."

paths=("$@")
[ "${#paths[@]}" -gt 0 ] || paths=(src tests bench fuzz scripts docs README.md)
existing=()
for p in "${paths[@]}"; do [ -e "$p" ] && existing+=("$p"); done
[ "${#existing[@]}" -gt 0 ] || { echo "check_history.sh: none of the paths exist: ${paths[*]}" >&2; exit 2; }

# Work-history patterns (extended regex, matched case-insensitively).
patterns=(
  '\bissues? *#? *[0-9]+'                # issue 6, issue #6, issues 5
  '\bsessions?\b'                        # ninth session, this session, sessions
  '\bround [0-9]+ of work\b'             # round 3 of work
  '\brounds? of work\b'
  '\bs[0-9]+-[a-z][a-z0-9-]*'            # s10-ggml-prefetch, s9-lean
)
# Legitimate phrases, removed from a line before the patterns are matched.
allow='\b(chat|http|tls|ssl|user|login|browser|client|server|websocket|ssh|tmux|screen|debug|profiling|nsight) sessions?\b|\bsessions? (id|ids|key|keys|token|tokens|cookie|cookies|state)\b|\bsession_[a-z_]+|\b[a-z_]+_sessions?\b'

self="scripts/check_history.sh"
hits=0
while IFS= read -r line; do
  file=${line%%:*}
  [ "$file" = "$self" ] && continue
  rest=${line#*:}
  text=${rest#*:}
  cleaned=$(printf '%s\n' "$text" | sed -E "s/${allow}//Ig")
  for pat in "${patterns[@]}"; do
    if printf '%s\n' "$cleaned" | grep -qiE "$pat"; then
      printf '%s\n' "$line"
      hits=$((hits + 1))
      break
    fi
  done
done < <(grep -rnIiE --exclude-dir=.git "$(IFS='|'; echo "${patterns[*]}")" "${existing[@]}" 2>/dev/null)

if [ "$hits" -gt 0 ]; then
  echo "check_history.sh: $hits line(s) carry work history (issue numbers, sessions, rounds of work, branch names);" \
       "state what is true now and leave the history to git" >&2
  exit 1
fi
echo "check_history.sh: no work history in ${existing[*]}"
