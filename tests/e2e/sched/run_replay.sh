#!/usr/bin/env bash
# run_replay.sh: a finding found under decided faults or orders is found
# again from the decision log alone.
#
# usage: run_replay.sh [--env RDMASAN_OPTIONS_VALUE] PROG SOURCE ID RDMASAN FABRIC
#                      [rdmasan options...]
# Runs PROG under the options (and RDMASAN_OPTIONS, if --env) with --decision_log=LOG (run_check.sh must
# see finding ID at SOURCE's marker), checks that LOG recorded decisions,
# then runs PROG again with only --schedule=LOG and wants the same finding.
set -uo pipefail
env_opts=""
if [[ ${1:-} == --env ]]; then
  env_opts=$2
  shift 2
fi
[[ $# -ge 5 ]] || { echo "usage: run_replay.sh PROG SOURCE ID RDMASAN FABRIC [options...]" >&2; exit 2; }
prog=$1 src=$2 id=$3 rdmasan=$4 fabric=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp "${TMPDIR:-/tmp}/rdmasan-replay-XXXXXX.log")
trap 'rm -f "$log"' EXIT
RDMASAN_OPTIONS=$env_opts "$here/../checks/run_check.sh" "$prog" "$src" --expect-id "$id" --rdmasan "$rdmasan" \
  --fabric "$fabric-rec" "$@" "--decision_log=$log" || { echo "run_replay: the recording run did not find $id"; exit 1; }
if ! grep -qv '^#' "$log"; then
  echo "run_replay: no decision recorded in $log"
  exit 1
fi
echo "--- decision log:"
cat "$log"
# The replay: nothing but the log (RDMASAN_OPTIONS cleared).
RDMASAN_OPTIONS= "$here/../checks/run_check.sh" "$prog" "$src" --expect-id "$id" --rdmasan "$rdmasan" \
  --fabric "$fabric-rep" "--schedule=$log" || { echo "run_replay: the replay did not find $id again"; exit 1; }
echo "run_replay: $id found again from the decision log"
