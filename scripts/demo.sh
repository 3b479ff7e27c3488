#!/usr/bin/env bash
# demo.sh: README's main job.  Shows rdmasan running unmodified verbs
# programs on softnic, with no RDMA hardware, in seven steps:
#   1. `ibv_devinfo`: the device softnic presents;
#   2. an ibv_rc_pingpong server and client (two processes, loopback);
#   3. an rping pair connecting through rdma_cm (rdma-core's example; its
#      true positives are explained in suppressions/rdmacm-utils.supp);
#   4-5. the RPC example of examples/rpc, correct, then with a planted bug;
#   6-7. the block-storage example of examples/blk (memory windows),
#      correct, then with a planted bug.
# A correct program must end with no finding; a planted bug must be reported
# by the check it is named after (exit status 66).  Each step prints what it
# ran, what it expected and what it got; the reports of the planted bugs are
# shown once, in full.  Every process runs with --softnic=on, so the demo
# uses softnic even on a machine that has an RDMA NIC (where the default,
# softnic=auto, hides softnic), on a fabric and TCP ports of its own.
# Exits non-zero if any step does not behave so (the logs say why).
#
# usage: scripts/demo.sh          (BUILD_DIR=build by default)
set -uo pipefail
exec 2>&1  # one stream, in order

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
rdmasan=$build/rdmasan
logs=$build/demo
if [[ ! -x $rdmasan ]]; then
  echo "demo: $rdmasan not found; build first: cmake --preset default && cmake --build --preset demo" >&2
  exit 1
fi
mkdir -p "$logs"

listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# A free TCP port, and the next one free too (rping's pair uses port+1).
next_port() {
  local p
  for _ in $(seq 1 100); do
    p=$(( 20000 + RANDOM % 20000 ))
    if ! listening "$p" && ! listening $((p + 1)); then echo "$p"; return; fi
  done
  echo "demo: no free TCP port found" >&2
  exit 1
}

steps=7 step=0 failed=0
header() {
  step=$((step + 1))
  echo
  echo "==== $step/$steps: $1"
  echo "     expect: $2"
}
verdict() {  # verdict OK|FAIL words...
  local result=$1
  shift
  if [[ $result == OK ]]; then
    echo "     result: $*"
  else
    echo "     result: NOT AS EXPECTED: $*"
    failed=$((failed + 1))
  fi
}
# show_report LOG: the first report of LOG, in full.
show_report() {
  awk '/==[0-9]+==(ERROR|WARNING): rdmasan:/ { on = 1 } on { print "     | " $0 } /^SUMMARY: rdmasan:/ && on { exit }' "$1"
}
# A correct pair: run_pair.sh prints the logs only when something is wrong.
clean_pair() {  # clean_pair NAME EXPECT_LINE_REGEX [run_pair options] -- SERVER --- CLIENT
  local name=$1 want=$2
  shift 2
  local out
  if out=$("$repo/tests/e2e/run_pair.sh" --rdmasan "$rdmasan" --outdir "$logs" --timeout 60 --quiet \
             --opt softnic=on "$@" 2>&1); then
    grep -hE "$want" "$logs/$name.server.log" "$logs/$name.client.log" | head -2 | sed 's/^/     | /'
    verdict OK "both processes exited 0, rdmasan found nothing"
  else
    printf '%s\n' "$out"
    verdict FAIL "see above and $logs/$name.*.log"
  fi
}
# An example's pair, correct or with its planted bug (examples/run_example.sh
# judges it: the planted bug's check must be reported, and nothing else).
example_pair() {  # example_pair NAME PORT MODE -- SERVER --- CLIENT
  local name=$1 mode=$3 out
  if out=$("$repo/examples/run_example.sh" --rdmasan "$rdmasan" --outdir "$logs" --timeout 60 \
             --opt softnic=on "$@" 2>&1); then
    if [[ $mode == correct ]]; then
      grep -hE "^(rpc|blk)_client: .*(ok|done)" "$logs/$name.client.log" | sed 's/^/     | /'
      verdict OK "both processes exited 0, rdmasan found nothing"
    else
      echo "     the client's report:"
      show_report "$logs/$name.client.log"
      local how="the client exited 0"
      [[ $out =~ client:\ exit\ ([0-9]+) ]] && how="the client exited ${BASH_REMATCH[1]}"
      verdict OK "rdmasan reported $mode and nothing else, $how, as planted"
    fi
  else
    printf '%s\n' "$out"
    verdict FAIL "see above and $logs/$name.*.log"
  fi
}

