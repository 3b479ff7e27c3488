#!/usr/bin/env bash
# run_campaign.sh: one `rdmasan fuzz` campaign over one planted program of
# tests/e2e/fuzz, checked against what the campaign must produce.  It only
# runs the campaign and the repro.sh it saved, in a folder of its own; it
# never edits what the campaign wrote.
#
# usage:
#   run_campaign.sh --rdmasan PATH --out DIR --prog PROG --src SOURCE
#                   (--expect-id ID [--others-ok] | --silent) [--max-decisions N]
#                   [--repro-timeout S] -- [rdmasan fuzz options...]
#
#   --expect-id ID  the campaign finds ID: exit 66; its summary (the last
#                   line of stdout, `rdmasan fuzz: N runs, K unique
#                   findings: n-id, ...`) names only ID; runs.txt has N
#                   well-formed lines, the ones that found it naming it; and
#                   for each finding DIR/<n>-ID/:
#                     - report.txt, decisions.log, story.txt, schedule.log,
#                       and an executable repro.sh;
#                     - report.txt's SUMMARY is `ID SOURCE:LINE`, LINE the
#                       line of `// CHECK: ID` in SOURCE;
#                     - schedule.log shrunk to 1..N decisions (non-comment
#                       lines; N = --max-decisions, default 5), as many as
#                       story.txt's numbered steps;
#                     - repro.sh, run alone (no RDMASAN_OPTIONS) under
#                       --repro-timeout (default 20 s), reports
#                       `ERROR: rdmasan: ID` with the same SUMMARY and ends
#                       by itself with a non-zero status (a hang's repro
#                       halts on its report; killed at the timeout fails).
#   --summary-re RE (with --expect-id) for a report whose SUMMARY names
#                   no frame of SOURCE (a crash raised by abort() is
#                   summarized inside libc): report.txt and repro.sh's
#                   output have a line matching RE (an extended regex)
#                   instead of the SUMMARY above, and report.txt has a
#                   frame ` in FN .../SOURCE:LINE`
#   --others-ok     (with --expect-id) findings of other checks may come
#                   too (a default campaign's faults reach the whole
#                   program); only ID's folders are checked.
#   --silent        a control: exit 0, `N runs, 0 unique findings`, no
#                   finding folder, no run of runs.txt with findings.
# DIR is emptied first.  With --runs=R among the fuzz options (and no
# --strategy=enumerate, which may end early), N must be R.
# Prints the campaign's output, and the repro's when it fails.
set -uo pipefail

die() { echo "run_campaign: $*" >&2; exit 2; }
fail() {
  echo "FAIL: $*"
  exit 1
}

rdmasan="" out="" prog="" src="" mode="" id="" max_decisions=5 repro_timeout=20 others_ok=0 summary_re_opt=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prog) prog=$2; shift 2 ;;
    --src) src=$2; shift 2 ;;
    --expect-id) mode=expect id=$2; shift 2 ;;
    --silent) mode=silent; shift ;;
    --others-ok) others_ok=1; shift ;;
    --summary-re) summary_re_opt=$2; shift 2 ;;
    --max-decisions) max_decisions=$2; shift 2 ;;
    --repro-timeout) repro_timeout=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unexpected argument '$1'" ;;
  esac
done
fuzz_opts=("$@")
[[ -x $rdmasan ]] || die "no rdmasan command at '$rdmasan'"
[[ -n $out ]] || die "--out DIR is required"
[[ -x $prog ]] || die "no program '$prog'"
[[ -r $src ]] || die "no source '$src'"
[[ -n $mode ]] || die "say --expect-id ID or --silent"

want_runs=""
enumerate=0
for o in "${fuzz_opts[@]}"; do
  case $o in
    --runs=*) want_runs=${o#--runs=} ;;
    --strategy=enumerate) enumerate=1 ;;
  esac
done
((enumerate)) && want_runs=""

rm -rf "$out"
mkdir -p "$(dirname "$out")" || die "cannot create the parent of $out"
base=$(basename "$src")
line=""
if [[ $mode == expect ]]; then
  line=$(grep -n -- "// CHECK: $id\$" "$src" | cut -d: -f1)
  [[ -n $line && $line != *$'\n'* ]] || die "$src wants exactly one '// CHECK: $id' marker"
fi

echo "+ $rdmasan fuzz --out=$out ${fuzz_opts[*]} -- $prog"
stdout=$("$rdmasan" fuzz "--out=$out" "${fuzz_opts[@]}" -- "$prog" 2> "$out.stderr")
status=$?
cat "$out.stderr"
echo "$stdout"
echo "(exit $status)"
summary=$(printf '%s\n' "$stdout" | tail -n 1)

# The summary line.
re='^rdmasan fuzz: ([0-9]+) runs, ([0-9]+) unique findings?(: (.*))?$'
[[ $summary =~ $re ]] || fail "last line of stdout is no summary: '$summary'"
runs=${BASH_REMATCH[1]} unique=${BASH_REMATCH[2]} listed=${BASH_REMATCH[4]}
[[ -z $want_runs || $runs == "$want_runs" ]] || fail "summary says $runs runs, --runs=$want_runs"
((runs > 0)) || fail "no run finished"

