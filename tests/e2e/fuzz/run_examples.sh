#!/usr/bin/env bash
# run_examples.sh: the campaign examples of docs/fuzzing.md, run on this
# machine as their batch systems would run them, give the campaign they
# claim to give.  It runs the examples' own commands with the variables
# the batch systems would set; it never edits the examples.
#
# usage:
#   run_examples.sh --rdmasan PATH --out DIR --slurm SBATCH_SCRIPT --k8s JOB_YAML
#                   --shards N --runs R --seed S --options "FUZZ OPTIONS" --program "PROG ARGS"
#
#   1. the whole campaign: rdmasan fuzz --seed=S --runs=R OPTIONS -- PROG
#      into DIR/whole;
#   2. Slurm: the sbatch script run once per array task K = 0..N-1 with
#      SLURM_ARRAY_TASK_ID=K, SLURM_ARRAY_TASK_COUNT=N (arguments --runs=R
#      OPTIONS -- PROG, CAMPAIGN_DIR=DIR/slurm); each task exits 0;
#   3. Kubernetes: the Indexed Job's container command (it must be an
#      Indexed Job whose SHARDS equals its completions) run once per index
#      with JOB_COMPLETION_INDEX=K, its env as written except RDMASAN,
#      CAMPAIGN_DIR=DIR/k8s, SHARDS=N, FUZZ_SEED, FUZZ_RUNS, FUZZ_JOBS=1,
#      FUZZ_OPTIONS and FUZZ_PROGRAM; each pod exits 0;
#   then for each of 2 and 3, `rdmasan fuzz merge` of its shard folders has
#   the whole campaign's runs (index and seed) and finding check ids, and
#   the exit status that goes with them.
# Exits 77 (skipped) without python3's yaml module.
set -uo pipefail
set -f

die() { echo "run_examples: $*" >&2; exit 2; }
fail() {
  echo "FAIL: $*"
  exit 1
}

rdmasan="" out="" slurm="" k8s="" shards="" runs="" seed="" options="" program=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --slurm) slurm=$2; shift 2 ;;
    --k8s) k8s=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --options) options=$2; shift 2 ;;
    --program) program=$2; shift 2 ;;
    *) die "unexpected argument '$1'" ;;
  esac
done
[[ -x $rdmasan ]] || die "no rdmasan command at '$rdmasan'"
[[ -r $slurm && -r $k8s ]] || die "need --slurm SCRIPT and --k8s YAML"
[[ -n $out && -n $shards && -n $runs && -n $seed && -n $program ]] || die "missing arguments"
python3 -c 'import yaml' 2> /dev/null || { echo "SKIP: python3 yaml module missing"; exit 77; }

rm -rf "$out"
mkdir -p "$out" || die "cannot create $out"

summary_re='^rdmasan fuzz: [0-9]+ runs, [0-9]+ unique findings?(: (.*))?$'
# ids SUMMARY: the sorted, distinct check ids a summary line names.
ids() {
  [[ $1 =~ $summary_re ]] || fail "no summary line: '$1'"
  tr ',' '\n' <<< "${BASH_REMATCH[2]}" | sed -e 's/^ *//' -e 's/^[0-9]*-//' | grep . | sort -u | tr '\n' ' '
}
# pairs FILE: "index seed" of each numbered run, sorted.
pairs() { awk '$1 == "run" && $2 ~ /^[0-9]+$/ { print $2, $4 }' "$1" | sort -n; }

echo "+ whole campaign"
stdout=$("$rdmasan" fuzz "--out=$out/whole" "--seed=$seed" "--runs=$runs" $options -- $program 2> "$out/whole.stderr")
whole_status=$?
whole_summary=$(tail -n 1 <<< "$stdout")
echo "$whole_summary (exit $whole_status)"
[[ $whole_status == 0 || $whole_status == 66 ]] || { cat "$out/whole.stderr"; fail "the whole campaign exits $whole_status"; }
whole_ids=$(ids "$whole_summary")
pairs "$out/whole/runs.txt" > "$out/whole.pairs"
[[ $(wc -l < "$out/whole.pairs") == "$runs" ]] || fail "the whole campaign ran $(wc -l < "$out/whole.pairs") runs, not $runs"

