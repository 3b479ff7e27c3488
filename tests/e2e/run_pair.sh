#!/usr/bin/env bash
# run_pair.sh: run a server/client pair of verbs programs under `rdmasan run`
# on softnic, the way ctest, scripts/demo.sh and bench/ need it.
#
# usage:
#   run_pair.sh [options] NAME PORT -- SERVER_CMD [args...] --- CLIENT_CMD [args...]
#
# Any argument of either command containing @PORT@ has it replaced by PORT.
#
# options:
#   --rdmasan PATH   the rdmasan command (default: $RDMASAN_BIN, else
#                    <repo>/build/rdmasan)
#   --outdir DIR     where NAME.server.log / NAME.client.log go (default:
#                    $RDMASAN_E2E_OUT, else <repo>/build/e2e-out)
#   --timeout SEC    limit for each of the two processes (default 60)
#   --listen-wait S  how long to wait for the server to listen on PORT (30)
#   --expect REGEX   extended regex that must occur in the server's or the
#                    client's output; repeatable, all must match
#   --opt NAME=VAL   extra rdmasan option (becomes `rdmasan run --NAME=VAL`)
#   --allow-findings do not fail on rdmasan error reports in the output
#   --rdma-cm        the server listens through rdma_cm, not TCP: wait for
#                    softnic's port file of PORT instead (any port space)
#   --no-rdmasan     run both commands directly (tests of this harness)
#   --quiet          print the logs only when the pair fails
#   --teardown-race REGEX
#                    libfabric 1.17's ofi_rxm teardown race (docs/softnic.md):
#                    when the traces prove that the only failure is that race
#                    (see teardown_race), run the pair once more (a new
#                    fabric, the first try's logs and traces kept as
#                    NAME.try1.*); exit 77 (ctest: skipped), not 1, only when
#                    the second try proves it too.  --timeout is per try.
#   --listen-race REGEX
#                    perftest -R's listen race (docs/softnic.md): when the
#                    client failed printing REGEX (its connect rejected for
#                    want of a listener) and the server, still running,
#                    listened on PORT after the client's end (so its listen
#                    came after that connect), run the pair once more (a new
#                    fabric, the first try's logs kept as NAME.try1.*).
#                    Proven twice is a failure.
#
# What it does: picks a softnic fabric private to this run
# (softnic_fabric=e2e-NAME-<pid>; the softnic mode is the default, auto,
# as users run it, unless --opt softnic=on says), refuses a PORT already in
# use, starts the server, waits (bounded) until something listens on PORT
# while the server is alive, runs the client, then waits for the server
# (killing it 5 s after a failed client).  Passes only if both exit 0, every
# --expect matches, and neither printed an rdmasan error report.
set -uo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(cd "$script_dir/../.." && pwd)

rdmasan=${RDMASAN_BIN:-$repo_dir/build/rdmasan}
outdir=${RDMASAN_E2E_OUT:-$repo_dir/build/e2e-out}
limit=60
listen_wait=30
expects=()
extra_opts=()
use_rdmasan=1
rdma_cm=0
allow_findings=0
quiet=0
teardown_re=""
listen_race_re=""

die() { echo "run_pair: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --outdir) outdir=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --listen-wait) listen_wait=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --opt) extra_opts+=("--$2"); shift 2 ;;
    --allow-findings) allow_findings=1; shift ;;
    --no-rdmasan) use_rdmasan=0; shift ;;
    --rdma-cm) rdma_cm=1; shift ;;
    --quiet) quiet=1; shift ;;
    --teardown-race) teardown_re=$2; shift 2 ;;
    --listen-race) listen_race_re=$2; shift 2 ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done

