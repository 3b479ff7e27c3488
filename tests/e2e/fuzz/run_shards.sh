#!/usr/bin/env bash
# run_shards.sh: N shards of a campaign cover exactly the runs of the whole
# campaign and merge to its findings (issue 12, "beyond one machine").  It
# only runs `rdmasan fuzz` and `rdmasan fuzz merge` into folders of its own.
#
# usage:
#   run_shards.sh --rdmasan PATH --out DIR --shards N -- [rdmasan fuzz options...] -- PROG [args...]
#
# The fuzz options must hold --runs=R.  Runs the campaign once whole
# (DIR/whole), then once per shard with --shard=K/N (DIR/shard-K, K = 0 ..
# N-1), then `rdmasan fuzz merge --out=DIR/merged DIR/shard-*`, and wants:
#   - the whole campaign's runs.txt: R runs, indices 0..R-1;
#   - shard K's runs.txt: exactly the runs i with i % N == K;
#   - the union of the shards' (run index, seed) pairs equal to the whole
#     campaign's, and each run's finding check ids alike (for programs
#     deterministic under their schedule, as the planted ones are);
#   - the merged runs.txt: the whole campaign's (run, seed) pairs;
#   - the merge's summary line and exit status naming the same set of
#     finding check ids as the whole campaign's (numbers aside), each saved
#     as DIR/merged/<n>-<id>/ with an executable repro.sh.
set -uo pipefail

die() { echo "run_shards: $*" >&2; exit 2; }
fail() {
  echo "FAIL: $*"
  exit 1
}

rdmasan="" out="" shards=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unexpected argument '$1'" ;;
  esac
done
[[ -x $rdmasan ]] || die "no rdmasan command at '$rdmasan'"
[[ -n $out ]] || die "--out DIR is required"
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "--shards N wants a positive number"
opts=() runs=""
while [[ $# -gt 0 && $1 != -- ]]; do
  [[ $1 == --runs=* ]] && runs=${1#--runs=}
  opts+=("$1")
  shift
done
[[ ${1:-} == -- ]] || die "no '-- PROG' after the fuzz options"
shift
program=("$@")
((${#program[@]} > 0)) || die "no program"
[[ -n $runs ]] || die "the fuzz options need --runs=R"

rm -rf "$out"
mkdir -p "$out" || die "cannot create $out"

# campaign NAME [extra options...]: runs one campaign into $out/NAME; sets
# $summary (its last stdout line) and $status.
campaign() {
  local name=$1
  shift
  echo "+ $rdmasan fuzz --out=$out/$name ${opts[*]} $* -- ${program[*]}"
  local stdout
  stdout=$("$rdmasan" fuzz "--out=$out/$name" "${opts[@]}" "$@" -- "${program[@]}" 2> "$out/$name.stderr")
  status=$?
  summary=$(printf '%s\n' "$stdout" | tail -n 1)
  echo "$summary (exit $status)"
}

# ids SUMMARY: the sorted, distinct check ids a summary line names.
ids() {
  local re='^rdmasan fuzz: [0-9]+ runs, [0-9]+ unique findings?(: (.*))?$'
  [[ $1 =~ $re ]] || fail "no summary line: '$1'"
  tr ',' '\n' <<< "${BASH_REMATCH[2]}" | sed -e 's/^ *//' -e 's/^[0-9]*-//' | grep . | sort -u | tr '\n' ' '
}

# runs_of FILE: "index seed check-ids" per numbered run (an enumerate
# campaign's baseline left out), sorted by index.
runs_of() {
  [[ -f $1 ]] || fail "no $1"
  awk '$1 == "run" && $2 ~ /^[0-9]+$/ {
         ids = "";
         for (f = 1; f < NF; ++f) if ($f == "findings") ids = $(f + 1);
         out = "-";
         if (ids != "-") {
           out = "";
           n = split(ids, a, ",");
           for (i = 1; i <= n; ++i) { sub(/^[0-9]+-/, "", a[i]); out = out (out == "" ? "" : ",") a[i] }
         }
         print $2, $4, out
       }' "$1" | sort -n -k1,1
}

campaign whole
[[ $status == 0 || $status == 66 ]] || fail "the whole campaign exits $status"
whole_status=$status
whole_ids=$(ids "$summary")
runs_of "$out/whole/runs.txt" > "$out/whole.runs"
[[ $(wc -l < "$out/whole.runs") == "$runs" ]] || fail "the whole campaign ran $(wc -l < "$out/whole.runs") runs, --runs=$runs"
[[ $(cut -d' ' -f1 "$out/whole.runs" | tr '\n' ' ') == "$(seq 0 $((runs - 1)) | tr '\n' ' ')" ]] ||
  fail "the whole campaign's run indices are not 0..$((runs - 1))"

shard_dirs=()
: > "$out/union.runs"
for ((k = 0; k < shards; ++k)); do
  campaign "shard-$k" "--shard=$k/$shards"
  [[ $status == 0 || $status == 66 ]] || fail "shard $k/$shards exits $status"
  shard_dirs+=("$out/shard-$k")
  runs_of "$out/shard-$k/runs.txt" > "$out/shard-$k.runs"
  while read -r i _; do
    ((i % shards == k)) || fail "shard $k/$shards ran run $i"
  done < "$out/shard-$k.runs"
  cat "$out/shard-$k.runs" >> "$out/union.runs"
done
sort -n -k1,1 -o "$out/union.runs" "$out/union.runs"
if ! diff <(cut -d' ' -f1,2 "$out/whole.runs") <(cut -d' ' -f1,2 "$out/union.runs"); then
  fail "the shards' (run, seed) pairs differ from the whole campaign's (< whole, > shards)"
fi
echo "the $shards shards ran the whole campaign's $runs runs with its seeds"
if ! diff "$out/whole.runs" "$out/union.runs"; then
  fail "a run found other checks in its shard than in the whole campaign (< whole, > shards)"
fi

echo "+ $rdmasan fuzz merge --out=$out/merged ${shard_dirs[*]}"
stdout=$("$rdmasan" fuzz merge "--out=$out/merged" "${shard_dirs[@]}" 2> "$out/merged.stderr")
status=$?
cat "$out/merged.stderr"
summary=$(printf '%s\n' "$stdout" | tail -n 1)
echo "$summary (exit $status)"
[[ $status == "$whole_status" ]] || fail "merge exits $status, the whole campaign $whole_status"
merged_ids=$(ids "$summary")
[[ $merged_ids == "$whole_ids" ]] || fail "merged findings '$merged_ids', whole campaign's '$whole_ids'"
runs_of "$out/merged/runs.txt" > "$out/merged.runs"
diff <(cut -d' ' -f1,2 "$out/whole.runs") <(cut -d' ' -f1,2 "$out/merged.runs") ||
  fail "the merged runs.txt differs from the whole campaign's runs (< whole, > merged)"
re='^rdmasan fuzz: [0-9]+ runs, [0-9]+ unique findings?(: (.*))?$'
[[ $summary =~ $re ]]
IFS=', ' read -r -a names <<< "${BASH_REMATCH[2]}"
for n in "${names[@]}"; do
  [[ -x $out/merged/$n/repro.sh ]] || fail "merged finding $n: no $out/merged/$n/repro.sh"
done
echo "PASS: $shards shards = the whole campaign ($runs runs); merged findings: ${merged_ids:-none}"
