#!/usr/bin/env bash
# scripts/install_torch.sh: a complete environment of the pinned torch is reused without pip (its
# LibTorch folder the only line on stdout); an incomplete one, or one with another torch version,
# is installed again, and without PyPI that fails with one `error:` line and no prefix printed;
# a venv that cannot be made fails the same way and leaves nothing; arguments are refused (2).
#
#   test_install_torch.sh SOURCE_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
script="$1/scripts/install_torch.sh"
enter_workdir "$2"
version=2.11.0
# No package index and no local wheels: any pip install fails at once.
offline=(env PIP_NO_INDEX=1 PIP_FIND_LINKS= PIP_RETRIES=0 PIP_TIMEOUT=2)

# expect_failure WHAT TEXT CMD...: status 1, nothing on stdout, one `error:` line holding TEXT.
expect_failure() {
  local what=$1 text=$2
  shift 2
  "$@" </dev/null >out.txt 2>err.txt
  status=$?
  if [ "$status" -ne 1 ]; then fail "$what: exit $status, not 1"; show err.txt; return; fi
  [ -s out.txt ] && fail "$what: printed a prefix anyway: $(head -c 200 out.txt)"
  check_eq "$what: error lines" "$(grep -c '^error:' err.txt)" 1
  grep '^error:' err.txt | grep -qF -- "$text" || fail "$what: the error line lacks '$text'"
  pass "$what: $(grep '^error:' err.txt)"
}

# The pinned environment, when this machine has it (scripts/test.sh installs it for its second
# build): reused offline, in seconds.
default_venv="${XDG_CACHE_HOME:-$HOME/.cache}/pets_train/venv-torch-$version"
if [ -x "$default_venv/bin/python" ]; then
  start=$SECONDS
  "${offline[@]}" "$script" </dev/null >out.txt 2>err.txt
  status=$?
  check_eq "reuse: exit status" "$status" 0
  check_eq "reuse: lines on stdout" "$(wc -l <out.txt)" 1
  prefix=$(cat out.txt)
  [ -f "$prefix/share/cmake/Torch/TorchConfig.cmake" ] ||
    fail "reuse: '$prefix' holds no share/cmake/Torch/TorchConfig.cmake"
  grep -qi pip err.txt && fail "reuse: pip ran: $(head -3 err.txt)"
  pass "the complete pinned environment reused in $((SECONDS - start)) s: $prefix"
else
  echo "note: no $default_venv on this machine; its reuse is not checked"
fi

# An environment without torch (an interrupted first install): installs again, offline fails.
python3 -m venv --without-pip --system-site-packages venv-empty ||
  fatal "python3 -m venv failed"
expect_failure "venv without torch, offline" "torch==$version" \
  "${offline[@]}" PETS_TORCH_VENV="$work/venv-empty" "$script"

# An environment with another torch version: not reused.
python3 -m venv --without-pip --system-site-packages venv-other || fatal "python3 -m venv failed"
site=$(venv-other/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/torch-1.13.1.dist-info" "$site/torch/share/cmake/Torch" "$site/torch/lib" \
  "$site/torch/include/torch"
printf 'Metadata-Version: 2.1\nName: torch\nVersion: 1.13.1\n' >"$site/torch-1.13.1.dist-info/METADATA"
touch "$site/torch/share/cmake/Torch/TorchConfig.cmake" "$site/torch/include/torch/script.h"
for lib in libtorch.so libc10.so libtorch_cpu.so; do touch "$site/torch/lib/$lib"; done
expect_failure "venv with torch 1.13.1, offline" "torch==$version" \
  "${offline[@]}" PETS_TORCH_VENV="$work/venv-other" "$script"

# No venv can be made: nothing is left behind.
expect_failure "no venv module" "virtual environment" \
  env PYTHON=false PETS_TORCH_VENV="$work/venv-none" "$script"
[ -e venv-none ] && fail "no venv module: $work/venv-none left behind"

expect_usage "an argument" "takes no arguments" "$script" extra
finish
