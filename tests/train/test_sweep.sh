#!/usr/bin/env bash
# A learning-rate sweep (--max-lr A,B,C): each head trains bitwise as a run of that --max-lr
# alone (every epoch's loss, lr, accuracy and per-class counts, the head's weights and Adam
# moments) in fp32 and bf16, under both BatchNorm modes, at 1, 2 and 4 ranks; the epoch lines
# report the best head, model.safetensors is the final epoch's best head and best.safetensors (with
# --keep-best) the best head of the best epoch; confusion.json and
# the per-class figures agree; a sweep stopped after an epoch or mid-epoch resumes bit for bit;
# resuming with another list and bad lists are refused with exit 2.
# usage: test_sweep.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
check=$(dirname "${BASH_SOURCE[0]}")/sweep_check.py
"$synth" --out images --classes 3 --per-class 24 --seed 7 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --epochs 2 --batch-size 4 --eval-batch-size 8 --image-size 64 --seed 42)
lrs=(1e-2 3e-2 5e-2)
sweep=$(IFS=,; echo "${lrs[*]}")

# 1. Sweep against its heads alone. Epoch lines: the best head's accuracy, one line per epoch.
for precision in no bf16; do
  for bn in train eval; do
    for np in 1 2 4; do
      case_name="$precision-$bn-np$np"
      args=("${common[@]}" --mixed-precision "$precision" --bn-mode "$bn")
      run_np "$np" "$train" "${args[@]}" --max-lr "$sweep" --keep-best --out "sweep_$case_name" \
        > "sweep_$case_name.out" 2> "sweep_$case_name.err" ||
        { fail "$case_name: sweep exit $?"; show "sweep_$case_name.err"; continue; }
      singles=()
      for lr in "${lrs[@]}"; do
        run_np "$np" "$train" "${args[@]}" --max-lr "$lr" --out "single_${case_name}_$lr" \
          > "single_${case_name}_$lr.out" 2> "single_${case_name}_$lr.err" ||
          { fail "$case_name: --max-lr $lr exit $?"; show "single_${case_name}_$lr.err"; }
        singles+=("single_${case_name}_$lr")
      done
      python3 "$check" same "sweep_$case_name" "${singles[@]}" ||
        fail "$case_name: the sweep's heads did not train as their runs alone"
      python3 - "sweep_$case_name/metrics.jsonl" "sweep_$case_name.out" <<'PY' ||
import json, sys
lines = ["epoch %d: %.2f" % (m["epoch"], m["accuracy"]) for m in map(json.loads, open(sys.argv[1]))]
sys.exit(open(sys.argv[2]).read().splitlines() != lines)
PY
        { fail "$case_name: stdout is not the best heads' epoch lines"; show "sweep_$case_name.out"; }
    done
  done
done

# 2. What a sweep prints and writes: a line per head after each epoch (the best marked), the
#    [run] line naming the chosen head and the three worst classes, confusion.json.
run=sweep_no-train-np2
[ "$(grep -cE '^\[epoch [01]\] head [0-2] max-lr (1e-2|3e-2|5e-2): loss [0-9.]+, accuracy [0-9.]+ %' "$run.err")" -eq 6 ] ||
  { fail "not one line per head and epoch"; show "$run.err"; }
[ "$(grep -c '(best)$' "$run.err")" -eq 2 ] || { fail "not one best head per epoch"; show "$run.err"; }
chosen=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["head"])' "$run/metrics.jsonl")
grep -qE "^\[run\] 2 epochs, final accuracy [0-9.]+ % \(head $chosen of 3, max-lr ${lrs[$chosen]}; worst: [A-Za-z_]+ [0-9.]+ %, [A-Za-z_]+ [0-9.]+ %, [A-Za-z_]+ [0-9.]+ %\)" "$run.err" ||
  { fail "the [run] line does not name the chosen head and the worst classes"; show "$run.err"; }
for dir in "$run" single_no-train-np2_3e-2; do
  python3 "$check" confusion "$dir" || fail "$dir: confusion.json disagrees with metrics.jsonl"
done

# 3. Resume. After epoch 1: the checkpoint of the uninterrupted sweep, resumed, ends bitwise as it.
results() { sed -E 's/"(eval_images_per_s|eval_seconds|loader_wait_share|upload_share|comm_share|train_images_per_s|train_seconds)":[^,}]*,?//g' "$1"; }
same_end() {  # WHAT DIR: DIR ended as the uninterrupted sweep $run
  cmp -s "$run/model.safetensors" "$2/model.safetensors" || fail "$1: final model differs"
  cmp -s "$run/confusion.json" "$2/confusion.json" || fail "$1: confusion.json differs"
  [ "$(results "$run/metrics.jsonl")" = "$(results "$2/metrics.jsonl")" ] || fail "$1: metrics.jsonl differs"
}
first=$(ls "$run" | grep -E '^ckpt-[0-9]+\.safetensors$' | sort -t- -k2 -n | head -1)
mkdir -p after_1 && cp "$run/$first" after_1/ && echo "$first" > after_1/latest
run_np 2 "$train" --out after_1 --resume > after_1.out 2> after_1.err ||
  { fail "resume after epoch 1 exit $?"; show after_1.err; }
tail -n 1 "$run.out" | cmp -s - after_1.out || fail "after epoch 1: the epoch line differs"
same_end "resumed after epoch 1" after_1
# Mid-epoch: SIGUSR1 while rank 0 is held in global step 3 (of 8 an epoch).
PETS_PAUSE_STEP=3:3 start_np 2 -x PETS_PAUSE_STEP "$train" "${common[@]}" --mixed-precision no \
  --bn-mode train --max-lr "$sweep" --keep-best --out mid > mid.out 2> mid.err
wait_for mid.err "^pausing in step 3 " 600 "$np_pid" || fail "rank 0 never paused in step 3"
kill -USR1 "$np_pid"
wait "$np_pid"; status=$?
[ "$status" -eq 75 ] || { fail "stop by SIGUSR1 exited $status, not 75"; show mid.err; }
grep -q "stopped by .* step [1-9]" mid.err || { fail "the stop did not land mid-epoch"; show mid.err; }
run_np 2 "$train" --out mid --resume > mid_resumed.out 2> mid_resumed.err ||
  { fail "mid-epoch resume exit $?"; show mid_resumed.err; }
same_end "resumed mid-epoch" mid
# Another list: refused, both named.
expect_usage "resuming with another list" "--max-lr $sweep (given: 1e-2,3e-2)" \
  run_np 2 "$train" --out mid --resume --max-lr 1e-2,3e-2

# 4. Bad lists: one line naming --max-lr, exit 2.
for bad in "" "1e-2,1e-2" "1e-2,abc" "1e-2,,3e-2" "0" "1e-2,0" "nan" "3e-2,inf"; do
  expect_usage "--max-lr '$bad'" "--max-lr" run_np 2 "$train" "${common[@]}" --max-lr "$bad" --out bad
done
[ ! -e bad ] || fail "a refused run left --out behind"

finish
