#!/usr/bin/env bash
# Puts the pinned tensorboard package into a virtual environment of its own and prints, on
# stdout, that environment's python (which can `import tensorboard`). The tests read the event
# files of `pets_train --tensorboard DIR` back with it; a user can run TensorBoard from it:
#
#   "$(scripts/install_tensorboard.sh)" -m tensorboard.main --logdir DIR
#
# Idempotent: a complete environment with the pinned version is reused as it is (no network);
# a missing or incomplete one is (re)installed from PyPI (about 180 MB with numpy and grpcio).
# Progress goes to stderr; a failure is one `error:` line.
#
# Environment: PETS_TENSORBOARD_VERSION (default 2.21.0), PETS_TENSORBOARD_VENV (default
# ~/.cache/pets_train/venv-tensorboard-$PETS_TENSORBOARD_VERSION), PYTHON (the python3 that
# makes the venv); pip's own settings (PIP_INDEX_URL, ...) apply.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "error: install_tensorboard.sh takes no arguments (got '$1'); see --help" >&2; exit 2 ;;
esac

version="${PETS_TENSORBOARD_VERSION:-2.21.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pets_train"
venv="${PETS_TENSORBOARD_VENV:-$cache/venv-tensorboard-$version}"
python="${PYTHON:-python3}"

# Status 0 when the venv holds the pinned tensorboard completely and its event reader imports
# (no network). pip writes RECORD last: every file it lists must be there, or an install was cut
# short.
complete() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$version" <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, pathlib, sys
dist = md.distribution("tensorboard")
if dist.version != sys.argv[1]:
    sys.exit(1)
for f in dist.files or []:
    if not pathlib.Path(dist.locate_file(f)).exists():
        sys.exit(1)
from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
EOF
}

# One install at a time (tests running in parallel may all ask for it on a fresh machine).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if complete; then
  echo "$venv/bin/python"
  exit 0
fi

echo "install_tensorboard: installing tensorboard==$version into $venv" >&2
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" >&2; then
    rm -rf "$venv"
    echo "error: could not create a virtual environment at $venv with $python -m venv (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# An interrupted run leaves an incomplete venv: the next run finds it incomplete and installs
# again into it (pip completes it).
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
     "tensorboard==$version" >&2; then
  echo "error: pip could not install tensorboard==$version into $venv (no access to PyPI? see pip's messages above)" >&2
  exit 1
fi
if ! complete; then
  echo "error: tensorboard==$version installed into $venv but its event reader does not import" >&2
  exit 1
fi
echo "$venv/bin/python"
