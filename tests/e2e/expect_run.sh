#!/usr/bin/env bash
# expect_run.sh: run one command and check its exit status and output
# (stdout and stderr together).  Used by ctest for single-process e2e tests
# and for the tests of the `rdmasan` command itself.
#
# usage:
#   expect_run.sh [--status N] [--expect REGEX]... [--reject REGEX]...
#                 [--timeout SEC] [--allow-findings] -- COMMAND [args...]
#
#   --status N       required exit status (default 0)
#   --expect REGEX   extended regex that must occur in the output (repeatable)
#   --reject REGEX   extended regex that must not occur (repeatable)
#   --timeout SEC    limit for the command (default 60)
#   --allow-findings do not fail on rdmasan error reports in the output
set -uo pipefail

want_status=0
limit=60
expects=()
rejects=('==[0-9]+==(ERROR|WARNING): rdmasan')

die() { echo "expect_run: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --status) want_status=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --reject) rejects+=("$2"); shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --allow-findings) rejects=("${rejects[@]:1}"); shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (the command follows '--')" ;;
  esac
done
[[ $# -gt 0 ]] || die "no command given"

log=$(mktemp "${TMPDIR:-/tmp}/expect_run.XXXXXX") || die "mktemp failed"
trap 'rm -f "$log"' EXIT

timeout -k 5 "$limit" "$@" >"$log" 2>&1 </dev/null
status=$?

echo "---- $* (exit $status)"
cat "$log"
echo "----"

failures=()
if [[ $status -ne $want_status ]]; then
  if [[ $status -eq 124 ]]; then
    failures+=("timed out after ${limit}s")
  else
    failures+=("exit status $status, expected $want_status")
  fi
fi
for re in "${expects[@]}"; do
  grep -Eq -- "$re" "$log" || failures+=("expected output /$re/ not found")
done
for re in "${rejects[@]}"; do
  ! grep -Eq -- "$re" "$log" || failures+=("unwanted output /$re/ found")
done
if [[ ${#failures[@]} -gt 0 ]]; then
  for f in "${failures[@]}"; do echo "expect_run: FAIL: $f"; done
  exit 1
fi
echo "expect_run: PASS"
