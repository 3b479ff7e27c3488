#!/usr/bin/env bash
# run_fault.sh: a bug that only an injected fault exposes, three runs.
#
# usage: run_fault.sh PROG SOURCE RDMASAN FABRIC
#
# SOURCE carries `// CHECK: <id>` on the line the report must name (as in
# tests/e2e/checks) and a line `// FAULT-OPTS: <rdmasan options>`.
#   1. plain `rdmasan run`: silent, exit 0;
#   2. with FAULT-OPTS and decision_log=: the report of <id> at that line
#      (checks/run_check.sh asserts it), and a decision log with at least
#      one decision;
#   3. with only schedule=<that log>: the same report again.
set -uo pipefail
prog=$1 src=$2 rdmasan=$3 fabric=$4
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../checks/run_check.sh
id=$(sed -n 's|.*// CHECK: \([a-z-]*\)$|\1|p' "$src")
fault_opts=$(sed -n 's|^// FAULT-OPTS: *\(.*\)$|\1|p' "$src" | head -1)
[[ -n $id && -n $fault_opts ]] || { echo "run_fault: $src needs // CHECK: and FAULT-OPTS:" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "run_fault: FAIL: $*"; exit 1; }

echo "== 1. plain run: silent"
"$check" "$prog" "$src" --silent --rdmasan "$rdmasan" --fabric "$fabric-1" || fail "the plain run was not silent"

echo "== 2. with $fault_opts: $id"
# shellcheck disable=SC2086  # FAULT-OPTS is a list of options
"$check" "$prog" "$src" --expect-id "$id" --rdmasan "$rdmasan" --fabric "$fabric-2" $fault_opts \
  "--decision_log=$tmp/decisions" || fail "the fault did not expose $id"
grep -qE '^[a-z_.]+ obj=[0-9]+ hit=[0-9]+ outcome=[0-9]+' "$tmp/decisions" ||
  fail "no decision in the decision log: $(cat "$tmp/decisions")"
echo "-- decision log:"
cat "$tmp/decisions"

echo "== 3. --schedule=<that log> alone: $id again"
"$check" "$prog" "$src" --expect-id "$id" --rdmasan "$rdmasan" --fabric "$fabric-3" \
  "--schedule=$tmp/decisions" || fail "the schedule did not reproduce $id"
echo "run_fault: OK"
