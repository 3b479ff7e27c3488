#!/usr/bin/env bash
# run_example.sh: run an example's server/client pair under rdmasan (through
# tests/e2e/run_pair.sh) and judge it by the mode it runs in.
#
# usage:
#   run_example.sh [--rdmasan PATH] [--outdir DIR] [--timeout S] [--also ID]...
#                  NAME PORT MODE -- SERVER... --- CLIENT...
#
#   --id ID      the check the bug must trigger, when it is not named MODE
#   --opt N=V    an rdmasan option for both runs (e.g. reorder=random)
# MODE correct: run_pair.sh's own verdict (both exit 0, no rdmasan report).
# Any other MODE is the id of the rdmasan check the planted bug must
# trigger.  Passes when
#   - a report `==PID==ERROR: rdmasan: MODE:` (or WARNING) is in the logs,
#   - every other check reported is listed with --also (a known consequence
#     of the bug), so a new or different finding fails the test,
#   - both programs ended by themselves: no timeout, no signal; the server
#     exits 0 (its code is correct), the client any status below 128 (the
#     bug may stop it: 1, or rdmasan's exitcode 66 for an Error finding).
set -uo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run_pair=$script_dir/../tests/e2e/run_pair.sh

pair_opts=()
outdir=${RDMASAN_E2E_OUT:-$script_dir/../build/examples/out}
also=()
want_id=""
timeout=30
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) pair_opts+=(--rdmasan "$2"); shift 2 ;;
    --outdir) outdir=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --also) also+=("$2"); shift 2 ;;
    --id) want_id=$2; shift 2 ;;
    --opt) pair_opts+=(--opt "$2"); shift 2 ;;
    -*) echo "run_example: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -ge 4 && $4 == "--" ]] || { echo "usage: run_example.sh [opts] NAME PORT MODE -- SERVER... --- CLIENT..." >&2; exit 2; }
name=$1 port=$2 mode=$3
shift 3
if [[ -n $want_id ]]; then
  check_mode=$want_id
else
  check_mode=$mode
fi

if [[ $mode == correct ]]; then
  exec "$run_pair" "${pair_opts[@]}" --outdir "$outdir" --timeout "$timeout" "$name" "$port" "$@"
fi

out=$("$run_pair" "${pair_opts[@]}" --outdir "$outdir" --timeout "$timeout" --allow-findings \
        --expect "rdmasan: $check_mode:" "$name" "$port" "$@" 2>&1)
# run_pair.sh judges a clean run: for a planted bug, a client that exits 66
# (rdmasan's exit status for findings) or is stopped by the bug is what
# is expected, and is said so in words.
while IFS= read -r line; do
  if [[ $line =~ ^run_pair:\ .*:\ FAIL:\ client:\ exit\ ([0-9]+)$ && ${BASH_REMATCH[1]} -lt 128 ]]; then
    code=${BASH_REMATCH[1]}
    if [[ $code -eq 66 ]]; then
      echo "run_example: $name: client: exit 66: findings, as expected"
    else
      echo "run_example: $name: client: exit $code: stopped by the planted bug, as expected"
    fi
  else
    printf '%s\n' "$line"
  fi
done <<<"$out"
safe_name=${name//[^A-Za-z0-9_.-]/-}
logs=("$outdir/$safe_name.server.log" "$outdir/$safe_name.client.log")

failures=()
while IFS= read -r line; do
  reason=${line#*: FAIL: }
  if [[ $reason =~ ^client:\ exit\ ([0-9]+)$ && ${BASH_REMATCH[1]} -lt 128 ]]; then
    continue  # the bug stopped the client, or rdmasan's exit code for an Error finding
  fi
  failures+=("$reason")
done < <(grep -E "^run_pair: .*: FAIL: " <<<"$out")

mapfile -t found < <(grep -hoE '==[0-9]+==(ERROR|WARNING): rdmasan: [a-z0-9-]+:' "${logs[@]}" 2>/dev/null |
                     sed -E 's/.*rdmasan: ([a-z0-9-]+):/\1/' | sort -u)
echo "run_example: $name: checks reported: ${found[*]:-none}"
for id in "${found[@]}"; do
  [[ $id == "$check_mode" ]] && continue
  ok=0
  for a in "${also[@]}"; do [[ $id == "$a" ]] && ok=1; done
  [[ $ok -eq 1 ]] || failures+=("unexpected finding: $id")
done

if [[ ${#failures[@]} -gt 0 ]]; then
  for f in "${failures[@]}"; do echo "run_example: $name: FAIL: $f"; done
  exit 1
fi
echo "run_example: $name: PASS ($check_mode reported)"
exit 0
