#!/usr/bin/env bash
# What a --max-lr sweep costs on the CPU: the end-to-end wall time of pets_train training 8 heads
# over one backbone forward per step (--max-lr 1e-3,2e-3,5e-3,1e-2,2e-2,3e-2,5e-2,1e-1) against the
# single head (--max-lr 3e-2), the same data, seed and options otherwise; target: the sweep at most
# 1.10 times the single head's wall time. Makes a small synthetic set (pets_synth, the 37 breeds,
# pets_preprocess under mpirun), runs one warm-up of each side (not counted), then --pairs pairs,
# alternating which side goes first (ABBA...), each run a whole `mpirun -np RANKS pets_train`.
#
#   bench/sweep_bench.sh [--smoke] [--pairs N] [--ranks N] [--per-class N] [--image-size S]
#                        [--batch-size B] [--epochs E] [--sweep LIST] [--single VALUE]
#                        [--report FILE] [--mpi-preflags "FLAGS"]
#
# Defaults: 6 pairs, 2 ranks of one thread, 10 images per breed (370; about 296 for training),
# 64-pixel crops, batch 8 per rank, 3 epochs: about 10 s a run on 2 idle cores, a few minutes in
# all. The small crops and batch make the backbone's step short, so the heads' share of it is
# larger than at the tutorial's sizes (224 px, batch 64): the ratio here bounds theirs from above.
# --smoke: 1 pair, 2 images per breed, 1 epoch. --sweep/--single change the two sides' --max-lr
# (--sweep 3e-2 measures one head against itself: the pairs' noise).
#
# Report (bench/sweep_report.py): per pair the sweep's wall, training and CPU seconds over the
# single head's (wall_ratio, train_ratio, cpu_ratio) and added_head_share (the training time each
# further head adds, over the single head's); their medians; bytes_per_step of each side
# (metrics.jsonl), their ratio and the bytes each added head adds; and checks of the sweep's
# outputs (`heads` in metrics.jsonl, the per-head stderr lines, class_accuracy, confusion.json).
# JSON to --report (default bench/results/sweep-cpu-<date>.json), the table to stderr. Run
# folders and logs under $PETS_BUILD/bench-work/sweep (the models removed after each run). Exit
# status 1 when a run failed or the sweep did not report its heads.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh
source "$here/scripts/env.sh"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

pairs=6
ranks=2
per_class=10
image_size=64
batch_size=8
epochs=3
sweep=1e-3,2e-3,5e-3,1e-2,2e-2,3e-2,5e-2,1e-1
single=3e-2
report=""
mpi_preflags=""
while [ $# -gt 0 ]; do
  case $1 in
  --smoke) pairs=1; per_class=2; epochs=1; shift ;;
  --pairs) pairs=${2:?--pairs N}; shift 2 ;;
  --ranks) ranks=${2:?--ranks N}; shift 2 ;;
  --per-class) per_class=${2:?--per-class N}; shift 2 ;;
  --image-size) image_size=${2:?--image-size S}; shift 2 ;;
  --batch-size) batch_size=${2:?--batch-size B}; shift 2 ;;
  --epochs) epochs=${2:?--epochs E}; shift 2 ;;
  --sweep) sweep=${2:?--sweep LIST}; shift 2 ;;
  --single) single=${2:?--single VALUE}; shift 2 ;;
  --report) report=${2:?--report FILE}; shift 2 ;;
  --mpi-preflags) mpi_preflags=${2?--mpi-preflags FLAGS}; shift 2 ;;
  -h | --help) usage ;;
  *) echo "error: sweep_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in pairs ranks per_class image_size batch_size epochs; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] ||
    { echo "error: sweep_bench.sh: --${v//_/-} must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[[ "$single" != *,* ]] || { echo "error: sweep_bench.sh: --single is one value, not '$single'" >&2; exit 2; }
report=${report:-$here/bench/results/sweep-cpu-$(date -u +%F).json}

bin=$PETS_BUILD
for p in pets_train pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "error: sweep_bench.sh: no $bin/$p (build first)" >&2; exit 2; }
done
log() { echo "sweep_bench.sh: $*" >&2; }

