#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build script: builds the libFuzzer targets of
# fuzz/ with the toolchain's $CC, $CXX, $CFLAGS, $CXXFLAGS and
# $LIB_FUZZING_ENGINE, and puts in $OUT what the runner needs: each target,
# its seed corpus ($OUT/<target>_seed_corpus.zip, from fuzz/corpus/<name>/,
# <name> being the target's name up to "_fuzzer"), and the shared libraries
# the targets load that the runner image lacks ($OUT/lib, found through the
# targets' $ORIGIN/lib run path).  It builds nothing but the fuzz targets and
# their dependencies, and writes only under $WORK and $OUT.
#
# Runs in the image of .clusterfuzzlite/Dockerfile (SRC, WORK, OUT set).
# Without $SRC/abseil-cpp (a local try with a system Abseil built for the
# same standard library) it uses the installed Abseil.
SRC_DIR=${SRC_DIR:-$SRC/rdmasan}
BUILD=$WORK/rdmasan-build
DEPS=$WORK/deps

# Abseil with the toolchain's flags (libc++), static, C++20 as the project.
if [ -d "$SRC/abseil-cpp" ]; then
  cmake -S "$SRC/abseil-cpp" -B "$WORK/abseil-build" -G Ninja \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS" \
    -DCMAKE_CXX_STANDARD=20 -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF \
    -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_INSTALL_PREFIX="$DEPS"
  cmake --build "$WORK/abseil-build" --target install -j"$(nproc)"
fi

# RDMASAN_FUZZ=ON: every library with -fsanitize=fuzzer-no-link and
# ASan+UBSan, the fuzz targets linked with -fsanitize=fuzzer, which is what
# $LIB_FUZZING_ENGINE says for libFuzzer (the only engine ClusterFuzzLite
# runs; anything else is refused here).  The run path (quoted for the
# shell that runs the link) lets the targets find the libraries copied to
# $OUT/lib below.
if [ "$LIB_FUZZING_ENGINE" != "-fsanitize=fuzzer" ]; then
  echo "build.sh: LIB_FUZZING_ENGINE='$LIB_FUZZING_ENGINE': only libFuzzer (-fsanitize=fuzzer) is supported" >&2
  exit 1
fi
cmake -S "$SRC_DIR" -B "$BUILD" -G Ninja \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="${LDFLAGS:-} -Wl,-rpath,'\$ORIGIN/lib'" \
  -DCMAKE_BUILD_TYPE=Debug -DRDMASAN_FUZZ=ON -DCMAKE_PREFIX_PATH="$DEPS"
cmake --build "$BUILD" --target fuzz_targets -j"$(nproc)"

mkdir -p "$OUT/lib"
found=0
for target in "$BUILD"/*_fuzzer*; do
  [ -f "$target" ] && [ -x "$target" ] || continue
  name=$(basename "$target")
  cp "$target" "$OUT/$name"
  found=$((found + 1))
  corpus="$SRC_DIR/fuzz/corpus/${name%%_fuzzer*}"
  if [ -d "$corpus" ]; then
    rm -f "$OUT/${name}_seed_corpus.zip"
    (cd "$corpus" && zip -q -r "$OUT/${name}_seed_corpus.zip" .)
  fi
  # Shared libraries outside the C runtime (libdw and its compression
  # libraries, libibverbs, ...): the runner image has the base system only.
  ldd "$target" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*.so* | libgcc_s.so*) ;;
      *) cp -n "$lib" "$OUT/lib/" ;;
    esac
  done
done
if [ "$found" -eq 0 ]; then
  echo "build.sh: no fuzz target was built in $BUILD" >&2
  exit 1
fi
echo "build.sh: $found fuzz targets in $OUT"
