#!/usr/bin/env bash
# cross_user.sh RDMASAN OUTDIR PROGRAM: another user on the machine cannot
# deny softnic to a victim or make rdmasan write through a planted link
# (issue 10 items 13 and 14; item 12, forged and squatted event sockets, is
# unit.softnic_device_test's SoftnicPair.EventsFromAnotherUserAreDropped,
# also root-only).  Needs root, to act as two throwaway users (numeric ids
# with no passwd entry, through setpriv); exits 77 (skipped) otherwise.
# PROGRAM: a check program that reports an Error finding (exit 66).
set -uo pipefail
rdmasan=$1 out=$2 prog=$3
# shellcheck source=two_users.sh
source "$(dirname "$0")/two_users.sh" || exit 2
two_users cross_user 61000

dir="$out/cross_user"
rm -rf "$dir" && mkdir -p "$dir" && chmod 0755 "$out" "$dir" || exit 2
fabric="xuser-$$"
shm=${RDMASAN_SOFTNIC_DIR:-/dev/shm}
cleanup() { rm -rf "$shm/rdmasan-$victim-$fabric" "$shm/rdmasan-$victim.d" "$dir"; }
[[ -n ${KEEP:-} ]] || trap cleanup EXIT
fail() { echo "cross_user: FAIL: $*"; exit 1; }

# Item 13: the squatter pre-creates the victim's predictable fabric file.
as "$squatter" sh -c "umask 0; : > '$shm/rdmasan-$victim-$fabric'" || exit 2
as "$victim" "$rdmasan" run --softnic_fabric="$fabric" -- ibv_devinfo >"$dir/devinfo.txt" 2>&1
status=$?
[[ $status -eq 0 ]] || fail "a squatted fabric name denied softnic (exit $status): $(cat "$dir/devinfo.txt")"
grep -q "softnic0" "$dir/devinfo.txt" || fail "ibv_devinfo lists no softnic0: $(cat "$dir/devinfo.txt")"
[[ $(stat -c %s "$shm/rdmasan-$victim-$fabric") -eq 0 ]] || fail "the squatter's file was written"
echo "item 13: squatted fabric name: softnic still works ($(grep -c 'using' "$dir/devinfo.txt") notice)"

# Item 14: in a folder anyone can write (no sticky bit, so the kernel's
# protected_symlinks does not help), the squatter plants links from the
# victim's trace, log and SARIF names to a file of the victim's.
shared="$dir/shared"
mkdir -m 0777 "$shared" || exit 2
home="$dir/victim"
mkdir -m 0700 "$home" && chown "$victim:$victim" "$home" || exit 2
precious="$home/precious"
as "$victim" sh -c "echo precious > '$precious'" || exit 2
as "$squatter" sh -c "ln -s '$precious' '$shared/t.trace.incomplete'; ln -s '$precious' '$shared/t.trace'" || exit 2
# The log and SARIF names carry the pid: the victim waits until the links
# for its pid are planted, then becomes the program (same pid), in the
# shared folder.  victim_run NAME-SUFFIXES... -- RDMASAN-OPTIONS...
victim_run() {
  local suffixes=() opts=() pid
  while [[ $1 != -- ]]; do suffixes+=("$1"); shift; done
  shift
  opts=("$@")
  rm -f "$home/pid" "$home/go"
  (cd "$shared" && as "$victim" sh -c "echo \$\$ > '$home/pid'; while [ ! -e '$home/go' ]; do sleep 0.05; done;
    exec \"\$0\" \"\$@\"" "$rdmasan" run --softnic_fabric="$fabric" "${opts[@]}" -- "$prog") \
    >"$dir/run.txt" 2>&1 &
  local runner=$!
  for _ in $(seq 1 100); do [[ -s $home/pid ]] && break; sleep 0.05; done
  pid=$(cat "$home/pid") || fail "the victim never started"
  for suffix in "${suffixes[@]}"; do
    as "$squatter" ln -s "$precious" "$shared/${suffix//PID/$pid}" || exit 2
  done
  touch "$home/go"
  wait "$runner"
}
intact() { [[ $(cat "$precious") == precious ]] || fail "$1: the victim's file was overwritten through a planted link"; }

victim_run log.PID -- --log_path="$shared/log"
status=$?
intact log_path
[[ $status -eq 2 ]] && grep -q "log_path: cannot create.*: a symlink" "$dir/run.txt" ||
  fail "log_path through a planted link: exit $status: $(cat "$dir/run.txt")"
echo "item 14: a link planted at the log: refused at start (exit 2), the victim's file intact"

victim_run -- --trace="$shared/t.trace"
status=$?
intact trace
[[ $status -eq 66 ]] || fail "the checked run did not end as its finding says (exit $status): $(cat "$dir/run.txt")"
grep -q "cannot record the trace" "$dir/run.txt" || fail "no word on the refused trace: $(cat "$dir/run.txt")"
echo "item 14: links planted at the trace: not followed, the victim's file intact"

# The SARIF log is written at exit, but its path is checked at start
# (issue 29 item 1): a link there stops the run before the program runs.
victim_run rdmasan.PID.sarif -- --report_format=sarif
status=$?
intact SARIF
[[ $status -eq 2 ]] && grep -q "will not write the SARIF log 'rdmasan\.[0-9]*\.sarif': a symlink" "$dir/run.txt" ||
  fail "SARIF through a planted link: exit $status: $(cat "$dir/run.txt")"
echo "item 14: a link planted at the SARIF log: refused at start (exit 2), the victim's file intact"
echo "cross_user: PASS"
