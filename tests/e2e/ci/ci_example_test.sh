#!/usr/bin/env bash
# ci_example_test.sh: runs examples/ci/rdmasan-tests.sh, the steps of the
# user CI example, as a CI job would, and checks what the job shows.
#
# usage: ci_example_test.sh CASE RDMASAN OUTDIR [PROGRAM...]
#   clean     PROGRAMS: a correct check program, rpc_pair.  ibv_devinfo and
#             both programs pass: exit 0, a PASS line each, no finding, a
#             SARIF log per command with no result, a merged log with none.
#   findings  PROGRAMS: a correct program, one with a planted sq-overflow,
#             one with a warning (error-completion).  Exit 66; the planted
#             bug's command is named in a FAIL line with its check id; its
#             report is printed; its SARIF log and the merged log hold an
#             sq-overflow result; the warning passes, and fails the job with
#             --fail-on-warnings.
#   pair      PROGRAMS: pair.sh, rpc_server, rpc_client, then a TCP port.
#             A wrapper script that starts a server and a client is one
#             command: its correct mode passes; its sq-overflow mode fails
#             the job (66) with the finding, a SARIF log from each of the
#             two processes and the finding in the merged log.
#   failures  no PROGRAMS.  A command exiting 3 and one not found fail the
#             job with exit 1, each named with its status; a bad option and
#             no commands are usage errors (exit 2); --commands FILE reads
#             one command a line, skipping comments and blank lines.
set -uo pipefail

