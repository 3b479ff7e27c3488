#!/usr/bin/env bash
# cross_user_reports.sh RDMASAN OUTDIR PROGRAM: another user cannot read or
# rewrite a victim's reports by pre-creating files at their predictable
# names (issue 29 item 1).  In a folder anyone may write, the squatter
# plants mode-0666 files of its own at LOG.<pid>, LOG.<pid>.sarif and
# ./rdmasan.<pid>.sarif (and a symlink at the last): the victim's run must
# refuse at start (exit 2) naming the path and the reason, and write
# nothing into them; with nothing planted the same run writes its log and
# SARIF log as files of its own, mode 0600.  Needs root, to act as two
# throwaway users (setpriv); exits 77 (skipped) otherwise.
# PROGRAM: a check program that reports an Error finding (exit 66).
set -uo pipefail
rdmasan=$1 out=$2 prog=$3
# shellcheck source=two_users.sh
source "$(dirname "$0")/two_users.sh" || exit 2
two_users cross_user_reports 62000

dir="$out/cross_user_reports"
rm -rf "$dir" && mkdir -p "$dir" && chmod 0755 "$out" "$dir" || exit 2
fabric="xreports-$$"
shm=${RDMASAN_SOFTNIC_DIR:-/dev/shm}
cleanup() { rm -rf "$shm/rdmasan-$victim-$fabric" "$shm/rdmasan-$victim.d" "$dir"; }
[[ -n ${KEEP:-} ]] || trap cleanup EXIT
fail() { echo "cross_user_reports: FAIL: $*"; exit 1; }

shared="$dir/shared"  # no sticky bit: anyone may create and remove here
mkdir -m 0777 "$shared" || exit 2
home="$dir/victim"
mkdir -m 0700 "$home" && chown "$victim:$victim" "$home" || exit 2

# plant_and_run KIND NAMES... -- RDMASAN-OPTIONS...: the victim shell writes
# its pid and waits; the squatter plants KIND (file: a 0666 file saying
# "theirs"; link: a symlink to it) at each NAME (PID replaced by the pid);
# then the victim becomes `rdmasan run` (same pid) in the shared folder.
plant_and_run() {
  local kind=$1 names=() opts=() pid n
  shift
  while [[ $1 != -- ]]; do names+=("$1"); shift; done
  shift
  opts=("$@")
  rm -f "$home/pid" "$home/go"
  (cd "$shared" && as "$victim" sh -c "echo \$\$ > '$home/pid'; while [ ! -e '$home/go' ]; do sleep 0.05; done;
    exec \"\$0\" \"\$@\"" "$rdmasan" run --softnic_fabric="$fabric" "${opts[@]}" -- "$prog") \
    >"$dir/run.txt" 2>&1 &
  local runner=$!
  for _ in $(seq 1 100); do [[ -s $home/pid ]] && break; sleep 0.05; done
  pid=$(cat "$home/pid") || fail "the victim never started"
  for n in "${names[@]}"; do
    n="$shared/${n//PID/$pid}"
    case $kind in
      file) as "$squatter" sh -c "umask 0; echo theirs > '$n'" || exit 2 ;;
      link) as "$squatter" sh -c "umask 0; echo theirs > '$shared/target'; ln -s '$shared/target' '$n'" || exit 2 ;;
    esac
  done
  touch "$home/go"
  wait "$runner"
  status=$?
  planted_pid=$pid
}
untouched() {
  local f
  for f in "$@"; do
    f="$shared/${f//PID/$planted_pid}"
    [[ $(cat "$f") == theirs ]] || fail "$f was written: $(cat "$f")"
    [[ $(stat -c %u "$f") -eq $squatter ]] || fail "$f changed owner"
  done
  rm -f "$shared"/*
}
refused() {  # refused WHAT PATTERN
  [[ $status -eq 2 ]] && grep -Eq "$2" "$dir/run.txt" || fail "$1: exit $status, output: $(cat "$dir/run.txt")"
  echo "item 1: $1: refused at start: $(grep -Eo "$2.*" "$dir/run.txt" | head -1)"
}

plant_and_run file log.PID -- --log_path="$shared/log"
refused "a 0666 file of the squatter's at LOG.<pid>" "log_path: cannot create '$shared/log\.[0-9]+': owned by uid $squatter"
untouched log.PID

plant_and_run file log.PID.sarif -- --log_path="$shared/log" --report_format=sarif
refused "a 0666 file at LOG.<pid>.sarif" "report_format=sarif: will not write the SARIF log '$shared/log\.[0-9]+\.sarif': owned by uid $squatter"
untouched log.PID.sarif

plant_and_run file rdmasan.PID.sarif -- --report_format=sarif
refused "a 0666 file at ./rdmasan.<pid>.sarif" "will not write the SARIF log 'rdmasan\.[0-9]+\.sarif': owned by uid $squatter"
untouched rdmasan.PID.sarif

plant_and_run link rdmasan.PID.sarif -- --report_format=sarif
refused "a symlink at ./rdmasan.<pid>.sarif" "will not write the SARIF log 'rdmasan\.[0-9]+\.sarif': a symlink"
untouched target

# Control: nothing planted.  The run ends as its finding says, and both
# files are the victim's own, readable by nobody else.
plant_and_run file -- --log_path="$shared/log" --report_format=sarif
[[ $status -eq 66 ]] || fail "the unsquatted run: exit $status: $(cat "$dir/run.txt")"
for f in "$shared/log.$planted_pid" "$shared/log.$planted_pid.sarif"; do
  [[ $(stat -c '%u %a' "$f") == "$victim 600" ]] || fail "$f: $(stat -c 'owner %u mode %a' "$f"), not the victim's 0600"
done
grep -q "sq-overflow" "$shared/log.$planted_pid" || fail "the log lacks the finding"
echo "item 1: nothing planted: exit 66, log and SARIF log are the victim's, mode 0600"
echo "cross_user_reports: PASS"
