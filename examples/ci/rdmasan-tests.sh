#!/usr/bin/env bash
# rdmasan-tests.sh: run a project's test commands under rdmasan on softnic,
# as a CI job does.  Copy it into your repository (e.g. ci/rdmasan-tests.sh).
#
# usage:
#   rdmasan-tests.sh [options] -- 'CMD [ARGS...]' ['CMD [ARGS...]' ...]
#   rdmasan-tests.sh [options] --commands FILE
#
# Each CMD is one test: one string, split into words as the shell splits
# them (quotes work; leading NAME=value words set the environment).  With
# --commands, FILE holds one CMD per line ('#' lines and blank lines are
# skipped).  Each command runs as
#   rdmasan run --softnic_fabric=ci-<pid>-<n> --report_format=sarif \
#               --log_path=OUT/<n>/rdmasan [your options] -- CMD
# in the current directory: its own private softnic fabric, rdmasan's
# reports in OUT/<n>/rdmasan.<pid> (printed after the command's output)
# and a SARIF log per process in OUT/<n>/rdmasan.<pid>.sarif.  At the end
# all SARIF logs are merged into OUT/rdmasan.sarif (one run, every result;
# needs jq or python3), the file a code-scanning upload wants.  A command
# that starts processes of its own (a server and a client, say) gets one
# report and one SARIF log per process, all on the same fabric.
#
# options:
#   --rdmasan PATH        the rdmasan command (default: $RDMASAN, else
#                         rdmasan from PATH; the .deb installs /usr/bin/rdmasan)
#   --out DIR             where reports and SARIF logs go (default
#                         rdmasan-out); created, and emptied of earlier runs
#   --commands FILE       read the commands from FILE, one per line
#   --suppressions FILE   rdmasan's suppressions= (checked to exist)
#   --timeout SEC         stop a command after SEC seconds (timeout(1));
#                         0: no limit (default)
#   --fail-on-warnings    a command with Warning findings fails too
#   --NAME=VALUE          any other rdmasan option, given to every
#                         `rdmasan run` (e.g. --checks=default,-error-completion,
#                         --hang_timeout=30, --strip_path_prefix=$PWD/)
#
# Prints one line per command (PASS or FAIL and why) and a total.
# Exit status: 0 every command passed; 66 some command had Error findings
# (or Warnings, with --fail-on-warnings); 1 some command failed otherwise
# (non-zero exit status, timeout, signal); 2 bad usage.
set -euo pipefail

me="rdmasan-tests"
die() { echo "$me: $*" >&2; exit 2; }

rdmasan=${RDMASAN:-rdmasan}
out="rdmasan-out"
commands_file=""
suppressions=""
limit=0
fail_on_warnings=0
rdmasan_opts=()
cmds=()

while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) [[ $# -ge 2 ]] || die "--rdmasan wants a path"; rdmasan=$2; shift 2 ;;
    --rdmasan=*) rdmasan=${1#*=}; shift ;;
    --out) [[ $# -ge 2 ]] || die "--out wants a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --commands) [[ $# -ge 2 ]] || die "--commands wants a file"; commands_file=$2; shift 2 ;;
    --commands=*) commands_file=${1#*=}; shift ;;
    --suppressions) [[ $# -ge 2 ]] || die "--suppressions wants a file"; suppressions=$2; shift 2 ;;
    --suppressions=*) suppressions=${1#*=}; shift ;;
    --timeout) [[ $# -ge 2 ]] || die "--timeout wants seconds"; limit=$2; shift 2 ;;
    --timeout=*) limit=${1#*=}; shift ;;
    --fail-on-warnings) fail_on_warnings=1; shift ;;
    --softnic_fabric=* | --log_path=* | --report_format=*)
      die "${1%%=*} is set by this script, per command" ;;
    --help | -h) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    --) shift; cmds+=("$@"); break ;;
    --?*=*) rdmasan_opts+=("$1"); shift ;;
    *) die "unexpected argument '$1' (rdmasan options are --name=value; commands go after --)" ;;
  esac
