#!/usr/bin/env bash
# Puts the pinned torch wheel into a virtual environment of its own and prints, on stdout, the
# LibTorch folder to build against (the wheel's torch/ package: include/, lib/, share/cmake/):
#
#   cmake -S . -B build -DCMAKE_PREFIX_PATH="$(scripts/install_torch.sh)"
#   make -f Makefile.cluster build LIBTORCH="$(scripts/install_torch.sh)"
#
# Idempotent: a complete environment with the pinned version is reused as it is (no network);
# a missing or incomplete one is (re)installed from PyPI (about 4.6 GB with its CUDA libraries).
# Nothing is downloaded at build time. Progress goes to stderr; a failure is one `error:` line.
#
# Environment: PETS_TORCH_VERSION (default 2.11.0), PETS_TORCH_VENV (default
# ~/.cache/pets_train/venv-torch-$PETS_TORCH_VERSION), PYTHON (the python3 that makes the venv);
# pip's own settings (PIP_INDEX_URL, ...) apply.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "error: install_torch.sh takes no arguments (got '$1'); see --help" >&2; exit 2 ;;
esac

version="${PETS_TORCH_VERSION:-2.11.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pets_train"
venv="${PETS_TORCH_VENV:-$cache/venv-torch-$version}"
python="${PYTHON:-python3}"

# The LibTorch folder of the venv's torch when it is complete and the pinned version; nothing
# (and status 1) otherwise. Reads the installed metadata and files only: no import, no network.
complete_prefix() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$version" <<'EOF' 2>/dev/null
import importlib.metadata as md, pathlib, sys
dist = md.distribution("torch")
if dist.version.split("+")[0] != sys.argv[1]:
    sys.exit(1)
root = pathlib.Path(dist.locate_file("torch"))
needed = ["share/cmake/Torch/TorchConfig.cmake", "include/torch/script.h", "lib/libtorch.so",
          "lib/libc10.so", "lib/libtorch_cpu.so"]
if not all((root / f).is_file() for f in needed):
    sys.exit(1)
# pip writes RECORD last: every file it lists must be there, or an install was cut short.
for f in dist.files or []:
    if not pathlib.Path(dist.locate_file(f)).exists():
        sys.exit(1)
print(root)
EOF
}

if prefix="$(complete_prefix)"; then
  echo "$prefix"
  exit 0
fi

echo "install_torch: installing torch==$version into $venv (about 4.6 GB, a few minutes)" >&2
mkdir -p "$(dirname "$venv")"
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" >&2; then
    rm -rf "$venv"
    echo "error: could not create a virtual environment at $venv with $python -m venv (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# An interrupted run leaves an incomplete venv: the next run finds it incomplete and installs
# again into it (pip completes it); the prefix is printed only once it is complete.
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
     "torch==$version" >&2; then
  echo "error: pip could not install torch==$version into $venv (no access to PyPI? see pip's messages above)" >&2
  exit 1
fi
if ! prefix="$(complete_prefix)"; then
  echo "error: torch==$version installed into $venv but incomplete (no LibTorch CMake config, headers or libraries)" >&2
  exit 1
fi
echo "$prefix"
