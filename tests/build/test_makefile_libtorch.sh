#!/usr/bin/env bash
# The cluster Makefile's LibTorch choices configured and built for real, against the LibTorch of
# this build (a pip torch's package folder, which has an unzipped LibTorch's layout):
#   LIBTORCH=pip (the torch of PYTHON), LIBTORCH=<folder> (an unzipped LibTorch): each configures
#     a fresh build folder and builds pets_train, which links that LibTorch and no other and runs;
#   CMAKE_PREFIX_PATH=<LibTorch>/share/cmake (torch.utils.cmake_prefix_path) beside the system's
#     LibTorch: configure refuses the mixed LibTorch with one clear message;
#   LIBTORCH=<not a LibTorch>: one error line, exit 2, nothing configured.
# The build folders sit beside this build (same depth in the checkout), so with ccache (env.sh's
# CCACHE_BASEDIR) the compilations are this build's, and only configure and linking cost time.
#
#   test_makefile_libtorch.sh SOURCE_DIR TORCH_PREFIX WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
src=$1
prefix=$(realpath "$2")
enter_workdir "$3"
export CCACHE_BASEDIR="$src" CCACHE_NOHASHDIR=1
build="$src/build-torch2-make"
at_exit "rm -rf '$build'"

# The python whose torch this is: a venv's, above lib/pythonX.Y/site-packages/torch.
python="$prefix/../../../../bin/python"
[ -x "$python" ] || skip "this build's LibTorch ($prefix) is no pip torch in a venv"
imported=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
[ "$(realpath "$imported" 2>/dev/null)" = "$prefix" ] ||
  skip "$python imports no torch from $prefix"

# build_with WHAT LIBTORCH [PYTHON]: make -f Makefile.cluster build of pets_train in a fresh
# folder; then pets_train must load this LibTorch's libraries and answer --help.
build_with() {
  local what=$1 libtorch=$2 py=${3:-python3} torch_lib
  rm -rf "$build"
  capture "$what.log" make -C "$src" -f Makefile.cluster build LIBTORCH="$libtorch" PYTHON="$py" \
    BUILD="$build" BUILD_TYPE=RelWithDebInfo TARGETS=pets_train JOBS=2 \
    CMAKE_FLAGS="-DPETS_BUILD_TESTS=OFF"
  if [ "$status" -ne 0 ]; then
    fail "$what: make build exited $status"
    show "$what.log"
    return
  fi
  echo "$what: configured and built in $seconds s"
  if ! grep -Eq "^Torch_DIR:[A-Z]+=$prefix/share/cmake/Torch\$" "$build/CMakeCache.txt"; then
    fail "$what: configured with $(grep '^Torch_DIR' "$build/CMakeCache.txt"), not $prefix's"
  fi
  torch_lib=$(ldd "$build/pets_train" | awk '$1 == "libtorch_cpu.so" {print $3}')
  if [ "$(realpath "$torch_lib" 2>/dev/null)" != "$prefix/lib/libtorch_cpu.so" ]; then
    fail "$what: pets_train loads libtorch_cpu.so from '$torch_lib', not $prefix/lib"
    ldd "$build/pets_train" | grep -E 'torch|c10'
  fi
  capture "$what.help.log" "$build/pets_train" --help
  if [ "$status" -ne 0 ] || ! grep -q -- '--epochs' "$what.help.log"; then
    fail "$what: pets_train --help exited $status"
    show "$what.help.log"
  fi
  pass "$what: make -f Makefile.cluster build, pets_train linked against $prefix"
}

build_with "LIBTORCH=pip" pip "$python"
build_with "LIBTORCH=folder" "$prefix"

# The config's folder alone as the prefix: with a LibTorch on the system's library paths, CMake's
# find_library takes that one; configure must refuse the mix.
system_torch=$(ldconfig -p 2>/dev/null | awk '$1 == "libtorch.so" {print $NF; exit}')
if [ -n "$system_torch" ] && [ "$(realpath "$system_torch")" != "$prefix/lib/libtorch.so" ]; then
  rm -rf "$build"
  capture mixed.log cmake -S "$src" -B "$build" -DPETS_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/share/cmake"
  if [ "$status" -eq 0 ]; then
    fail "a mixed LibTorch (config in $prefix, $system_torch on the library path) configured"
    grep -E '^(TORCH_LIBRARY|Torch_DIR)' "$build/CMakeCache.txt"
  elif ! grep -q "mixed LibTorch" mixed.log; then
    fail "configure of a mixed LibTorch failed without saying why"
    show mixed.log
  else
    pass "a mixed LibTorch refused: $(grep -m1 -A1 'mixed LibTorch' mixed.log | tr -s ' \n' ' ')"
  fi
else
  echo "note: no other LibTorch on the library paths; the mixed case is not checked"
fi

rm -rf "$build"
expect_usage "LIBTORCH=<not a LibTorch>" "is no LibTorch folder" \
  make -C "$src" -f Makefile.cluster configure LIBTORCH="$work/nothing" BUILD="$build"
[ -e "$build" ] && fail "LIBTORCH=<not a LibTorch> left a build folder"
pass "LIBTORCH=<not a LibTorch> refused"
finish
