# two_users.sh, sourced by the cross-user tests: `two_users NAME BASE` skips
# (exit 77) unless run as root with setpriv, else sets $victim and
# $squatter to two throwaway uids from BASE + pid % 1000 up (numeric ids
# with no passwd or group entry; each test its own BASE, so tests that run
# at once never share a uid, and with it a softnic user directory), and
# `as UID COMMAND...` runs a command as that user.
two_users() {
  local name=$1 base=$2 u
  [[ $(id -u) -eq 0 ]] || { echo "$name: SKIP: needs root"; exit 77; }
  command -v setpriv >/dev/null || { echo "$name: SKIP: no setpriv"; exit 77; }
  victim="" squatter=""
  for u in $(seq $((base + $$ % 1000)) $((base + $$ % 1000 + 500))); do
    getent passwd "$u" >/dev/null || getent group "$u" >/dev/null && continue
    if [[ -z $victim ]]; then victim=$u; else squatter=$u; break; fi
  done
  [[ -n $squatter ]] || { echo "$name: no free uids near $base"; exit 2; }
}
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups -- env HOME=/ "$@"; }
