#!/usr/bin/env bash
# Which BatchNorm statistics the evaluation should use at several ranks: for each seed, one
# pets_train run (--bn-mode train, the default) with every step dumped (PETS_DUMP_STEPS), then the
# same trained model evaluated with three sets of running statistics (bench/bn_eval_compare.py):
# the ranks' average (what pets_train writes), rank 0's after the last step, and rank 0's never
# averaged (what PyTorch DDP evaluates with). Each is evaluated by pets_predict on the run's
# held-out split (the averaged model there must score pets_train's own final accuracy) and on a
# fresh pets_synth set of another seed (same classes, unseen images). Writes
# DIR/bn-eval-np<R>-c<PER_CLASS>-s<SIZE>-e<EPOCHS>.json and prints the Markdown tables: per seed the
# accuracies, per rank-0 variant and set the seeds where rank 0's statistics win, lose and tie, the
# sign test's p (two-sided, ties dropped) and the mean difference ± its standard error, for the
# accuracy (the decision) and for the probability given to the true class (finer).
#
# usage: bench/bn_eval_compare.sh [--seeds "1 .. 16"] [--ranks 2] [--epochs 5] [--batch-size 64]
#        [--image-size 112] [--per-class 10] [--fresh-per-class 20] [--fresh-seed 4242]
#        [--out DIR] [--keep-models]
# Builds nothing: PETS_BIN (default build/) must hold pets_train, pets_predict, pets_synth and
# pets_preprocess; the Python is bench/reference_python.sh's (PETS_REFERENCE_VENV; unset, the
# reference-python folder beside the programs when there is one). The training images: pets_synth --seed 42,
# --per-class × 37 (10: 370, the paired runs' set), made once in DIR/images-PER_CLASS; the fresh
# set in DIR/fresh-FRESH_PER_CLASS-seedFRESH_SEED. A seed's dump (the steps' input tensors, about
# 10 MB a step and rank at 112 pixels) is deleted once its models are written; the two rank-0
# models once they are scored (--keep-models keeps them; RUN/bn/epoch_end_buffers.safetensors
# keeps what they are made from).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
bin="${PETS_BIN:-$PETS_BUILD}"
seeds="$(seq -s ' ' 1 16)"
ranks=2 epochs=5 batch=64 size=112 per_class=10 fresh_per_class=20 fresh_seed=4242
out="$PETS_ROOT/work/bn-eval" keep_models=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep-models) keep_models=1; shift; continue ;;
    --seeds) seeds=${2-} ;;
    --ranks) ranks=${2-} ;;
    --epochs) epochs=${2-} ;;
    --batch-size) batch=${2-} ;;
    --image-size) size=${2-} ;;
    --per-class) per_class=${2-} ;;
    --fresh-per-class) fresh_per_class=${2-} ;;
    --fresh-seed) fresh_seed=${2-} ;;
    --out) out=${2-} ;;
    *) echo "bn_eval_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2 || { echo "bn_eval_compare.sh: $1 needs a value" >&2; exit 2; }
done
if [ "$ranks" -lt 2 ]; then
  echo "bn_eval_compare.sh: --ranks must be at least 2 (at one rank there is one set of statistics)" >&2
  exit 2
fi
for p in pets_train pets_predict pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "bn_eval_compare.sh: $bin/$p not built" >&2; exit 2; }
done
if [ -z "${PETS_REFERENCE_VENV:-}" ] && [ -x "$bin/reference-python/bin/python" ]; then
  export PETS_REFERENCE_VENV="$bin/reference-python"
fi
py=$("$PETS_ROOT/bench/reference_python.sh")
tool="$PETS_ROOT/bench/bn_eval_compare.py"
mkdir -p "$out"
out=$(cd "$out" && pwd)  # pets_predict prints the paths as given; score matches them
images="$out/images-$per_class" store="$out/pets-$per_class.h5"
if [ ! -s "$store" ]; then
  rm -rf "$images"
  "$bin/pets_synth" --out "$images" --per-class "$per_class" --seed 42 >&2
  mpirun -np 2 "$bin/pets_preprocess" --images "$images" --out "$store" >&2
fi
fresh="$out/fresh-$fresh_per_class-seed$fresh_seed"
if [ ! -d "$fresh" ]; then
  "$bin/pets_synth" --out "$fresh.tmp" --per-class "$fresh_per_class" --seed "$fresh_seed" >&2
  mv "$fresh.tmp" "$fresh"
fi
eval_files="$out/eval-files-$per_class.txt"
"$py" "$tool" eval-files "$store" "$images" >"$eval_files"
mapfile -t held_out <"$eval_files"
# Every step dumped: each rank's last file holds its statistics after the run's last step.
steps=$("$py" "$tool" steps "$store" --ranks "$ranks" --batch-size "$batch" --epochs "$epochs")
classes=$("$py" "$tool" classes "$store")
runs=()
for seed in $seeds; do
  start=$SECONDS
  run="$out/np$ranks-c$per_class-s$size-e$epochs-seed$seed"
  rm -rf "$run"
  mkdir -p "$run/bn"
  PETS_DUMP_STEPS="$run/dump:$steps" mpirun -np "$ranks" -x PETS_DUMP_STEPS "$bin/pets_train" \
    --data "$store" --out "$run/pets" --seed "$seed" --epochs "$epochs" --batch-size "$batch" \
    --image-size "$size" --threads 1 --progress none </dev/null >"$run/pets.log" 2>&1 ||
    { echo "bn_eval_compare.sh: pets_train failed, see $run/pets.log" >&2; exit 1; }
  "$py" "$tool" models "$run"
  # Once a run (the first seed): rank0_ddp's closed form against timm's replay of DDP's rank 0.
  [ "${#runs[@]}" -gt 0 ] || "$py" "$tool" replay "$run"
  rm -rf "$run/dump"
  for variant in averaged rank0_last_step rank0_ddp; do
    model="$run/bn/$variant.safetensors"
    [ "$variant" = averaged ] && model="$run/pets/model.safetensors"
    mpirun -np "$ranks" "$bin/pets_predict" --model "$model" --threads 1 --top-k "$classes" \
      "${held_out[@]}" "$fresh" \
      </dev/null >"$run/bn/predict-$variant.txt" 2>"$run/bn/predict-$variant.log" ||
      { echo "bn_eval_compare.sh: pets_predict failed, see $run/bn/predict-$variant.log" >&2; exit 1; }
  done
  "$py" "$tool" score "$run" --eval-files "$eval_files" --fresh "$fresh"
  [ "$keep_models" = 1 ] || rm -f "$run/bn/rank0_last_step.safetensors" "$run/bn/rank0_ddp.safetensors"
  runs+=("$seed=$run")
  echo "bn_eval_compare.sh: seed $seed done in $((SECONDS - start)) s" >&2
done
"$py" "$tool" summary --json "$out/bn-eval-np$ranks-c$per_class-s$size-e$epochs.json" "${runs[@]}"
