#!/usr/bin/env bash
# The sanitizer build: fuzz/CMakeLists.txt (the LibTorch-free sources, the libFuzzer targets and
# the LibTorch-free unit tests, all under AddressSanitizer and UndefinedBehaviorSanitizer) built
# with clang into its own folder, then its unit tests run. The fuzz targets run with
# fuzz/run_fuzz.sh. ctest runs the steps one by one (tests/sanitize/CMakeLists.txt).
#
# usage: scripts/sanitize.sh [--build-only | --test-only | --skipped] [--tests FILE] [DIR]
#   DIR            the build folder (default: $PETS_BUILD/sanitize, i.e. build/sanitize)
#   --tests FILE   the main build's list of tests (default: $PETS_BUILD/pets_tests.cmake); those
#                  whose libraries are all LibTorch-free are built and run here
#   (no option)    build, run the unit tests, report the tests not built (SKIPPED lines)
#   --build-only   configure (clang++-14, Ninja, ccache) and build
#   --test-only    run the unit tests of a build (ctest there), then the SKIPPED lines
#   --skipped      only the SKIPPED lines; exit 77 when there are any
# Without clang and libFuzzer (Debian: clang-14 libclang-rt-14-dev, from scripts/install_deps.sh)
# every step prints SKIPPED with the reason and exits 77, ctest's code for a skipped test.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

usage() { sed -n '7,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

mode=all
dir=""
tests=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) mode=build; shift ;;
    --test-only) mode=test; shift ;;
    --skipped) mode=skipped; shift ;;
    --tests) [ $# -ge 2 ] || usage; tests="$2"; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "sanitize.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$dir" ] || usage; dir="$1"; shift ;;
  esac
done
dir=$(realpath -m "${dir:-$PETS_BUILD/sanitize}")
tests=$(realpath -m "${tests:-$PETS_BUILD/pets_tests.cmake}")
cxx="${PETS_SAN_CXX:-clang++-14}"
cc="${PETS_SAN_CC:-clang-14}"

# Why this machine cannot build the sanitizer project, or nothing when it can: clang must link
# a libFuzzer target with both sanitizers (the runtimes come in libclang-rt-14-dev).
missing_toolchain() {
  if ! command -v "$cxx" >/dev/null || ! command -v "$cc" >/dev/null; then
    echo "$cxx or $cc not found (Debian packages clang-14 libclang-rt-14-dev)"
    return
  fi
  local probe="$dir/toolchain_probe"
  mkdir -p "$probe"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    >"$probe/probe.cpp"
  if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" \
       >"$probe/log" 2>&1; then
    echo "$cxx cannot link a libFuzzer program with ASan and UBSan ($(head -1 "$probe/log"));" \
         "Debian package libclang-rt-14-dev"
  fi
}

# Prints SKIPPED with the reason and exits 77 when the build was skipped (or is to be).
skip_if_no_toolchain() {
  local why
  why=$(missing_toolchain)
  if [ -n "$why" ] && [ -x "$PETS_ROOT/scripts/install_deps.sh" ]; then
    echo "sanitize.sh: $why; trying scripts/install_deps.sh" >&2
    "$PETS_ROOT/scripts/install_deps.sh" >&2 || true
    why=$(missing_toolchain)
  fi
  if [ -n "$why" ]; then
    mkdir -p "$dir"
    echo "$why" >"$dir/skipped_reason"
    echo "SKIPPED: sanitizer build and fuzz targets ($why)"
    exit 77
  fi
  rm -f "$dir/skipped_reason"
}

build() {
  skip_if_no_toolchain
  local generator=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  [ -f "$tests" ] || { echo "sanitize.sh: $tests missing (configure the main build first)" >&2; return 1; }
  # Configured each time with the list of tests, so a test added or relinked is seen.
  cmake -S "$PETS_ROOT/fuzz" -B "$dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_C_COMPILER="$cc" -DPETS_TEST_LIST="$tests" || return 1
  cmake --build "$dir" --parallel "$PETS_JOBS"
}

# One SKIPPED line per unit test left out of the sanitizer build; returns 1 when there are any.
report_skipped() {
  local list="$dir/sanitize_skipped.txt" name folder reason any=0
  [ -f "$list" ] || { echo "sanitize.sh: $list missing (build first)" >&2; return 2; }
  while IFS=$'\t' read -r name folder reason; do
    [ -n "$name" ] || continue
    echo "SKIPPED: $name ($folder, not built under the sanitizers: $reason)"
    any=1
  done <"$list"
  return $any
}

unit_tests() {
  if [ -f "$dir/skipped_reason" ] && [ ! -f "$dir/CTestTestfile.cmake" ]; then
    echo "SKIPPED: sanitizer unit tests ($(cat "$dir/skipped_reason"))"
    exit 77
  fi
  [ -f "$dir/CTestTestfile.cmake" ] || { echo "sanitize.sh: no sanitizer build in $dir" >&2; return 1; }
  local status=0
  (cd "$dir" && ctest --output-on-failure --timeout 300) || status=1
  report_skipped
  return $status
}

case "$mode" in
  build) build ;;
  test) unit_tests ;;
  skipped)
    if [ -f "$dir/skipped_reason" ] && [ ! -f "$dir/sanitize_skipped.txt" ]; then
      echo "SKIPPED: sanitizer unit tests ($(cat "$dir/skipped_reason"))"
      exit 77
    fi
    report_skipped
    case $? in 0) echo "every unit test is built under the sanitizers" ;; 1) exit 77 ;; *) exit 1 ;; esac
    ;;
  all) build && unit_tests ;;
esac
