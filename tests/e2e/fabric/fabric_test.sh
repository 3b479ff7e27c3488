#!/usr/bin/env bash
# fabric_test.sh: the life cycle of softnic's fabric file, as real programs
# under `rdmasan run` live it (issue 10 items 5 and 16).
#
# usage: fabric_test.sh --rdmasan RDMASAN --bin DIR CASE
#   fork_child_exit  a forked child's exit() leaves the parent's slot,
#                    objects and file alone and prints no findings of the
#                    parent's; the parent, ending with findings, removes
#                    the file
#   killed_peer      of two processes, one is SIGKILLed; the survivor's
#                    normal exit removes the file
#   killed_last      the last of two processes is SIGKILLed; the next
#                    softnic run of the user (another fabric) removes it
#   exit_together    two processes exit at the same moment (5 rounds); the
#                    file is gone after each
#   small_shm_cq     (item 8) with a 64 MiB /dev/shm, large CQs end in
#                    ENOMEM from ibv_create_cq, not SIGBUS
#   full_shm_devices (item 8) with a full /dev/shm, `rdmasan devices` fails
#                    with a message, not a signal
#   sigterm          (issue 29 item 11) a process ended by SIGTERM removes
#                    the file, as an exit does, and still dies of SIGTERM
#   killed_cm        (issue 29 item 11) an rdma_cm server (rping -s) is
#                    SIGKILLed; the next softnic run of the user removes its
#                    rdma_cm folder
# Each run uses a fabric of its own (fabric-<case>-<pid>) and, unless
# RDMASAN_SOFTNIC_DIR is set, a runtime directory of its own
# (XDG_RUNTIME_DIR, softnic/user_dir.h), where softnic keeps its files.  The tmpfs cases
# need a mount namespace (root, or unprivileged user namespaces): without
# one they exit 77 (skipped).  Exit 0: pass.
set -uo pipefail

rdmasan="" bin="" case=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) case=$1; shift ;;
  esac
done
[[ -x $rdmasan && -d $bin && -n $case ]] || { echo "usage: $0 --rdmasan R --bin DIR CASE" >&2; exit 2; }

fabric="fabric-$case-$$"
runtime=""
if [[ -n ${RDMASAN_SOFTNIC_DIR:-} ]]; then
  udir="$RDMASAN_SOFTNIC_DIR/rdmasan-$(id -u).d"
else
  runtime=$(mktemp -d /dev/shm/rdmasan-runtime-XXXXXX) || exit 2
  export XDG_RUNTIME_DIR=$runtime
  udir="$runtime/rdmasan"
