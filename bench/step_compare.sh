#!/usr/bin/env bash
# pets_train's first training steps replayed with PyTorch and timm (bench/step_compare.py): runs
# `mpirun -np RANKS pets_train --epochs 2` over pets_synth's 740 images with PETS_DUMP_STEPS (the
# replay builds the schedule for the run's epochs, whatever they are), then the
# replay, which prints one line per step and the first quantity that differs beyond float
# tolerance (exit 1), or that all agree. --images also compares every input with torchvision's
# crop of the same box. Arguments after `--` go to pets_train (e.g. `-- --unfreeze layer4`); the
# dump's folder is named by the ranks alone, so each such run replaces the last.
#
# usage: bench/step_compare.sh [--ranks 2] [--steps 10] [--out DIR] [--images] [--json FILE]
#        [-- PETS_TRAIN_ARGS...]
# Builds nothing: PETS_BIN (default build/) must hold pets_train, pets_synth and pets_preprocess.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bin="${PETS_BIN:-$PETS_BUILD}"
ranks=2 steps=10 out="$PETS_ROOT/work/step-compare" images=() json=() train_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift ;;
    --steps) steps=$2; shift ;;
    --out) out=$2; shift ;;
    --json) json=(--json "$2"); shift ;;
    --images) images=(--images) ;;
    --) shift; train_args=("$@"); break ;;
    *) echo "step_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for p in pets_train pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "step_compare.sh: $bin/$p not built" >&2; exit 2; }
done
py=$("$PETS_ROOT/bench/reference_python.sh")
mkdir -p "$out"
if [ ! -s "$out/pets.h5" ]; then
  rm -rf "$out/images"
  "$bin/pets_synth" --out "$out/images" --per-class 20 --seed 42 >&2
  mpirun -np 2 "$bin/pets_preprocess" --images "$out/images" --out "$out/pets.h5" >&2
fi
[ "${#images[@]}" -eq 0 ] || images=(--images "$out/images")
dump="$out/np$ranks"
rm -rf "$dump" "$out/run-np$ranks"
PETS_DUMP_STEPS="$dump:$steps" mpirun -np "$ranks" "$bin/pets_train" --data "$out/pets.h5" \
  --out "$out/run-np$ranks" --epochs 2 --progress none "${train_args[@]}" </dev/null >"$out/pets-np$ranks.log" 2>&1 ||
  { echo "step_compare.sh: pets_train failed, see $out/pets-np$ranks.log" >&2; exit 1; }
"$py" "$PETS_ROOT/bench/step_compare.py" "$dump" "${images[@]}" "${json[@]}"