# runs.txt: one well-formed line per finished run (enumerate: and its
# baseline run first; each line then ends with the fault it injected).
[[ -f $out/runs.txt ]] || fail "no $out/runs.txt"
lines=$(grep -c '^run [0-9]' "$out/runs.txt")
[[ $lines == "$runs" ]] || fail "runs.txt has $lines runs, the summary $runs"
run_re='^run ([0-9]+|baseline) seed [0-9]+ exit [^ ]+ .*findings (-|[0-9]+-[a-z-]+(,[0-9]+-[a-z-]+)*)( fault [^ ]+)?$'
while IFS= read -r l; do
  [[ $l =~ $run_re ]] || fail "malformed runs.txt line: '$l'"
done < "$out/runs.txt"
found_dirs=()
for d in "$out"/[0-9]*-*; do
  [[ -d $d ]] && found_dirs+=("$d")
done

if [[ $mode == silent ]]; then
  [[ $status == 0 ]] || fail "a control campaign exits $status, wanted 0"
  [[ $unique == 0 ]] || fail "the control has $unique findings: $listed"
  ((${#found_dirs[@]} == 0)) || fail "finding folders in a clean campaign: ${found_dirs[*]}"
  if grep -v 'findings -\( fault [^ ]*\)\?$' "$out/runs.txt"; then fail "runs with findings in runs.txt"; fi
  echo "PASS: $runs runs, 0 unique findings"
  exit 0
fi

[[ $status == 66 ]] || fail "the campaign exits $status, wanted 66 (findings)"
((unique >= 1)) || fail "the campaign found nothing"
IFS=', ' read -r -a listed_names <<< "$listed"
((${#listed_names[@]} == unique)) || fail "summary counts $unique findings but lists '${listed}'"
names=()
for n in "${listed_names[@]}"; do
  [[ $n =~ ^[0-9]+-(.*)$ ]] || fail "finding name '$n' is not <n>-<check-id>"
  if [[ ${BASH_REMATCH[1]} == "$id" ]]; then
    names+=("$n")
  elif ((others_ok)); then
    echo "(also found: $n)"
  else
    fail "finding $n: another check than $id"
  fi
done
((${#names[@]} >= 1)) || fail "no finding of $id"
((${#found_dirs[@]} == unique)) || fail "${#found_dirs[@]} finding folders for $unique findings"
grep -q "findings .*[0-9]-$id" "$out/runs.txt" || fail "no run in runs.txt names $id"
echo "first found by run $(awk -v id="-$id" '$1 == "run" && $2 != "baseline" && index($0, id) { print $2; exit }' "$out/runs.txt")"

for n in "${names[@]}"; do
  d=$out/$n
  for f in report.txt decisions.log story.txt schedule.log; do
    [[ -s $d/$f ]] || fail "$d/$f missing or empty"
  done
  [[ -x $d/repro.sh ]] || fail "$d/repro.sh missing or not executable"
  summary_re="SUMMARY: rdmasan: $id $base:$line in "
  grep_summary=(grep -q --)
  if [[ -n $summary_re_opt ]]; then
    summary_re=$summary_re_opt
    grep_summary=(grep -qE --)
    ebase=${base//./\\.}
    grep -qE -- " in [^ ]+ ([^ ]*/)?$ebase:$line([: ]|\$)" "$d/report.txt" || {
      cat "$d/report.txt"
      fail "$d/report.txt: no frame $base:$line"
    }
  fi
  "${grep_summary[@]}" "$summary_re" "$d/report.txt" || {
    cat "$d/report.txt"
    fail "$d/report.txt: no '$summary_re'"
  }
  decisions=$(grep -vc '^#' "$d/schedule.log")
  echo "--- $d/schedule.log ($decisions decisions):"
  cat "$d/schedule.log"
  echo "--- story:"
  cat "$d/story.txt"
  ((decisions >= 1 && decisions <= max_decisions)) ||
    fail "$d/schedule.log keeps $decisions decisions, wanted 1..$max_decisions"
  steps=$(grep -c '^[0-9][0-9]*\. ' "$d/story.txt")
  [[ $steps == "$decisions" ]] || fail "story.txt tells $steps steps of $decisions decisions"

  # The reproducer, alone.
  echo "--- $d/repro.sh"
  repro_out=$(env -u RDMASAN_OPTIONS timeout -s TERM -k 5 "$repro_timeout" "$d/repro.sh" 2>&1)
  repro_status=$?
  if ! grep -q -- "ERROR: rdmasan: $id" <<< "$repro_out" || ! "${grep_summary[@]}" "$summary_re" <<< "$repro_out"; then
    echo "$repro_out"
    fail "repro.sh (exit $repro_status) did not report $id at $base:$line"
  fi
  [[ $repro_status != 0 ]] || fail "repro.sh reported $id but exited 0"
  [[ $repro_status != 124 && $repro_status != 137 ]] || fail "repro.sh reported $id but did not end (killed at $repro_timeout s)"
  echo "repro.sh: exit $repro_status, $id at $base:$line again"
done
echo "PASS: $runs runs, ${#names[@]} unique finding(s) of $id, each reproduced by its repro.sh from <= $max_decisions decisions"
