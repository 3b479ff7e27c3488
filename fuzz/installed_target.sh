#!/bin/sh
# installed_target.sh: a fuzz target built the way a user builds one against
# an installed rdmasan: `cmake --install` to a scratch prefix, then
# fuzz/rpc_fuzzer.cc and examples/rpc compiled by clang with
# -fsanitize=fuzzer, `#include <rdmasan/rdmasan_fuzz.h>` from the prefix's
# include/, linked with -lrdmasan from the prefix's lib*/rdmasan/ (and not
# with libibverbs).  The target, in its planted mode, must then find,
# save and reproduce its bug (find_and_reproduce.sh).
#
# usage: installed_target.sh BUILD_DIR SOURCE_DIR WORKDIR CLANG CLANGXX
set -u
[ $# -eq 5 ] || { echo "usage: installed_target.sh BUILD_DIR SOURCE_DIR WORKDIR CLANG CLANGXX" >&2; exit 2; }
build=$1 src=$2 work=$3 cc=$4 cxx=$5
fail() { echo "installed_target: FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work/obj" || exit 2
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
[ -f "$work/prefix/include/rdmasan/rdmasan_fuzz.h" ] || fail "rdmasan_fuzz.h was not installed"
lib=$(find "$work/prefix" -name librdmasan.so | head -n 1)
[ -n "$lib" ] || fail "librdmasan.so was not installed"
libdir=$(dirname "$lib")
flags="-g -gdwarf-aranges -O1 -fno-omit-frame-pointer -fsanitize=fuzzer -I$work/prefix/include -I$src"
for f in rpc_common rpc_inproc rpc_inproc_client rpc_inproc_server; do
  # shellcheck disable=SC2086
  "$cc" $flags -c "$src/examples/rpc/$f.c" -o "$work/obj/$f.o" || fail "cannot compile $f.c"
done
# shellcheck disable=SC2086
"$cxx" $flags -DRPC_FUZZ_MODE='"reply-before-send"' "$src/fuzz/rpc_fuzzer.cc" "$work"/obj/*.o \
  -L"$libdir" -lrdmasan -Wl,-rpath,"$libdir" -o "$work/rpc_fuzzer" || fail "cannot link against $lib"
ldd "$work/rpc_fuzzer" | grep -q "$libdir/librdmasan.so" || fail "the target does not load the installed librdmasan.so"
exec "$src/fuzz/find_and_reproduce.sh" "$work/rpc_fuzzer" "ERROR: rdmasan: buffer-modified-in-flight" \
  "$work/find" 20 "in poll_cq [^ ]*examples/rpc/rpc_client.c:[0-9]+"
