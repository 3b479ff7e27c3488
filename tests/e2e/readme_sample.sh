#!/usr/bin/env bash
# readme_sample.sh: the golden test of README's sample report.  Runs
# examples/rpc in mode dereg-in-flight under `rdmasan run` (as
# scripts/demo.sh does) and compares the client's report with the one
# README.md shows under "## A report", so README and the tool cannot drift.
#
# Normalised on both sides before the comparison: pids (==N==), hex
# numbers (addresses, object ids, lkeys, wr_ids), the count of outstanding
# WRs (how far the client got is timing), source paths (made relative to
# the repository; a frame in a file outside it, e.g. glibc's, keeps only
# its function).  Everything else (checks, messages, labels, the order of
# the frames, functions, lines, SUMMARY) must be the same.
#
# usage: readme_sample.sh RDMASAN RPC_SERVER RPC_CLIENT PORT OUTDIR
set -uo pipefail
[[ $# -eq 5 ]] || { echo "usage: readme_sample.sh RDMASAN RPC_SERVER RPC_CLIENT PORT OUTDIR" >&2; exit 2; }
rdmasan=$1 server=$2 client=$3 port=$4 outdir=$5
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=readme-sample

"$repo/examples/run_example.sh" --rdmasan "$rdmasan" --outdir "$outdir" --timeout 60 \
  "$name" "$port" dereg-in-flight \
  -- "$server" -p "$port" --mode dereg-in-flight \
  --- "$client" -p "$port" --mode dereg-in-flight -n 500 127.0.0.1 || exit 1

# The report: from its ERROR line to the findings line.
report() { sed -n '/^==[0-9]*==ERROR: rdmasan: dereg-in-flight:/,/^==[0-9]*==rdmasan: [0-9]* finding/p'; }
normalise() {
  sed -E -e 's/^==[0-9]+==/==PID==/' \
         -e 's/with [0-9]+ outstanding/with N outstanding/' \
         -e "s# ($repo/|[^ ]*/)?(examples/[^ :]+):# \\2:#" \
         -e 's/^( +#[0-9]+ 0x[0-9a-f]+ in [^ ]+) [^e ][^ ]*$/\1 <system>/' \
         -e 's/0x[0-9a-f]+/0x?/g'
}
live=$(report <"$outdir/$name.client.log" | normalise)
golden=$(sed -n '/^## A report/,/^## /p' "$repo/README.md" | sed -n '/^```$/,/^```$/p' | sed '/^```$/d' | report | normalise)
[[ -n $golden ]] || { echo "readme_sample: FAIL: no sample report under '## A report' in README.md"; exit 1; }
[[ -n $live ]] || { echo "readme_sample: FAIL: no dereg-in-flight report in $outdir/$name.client.log"; exit 1; }
if ! diff -u <(echo "$golden") <(echo "$live"); then
  echo "readme_sample: FAIL: the report differs from README's sample (- README, + live run); the live report:"
  report <"$outdir/$name.client.log"
  exit 1
fi
echo "readme_sample: PASS (README's sample report matches the live run)"
