#!/usr/bin/env bash
# run_check.sh: run one tests/e2e/checks program under `rdmasan run` on
# softnic and check its report against the markers in its source.
#
# usage:
#   run_check.sh PROG SOURCE (--expect-id ID | --silent) [runner options]
#                [rdmasan options...]
#
#   --expect-id ID   the program must trigger check ID: a report
#                    `==PID==ERROR: rdmasan: ID:` (WARNING for warning checks)
#                    whose first stack has a frame ` in FN .../SOURCE:LINE`,
#                    LINE being the line of `// CHECK: ID` in SOURCE, every
#                    line marked `// CHECK-ALSO: ID` appearing as a frame
#                    somewhere in that report, and its
#                    `SUMMARY: rdmasan: ID SOURCE:LINE in FN`; exit status 66
#                    for an error check, 0 for a warning check.
#                    The labelled secondary stacks: for every line marked
#                    `// POSTED-AT: ID` (`// REGISTERED-AT: ID`,
#                    `// CREATED-AT: ID`, `// IN-VERBS-AT: ID`), a stack of
#                    that report whose label ends in "posted at"
#                    ("registered at", "created at", "in verbs at") has
#                    a frame ` in FN .../SOURCE:LINE`, FN being the function
#                    the marker is in (the last `name(...) {` definition
#                    starting in column 0 above it) and LINE its line.
#   --silent         a control: exit 0, no rdmasan report at all.
# In either mode, a line `// CHECK-NOT: OTHER-ID` in SOURCE forbids any
# report of OTHER-ID (a known false positive that rides along).  With
# --expect-id, a line ` * REPORT-HAS: TEXT` (or `// REPORT-HAS: TEXT`)
# wants TEXT in some report of ID (its lines from the ERROR/WARNING header
# to its SUMMARY).  A line `LIVE-ONLY: ID` (in a comment) says ID is raised
# by the live run only (thread-domain-race: the overlap of two calls, which
# no event records): the replay must give the live run's findings without
# ID's reports, and its exit status is not compared.
# runner options:
#   --rdmasan PATH   the rdmasan command (default: $RDMASAN, else
#                    <repo>/build/rdmasan)
#   --fabric NAME    softnic fabric name (default: checks-<prog>-<pid>)
#   --status N       exit status required instead of the default above
#   --stops          the program is expected to stop early: no DONE needed
#   --timeout SEC    limit for the run (default 30)
# Anything else starting with -- (e.g. --checks=+wr-id-duplicate) goes to
# `rdmasan run`.  Prints the whole output when the test fails.
set -uo pipefail

die() { echo "run_check: $*" >&2; exit 2; }

# Warning-severity checks (`rdmasan checks` lists them); every other id is an error.
warning_ids=" unsignaled-run post-after-error error-completion wr-id-duplicate fork-with-mrs overlapping-destinations "

[[ $# -ge 2 ]] || die "usage: run_check.sh PROG SOURCE (--expect-id ID | --silent) [options]"
prog=$1 src=$2
shift 2
[[ -x $prog ]] || die "no program $prog"
[[ -r $src ]] || die "no source $src"

script_dir=$(cd "$(dirname "$0")" && pwd)
rdmasan=${RDMASAN:-$script_dir/../../../build/rdmasan}
mode="" id="" fabric="" want_status="" stops=0 limit=30
opts=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --expect-id) mode=expect id=$2; shift 2 ;;
    --silent) mode=silent; shift ;;
    --rdmasan) rdmasan=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --status) want_status=$2; shift 2 ;;
    --stops) stops=1; shift ;;
    --timeout) limit=$2; shift 2 ;;
    --*) opts+=("$1"); shift ;;
    *) die "unexpected argument '$1'" ;;
  esac
done
[[ -n $mode ]] || die "say --expect-id ID or --silent"
[[ -x $rdmasan ]] || die "no rdmasan command at $rdmasan (set RDMASAN or --rdmasan)"
base=$(basename "$src")
[[ -n $fabric ]] || fabric="checks-$(basename "$prog")-$$"

