#!/usr/bin/env bash
# setup.sh: install what building and testing rdmasan needs on Debian 12
# (bookworm).  Run as root, or as a user with sudo.  Idempotent: when every
# package is already installed it changes nothing and needs no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config  # toolchain
  libibverbs-dev                                 # <infiniband/verbs.h>, libibverbs
  ibverbs-utils perftest                         # the e2e test programs
  rdmacm-utils librdmacm-dev libfabric-bin       # rdma_cm users (e2e.cm.*, e2e.fi_*)
  ucx-utils openmpi-bin libopenmpi-dev           # UCX and Open MPI (e2e.ucx.*, e2e.mpi.*)
  libabsl-dev googletest libgtest-dev libgmock-dev
  clang-14 libclang-rt-14-dev                    # libFuzzer targets
  libdw-dev                                      # symbolizing report stacks
  dpkg-dev file                                  # cpack -G DEB (dpkg-shlibdeps)
  clang-format-14 groff-base                     # format check, man page check
  nlohmann-json3-dev                             # JSON and SARIF reports, trace export
  libbenchmark-dev                               # bench/postpoll_bench, bench/engine_scaling
  python3-pyverbs                                # rdma-core's own test suite (ctest -L conformance)
)

missing=()
for p in "${packages[@]}"; do
  if [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) != installed ]]; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup: must run as root (or with sudo available) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${packages[@]}" </dev/null >/dev/null
echo "setup: done"
