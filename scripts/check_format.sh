#!/usr/bin/env bash
# check_format.sh: the project's own C and C++ sources against .clang-format
# (clang-format-14).  Prints each file that differs and exits 1 if any does;
# `scripts/check_format.sh --fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0
[[ ${1:-} == --fix ]] && fix=1
clang_format=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $clang_format ]] || { echo "check_format: clang-format-14 not found (scripts/setup.sh installs it)" >&2; exit 2; }

mapfile -t files < <(find core checkers traces softnic interpose cli fuzz bench examples tests include \
                       -type f \( -name '*.cc' -o -name '*.h' -o -name '*.c' \) | sort)
if [[ $fix == 1 ]]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'check_format: not formatted (run scripts/check_format.sh --fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