severity=ERROR
if [[ $mode == expect ]]; then
  [[ $warning_ids == *" $id "* ]] && severity=WARNING
  if [[ -z $want_status ]]; then
    if [[ $severity == ERROR ]]; then want_status=66; else want_status=0; fi
  fi
  line=$(grep -n -- "// CHECK: $id\$" "$src" | cut -d: -f1)
  [[ -n $line ]] || die "$src has no '// CHECK: $id' marker"
  [[ $line != *$'\n'* ]] || die "$src has more than one '// CHECK: $id' marker"
  also=$(grep -n -- "// CHECK-ALSO: $id\$" "$src" | cut -d: -f1 | tr '\n' ' ')
  # "kind:line:function ..." for the labelled-stack markers.
  labelled=$(awk -v id="$id" '
    /^[A-Za-z_][A-Za-z0-9_ *]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*\) *\{/ {
      fn = $0; sub(/\(.*/, "", fn); sub(/.*[ *]/, "", fn)
    }
    match($0, "// (POSTED|REGISTERED|CREATED|IN-VERBS)-AT: " id "$") {
      kind = substr($0, RSTART + 3); sub(/-AT:.*/, "", kind); gsub(/-/, "_", kind)
      printf "%s:%d:%s ", tolower(kind), NR, fn
    }' "$src")
else
  [[ -n $want_status ]] || want_status=0
fi

log=$(mktemp "${TMPDIR:-/tmp}/run_check.XXXXXX") || die "mktemp failed"
trace=$log.trace
replay_log=$log.replay
trap 'rm -f "$log" "$trace" "$trace.incomplete" "$replay_log"' EXIT

# The live run records its trace; `rdmasan replay` of it must report the
# same findings (same ids, messages, stacks, SUMMARY lines) and exit alike.
cmd=("$rdmasan" run "--softnic_fabric=$fabric" "--trace=$trace" "${opts[@]}" -- "$prog")
timeout -k 5 "$limit" "${cmd[@]}" >"$log" 2>&1 </dev/null
status=$?

failures=()
if [[ $status -ne $want_status ]]; then
  if [[ $status -eq 124 ]]; then
    failures+=("timed out after ${limit}s")
  else
    failures+=("exit status $status, expected $want_status")
  fi
fi
if [[ $stops -eq 0 ]] && ! grep -qx 'DONE' "$log"; then
  failures+=("the program did not print DONE")
fi

for not_id in $(grep -o -- '// CHECK-NOT: [a-z-]*$' "$src" | sed 's|// CHECK-NOT: ||'); do
  if grep -Eq "^==[0-9]+==(ERROR|WARNING): rdmasan: $not_id:" "$log"; then
    failures+=("unwanted report of $not_id (// CHECK-NOT: $not_id)")
  fi
done

if [[ $mode == silent ]]; then
  if grep -Eq '^==[0-9]+==(ERROR|WARNING): rdmasan' "$log"; then
    failures+=("a control got a report: $(grep -E '^==[0-9]+==(ERROR|WARNING): rdmasan' "$log" | head -3 | tr '\n' ' ')")
  fi
  if grep -Eq 'rdmasan: [0-9]+ findings?' "$log"; then
    failures+=("a control has findings")
  fi
else
  # Judge every report of $id; one must match everything.  Prints the reason
  # the closest report failed otherwise.
  verdict=$(awk -v id="$id" -v sev="$severity" -v base="$base" -v line="$line" -v also="$also" \
      -v labelled="$labelled" '
    function frame_re(l) { return " in [^ ]+ ([^ ]*/)?" ebase ":" l "([: \n]|$)" }
    function fn_frame_re(f, l) { return " in " f "(\\(.*\\))? ([^ ]*/)?" ebase ":" l "$" }
    function judge(   why, n, a, i) {
      why = ""
      if (hdr !~ ("^==[0-9]+==" sev ": rdmasan: " id ":"))
        why = why "header is not " sev "; "
      if (!prim_ok) why = why "no frame " base ":" line " in the first stack; "
      n = split(also, a, " ")
      for (i = 1; i <= n; i++)
        if (blk !~ frame_re(a[i])) why = why "no frame " base ":" a[i] " (CHECK-ALSO) in the report; "
      n = split(labelled, a, " ")
      for (i = 1; i <= n; i++) {
        split(a[i], m, ":")
        kk = m[1]; gsub(/_/, " ", kk)
        if (lab[m[1] " at", m[3], m[2]] == "")
          why = why "no frame " m[3] " " base ":" m[2] " in a \"" kk " at\" stack; "
      }
      if (summ !~ ("^SUMMARY: rdmasan: " id " " ebase ":" line " in [^ ]+$"))
        why = why "SUMMARY is \"" summ "\", wanted \"SUMMARY: rdmasan: " id " " base ":" line " in <fn>\"; "
      if (why == "") { ok = 1 } else if (last == "") { last = why }
      seen++
    }
    BEGIN { ebase = base; gsub(/\./, "\\.", ebase); inblk = 0; ok = 0; seen = 0; last = "" }
    inblk && /^SUMMARY: rdmasan:/ { summ = $0; judge(); inblk = 0; next }
    inblk {
      blk = blk "\n" $0
      # The first stack: its frames, after any lines about the finding
      # (an "after injected ..." context line) before its first frame.
      if (prim && $0 ~ /^ +#[0-9]+ /) { pframes++; if ($0 ~ frame_re(line)) prim_ok = 1 }
      else if (prim && pframes) prim = 0
      if ($0 ~ /^  [^ ].*:$/) { label = $0; sub(/:$/, "", label) }
      else if (label != "" && $0 ~ /^ +#[0-9]+ /) {
        nl = split(labelled, la, " ")
        for (k = 1; k <= nl; k++) {
          split(la[k], m, ":")
          kw = m[1]; gsub(/_/, " ", kw)
          if (label ~ (kw " at$") && $0 ~ fn_frame_re(m[3], m[2])) lab[m[1] " at", m[3], m[2]] = 1
        }
      }
      next
    }
    $0 ~ ("^==[0-9]+==(ERROR|WARNING): rdmasan: " id ":") {
      inblk = 1; hdr = $0; blk = ""; prim = 1; pframes = 0; prim_ok = 0; summ = ""; label = ""; split("", lab)
    }
    END {
      if (inblk) { summ = "(none)"; judge() }
      if (ok) print "OK"
      else if (seen == 0) print "no report of " id
      else print last
    }' "$log")
  [[ $verdict == OK ]] || failures+=("$verdict")
  while IFS= read -r want; do
    [[ -n $want ]] || continue
    awk -v id="$id" '$0 ~ ("^==[0-9]+==(ERROR|WARNING): rdmasan: " id ":") { on = 1 }
                     on { print } /^SUMMARY: rdmasan:/ { on = 0 }' "$log" | grep -qF -- "$want" ||
      failures+=("no report of $id says \"$want\" (REPORT-HAS)")
  done < <(grep -E '^ *(\*|//) REPORT-HAS: ' "$src" | sed -E 's/^ *(\*|\/\/) REPORT-HAS: //')
fi

# Replay (unless the program was meant to stop halfway: its trace is a
# prefix and may end before the report; or ran with --checking=false,
# which records no trace).
if [[ $stops -eq 0 && " ${opts[*]} " != *" --checking=false "* ]]; then
  replay_opts=()
  for o in "${opts[@]}"; do
    case $o in --checks=*|--suppressions=*|--buffer_check=*) replay_opts+=("$o") ;; esac
  done
  timeout -k 5 "$limit" "$rdmasan" replay "${replay_opts[@]}" "$trace" >"$replay_log" 2>&1 </dev/null
  replay_status=$?
  live_only=$(grep -oE -- 'LIVE-ONLY: [a-z-]+' "$src" | sed 's/LIVE-ONLY: //' | head -1)
  if [[ -z $live_only ]]; then
    [[ $replay_status -eq $status ]] || failures+=("replay exited $replay_status, the live run $status")
  fi
  # Byte for byte, the recorded process's pid included; a live-only check's
  # reports (and the count of findings, which has them) left out.
  normalize() {
    grep -E '^==[0-9]+==(ERROR|WARNING): rdmasan|^    #|^  [^ ].*:$|^SUMMARY: rdmasan|rdmasan: [0-9]+ findings?' "$1" |
      awk -v id="$live_only" 'id == "" { print; next }
        $0 ~ ("^==[0-9]+==(ERROR|WARNING): rdmasan: " id ":") { skip = 1; next }
        skip && /^SUMMARY: rdmasan:/ { skip = 0; next }
        skip || /rdmasan: [0-9]+ findings?/ { next }
        { print }'
  }
  if ! diff <(normalize "$log") <(normalize "$replay_log") >/dev/null; then
    failures+=("the replay's findings differ from the live run's: $(diff <(normalize "$log") <(normalize "$replay_log") | head -6 | tr '\n' ' ')")
  fi
fi

if [[ ${#failures[@]} -gt 0 ]]; then
  [[ -f $replay_log ]] && { echo "---- replay:"; cat "$replay_log"; }
  echo "---- ${cmd[*]} (exit $status)"
  cat "$log"
  echo "----"
  for f in "${failures[@]}"; do echo "run_check: FAIL: $f"; done
  exit 1
fi
echo "run_check: PASS ($(basename "$prog"): ${id:-silent}, exit $status, replay identical)"
grep -E '^SUMMARY: rdmasan:|^==[0-9]+==rdmasan:' "$log"
exit 0
