#!/usr/bin/env bash
# The main job, end to end on this machine: install what is missing, build, make a small synthetic
# pets-like image folder, preprocess it to HDF5 and train for 5 epochs under `mpirun -np 2`.
# Everything lands in work/ (override with PETS_WORK=DIR).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
pets_build -DPETS_BUILD_TESTS=OFF

work="${PETS_WORK:-$PETS_ROOT/work}"
ranks="${PETS_RANKS:-2}"
mkdir -p "$work"
bin="$PETS_BUILD"

if [ ! -d "$work/images" ]; then
  "$bin/pets_synth" --out "$work/images.part" --per-class "${PETS_PER_CLASS:-20}" --seed 42
  mv "$work/images.part" "$work/images"
fi
mpirun -np "$ranks" "$bin/pets_preprocess" --images "$work/images" --out "$work/pets.h5"
mpirun -np "$ranks" "$bin/pets_train" --data "$work/pets.h5" --epochs 5 \
  --out "$work/runs/demo" "$@"