[[ $# -ge 2 ]] || die "usage: run_pair.sh [options] NAME PORT -- SERVER... --- CLIENT..."
name=$1 port=$2
shift 2
[[ $port =~ ^[0-9]+$ && $port -gt 0 && $port -lt 65536 ]] || die "bad port '$port'"
[[ ${1:-} == "--" ]] || die "expected '--' before the server command"
shift
server=() client=()
while [[ $# -gt 0 && $1 != "---" ]]; do server+=("${1//@PORT@/$port}"); shift; done
[[ ${1:-} == "---" ]] || die "expected '---' between the server and the client command"
shift
while [[ $# -gt 0 ]]; do client+=("${1//@PORT@/$port}"); shift; done
[[ ${#server[@]} -gt 0 ]] || die "empty server command"
[[ ${#client[@]} -gt 0 ]] || die "empty client command"

safe_name=${name//[^A-Za-z0-9_.-]/-}
fabric_name=${name#e2e.}
base_fabric="e2e-${fabric_name//[^A-Za-z0-9_-]/_}-$$"
# rdma_cm port files live in a folder named after the fabric (cut and hashed
# past 24 characters): a short name keeps it predictable here.
[[ $rdma_cm -eq 1 ]] && base_fabric="cm-$$-$RANDOM"
mkdir -p "$outdir" || die "cannot create $outdir"
server_log="$outdir/$safe_name.server.log"
client_log="$outdir/$safe_name.client.log"
[[ $use_rdmasan -eq 1 || -z $teardown_re ]] || die "--teardown-race needs rdmasan (its traces)"
[[ $use_rdmasan -eq 0 || -x $rdmasan ]] || die "rdmasan not found at $rdmasan (build first, or pass --rdmasan)"

# prepare_try N: the fabric, the empty logs and the command prefixes of
# try N (a new fabric each try: nothing of the last one is reused).
prepare_try() {
  fabric=$base_fabric
  [[ $1 -gt 1 ]] && fabric="$base_fabric-t$1"
  # An earlier run's kept tries would pass for this run's.
  [[ $1 -gt 1 ]] || rm -f "$outdir/$safe_name".try[0-9]*.{server,client}.{log,trace,trace.incomplete}
  : >"$server_log"
  : >"$client_log"
  server_prefix=() client_prefix=()
  [[ $use_rdmasan -eq 1 ]] || return 0
  server_prefix=("$rdmasan" run "--softnic_fabric=$fabric" "${extra_opts[@]}")
  client_prefix=("${server_prefix[@]}")
  if [[ -n $teardown_re ]]; then
    rm -f "$outdir/$safe_name".{server,client}.trace{,.incomplete}
    server_prefix+=("--trace=$outdir/$safe_name.server.trace")
    client_prefix+=("--trace=$outdir/$safe_name.client.trace")
  fi
  server_prefix+=(--)
  client_prefix+=(--)
}

# keep_try N: try N's logs and traces moved to NAME.tryN.* (the next try
# writes the usual names).
keep_try() {
  local part
  for part in server.log client.log server.trace client.trace server.trace.incomplete client.trace.incomplete; do
    if [[ -e $outdir/$safe_name.$part ]]; then mv -f "$outdir/$safe_name.$part" "$outdir/$safe_name.try$1.$part"; fi
  done
}

# True if some socket listens on TCP port $1 (IPv4 or IPv6).  Reads /proc so
# it needs neither ss nor netstat.
listening() {
  if [[ $rdma_cm -eq 1 ]]; then
    # softnic's rdma_cm port files: <user dir>/cm-<fabric>/p<ps>-<port>, the
    # user directory one of softnic/user_dir.h's places.
    # A port file exists from rdma_bind_addr on; its record (softnic/cm_wire.h,
    # PortRecord) says listening (u32 1 at offset 12) only from rdma_listen
    # on: a client that connects between the two is rejected.
    local f
    local u
    u=$(id -u)
    for f in "${RDMASAN_SOFTNIC_DIR:-/dev/shm}/rdmasan-$u".*/cm-"$fabric"/p*-"$1" \
      "${XDG_RUNTIME_DIR:-/nonexistent}/rdmasan/cm-$fabric/p"*"-$1" "/run/user/$u/rdmasan/cm-$fabric/p"*"-$1"; do
      [[ -f $f && $(od -An -t u4 -j 12 -N 4 "$f" 2>/dev/null | tr -d ' ') == 1 ]] && return 0
    done
    return 1
  fi
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

server_pid=""
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

describe() {  # describe STATUS -> words
  case $1 in
    0) echo "exit 0" ;;
    124) echo "TIMED OUT after ${limit}s" ;;
    137) echo "killed (SIGKILL after timeout)" ;;
    *) if [[ $1 -gt 128 ]]; then echo "exit $1 (signal $(( $1 - 128 )))"; else echo "exit $1"; fi ;;
  esac
}

failures=()

# teardown_race: true, with race_evidence set, when the pair's one failure
# is libfabric 1.17's ofi_rxm teardown race (docs/softnic.md): one side
# timed out, the other exited 0, both printed $teardown_re (their work
# done) and no finding, and the hung side's trace shows it polled fewer
# successful receive completions than the SENDs its peer's trace saw
# complete successfully (each one a message placed in the hung side's
# receive queue), then destroyed the QP it received on: it dropped a
# delivered message with its QP (rxm closes the connection on the peer's
# disconnect before it polls) and polls on for it.  Anything else is a
# failure.
race_evidence=""
teardown_race() {
  local hung peer hung_status peer_status
  if [[ $client_status == 124 || $client_status == 137 ]]; then
    hung=client peer=server hung_status=$client_status peer_status=${server_status:-?}
    [[ $killed_server -eq 0 ]] || return 1
  elif [[ ${server_status:-?} == 124 || ${server_status:-?} == 137 ]]; then
    hung=server peer=client hung_status=$server_status peer_status=$client_status
  else
    return 1
  fi
  [[ $peer_status == 0 && ${#failures[@]} -eq 1 ]] || return 1
  grep -Eq -- "$teardown_re" "$server_log" && grep -Eq -- "$teardown_re" "$client_log" || return 1
  local f hung_trace="" peer_trace="$outdir/$safe_name.$peer.trace"
  for f in "$outdir/$safe_name.$hung.trace" "$outdir/$safe_name.$hung.trace.incomplete"; do
    [[ -f $f ]] && hung_trace=$f
  done
  [[ -n $hung_trace && -f $peer_trace ]] || return 1
  local hung_dump peer_dump
  hung_dump=$("$rdmasan" trace dump "$hung_trace" 2>/dev/null) || return 1
  peer_dump=$("$rdmasan" trace dump "$peer_trace" 2>/dev/null) || return 1
  # Completions print as {wr_id=.. status=S op=O ...}: IBV_WC_SEND is 0,
  # IBV_WC_RECV 128.
  local received sent qp
  received=$(grep -o 'status=0 op=128 ' <<<"$hung_dump" | wc -l)
  sent=$(grep -o 'status=0 op=0 ' <<<"$peer_dump" | wc -l)
  qp=$(grep -o 'post_recv obj=[0-9]*' <<<"$hung_dump" | tail -1)
  qp=${qp#post_recv obj=}
  [[ -n $qp ]] && grep -q "destroy_qp obj=$qp " <<<"$hung_dump" || return 1
  [[ $received -lt $sent ]] || return 1
  race_evidence="the $hung ($(describe "$hung_status")) polled $received receive completions of the $sent SENDs the $peer saw complete, destroyed its QP (trace object $qp) and polled on"
  return 0
}

# listen_race: true, with race_evidence set, when the try failed only as
# perftest -R's listen race does (docs/softnic.md): the client failed
# printing $listen_race_re (a connect rejected because nobody listened),
# no finding, and the server, alive after the client's end, was then seen
# listening on the port (late_listen): the listener the client's connect
# wanted came after it.  Anything else is a failure.
listen_race() {
  [[ -n $listen_race_re && $client_status != 0 && $client_status != "not run" ]] || return 1
  [[ $late_listen -eq 1 ]] || return 1
  grep -Eq -- "$listen_race_re" "$client_log" || return 1
  local f
  for f in "${failures[@]}"; do [[ $f != "rdmasan reported errors" ]] || return 1; done
  race_evidence="the client ($(describe "$client_status")) was refused for want of a listener (/$listen_race_re/) and the server listened on port $port only after the client's end"
  return 0
}

# run_try: one run of the pair; sets failures, server_status,
# client_status, killed_server and late_listen.
run_try() {
  failures=()
  # A stale server (an earlier run, another test) would answer our client.
  for _ in $(seq 1 50); do listening "$port" || break; sleep 0.1; done
  if listening "$port"; then
    die "TCP port $port is already in use; is a stale server still running?"
  fi

  echo "run_pair: $name: fabric $fabric, port $port, timeout ${limit}s, logs in $outdir"
  timeout -k 5 "$limit" "${server_prefix[@]}" "${server[@]}" >"$server_log" 2>&1 </dev/null &
  server_pid=$!

  # Wait until the server listens (bounded), or dies.
  now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $(( t / 1000 )); }
  deadline=$(( $(now_ms) + listen_wait * 1000 ))
  server_status=""
  until listening "$port"; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      wait "$server_pid"; server_status=$?
      server_pid=""
      failures+=("server exited ($(describe "$server_status")) before listening on port $port")
      break
    fi
    if [[ $(now_ms) -ge $deadline ]]; then
      failures+=("server did not listen on port $port within ${listen_wait}s")
      break
    fi
    sleep 0.05
  done

  client_status="not run"
  killed_server=0
  late_listen=0
  if [[ ${#failures[@]} -eq 0 ]]; then
    timeout -k 5 "$limit" "${client_prefix[@]}" "${client[@]}" >"$client_log" 2>&1 </dev/null
    client_status=$?
    if [[ $client_status -ne 0 ]]; then
      # The server may wait forever for a peer that is gone: 5 s grace.
      # With --listen-race, whether it listens meanwhile (listen_race).
      for _ in $(seq 1 50); do
        kill -0 "$server_pid" 2>/dev/null || break
        if [[ -n $listen_race_re ]] && listening "$port"; then
          late_listen=1
          break
        fi
        sleep 0.1
      done
    fi
  fi
  if [[ -n $server_pid ]]; then
    if [[ $client_status != 0 ]] && kill -0 "$server_pid" 2>/dev/null; then
      kill -TERM "$server_pid" 2>/dev/null
      killed_server=1
    fi
    wait "$server_pid"; server_status=$?
    server_pid=""
  fi

  if [[ $killed_server -eq 1 ]]; then
    failures+=("server: still running at the end; killed by run_pair")
  elif [[ $server_status != 0 ]]; then
    failures+=("server: $(describe "$server_status")")
  fi
  if [[ $client_status == "not run" ]]; then
    failures+=("client: not run")
  elif [[ $client_status -ne 0 ]]; then
    failures+=("client: $(describe "$client_status")")
  fi
  for re in "${expects[@]}"; do
    # Not `cat ... | grep -q`: grep quitting early would SIGPIPE cat and
    # fail the pipeline under pipefail.
    if ! grep -Eq -- "$re" "$server_log" "$client_log"; then
      failures+=("expected output /$re/ not found")
    fi
  done
  if [[ $allow_findings -eq 0 ]] && grep -Eq '==[0-9]+==(ERROR|WARNING): rdmasan' "$server_log" "$client_log"; then
    failures+=("rdmasan reported errors")
  fi
}

try=1
while :; do
  prepare_try "$try"
  run_try
  # A proven teardown race on the first try: once more, on a new fabric.
  if [[ ${#failures[@]} -gt 0 && -n $teardown_re && $try -lt 2 ]] && teardown_race; then
    keep_try "$try"
    echo "run_pair: $name: try $try: libfabric 1.17's ofi_rxm teardown race (docs/softnic.md): $race_evidence; running the pair again (this try's logs and traces: $outdir/$safe_name.try$try.*)"
    try=$((try + 1))
    continue
  fi
  # Likewise perftest -R's listen race.
  if [[ ${#failures[@]} -gt 0 && $try -lt 2 ]] && listen_race; then
    keep_try "$try"
    echo "run_pair: $name: try $try: perftest -R's listen race (docs/softnic.md): $race_evidence; running the pair again (this try's logs: $outdir/$safe_name.try$try.*)"
    try=$((try + 1))
    continue
  fi
  break
done

if [[ $quiet -eq 0 || ${#failures[@]} -gt 0 ]]; then
  if [[ $killed_server -eq 1 ]]; then server_words="killed by run_pair"; else server_words=$(describe "${server_status:-?}"); fi
  echo "---- server ($server_words): ${server[*]}"
  cat "$server_log"
  echo "---- client ($( [[ $client_status == "not run" ]] && echo "not run" || describe "$client_status")): ${client[*]}"
  cat "$client_log"
  echo "----"
fi
if [[ ${#failures[@]} -gt 0 ]]; then
  if [[ -n $teardown_re ]] && teardown_race; then
    echo "run_pair: $name: SKIP: libfabric 1.17's ofi_rxm teardown race (docs/softnic.md): $race_evidence"
    exit 77
  fi
  if listen_race; then
    echo "run_pair: $name: FAIL: perftest -R's listen race twice in a row (docs/softnic.md): $race_evidence"
  fi
  for f in "${failures[@]}"; do echo "run_pair: $name: FAIL: $f"; done
  exit 1
fi
echo "run_pair: $name: PASS"
exit 0
