#!/usr/bin/env bash
# tree_test.sh: one case of the process-tree tests (CMakeLists.txt here).
# Each runs tree_prog under `rdmasan run` with the default options, then
# checks the exit status and every trace left, with `rdmasan trace stats`
# and `rdmasan replay`:
#   system         a system("true | true") does not replace the live PATH:
#                  PATH holds the program's events and replays its finding
#   exec           (trace=t.%p) the exec'd image writes t.<pid>.1, the
#                  first image's t.<pid> keeps its events and finding
#   fork           the forked child's events and finding are in PATH.<pid>
#   daemon         daemon()'s fork is checked (fork-with-mrs) and its
#                  child traced in PATH.<pid>
#   _exit, _Exit   exit status 66, the SARIF log, the complete trace
#   fds.HOW        the trace and the log survive a close / dup2 / raw close
#                  sweep of the program's folder, and the program's own
#                  file holds only what it wrote
#
# usage: tree_test.sh RDMASAN TREE_PROG OUTDIR CASE
set -uo pipefail
rdmasan=$1 prog=$2 case=$4
out="$3/tree-$case"
rm -rf "$out"
mkdir -p "$out"
fabric="e2e-tree-$case-$$"
fail() {
  echo "tree_test $case: FAIL: $*"
  exit 1
}
run() { "$rdmasan" run --softnic_fabric="$fabric" "$@"; }
events() { "$rdmasan" trace stats "$1" 2>/dev/null | awk '/^events:/ {print $2}'; }
# replay FILE STATUS FINDING: replays FILE, expects STATUS and FINDING
# (a check id) among its reports, or none at all for "-".
replay() {
  local log="$out/replay-$(basename "$1").txt" status
  "$rdmasan" replay --log_path=stderr "$1" >"$log" 2>&1
  status=$?
  [[ $status -eq $2 ]] || fail "replay $1 exited $status, not $2: $(tail -5 "$log")"
  if [[ $3 == - ]]; then
    ! grep -Eq '==[0-9]+==(ERROR|WARNING): rdmasan:' "$log" || fail "replay $1 reported: $(grep rdmasan: "$log" | head -3)"
  else
    grep -q "rdmasan: $3" "$log" || fail "replay $1 lacks $3: $(tail -5 "$log")"
  fi
}
complete() {
  [[ -f $1 ]] || fail "no trace $1 (folder: $(ls "$out" | tr '\n' ' '))"
  [[ ! -e $1.incomplete ]] || fail "$1.incomplete left behind"
  local n
  n=$(events "$1")
  [[ ${n:-0} -gt 10 ]] || fail "$1 holds ${n:-0} events"
}
expect_status() {
  [[ $1 -eq $2 ]] || fail "the program exited $1, not $2: $(tail -5 "$out/run.txt")"
}

