#!/usr/bin/env bash
# cross_user_squat.sh RDMASAN OUTDIR: another user on the machine cannot
# deny softnic to a victim by squatting its names with directories, nor
# reach the victim's softnic files (issue 29 item 2; softnic/user_dir.h).
# Needs root, to act as two throwaway users (numeric ids with no passwd
# entry, through setpriv), as e2e.cross_user; exits 77 (skipped) otherwise.
set -uo pipefail
rdmasan=$1 out=$2
# shellcheck source=two_users.sh
source "$(dirname "$0")/../two_users.sh" || exit 2
two_users cross_user_squat 63000

dir="$out/cross_user_squat"
rm -rf "$dir" && mkdir -p "$dir" && chmod 0755 "$out" "$dir" || exit 2
fabric="xsquat-$$"
shm=${RDMASAN_SOFTNIC_DIR:-/dev/shm}
xdg=""
cleanup() {
  rm -rf "$shm/rdmasan-$victim-$fabric"* "$shm/rdmasan-$victim".* "$dir"
  [[ -z $xdg ]] || rm -rf "$xdg"
}
[[ -n ${KEEP:-} ]] || trap cleanup EXIT
fail() { echo "cross_user_squat: FAIL: $*"; exit 1; }

# Issue 29 item 2: a directory at the old predictable fabric name.
as "$squatter" mkdir -m 777 "$shm/rdmasan-$victim-$fabric-d" || exit 2
as "$victim" "$rdmasan" run --softnic_fabric="$fabric-d" -- ibv_devinfo >"$dir/devinfo.txt" 2>&1
status=$?
[[ $status -eq 0 ]] || fail "a directory squatting the fabric name denied softnic (exit $status): $(cat "$dir/devinfo.txt")"
echo "item 2: a directory at the fabric's name: softnic still works"

# And the per-user directory taken as well: softnic moves to a name the
# squatter could not take first, says so, keeps it the victim's alone, and
# two processes of the victim still meet there (a pingpong pair).
rm -rf "$shm/rdmasan-$victim.d"
as "$squatter" mkdir -m 777 "$shm/rdmasan-$victim.d" || exit 2
port=$((18000 + $$ % 2000))
as "$victim" "$rdmasan" run --softnic_fabric="$fabric-d" -- ibv_rc_pingpong -d softnic0 -p "$port" -n 5 \
  >"$dir/server.txt" 2>&1 &
server=$!
hex=$(printf ':%04X' "$port")
for _ in $(seq 1 200); do
  awk -v p="$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 && break
  sleep 0.05
done
as "$victim" "$rdmasan" run --softnic_fabric="$fabric-d" -- ibv_rc_pingpong -d softnic0 -p "$port" -n 5 127.0.0.1 \
  >"$dir/client.txt" 2>&1
cstatus=$?
wait "$server"
sstatus=$?
[[ $cstatus -eq 0 && $sstatus -eq 0 ]] ||
  fail "with the name and the per-user directory taken, a pair did not meet (client $cstatus, server $sstatus): $(cat "$dir/client.txt" "$dir/server.txt")"
grep -q "using $shm/rdmasan-$victim\.[0-9a-f]\{12\} instead" "$dir/client.txt" ||
  fail "no word on the move: $(cat "$dir/client.txt")"
moved=$(compgen -G "$shm/rdmasan-$victim.????????????") || fail "no directory of the victim's own"
[[ $(stat -c '%u %a' "$moved") == "$victim 700" ]] || fail "$moved is not the victim's alone: $(stat -c '%u %a' "$moved")"
as "$squatter" ls "$moved" >/dev/null 2>&1 && fail "the squatter can list $moved"
echo "item 2: the per-user directory taken too: a pair meets in $moved (victim's, 0700)"

# A runtime directory that is not the victim's own (sudo -E keeps the
# variable): ignored, nothing written there.
xdg=$(mktemp -d /dev/shm/rdmasan-xdg-XXXXXX) && chown "$squatter" "$xdg" || exit 2
as "$victim" env XDG_RUNTIME_DIR="$xdg" "$rdmasan" run --softnic_fabric="$fabric-x" -- ibv_devinfo \
  >"$dir/devinfo.txt" 2>&1
status=$?
[[ $status -eq 0 ]] || fail "another user's XDG_RUNTIME_DIR denied softnic (exit $status): $(cat "$dir/devinfo.txt")"
[[ -z $(ls -A "$xdg") ]] || fail "the victim wrote into another user's runtime directory: $(ls -A "$xdg")"
echo "item 2: another user's XDG_RUNTIME_DIR is ignored"
echo "cross_user_squat: PASS"
