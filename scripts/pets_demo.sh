#!/usr/bin/env bash
# The main job, end to end on this machine: install what is missing, build, make a small synthetic
# pets-like image folder, preprocess it to HDF5 and train for 5 epochs under `mpirun -np 2`.
# Everything lands in work/ (override with PETS_WORK=DIR).
#
# Extra arguments go to pets_train and override the script's own choices (`--epochs 2`, `--out
# DIR`). Run again, it starts its own run folder over (--overwrite) unless it is told --out,
# --resume or --overwrite. PETS_PER_CLASS (images per class, default 20) and PETS_RANKS (default 2)
# size the run; PETS_BIN=DIR uses the programs already built in DIR instead of building.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [ -n "${PETS_BIN:-}" ]; then
  bin="$PETS_BIN"
else
  pets_build -DPETS_BUILD_TESTS=OFF
  bin="$PETS_BUILD"
fi

work="${PETS_WORK:-$PETS_ROOT/work}"
ranks="${PETS_RANKS:-2}"
per_class="${PETS_PER_CLASS:-20}"
mkdir -p "$work"

# The image folder is remade when it was written with other settings.
synth_args="--per-class $per_class --seed 42"
if [ ! -d "$work/images" ] || [ "$(cat "$work/images.args" 2>/dev/null)" != "$synth_args" ]; then
  rm -rf "$work/images" "$work/images.part" "$work/images.args"
  # shellcheck disable=SC2086  # synth_args is a list of words
  "$bin/pets_synth" --out "$work/images.part" $synth_args
  mv "$work/images.part" "$work/images"
  echo "$synth_args" > "$work/images.args"
fi

# The script's defaults for options the caller did not give (pets_train takes each option once).
given() {
  local name=$1 arg
  for arg in "${extra[@]}"; do
    case "$arg" in "$name" | "$name"=*) return 0 ;; esac
  done
  return 1
}
extra=("$@")
defaults=()
given --epochs || defaults+=(--epochs 5)
if ! given --out && ! given --resume && ! given --overwrite; then
  defaults+=(--out "$work/runs/demo" --overwrite)
elif ! given --out; then
  defaults+=(--out "$work/runs/demo")
fi

# The store is remade only when the images or pets_preprocess changed: a checkpoint resumes
# only on the store it was written from (every file pets_preprocess writes has an id of its own).
if [ ! -s "$work/pets.h5" ] || [ "$work/images.args" -nt "$work/pets.h5" ] ||
  [ "$bin/pets_preprocess" -nt "$work/pets.h5" ]; then
  mpirun -np "$ranks" "$bin/pets_preprocess" --images "$work/images" --out "$work/pets.h5" --overwrite
fi
# Ctrl-C stops the training as a preemption does: rank 0 writes the checkpoint of the last step
# completed, the ranks end after the step in flight and the script exits 75 (run it again with
# --resume to continue). mpirun runs in a process group of its own, so that the terminal's SIGINT
# reaches only this script, which passes it on as SIGUSR1: mpirun forwards that to every rank at
# once and exits with their status, whereas a SIGINT to mpirun itself reaches them as SIGTERM
# after its kill timeout (1 s), kills them 1 s later and exits 1 (README, "Stopping and
# resuming"). A second Ctrl-C hands the job to mpirun's own abort (within about 2 s).
interrupted=0
on_interrupt() {
  interrupted=$((interrupted + 1))
  if [ "$interrupted" -eq 1 ]; then
    echo "pets_demo.sh: Ctrl-C: checkpoint of the last step completed, then the ranks stop (Ctrl-C again: abort)" >&2
    kill -USR1 "$train_pid" 2>/dev/null || true
  else
    kill -INT "$train_pid" 2>/dev/null || true
  fi
}
set -m
mpirun -np "$ranks" "$bin/pets_train" --data "$work/pets.h5" "${defaults[@]}" "${extra[@]}" </dev/null &
train_pid=$!
set +m
trap on_interrupt INT
# A trapped signal interrupts `wait` (status > 128) while mpirun still runs: wait again.
while :; do
  status=0
  wait "$train_pid" || status=$?
  kill -0 "$train_pid" 2>/dev/null || break
done
exit "$status"