fi
file="$udir/fabric-$fabric"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
  rm -f "$file" "$file-next"
  [[ -z $runtime ]] || rm -rf "$runtime"
}
trap cleanup EXIT
fail() { echo "FAIL($case): $*"; for f in "$tmp"/*.out; do [[ -f $f ]] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
run() { "$rdmasan" run "--softnic_fabric=$fabric" -- "$@"; }

# Starts fabric_hold in the background as $tmp/<tag>.out, holding on until
# $tmp/go_<tag> exists; sets $<tag> to its pid (the program's own: rdmasan
# run execs it) and waits for READY.
hold() {
  "$rdmasan" run "--softnic_fabric=$fabric" -- "$bin/fabric_hold" "$tmp/go_$1" >"$tmp/$1.out" 2>&1 &
  pids+=($!)
  eval "$1=$!"
  for _ in $(seq 1 500); do
    grep -q READY "$tmp/$1.out" 2>/dev/null && return 0
    sleep 0.02
  done
  fail "$1 never became READY"
}

file_gone() {
  for _ in $(seq 1 100); do [[ -e $file ]] || return 0; sleep 0.02; done
  fail "the fabric file $file is left behind ($2)"
}

# Runs "$@" in a mount namespace of its own where /dev/shm is a tmpfs of
# size $1 (what a container gets); with FILL=1 the tmpfs is filled first.
in_small_tmpfs() {
  local size=$1; shift
  local script='mount -t tmpfs -o "size=$0,mode=1777" none /dev/shm || exit 77
    if [ -n "${FILL:-}" ]; then dd if=/dev/zero of=/dev/shm/filler bs=1M >/dev/null 2>&1; fi
    unset RDMASAN_SOFTNIC_DIR XDG_RUNTIME_DIR; exec "$@"'
  if unshare -m true 2>/dev/null; then
    unshare -m sh -c "$script" "$size" "$@"
  elif unshare -rm true 2>/dev/null; then
    unshare -rm sh -c "$script" "$size" "$@"
  else
    return 77
  fi
}

case $case in
  small_shm_cq)
    in_small_tmpfs 64m timeout 60 "$rdmasan" run "--softnic_fabric=$fabric" -- "$bin/big_cq" \
      >"$tmp/run.out" 2>&1
    status=$?
    [[ $status == 77 ]] && { echo "SKIP: no mount namespace"; exit 77; }
    [[ $status == 0 ]] || fail "exit status $status (>128: killed by signal $((status - 128)))"
    grep -q '^ENOMEM after [1-9]' "$tmp/run.out" || fail "no ENOMEM"
    ;;
  full_shm_devices)
    FILL=1 in_small_tmpfs 8m timeout 60 "$rdmasan" devices "--softnic_fabric=$fabric" \
      >"$tmp/run.out" 2>&1
    status=$?
    [[ $status == 77 ]] && { echo "SKIP: no mount namespace"; exit 77; }
    [[ $status == 1 ]] || fail "exit status $status, want 1 (>128: killed by signal $((status - 128)))"
    grep -q 'no room for the fabric' "$tmp/run.out" || fail "no message about the full file system"
    grep -q 'Cannot allocate memory' "$tmp/run.out" || fail "ibv_open_device did not fail with ENOMEM"
    ;;
  fork_child_exit)
    timeout 60 "$rdmasan" run "--softnic_fabric=$fabric" -- "$bin/fork_child_exit" "$file" \
      >"$tmp/run.out" 2>&1
    status=$?
    child=$(sed -n 's/^CHILD \([0-9]*\)$/\1/p' "$tmp/run.out")
    grep -q '^DONE$' "$tmp/run.out" || fail "the parent did not finish (status $status)"
    [[ $status == 66 ]] || fail "exit status $status, want 66 (the parent's sge-count finding)"
    [[ -n $child ]] || fail "no CHILD line"
    grep -Eq "^==$child==" "$tmp/run.out" && fail "the child ($child) printed rdmasan output"
    grep -Eq '^==[0-9]+==rdmasan: [0-9]+ findings?: .*sge-count' "$tmp/run.out" ||
      fail "the parent's summary is missing"
    file_gone "after a run that ended with findings"
    ;;
  killed_peer)
    hold a
    hold b
    [[ -e $file ]] || fail "no fabric file $file while two processes hold it"
    kill -9 "$a"
    wait "$a" 2>/dev/null
    touch "$tmp/go_b"
    wait "$b" || fail "the survivor failed"
    file_gone "after the SIGKILLed peer's survivor exited"
    ;;
  killed_last)
    hold a
    hold b
    touch "$tmp/go_b"
    wait "$b" || fail "b failed"
    kill -9 "$a"
    wait "$a" 2>/dev/null
    # Nobody is left to remove it; the next softnic user of this user does,
    # whatever fabric it uses.
    "$rdmasan" devices "--softnic_fabric=$fabric-next" >"$tmp/next.out" 2>&1 ||
      fail "rdmasan devices failed"
    file_gone "after the last process was SIGKILLed and another softnic run ended"
    [[ -e "$file-next" ]] && fail "rdmasan devices left its own fabric file"
    ;;
  exit_together)
    for round in 1 2 3 4 5; do
      rm -f "$tmp/go_a" "$tmp/go_b"
      hold a
      hold b
      touch "$tmp/go_a" "$tmp/go_b"
      wait "$a" || fail "round $round: a failed"
      wait "$b" || fail "round $round: b failed"
      file_gone "round $round: both processes exited together"
    done
    ;;
  sigterm)
    hold a
    [[ -e $file ]] || fail "no fabric file $file while a process holds it"
    kill -TERM "$a"
    wait "$a"
    status=$?
    [[ $status == 143 ]] || fail "exit status $status, want 143 (killed by SIGTERM)"
    file_gone "after SIGTERM, with no other softnic run since"
    ;;
  killed_cm)
    port=$((20000 + $$ % 20000))
    folder="$udir/cm-$fabric"
    "$rdmasan" run "--softnic_fabric=$fabric" -- rping -s -a 127.0.0.1 -p "$port" >"$tmp/a.out" 2>&1 &
    a=$!
    pids+=("$a")
    for _ in $(seq 1 500); do
      compgen -G "$folder/p*-$port" >/dev/null && break
      sleep 0.02
    done
    compgen -G "$folder/p*-$port" >/dev/null || fail "rping -s never bound port $port in $folder"
    kill -9 "$a"
    wait "$a" 2>/dev/null
    [[ -d $folder ]] || fail "no rdma_cm folder $folder after the SIGKILL"
    "$rdmasan" devices "--softnic_fabric=$fabric-next" >"$tmp/next.out" 2>&1 || fail "rdmasan devices failed"
    [[ -e $folder ]] && fail "the SIGKILLed server's rdma_cm folder is left behind: $(ls -la "$folder")"
    ;;
  *) echo "unknown case $case" >&2; exit 2 ;;
esac
echo "PASS($case)"
