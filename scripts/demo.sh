#!/usr/bin/env bash
# demo.sh: show rdmasan running unmodified verbs programs on softnic, with
# no RDMA hardware: `ibv_devinfo -v`, then an ibv_rc_pingpong server and
# client talking over softnic on loopback (private fabric, free TCP port),
# an rping pair connecting through rdma_cm on softnic (rdma-core's own
# example, its true positives explained in suppressions/rdmacm-utils.supp),
# then the RPC example of examples/rpc and the block-storage example of
# examples/blk (memory windows): each correct (rdmasan reports nothing) and
# with a planted bug (rdmasan reports it).  Prints everything; exits non-zero
# if a step does not behave so.
#
# usage: scripts/demo.sh          (BUILD_DIR=build by default)
set -uo pipefail
exec 2>&1  # one stream, in order

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
rdmasan=$build/rdmasan
if [[ ! -x $rdmasan ]]; then
  echo "demo: $rdmasan not found; build first: cmake --preset default && cmake --build --preset default" >&2
  exit 1
fi

listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
port=""
for _ in $(seq 1 100); do
  candidate=$(( 20000 + RANDOM % 20000 ))
  if ! listening "$candidate"; then port=$candidate; break; fi
done
[[ -n $port ]] || { echo "demo: no free TCP port found" >&2; exit 1; }
fabric="demo-$$"

status=0
echo "==== rdmasan run -- ibv_devinfo -v"
if ! "$rdmasan" run --softnic_fabric="$fabric" -- ibv_devinfo -v </dev/null; then
  echo "demo: ibv_devinfo failed" >&2
  status=1
fi

echo
echo "==== rdmasan run -- ibv_rc_pingpong (server and client, port $port)"
if ! "$repo/tests/e2e/run_pair.sh" --rdmasan "$rdmasan" --outdir "$build/demo" --timeout 60 \
    --expect "iters in" demo.rc_pingpong "$port" \
    -- ibv_rc_pingpong -d softnic0 -p "$port" \
    --- ibv_rc_pingpong -d softnic0 -p "$port" 127.0.0.1; then
  echo "demo: ibv_rc_pingpong pair failed" >&2
  status=1
fi

echo
echo "==== rdmasan run -- rping (rdma_cm: server and client, port $((port + 1)))"
if ! "$repo/tests/e2e/run_pair.sh" --rdmasan "$rdmasan" --outdir "$build/demo" --timeout 60 --rdma-cm \
    --opt "suppressions=$repo/suppressions/rdmacm-utils.supp" --expect "ping data: rdma-ping-9: " \
    demo.rping $((port + 1)) \
    -- rping -s -a 127.0.0.1 -p $((port + 1)) -C 10 -v \
    --- rping -c -a 127.0.0.1 -p $((port + 1)) -C 10 -v; then
  echo "demo: rping pair failed" >&2
  status=1
fi

next_port() {
  local p
  for _ in $(seq 1 100); do
    p=$(( 20000 + RANDOM % 20000 ))
    if ! listening "$p"; then echo "$p"; return; fi
  done
}

for mode in correct dereg-in-flight; do
  port=$(next_port)
  echo
  echo "==== rdmasan run -- examples/rpc (mode $mode, port $port)"
  if ! "$repo/examples/run_example.sh" --rdmasan "$rdmasan" --outdir "$build/demo" --timeout 60 \
      "demo.rpc.$mode" "$port" "$mode" \
      -- "$build/rpc_server" -p "$port" --mode "$mode" \
      --- "$build/rpc_client" -p "$port" --mode "$mode" -n 500 127.0.0.1; then
    echo "demo: rpc example ($mode) did not behave as expected" >&2
    status=1
  fi
  if [[ $mode != correct ]]; then
    echo "---- the client's report:"
    grep -h -A12 "ERROR: rdmasan: $mode" "$build"/demo/demo.rpc."$mode".client.log | head -14
  fi
done

# examples/blk: per-I/O memory windows, invalidated by the server's
# SEND_WITH_INV; then the client rebinding a window with the key the server
# already holds.
for mode in correct rkey-not-bumped; do
  port=$(next_port)
  echo
  echo "==== rdmasan run -- examples/blk (mode $mode, port $port)"
  if ! "$repo/examples/run_example.sh" --rdmasan "$rdmasan" --outdir "$build/demo" --timeout 60 \
      "demo.blk.$mode" "$port" "$mode" \
      -- "$build/blk_server" -p "$port" \
      --- "$build/blk_client" -p "$port" --mode "$mode" 127.0.0.1; then
    echo "demo: blk example ($mode) did not behave as expected" >&2
    status=1
  fi
  if [[ $mode != correct ]]; then
    echo "---- the client's report:"
    grep -h -A19 "ERROR: rdmasan: $mode" "$build"/demo/demo.blk."$mode".client.log | head -20
  fi
done

echo
if [[ $status -eq 0 ]]; then echo "demo: OK"; else echo "demo: FAILED"; fi
exit $status