work=$PETS_BUILD/bench-work/sweep
rm -rf "${work:?}"
mkdir -p "$work/runs" "$work/data"
facts=$work/facts.jsonl
: >"$facts"
trap 'exit 130' INT
trap 'exit 143' TERM

# Open MPI binds one core per rank when the ranks fit the cores (as the harness's np2 run); more
# ranks than cores need --oversubscribe.
mpi=(mpirun -np "$ranks")
[ "$(nproc)" -ge "$ranks" ] || mpi+=(--oversubscribe)
# shellcheck disable=SC2206  # the flags are words
[ -z "$mpi_preflags" ] || mpi+=($mpi_preflags)

# The data: the tutorial's 37 breeds (the heads' size), --per-class images of each, stored at 1.5
# times the crop.
"$bin/pets_synth" --out "$work/data/images" --classes 37 --per-class "$per_class" --seed 7 >/dev/null
"${mpi[@]}" "$bin/pets_preprocess" --images "$work/data/images" --out "$work/data/pets.h5" \
  --max-side $((image_size * 3 / 2)) >"$work/data/preprocess.txt" 2>&1 ||
  { cat "$work/data/preprocess.txt" >&2; exit 1; }
log "data: $(grep -m1 'stored' "$work/data/preprocess.txt" || tail -n1 "$work/data/preprocess.txt")"
log "$(uptime)"

# One run: side (single|sweep), pair number (0: warm-up).
run_one() {
  local side=$1 pair=$2 lr run
  if [ "$side" = sweep ]; then lr=$sweep; else lr=$single; fi
  run=$work/runs/$side-$pair
  python3 "$here/bench/sweep_report.py" time --facts "$facts" --label "$side" --pair "$pair" \
    --max-lr "$lr" --run "$run" --log "$run.log" --drop-models -- \
    "${mpi[@]}" "$bin/pets_train" --data "$work/data/pets.h5" --out "$run" --epochs "$epochs" \
    --batch-size "$batch_size" --eval-batch-size $((batch_size * 2)) --image-size "$image_size" \
    --threads 1 --device cpu --seed 7 --progress none --max-lr "$lr"
}

# The warm-up pair: page cache, and whether this pets_train takes the sweep at all.
for side in single sweep; do
  if ! run_one "$side" 0; then
    tail -n 15 "$work/runs/$side-0.log" >&2
    [ "$side" = single ] || log "the sweep's run failed: does $bin/pets_train take a list for --max-lr?"
    python3 "$here/bench/sweep_report.py" report --facts "$facts" --report "$report" \
      --sweep "$sweep" --single "$single" >/dev/null 2>&1 || true
    exit 1
  fi
done
for pair in $(seq 1 "$pairs"); do
  if [ $((pair % 2)) = 1 ]; then order="single sweep"; else order="sweep single"; fi
  for side in $order; do
    run_one "$side" "$pair" || tail -n 15 "$work/runs/$side-$pair.log" >&2
  done
done
log "$(uptime)"

rev=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+changes"
python3 "$here/bench/sweep_report.py" report --facts "$facts" --report "$report" \
  --sweep "$sweep" --single "$single" --device cpu \
  --setting "ranks=$ranks" --setting "threads_per_rank=1" --setting "per_class=$per_class" \
  --setting "classes=37" --setting "image_size=$image_size" --setting "batch_size=$batch_size" \
  --setting "epochs=$epochs" --setting "pairs=$pairs" --setting "commit=$rev" \
  --setting "pets_train=$bin/pets_train" --setting "mpirun=${mpi[*]}" \
  --setting "data=$(grep -m1 'stored' "$work/data/preprocess.txt" || true)"
