#!/usr/bin/env bash
# The paired comparison of pets_train with the tutorial's loop: for each seed, both train from the
# same model (the frozen random backbone and the head pets_train draws from the seed, which it
# writes with PETS_DUMP_STEPS) on the same split of the same images (the store's), with the same
# schedule, batch and epochs; pets_train under mpirun, the tutorial's loop (bench/tutorial_run.py,
# Accelerate on gloo) with as many processes. Each side draws its own crops and order, so one pair
# differs by chance; a difference in the training itself shows as a sign that holds over the
# seeds. Writes DIR/paired-RANKS.json and prints the per-epoch training losses and accuracies of
# both sides and the differences' signs (bench/paired_summary.py).
#
# usage: bench/paired_compare.sh [--seeds "1 2 3 4 5 6 7 8"] [--ranks 2] [--epochs 5]
#        [--batch-size 64] [--image-size 224] [--per-class 20] [--unfreeze none]
#        [--backbone-lr-ratio 0.1] [--unfreeze-epoch 0] [--out DIR]
# --unfreeze and the two after it are given to both sides (a trained backbone: README,
# "Fine-tune the backbone"); their runs are named with the stages (…-layer4-seedN).
# Builds nothing: PETS_BIN (default build/) must hold pets_train, pets_synth and pets_preprocess.
# The images: pets_synth's --per-class × 37 (20: 740, the demo's set), made once in
# DIR/images-PER_CLASS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bin="${PETS_BIN:-$PETS_BUILD}"
seeds="1 2 3 4 5 6 7 8"
ranks=2 epochs=5 batch=64 size=224 per_class=20 out="$PETS_ROOT/work/paired"
unfreeze=none ratio=0.1 unfreeze_epoch=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds=$2 ;;
    --ranks) ranks=$2 ;;
    --epochs) epochs=$2 ;;
    --batch-size) batch=$2 ;;
    --image-size) size=$2 ;;
    --per-class) per_class=$2 ;;
    --unfreeze) unfreeze=$2 ;;
    --backbone-lr-ratio) ratio=$2 ;;
    --unfreeze-epoch) unfreeze_epoch=$2 ;;
    --out) out=$2 ;;
    *) echo "paired_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2 || { echo "paired_compare.sh: $1 needs a value" >&2; exit 2; }
done
for p in pets_train pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "paired_compare.sh: $bin/$p not built" >&2; exit 2; }
done
py=$("$PETS_ROOT/bench/reference_python.sh")
mkdir -p "$out"
images="$out/images-$per_class" store="$out/pets-$per_class.h5"
if [ ! -s "$store" ]; then
  rm -rf "$images"
  "$bin/pets_synth" --out "$images" --per-class "$per_class" --seed 42 >&2
  mpirun -np 2 "$bin/pets_preprocess" --images "$images" --out "$store" >&2
fi
trained=(--unfreeze "$unfreeze" --backbone-lr-ratio "$ratio" --unfreeze-epoch "$unfreeze_epoch")
tag=""
[ "$unfreeze" = none ] || tag="-$unfreeze"
runs=()
for seed in $seeds; do
  run="$out/np$ranks-c$per_class-s$size$tag-seed$seed"
  rm -rf "$run"
  mkdir -p "$run"
  # PETS_DUMP_STEPS writes the model before the first step: the Python side starts from it.
  # Both sides run at once, one thread a process.
  PETS_DUMP_STEPS="$run/dump:1" mpirun -np "$ranks" "$bin/pets_train" --data "$store" \
    --out "$run/pets" --seed "$seed" --epochs "$epochs" --batch-size "$batch" \
    --image-size "$size" "${trained[@]}" --threads 1 --progress none </dev/null >"$run/pets.log" 2>&1 &
  pets=$!
  until [ -s "$run/dump/initial.safetensors" ]; do
    kill -0 "$pets" 2>/dev/null || { echo "paired_compare.sh: pets_train failed, see $run/pets.log" >&2; exit 1; }
    sleep 1
  done
  port=$((29500 + RANDOM % 1000))
  pids=()
  for ((r = 0; r < ranks; r++)); do
    OMP_NUM_THREADS=1 RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks LOCAL_WORLD_SIZE=$ranks \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$py" "$PETS_ROOT/bench/tutorial_run.py" \
      --images "$images" --store "$store" --initial "$run/dump/initial.safetensors" \
      --mixed-precision no --workers 1 --threads 1 --epochs "$epochs" --batch-size "$batch" \
      --image-size "$size" "${trained[@]}" --seed "$seed" --report "$run/tutorial.json" \
      >"$run/tutorial-$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { echo "paired_compare.sh: the tutorial's loop failed, see $run/tutorial-*.log" >&2; exit 1; }
  done
  wait "$pets" || { echo "paired_compare.sh: pets_train failed, see $run/pets.log" >&2; exit 1; }
  rm -rf "$run/dump"
  runs+=("$seed=$run")
  echo "paired_compare.sh: seed $seed done" >&2
done
"$py" "$PETS_ROOT/bench/paired_summary.py" --ranks "$ranks" --json "$out/paired-np$ranks-c$per_class-s$size$tag.json" \
  "${runs[@]}"