fabric="demo-$$"
header "rdmasan run -- ibv_devinfo" "one device, softnic0, port 1 PORT_ACTIVE"
if "$rdmasan" run --softnic=on --softnic_fabric="$fabric" -- ibv_devinfo </dev/null >"$logs/devinfo.log" 2>&1 &&
    grep -q "hca_id:.*softnic0" "$logs/devinfo.log" && grep -q "PORT_ACTIVE" "$logs/devinfo.log"; then
  grep -E "hca_id|transport|vendor_id|port:|state:|link_layer" "$logs/devinfo.log" | sed 's/^/     | /'
  verdict OK "softnic0 listed, port active, no finding"
else
  cat "$logs/devinfo.log"
  verdict FAIL "ibv_devinfo did not list softnic0"
fi

port=$(next_port)
header "rdmasan run -- ibv_rc_pingpong, server and client (port $port)" \
  "1000 round trips over an RC QP, no finding"
clean_pair demo.rc_pingpong "iters in" --expect "iters in" demo.rc_pingpong "$port" \
  -- ibv_rc_pingpong -d softnic0 -p "$port" \
  --- ibv_rc_pingpong -d softnic0 -p "$port" 127.0.0.1

port=$(next_port)
header "rdmasan run -- rping, server and client through rdma_cm (port $port)" \
  "10 pings, no finding (rping's own true positives suppressed: suppressions/rdmacm-utils.supp)"
clean_pair demo.rping "ping data: rdma-ping-9" --rdma-cm \
  --opt "suppressions=$repo/suppressions/rdmacm-utils.supp" --expect "ping data: rdma-ping-9: " \
  demo.rping "$port" \
  -- rping -s -a 127.0.0.1 -p "$port" -C 10 -v \
  --- rping -c -a 127.0.0.1 -p "$port" -C 10 -v

for mode in correct dereg-in-flight; do
  port=$(next_port)
  if [[ $mode == correct ]]; then
    header "examples/rpc, correct (port $port)" "500 RPCs, no finding"
  else
    header "examples/rpc --mode dereg-in-flight: a planted bug (port $port)" \
      "the client deregisters its send MR before polling the SENDs that use it: dereg-in-flight"
  fi
  example_pair "demo.rpc.$mode" "$port" "$mode" \
    -- "$build/rpc_server" -p "$port" --mode "$mode" \
    --- "$build/rpc_client" -p "$port" --mode "$mode" -n 500 127.0.0.1
done

for mode in correct rkey-not-bumped; do
  port=$(next_port)
  if [[ $mode == correct ]]; then
    header "examples/blk, correct (port $port)" \
      "200 I/Os through per-I/O memory windows the server invalidates, no finding"
  else
    header "examples/blk --mode rkey-not-bumped: a planted bug (port $port)" \
      "the client rebinds a window with the key the server still holds: rkey-not-bumped"
  fi
  example_pair "demo.blk.$mode" "$port" "$mode" \
    -- "$build/blk_server" -p "$port" \
    --- "$build/blk_client" -p "$port" --mode "$mode" 127.0.0.1
done

echo
if [[ $failed -eq 0 ]]; then
  echo "demo: OK: all $steps steps behaved as expected (logs in $logs)"
  echo "next: README.md's quick starts, docs/checks.md for what each report means"
  exit 0
fi
echo "demo: $failed of $steps steps did not behave as expected (logs in $logs)"
exit 1
