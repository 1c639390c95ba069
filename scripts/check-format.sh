#!/usr/bin/env bash
# Checks that every C++ source in the repository is formatted by .clang-format (Debian 12's
# clang-format 14). Prints each file that is not, and exits 1; exits 0 when all are.
# Fix: git ls-files '*.cc' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$cf" ] || { echo "check-format: clang-format-14 is not installed (scripts/install-deps.sh)" >&2; exit 2; }
bad=()
while IFS= read -r f; do
  "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cc' '*.h')
if [ ${#bad[@]} -ne 0 ]; then
  printf 'check-format: not formatted: %s\n' "${bad[@]}" >&2
  echo "check-format: run: git ls-files '*.cc' '*.h' | xargs $cf -i" >&2
  exit 1
fi
echo "check-format: $(git ls-files '*.cc' '*.h' | wc -l) files formatted"
