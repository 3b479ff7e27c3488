#!/usr/bin/env bash
# pair.sh: a user's wrapper that runs a server and a client as one test
# command (examples/rpc's pair; the client retries its connect).
# usage: pair.sh RPC_SERVER RPC_CLIENT PORT MODE
set -euo pipefail
server=$1 client=$2 port=$3 mode=$4
"$server" -p "$port" --mode "$mode" &
pid=$!
status=0
"$client" -p "$port" --mode "$mode" -n 200 127.0.0.1 || status=$?
wait "$pid" || status=$?
exit "$status"