# merge_and_compare NAME: merges $out/NAME/shard-* and compares with the whole campaign.
merge_and_compare() {
  local name=$1 dirs=() k
  for ((k = 0; k < shards; ++k)); do
    [[ -f $out/$name/shard-$k/runs.txt ]] || fail "$name: shard $k left no runs.txt"
    dirs+=("$out/$name/shard-$k")
  done
  local stdout status summary
  stdout=$("$rdmasan" fuzz merge "--out=$out/$name/merged" "${dirs[@]}")
  status=$?
  summary=$(tail -n 1 <<< "$stdout")
  echo "$name merged: $summary (exit $status)"
  [[ $status == "$whole_status" ]] || fail "$name: merge exits $status, the whole campaign $whole_status"
  [[ $(ids "$summary") == "$whole_ids" ]] || fail "$name: merged findings '$(ids "$summary")', whole '$whole_ids'"
  pairs "$out/$name/merged/runs.txt" > "$out/$name.pairs"
  diff "$out/whole.pairs" "$out/$name.pairs" || fail "$name: merged runs differ from the whole campaign's (< whole)"
}

# --- Slurm: each array task as Slurm would start it.
for ((k = 0; k < shards; ++k)); do
  echo "+ slurm task $k/$shards"
  env SLURM_ARRAY_TASK_ID=$k SLURM_ARRAY_TASK_COUNT=$shards SLURM_ARRAY_TASK_MIN=0 SLURM_CPUS_PER_TASK=1 \
    RDMASAN="$rdmasan" CAMPAIGN_DIR="$out/slurm" FUZZ_SEED="$seed" \
    bash "$slurm" "--runs=$runs" $options -- $program > "$out/slurm-$k.log" 2>&1
  status=$?
  tail -n 1 "$out/slurm-$k.log"
  [[ $status == 0 ]] || { cat "$out/slurm-$k.log"; fail "slurm task $k exits $status"; }
done
merge_and_compare slurm

# --- Kubernetes: the Job's container command, once per completion index.
job=$(python3 - "$k8s" << 'EOF'
import shlex, sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
spec = job["spec"]
assert job["kind"] == "Job" and spec["completionMode"] == "Indexed", "not an Indexed Job"
c = spec["template"]["spec"]["containers"][0]
env = {e["name"]: str(e["value"]) for e in c.get("env", [])}
assert env.get("SHARDS") == str(spec["completions"]), "SHARDS differs from completions"
assert c["command"] == ["/bin/sh", "-c"] and len(c["args"]) == 1, "want command /bin/sh -c SCRIPT"
for k, v in env.items():
    print("export %s=%s" % (k, shlex.quote(v)))
print("script=%s" % shlex.quote(c["args"][0]))
EOF
) || fail "$k8s is not the Indexed Job this test expects"
for ((k = 0; k < shards; ++k)); do
  echo "+ k8s index $k/$shards"
  (
    eval "$job"
    export RDMASAN=$rdmasan CAMPAIGN_DIR=$out/k8s SHARDS=$shards FUZZ_SEED=$seed FUZZ_RUNS=$runs FUZZ_JOBS=1
    export FUZZ_OPTIONS=$options FUZZ_PROGRAM=$program JOB_COMPLETION_INDEX=$k
    mkdir -p "$CAMPAIGN_DIR"
    exec /bin/sh -c "$script"
  ) > "$out/k8s-$k.log" 2>&1
  status=$?
  tail -n 1 "$out/k8s-$k.log"
  [[ $status == 0 ]] || { cat "$out/k8s-$k.log"; fail "k8s index $k exits $status"; }
done
merge_and_compare k8s
echo "PASS: the Slurm and Kubernetes examples ($shards shards each) merge to the whole campaign: ${whole_ids:-no findings}"