case $case in
  system)
    run --trace="$out/t" -- "$prog" system >"$out/run.txt" 2>&1
    expect_status $? 66
    complete "$out/t"
    "$rdmasan" trace stats "$out/t" 2>&1 | grep -q "^trace: .*tree_prog" ||
      fail "t is not tree_prog's trace: $("$rdmasan" trace stats "$out/t" 2>&1 | head -1)"
    replay "$out/t" 66 dereg-in-flight
    # The shell and `true` make no verbs call: no trace of theirs.
    [[ -z $(ls "$out" | grep '^t\.') ]] || fail "traces of processes without verbs calls: $(ls "$out")"
    ;;
  exec)
    run --trace="$out/t.%p" -- "$prog" exec >"$out/run.txt" 2>&1
    expect_status $? 0
    first=$(ls "$out" | grep -E '^t\.[0-9]+$')
    [[ -n $first ]] || fail "no t.<pid>: $(ls "$out" | tr '\n' ' ')"
    complete "$out/$first"
    complete "$out/$first.1"
    replay "$out/$first" 66 dereg-in-flight
    replay "$out/$first.1" 0 -
    grep -q "$first.1" "$out/replay-$first.txt" || fail "replay of $first does not name $first.1"
    "$rdmasan" replay "$out/$first" "$out/$first.1" >"$out/replay-both.txt" 2>&1
    status=$?
    [[ $status -eq 66 ]] || fail "replay of both exited $status"
    [[ $(grep -c "rdmasan: replaying" "$out/replay-both.txt") -eq 2 ]] || fail "replay of both: $(cat "$out/replay-both.txt")"
    ;;
  fork)
    run --trace="$out/t" -- "$prog" fork >"$out/run.txt" 2>&1
    expect_status $? 0
    child=$(sed -n 's/^tree_prog: child \([0-9]*\) exited 66$/\1/p' "$out/run.txt")
    [[ -n $child ]] || fail "the child did not exit 66: $(grep child "$out/run.txt")"
    complete "$out/t"
    complete "$out/t.$child"
    replay "$out/t" 0 -
    replay "$out/t.$child" 66 dereg-in-flight
    "$rdmasan" trace stats "$out/t.$child" >"$out/stats-child.txt" 2>&1
    grep -q "(pid $child," "$out/stats-child.txt" || fail "t.$child: $(head -1 "$out/stats-child.txt")"
    ;;
  daemon)
    run --trace="$out/t" -- "$prog" daemon "$out" >"$out/run.txt" 2>&1
    expect_status $? 0
    grep -q "rdmasan: fork-with-mrs" "$out/run.txt" || fail "daemon()'s fork was not checked: $(tail -5 "$out/run.txt")"
    for _ in $(seq 1 200); do [[ -f $out/daemon.pid ]] && break; sleep 0.1; done
    [[ -f $out/daemon.pid ]] || fail "the daemon never finished"
    child=$(cat "$out/daemon.pid")
    for _ in $(seq 1 100); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    complete "$out/t"
    complete "$out/t.$child"
    replay "$out/t" 0 fork-with-mrs
    replay "$out/t.$child" 0 -
    ;;
  _exit | _Exit)
    (cd "$out" && run --trace="$out/t" --report_format=sarif -- "$prog" "$case") >"$out/run.txt" 2>&1
    expect_status $? 66
    grep -q "tree_prog: $case done" "$out/run.txt" || fail "the program did not reach $case"
    sarif=$(ls "$out" | grep -E '^rdmasan\.[0-9]+\.sarif$')
    [[ -n $sarif ]] || fail "no SARIF log written: $(ls "$out" | tr '\n' ' ')"
    grep -q '"ruleId": *"dereg-in-flight"' "$out/$sarif" || fail "the SARIF log lacks the finding"
    complete "$out/t"
    replay "$out/t" 66 dereg-in-flight
    ;;
  fds.*)
    how=${case#fds.}
    for mode in none "$how"; do
      mkdir -p "$out/$mode"
      run --trace="$out/$mode/t" --log_path="$out/$mode/log" -- "$prog" "$mode" "$out/$mode" >"$out/run-$mode.txt" 2>&1
      status=$?
      [[ $status -eq 66 ]] || fail "$mode: the program exited $status, not 66: $(tail -5 "$out/run-$mode.txt")"
      printf 'program data 1\nprogram data 2\n' | cmp -s - "$out/$mode/data.txt" ||
        fail "$mode: the program's file holds more than it wrote ($(wc -c <"$out/$mode/data.txt") bytes)"
      grep -q "rdmasan: dereg-in-flight" "$out/$mode"/log.* || fail "$mode: the log lacks the finding"
      complete "$out/$mode/t"
      replay "$out/$mode/t" 66 dereg-in-flight
    done
    want=$(events "$out/none/t") got=$(events "$out/$how/t")
    [[ $got -eq $want ]] || fail "$how: the trace holds $got events, the undisturbed run's $want"
    ;;
  *) fail "unknown case" ;;
esac
echo "tree_test $case: PASS"
