# ports.sh: sourced by the benchmark scripts.  A TCP port for a benchmark's
# server: random in 20000-39999, not listening now (checked in /proc, no
# tools needed), so two benchmarks or a test run beside them do not meet.

# listening PORT: whether anything listens on PORT (IPv4 or IPv6).
listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# free_port: prints a port nothing listens on; fails after 100 tries.
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$(( 20000 + RANDOM % 20000 ))
    listening "$p" || { echo "$p"; return 0; }
  done
  return 1
}
