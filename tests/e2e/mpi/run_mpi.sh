#!/usr/bin/env bash
# run_mpi.sh: a two-rank MPI program over UCX on softnic, each rank under
# `rdmasan run`, one report per rank (log_path), as a user runs a job.
#
# usage: run_mpi.sh RDMASAN OUTDIR NAME PROGRAM [args...]
# RUN_MPI_OPTS: extra `rdmasan run` options (e.g. --softnic=on); none by
# default, as users type it.
# Passes when mpirun exits 0, rank 0 printed its PASS line, and no rank's
# report has an rdmasan error or warning.
set -uo pipefail
rdmasan=$1 outdir=$2 name=$3
shift 3
logs="$outdir/$name.mpi"
rm -rf "$logs" && mkdir -p "$logs" || exit 2
export UCX_TLS=${UCX_TLS:-rc_verbs,ud_verbs:aux,self}
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-softnic0:1}
fabric="mpi-$$"
extra=()
[[ $(id -u) -eq 0 ]] && extra+=(--allow-run-as-root)
timeout -k 5 120 mpirun "${extra[@]}" --oversubscribe -np 2 --mca pml ucx --mca btl ^openib,uct \
  -x UCX_TLS -x UCX_NET_DEVICES \
  "$rdmasan" run ${RUN_MPI_OPTS:-} --softnic_fabric="$fabric" --log_path="$logs/rank" -- "$@" \
  >"$logs/mpirun.log" 2>&1 </dev/null
status=$?
cat "$logs/mpirun.log"
fail=0
if [[ $status -ne 0 ]]; then echo "run_mpi: $name: FAIL: mpirun exited $status"; fail=1; fi
if ! grep -q "mpi_pingpong: PASS" "$logs/mpirun.log"; then echo "run_mpi: $name: FAIL: no PASS line"; fail=1; fi
nreports=$(ls "$logs"/rank.* 2>/dev/null | wc -l)
if grep -Eq '==[0-9]+==(ERROR|WARNING): rdmasan' "$logs"/rank.* 2>/dev/null; then
  echo "run_mpi: $name: FAIL: rdmasan reported findings:"; cat "$logs"/rank.*; fail=1
fi
echo "run_mpi: $name: $nreports rank log(s) in $logs"
[[ $fail -eq 0 ]] && echo "run_mpi: $name: PASS"
exit $fail
