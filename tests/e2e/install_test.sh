#!/usr/bin/env bash
# install_test.sh: rdmasan as a user gets it — from `cmake --install` into a
# fresh prefix, or from the Debian package CPack builds — and run from
# there, with nothing of the build tree on any path.
#
# usage:
#   install_test.sh install BUILD_DIR    cmake --install into a temporary prefix
#   install_test.sh deb BUILD_DIR        cpack -G DEB, check the control data,
#                                        extract it into a temporary root
#
# Then, in the installed tree: every file of the layout is there; rdmasan(1)
# names every option of `rdmasan run --help=1` and every check of `rdmasan
# checks`; `rdmasan run -- ibv_devinfo` (softnic, a fabric of its own) lists
# softnic0 with no finding, finding librdmasan.so by itself.
set -euo pipefail

mode=${1:?mode: install or deb}
build=${2:?build directory}
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmasan-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

case $mode in
  install)
    root=$work/prefix
    cmake --install "$build" --prefix "$root" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
    ;;
  deb)
    (cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
    debs=("$work"/pkg/rdmasan_*.deb)
    [[ -f ${debs[0]} ]] || fail "cpack wrote no rdmasan_*.deb"
    info=$(dpkg-deb --info "${debs[0]}")
    echo "$info" | grep -Eq '^ Package: rdmasan$' || fail "control: no 'Package: rdmasan'"
    echo "$info" | grep -Eq '^ Depends: .*libibverbs1' || fail "control: Depends lacks libibverbs1: $info"
    echo "$info" | grep -Eq '^ Depends: .*libdw1' || fail "control: Depends lacks libdw1 (dpkg-shlibdeps): $info"
    dpkg-deb -x "${debs[0]}" "$work/root"
    root=$work/root/usr
    ;;
  *) fail "unknown mode '$mode'" ;;
esac

rdmasan=$root/bin/rdmasan
lib=$(find "$root" -path '*/rdmasan/librdmasan.so' -print -quit)
docs=$root/share/doc/rdmasan
for f in "$rdmasan" "$lib" "$root/share/rdmasan/suppressions/perftest.supp" \
         "$docs/README.md" "$docs/CHANGELOG.md" "$docs/CONTRIBUTING.md" "$docs/LICENSE" \
         "$docs/LICENSES/BSD-2-Clause.txt" "$docs/LICENSES/GPL-2.0.txt" "$docs/traces/FORMAT.md" \
         "$docs/examples/ci/rdmasan-tests.sh" \
         "$root/share/man/man1/rdmasan.1" "$root/include/rdmasan/rdmasan_interface.h"; do
  [[ -n $f && -f $f ]] || fail "missing from the installed tree: ${f:-lib*/rdmasan/librdmasan.so}"
done
# Every page of docs/ is installed, in its place.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
while IFS= read -r page; do
  [[ -f $docs/$page ]] || fail "docs page $page is not installed in $docs"
done < <(cd "$src" && find docs -type f)
# The installed command preloads the installed shim, not the build tree's.
preload=$(env -u RDMASAN_LIB "$rdmasan" run --softnic_fabric="install-$mode-$$" -- \
            sh -c 'echo "$LD_PRELOAD"' 2>&1) || fail "rdmasan run -- sh: $preload"
[[ $preload == *"$root/"*librdmasan.so* && $preload != *"$build/librdmasan.so"* ]] ||
  fail "rdmasan run preloads '$preload', not the installed $lib"

# The man page against what the installed command prints.
man_src=$(sed 's/\\-/-/g' "$root/share/man/man1/rdmasan.1")
options=$(env -u RDMASAN_LIB "$rdmasan" run --help=1 2>&1 | sed -nE 's/^  ([a-z_]+) +(string|int|bool) .*/\1/p')
[[ -n $options ]] || fail "rdmasan run --help=1 listed no option"
checks=$(env -u RDMASAN_LIB "$rdmasan" checks | sed -nE 's/^([a-z]+(-[a-z]+)*) +(ERROR|WARNING) .*/\1/p')
[[ -n $checks ]] || fail "rdmasan checks listed no check"
for name in $options $checks; do
  grep -Fq "\\fB$name\\fR" <<<"$man_src" || fail "rdmasan.1 does not describe '$name'"
done
if command -v groff >/dev/null; then
  warnings=$(env -u LD_PRELOAD groff -man -Tutf8 -ww -z "$root/share/man/man1/rdmasan.1" 2>&1) || fail "groff: $warnings"
  [[ -z $warnings ]] || fail "groff warns about rdmasan.1: $warnings"
fi

out=$(cd "$work" && env -u RDMASAN_LIB timeout 60 "$rdmasan" run \
        --softnic_fabric="install-$mode-$$" -- ibv_devinfo 2>&1) || fail "rdmasan run -- ibv_devinfo: $out"
grep -Eq 'hca_id:[[:space:]]+softnic0' <<<"$out" || fail "ibv_devinfo under the installed rdmasan: $out"
if grep -Eq '==[0-9]+==(ERROR|WARNING): rdmasan' <<<"$out"; then fail "findings: $out"; fi
echo "install_test: $mode: OK ($(echo $options | wc -w) options, $(echo $checks | wc -w) checks in rdmasan.1)"