done

if [[ -n $commands_file ]]; then
  [[ -r $commands_file ]] || die "cannot read --commands file '$commands_file'"
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    line=${line#"${line%%[![:space:]]*}"}
    cmds+=("${line%"${line##*[![:space:]]}"}")
  done < "$commands_file"
fi
[[ ${#cmds[@]} -gt 0 ]] || die "no commands (give them after --, or with --commands FILE)"
[[ $limit =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds, not '$limit'"

# The rdmasan command, as a path that stays valid in any directory.
if [[ $rdmasan == */* ]]; then
  [[ -x $rdmasan ]] || die "no rdmasan command at '$rdmasan'"
  rdmasan=$(cd "$(dirname "$rdmasan")" && pwd)/$(basename "$rdmasan")
else
  rdmasan=$(command -v "$rdmasan") || die "no '$rdmasan' in PATH (install the rdmasan package, or give --rdmasan PATH)"
fi
if [[ -n $suppressions ]]; then
  [[ -r $suppressions ]] || die "cannot read --suppressions file '$suppressions'"
  suppressions=$(cd "$(dirname "$suppressions")" && pwd)/$(basename "$suppressions")
  rdmasan_opts+=("--suppressions=$suppressions")
fi
# --exitcode=N given through moves the status that means "Error findings".
exitcode=66
for o in "${rdmasan_opts[@]+"${rdmasan_opts[@]}"}"; do
  [[ $o == --exitcode=* ]] && exitcode=${o#*=}
done

mkdir -p "$out"
out_shown=${out%/}
out=$(cd "$out" && pwd)
[[ $out != "$PWD" ]] || die "--out wants a folder of its own, not the current directory"
rm -rf "${out:?}"/[0-9]* "$out/rdmasan.sarif"

# Findings of one command: its logs' report headers
# (==PID==ERROR: rdmasan: ID: ... / ==PID==WARNING: rdmasan: ID: ...).
# Prints "ERRORS WARNINGS id (n), id (n)" (ids in the order first seen).
count_findings() {
  local dir=$1 errors=0 warnings=0 ids="" sev id
  local -A seen=()
  local -a order=()
  while read -r sev id; do
    if [[ $sev == ERROR ]]; then errors=$((errors + 1)); else warnings=$((warnings + 1)); fi
    [[ -n ${seen[$id]+x} ]] || order+=("$id")
    seen[$id]=$(( ${seen[$id]:-0} + 1 ))
  done < <(for log in "$dir"/rdmasan.*; do
             [[ -f $log && $log != *.sarif ]] || continue
             sed -nE 's/^==[0-9]+==(ERROR|WARNING): rdmasan: ([a-z0-9-]+): .*/\1 \2/p' "$log"
           done)
  for id in "${order[@]+"${order[@]}"}"; do ids+="${ids:+, }$id (${seen[$id]})"; done
  echo "$errors $warnings $ids"
}

# Sets words to the shell's words of one command line.
split_command() {
  local line=$1
  eval "words=($line)" || return 1
}

n=0 failed=0 with_findings=0 total_errors=0 total_warnings=0
summary=()
for cmd in "${cmds[@]}"; do
  n=$((n + 1))
  dir=$out/$n
  mkdir -p "$dir"
  printf '%s\n' "$cmd" > "$dir/command"
  words=()
  if ! split_command "$cmd" || [[ ${#words[@]} -eq 0 ]]; then
    summary+=("FAIL  [$n] $cmd: not a command line the shell can split")
    failed=$((failed + 1))
    continue
  fi
  envs=()
  while [[ ${#words[@]} -gt 0 && ${words[0]} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
    envs+=("${words[0]}")
    words=("${words[@]:1}")
  done
  run=(env "${envs[@]+"${envs[@]}"}" "$rdmasan" run "--softnic_fabric=ci-$$-$n"
       --report_format=sarif "--log_path=$dir/rdmasan"
       "${rdmasan_opts[@]+"${rdmasan_opts[@]}"}" -- "${words[@]}")
  if [[ $limit -gt 0 ]]; then run=(timeout --kill-after=10 "$limit" "${run[@]}"); fi

  echo "=== [$n] $cmd"
  status=0
  "${run[@]}" || status=$?
  # rdmasan's reports, after the command's own output.
  for log in "$dir"/rdmasan.*; do
    [[ -f $log && $log != *.sarif && -s $log ]] || continue
    echo "--- [$n] rdmasan: ${log#"$out"/}"
    cat "$log"
  done

  read -r errors warnings ids <<< "$(count_findings "$dir")"
  total_errors=$((total_errors + errors))
  total_warnings=$((total_warnings + warnings))
  found=""
  if [[ $((errors + warnings)) -gt 0 ]]; then
    found="$errors error(s), $warnings warning(s): $ids"
  fi
  why=""
  if [[ $errors -gt 0 || ($fail_on_warnings -eq 1 && $warnings -gt 0) ]]; then
    why="exit $status, findings: $found"
    with_findings=$((with_findings + 1))
  elif [[ $status -ne 0 ]]; then
    if [[ $limit -gt 0 && ($status -eq 124 || $status -eq 137) ]]; then
      why="timed out after ${limit}s"
    elif [[ $status -eq $exitcode ]]; then
      why="exit $status (rdmasan's exitcode: Error findings, see the report above)"
      with_findings=$((with_findings + 1))
    elif [[ $status -eq 127 ]]; then
      why="exit 127 (command not found)"
    elif [[ $status -gt 128 ]]; then
      why="exit $status (killed by SIG$(kill -l $((status - 128)) 2>/dev/null || echo $((status - 128))))"
    else
      why="exit $status"
    fi
    [[ -z $found ]] || why+="; $found"
  fi
  if [[ -n $why ]]; then
    summary+=("FAIL  [$n] $cmd: $why")
    failed=$((failed + 1))
  else
    summary+=("PASS  [$n] $cmd${found:+ ($found)}")
  fi
done

# One SARIF log for the whole job: the first log's run, every log's results.
merged=$out/rdmasan.sarif
mapfile -t sarifs < <(find "$out" -mindepth 2 -name 'rdmasan.*.sarif' | sort)
if [[ ${#sarifs[@]} -eq 0 ]]; then
  # shellcheck disable=SC2016  # a literal "$schema", no expansion wanted
  printf '%s\n' '{"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json",' \
    ' "runs": [{"tool": {"driver": {"name": "rdmasan"}}, "results": []}]}' > "$merged"
elif command -v jq > /dev/null; then
  jq -s '.[0] + {runs: [.[0].runs[0] + {results: [.[].runs[].results[]]}]}' "${sarifs[@]}" > "$merged" ||
    { echo "$me: jq could not merge the SARIF logs" >&2; merged=""; }
elif command -v python3 > /dev/null; then
  python3 - "$merged" "${sarifs[@]}" << 'PY' || { echo "$me: python3 could not merge the SARIF logs" >&2; merged=""; }
import json, sys
logs = [json.load(open(p)) for p in sys.argv[2:]]
log = logs[0]
log["runs"] = [dict(log["runs"][0], results=[r for l in logs for run in l["runs"] for r in run["results"]])]
json.dump(log, open(sys.argv[1], "w"), indent=2)
PY
else
  merged=""
  echo "$me: neither jq nor python3: SARIF logs left one per process under $out" >&2
fi

echo "=== rdmasan-tests summary"
printf '%s\n' "${summary[@]}"
echo "$me: $n command(s), $((n - failed)) passed, $failed failed;" \
  "findings: $total_errors error(s), $total_warnings warning(s)${merged:+; SARIF: $out_shown/rdmasan.sarif}"
if [[ $with_findings -gt 0 ]]; then exit 66; fi
if [[ $failed -gt 0 ]]; then exit 1; fi
exit 0
