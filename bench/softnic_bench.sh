#!/usr/bin/env bash
# softnic_bench.sh: softnic between two processes against the project's
# targets, in one run on one machine:
#   - 8 B SEND latency:        ib_send_lat -s 8,      t_typical <= 1.0 us
#   - 64 KiB RDMA WRITE BW:    ib_write_bw -s 65536,  >= 50% of memcpy BW
#   - streaming memcpy BW:     build/memcpy_bw (64 KiB chunks, 2 x 512 MiB)
# Both perftest pairs run under `rdmasan run` (default options) on a private
# softnic fabric via tests/e2e/run_pair.sh.
#
# usage: bench/softnic_bench.sh [--strict]
#   --strict   exit 1 when a target is missed (default: exit 1 only when a
#              measurement could not be made)
# environment: BUILD_DIR (default build), LAT_ITERS (10000), BW_ITERS (20000),
#              MEMCPY_MIB (512 per buffer), RDMASAN_BENCH_OPTS (extra
#              `--name=value` rdmasan options, space separated)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
strict=0
[[ ${1:-} == --strict ]] && strict=1
lat_iters=${LAT_ITERS:-10000}
bw_iters=${BW_ITERS:-20000}
memcpy_mib=${MEMCPY_MIB:-512}
out=$build/bench-out
mkdir -p "$out"

for f in "$build/rdmasan" "$build/memcpy_bw"; do
  [[ -x $f ]] || { echo "bench: $f not found; build first (cmake --build build)" >&2; exit 1; }
done

# shellcheck source=bench/ports.sh
source "$repo/bench/ports.sh"

# softnic=on: these figures are softnic's, also on a host with an RDMA NIC
# (where the default, softnic=auto, hides softnic0).
runner_opts=(--opt softnic=on)
for o in ${RDMASAN_BENCH_OPTS:-}; do runner_opts+=(--opt "${o#--}"); done

# run_perftest NAME PROGRAM ARGS...: runs the pair; logs in $out/NAME.*.log.
run_perftest() {
  local name=$1 prog=$2 port
  shift 2
  port=$(free_port) || { echo "bench: no free TCP port" >&2; return 1; }
  echo "== $prog $* (server and client under rdmasan run, port $port)"
  "$repo/tests/e2e/run_pair.sh" --rdmasan "$build/rdmasan" --outdir "$out" --timeout 300 --quiet \
    "${runner_opts[@]}" --expect "#bytes" "$name" "$port" \
    -- "$prog" -d softnic0 -p "$port" -F "$@" \
    --- "$prog" -d softnic0 -p "$port" -F "$@" 127.0.0.1
}

# perftest_value LOG SIZE HEADER_RE COLUMN: field COLUMN of the results row
# for SIZE that follows a header line matching HEADER_RE.
perftest_value() {
  awk -v size="$2" -v hdr="$3" -v col="$4" '
    $0 ~ hdr { in_table = 1; next }
    in_table && $1 == size && NF >= col { print $col; exit }' "$1"
}

# t_typical is the 5th column of perftest's latency table:
#   #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] ...
# BW average is the 4th of the bandwidth table, in MiB/s (2^20 bytes/s,
# though perftest labels it MB/sec):
#   #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
lat_us="" bw_mibs="" memcpy_gbps=""
if run_perftest bench.send_lat ib_send_lat -s 8 -n "$lat_iters"; then
  for log in "$out/bench.send_lat.client.log" "$out/bench.send_lat.server.log"; do
    lat_us=$(perftest_value "$log" 8 "t_typical" 5)
    [[ -n $lat_us ]] && break
  done
fi
if run_perftest bench.write_bw ib_write_bw -s 65536 -n "$bw_iters"; then
  for log in "$out/bench.write_bw.client.log" "$out/bench.write_bw.server.log"; do
    bw_mibs=$(perftest_value "$log" 65536 "BW average\\[MB/sec\\]" 4)
    [[ -n $bw_mibs ]] && break
  done
fi
echo "== memcpy_bw $memcpy_mib"
memcpy_gbps=$("$build/memcpy_bw" "$memcpy_mib" | awk '$1 == "memcpy_bw_gbps" { print $2 }')

[[ -n $lat_us ]] || echo "bench: no 8 B latency figure (see $out/bench.send_lat.*.log)" >&2
[[ -n $bw_mibs ]] || echo "bench: no 64 KiB bandwidth figure (see $out/bench.write_bw.*.log)" >&2
[[ -n $memcpy_gbps ]] || echo "bench: memcpy_bw gave no figure" >&2

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo
echo "softnic benchmark: $(nproc) CPUs, ${cpu:-unknown CPU}, $(date -u +%Y-%m-%d)"
awk -v lat="$lat_us" -v mibs="$bw_mibs" -v mem="$memcpy_gbps" -v strict="$strict" '
  function verdict(ok) { return ok ? "PASS" : "MISS" }
  BEGIN {
    fmt = "%-38s %12s   %-10s %s\n"
    printf fmt, "measure", "value", "target", "result"
    missing = 0; missed = 0
    if (lat != "") {
      ok = lat + 0 <= 1.0; missed += !ok
      printf fmt, "8 B SEND latency, t_typical", sprintf("%.2f us", lat), "<= 1.0 us", verdict(ok)
    } else { printf fmt, "8 B SEND latency, t_typical", "n/a", "<= 1.0 us", "FAILED"; missing = 1 }
    gbs = ""
    if (mibs != "") {
      gbs = mibs * 1048576 / 1e9
      printf fmt, "64 KiB RDMA WRITE bandwidth", sprintf("%.2f GB/s", gbs), "", ""
    } else { printf fmt, "64 KiB RDMA WRITE bandwidth", "n/a", "", "FAILED"; missing = 1 }
    if (mem != "") printf fmt, "memcpy bandwidth (64 KiB chunks)", sprintf("%.2f GB/s", mem), "", ""
    else { printf fmt, "memcpy bandwidth (64 KiB chunks)", "n/a", "", "FAILED"; missing = 1 }
    if (gbs != "" && mem != "" && mem + 0 > 0) {
      ratio = 100 * gbs / mem; ok = ratio >= 50; missed += !ok
      printf fmt, "RDMA WRITE / memcpy", sprintf("%.0f %%", ratio), ">= 50 %", verdict(ok)
    } else printf fmt, "RDMA WRITE / memcpy", "n/a", ">= 50 %", "FAILED"
    print ""
    print "GB/s = 10^9 bytes/s; perftest reports MiB/s (2^20 bytes/s), converted."
    exit missing ? 1 : (strict && missed ? 1 : 0)
  }'