[[ $# -ge 3 ]] || { echo "usage: ci_example_test.sh CASE RDMASAN OUTDIR [PROGRAM...]" >&2; exit 2; }
case_=$1 rdmasan=$2 outdir=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../../../examples/ci/rdmasan-tests.sh
work=$outdir/ci_example.$case_
rm -rf "$work"
mkdir -p "$work"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# run_job NAME ARGS...: the script with ARGS; output in $work/NAME.log,
# status in $status, its --out folder $work/NAME.
run_job() {
  local name=$1
  shift
  status=0
  "$script" --rdmasan "$rdmasan" --out "$work/$name" "$@" > "$work/$name.log" 2>&1 || status=$?
  echo "--- $name: exit $status"
  cat "$work/$name.log"
}
# q STRING: STRING quoted for an extended regex.
q() { printf '%s' "$1" | sed 's/[][\.*^$+?(){}|]/\\&/g'; }
want_status() { [[ $status -eq $1 ]] || fail "$2: exit status $status, wanted $1"; }
want_line() {  # want_line LOG REGEX: some line of LOG matches the extended REGEX
  grep -Eq -- "$2" "$1" || fail "$(basename "$1"): no line matching /$2/"
}
# results FILE: the number of results in a SARIF log (each has one ruleId).
results() { grep -c '"ruleId"' "$1"; }
# Every command folder 1..N holds at least one SARIF log.
want_sarif_per_command() {
  local dir=$1 n=$2 i
  for ((i = 1; i <= n; i++)); do
    compgen -G "$dir/$i/rdmasan.*.sarif" > /dev/null || fail "$dir/$i: no SARIF log"
  done
}

case $case_ in
  clean)
    [[ $# -eq 2 ]] || { echo "clean wants CONTROL RPC_PAIR" >&2; exit 2; }
    control=$1 rpc_pair=$2
    run_job clean -- ibv_devinfo "$control" "$rpc_pair --mode correct -n 8 -r 20"
    log=$work/clean.log
    want_status 0 "three correct commands"
    want_line "$log" "^PASS  \[1\] ibv_devinfo$"
    want_line "$log" "^PASS  \[2\] $(q "$control")$"
    want_line "$log" "^PASS  \[3\] $(q "$rpc_pair") --mode correct -n 8 -r 20$"
    want_line "$log" "^rdmasan-tests: 3 command\(s\), 3 passed, 0 failed; findings: 0 error\(s\), 0 warning\(s\); SARIF: $(q "$work/clean/rdmasan.sarif")$"
    ! grep -Eq "^==[0-9]+==(ERROR|WARNING): rdmasan:" "$log" || fail "a report in a clean job"
    want_sarif_per_command "$work/clean" 3
    for f in "$work"/clean/*/rdmasan.*.sarif "$work/clean/rdmasan.sarif"; do
      [[ -f $f ]] || { fail "no SARIF log $f"; continue; }
      [[ $(results "$f") -eq 0 ]] || fail "$f: results in a clean job"
      grep -q '"version": "2.1.0"' "$f" || fail "$f: not a SARIF 2.1.0 log"
    done
    ;;
  findings)
    [[ $# -eq 3 ]] || { echo "findings wants CONTROL BUG WARNING" >&2; exit 2; }
    control=$1 bug=$2 warn=$3
    run_job findings -- "$control" "$bug" "$warn"
    log=$work/findings.log
    want_status 66 "a command with an Error finding"
    want_line "$log" "^PASS  \[1\] $(q "$control")$"
    want_line "$log" "^FAIL  \[2\] $(q "$bug"): exit 66, findings: 1 error\(s\), 0 warning\(s\): sq-overflow \(1\)$"
    want_line "$log" "^PASS  \[3\] $(q "$warn") \(0 error\(s\), 1 warning\(s\): error-completion \(1\)\)$"
    want_line "$log" "^==[0-9]+==ERROR: rdmasan: sq-overflow: "
    want_line "$log" "^SUMMARY: rdmasan: sq-overflow sq_overflow.c:[0-9]+ in main$"
    want_line "$log" "^rdmasan-tests: 3 command\(s\), 2 passed, 1 failed; findings: 1 error\(s\), 1 warning\(s\); SARIF: "
    want_sarif_per_command "$work/findings" 3
    grep -q '"ruleId": "sq-overflow"' "$work"/findings/2/rdmasan.*.sarif ||
      fail "command 2's SARIF log has no sq-overflow result"
    merged=$work/findings/rdmasan.sarif
    if [[ -f $merged ]]; then
      grep -q '"ruleId": "sq-overflow"' "$merged" || fail "the merged SARIF log has no sq-overflow result"
      grep -q '"ruleId": "error-completion"' "$merged" || fail "the merged SARIF log has no error-completion result"
      [[ $(results "$merged") -eq 2 ]] || fail "the merged SARIF log: $(results "$merged") results, wanted 2"
    else
      fail "no merged SARIF log"
    fi
    # The warning alone passes; with --fail-on-warnings it fails the job.
    run_job strict --fail-on-warnings -- "$warn"
    want_status 66 "a Warning finding under --fail-on-warnings"
    want_line "$work/strict.log" "^FAIL  \[1\] $(q "$warn"): exit 0, findings: 0 error\(s\), 1 warning\(s\): error-completion \(1\)$"
    ;;
  pair)
    [[ $# -eq 4 ]] || { echo "pair wants PAIR_SH RPC_SERVER RPC_CLIENT PORT" >&2; exit 2; }
    pair=$1 server=$2 client=$3 port=$4
    run_job pair --timeout 60 -- "$pair $server $client $port correct" "$pair $server $client $port sq-overflow"
    log=$work/pair.log
    want_status 66 "a pair with a planted sq-overflow"
    want_line "$log" "^PASS  \[1\] $(q "$pair") .* correct$"
    want_line "$log" "^FAIL  \[2\] $(q "$pair") .* sq-overflow: exit 66, findings: 1 error\(s\), 0 warning\(s\): sq-overflow \(1\)$"
    want_sarif_per_command "$work/pair" 2
    for i in 1 2; do
      sarifs=("$work/pair/$i"/rdmasan.*.sarif)
      [[ ${#sarifs[@]} -ge 2 ]] || fail "pair command $i: ${#sarifs[@]} SARIF log(s), wanted one per process (2)"
    done
    grep -q '"ruleId": "sq-overflow"' "$work/pair/rdmasan.sarif" || fail "the merged SARIF log has no sq-overflow result"
    ;;
  failures)
    printf '%s\n' "# the project's tests" "" "  sh -c 'exit 3'  " "no-such-test-program --flag" > "$work/commands"
    run_job failures --commands "$work/commands"
    log=$work/failures.log
    want_status 1 "commands that fail without findings"
    want_line "$log" "^FAIL  \[1\] sh -c 'exit 3': exit 3$"
    want_line "$log" "^FAIL  \[2\] no-such-test-program --flag: exit 127 \(command not found\)$"
    want_line "$log" "^rdmasan-tests: 2 command\(s\), 0 passed, 2 failed; findings: 0 error\(s\), 0 warning\(s\)"
    run_job no_commands --
    want_status 2 "no commands"
    want_line "$work/no_commands.log" "no commands"
    run_job own_option --log_path=x -- true
    want_status 2 "an option the script sets itself"
    want_line "$work/own_option.log" "--log_path is set by this script"
    run_job bad_rdmasan_option --no_such_option=1 -- true
    want_status 1 "an option rdmasan does not know"
    want_line "$work/bad_rdmasan_option.log" "^FAIL  \[1\] true: exit 2$"
    ;;
  *)
    echo "unknown case '$case_'" >&2
    exit 2
    ;;
esac

if [[ $failures -gt 0 ]]; then
  echo "FAIL: ci_example.$case_: $failures check(s) failed"
  exit 1
fi
echo "PASS: ci_example.$case_"
