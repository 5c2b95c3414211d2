#!/usr/bin/env bash
# --unfreeze layer4 --unfreeze-epoch 1 at 2 ranks: 1. epoch 0 trains the head alone, as a frozen
# run does (the same accuracy line, its traffic the head's); from epoch 1 layer4 trains too (its
# fp32 gradients counted in bytes_per_step), while every frozen stage's parameters and BatchNorm
# statistics end bit for bit those of the frozen run, and the checkpoints hold layer4 and its
# Adam moments. 2. SIGUSR1 to mpirun in a long step of epoch 1: the checkpoint of the last step
# (180 MB: more than plain mpirun's Ctrl-C leaves time for on a loaded machine, README),
# `--resume` refused with another --unfreeze, then `--resume --out DIR` alone continues to the
# accuracies and model of the run never stopped, bit for bit. 3. The end-of-epoch-0 checkpoint
# resumed at 3 ranks: layer4 starts training there (its gradients' bytes in epoch 1). 4. --bn-mode
# eval with layer4: no folded backbone or cached features (the model trains), the same accuracies
# and model as PETS_UNFOLDED. 5. Checkpoints kept: the default with layer4 (the newest 3 and the
# best epoch's), --keep-checkpoints 1 on a frozen backbone, the default there (every one).
# usage: test_unfreeze.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 30 --seed 7 >/dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 >/dev/null || fatal "pets_preprocess exit $?"
base=(--data pets.h5 --image-size 64 --batch-size 4 --eval-batch-size 8 --max-lr 3e-2 --seed 42)
common=("${base[@]}" --epochs 2)
unfreeze=(--unfreeze layer4 --unfreeze-epoch 1 --backbone-lr-ratio 0.2)

metric() { python3 -c "import json, sys; print(' '.join(str(json.loads(l)[sys.argv[2]]) for l in open(sys.argv[1]) if l.strip()))" "$1/metrics.jsonl" "$2"; }

# ---- 1. The head alone, then layer4 too --------------------------------------------------------
run_np 2 "$train" "${common[@]}" --out frozen >frozen.out 2>frozen.err ||
  { show frozen.err; fatal "the frozen run: exit $?"; }
run_np 2 "$train" "${common[@]}" "${unfreeze[@]}" --out never >never.out 2>never.err ||
  { show never.err; fatal "the layer4 run: exit $?"; }
check_eq "epoch 0 (the head alone) as the frozen run's" "$(head -n 1 never.out)" "$(head -n 1 frozen.out)"
layer4=$(tensors never/model.safetensors | awk '$1 ~ /^layer4\./ && $1 !~ /running_|num_batches/ {n += $2} END {print n}')
head_bytes=$(((2048 * 3 + 3 + 3) * 8))
check_eq "bytes per step: the head's, then with layer4's fp32 gradients" "$(metric never bytes_per_step)" \
  "$head_bytes $((head_bytes + 4 * layer4))"
same_tensors never/model.safetensors frozen/model.safetensors conv1. bn1. layer1. layer2. layer3. ||
  fail "a frozen stage's parameters or statistics differ from the frozen run's"
same_tensors never/model.safetensors frozen/model.safetensors layer4. &&
  fail "layer4 ended as in the frozen run: it did not train"
mapfile -t ckpts < <(ls never/ckpt-*.safetensors | sort -t- -k2 -n)
[ "${#ckpts[@]}" -eq 2 ] || fatal "expected 2 checkpoints in never/, found ${#ckpts[@]}"
n_params=$(tensors never/model.safetensors | awk '$1 ~ /^layer4\./ && $1 !~ /running_|num_batches/' | wc -l)
check_eq "a checkpoint's Adam moments: fc's 2 and layer4's" \
  "$(tensors "${ckpts[1]}" | grep -c '^adam\.exp_avg\.')" "$((2 + n_params))"
check_eq "a checkpoint's layer4 parameters" \
  "$(tensors "${ckpts[1]}" | awk '$1 ~ /^model\.layer4\./ && $1 !~ /running_|num_batches/' | wc -l)" "$n_params"
pass "epoch 0 trains the head alone, epoch 1 layer4 too; frozen stages untouched; checkpoints hold layer4"

# ---- 2. SIGUSR1 in a long step of epoch 1, resume bit for bit ---------------------------------
# mpirun forwards SIGUSR1 to both ranks and waits for them: rank 0 writes the checkpoint of the
# last step completed at once, both end with status 75 once the step in flight (rank 0 pauses 20 s
# in it) agrees on the stop.
steps=$(sed -nE 's/.* ([0-9]+) steps\/epoch,.*/\1/p' never.err | head -n1)
[ -n "$steps" ] || { show never.err; fatal "no steps per epoch in the start-up line"; }
k=$((steps / 2))
pause=$((steps + k))
PETS_PAUSE_STEP=$pause:20 start_np 2 -x PETS_PAUSE_STEP "$train" "${common[@]}" \
  "${unfreeze[@]}" --out run >run.out 2>run.err
wait_for run.err "^pausing in step $pause " 600 "$np_pid" ||
  { show run.err; fatal "rank 0 never reached step $pause"; }
kill -USR1 "$np_pid"
wait_for run.err '^stopped by signal 10' 15 "$np_pid" || fail "no stop line within 15 s of SIGUSR1"
wait "$np_pid"
check_eq "the stopped run's status" "$?" 75
check_eq "the latest checkpoint" "$(cat run/latest)" "ckpt-$pause.safetensors"
expect_usage "--resume with another --unfreeze" "--unfreeze layer4 (given: all)" \
  run_np 2 "$train" --resume --out run --unfreeze all
run_np 2 "$train" --resume --out run >run-b.out 2>run-b.err ||
  { show run-b.err; fatal "--resume --out run exit $?"; }
grep -q "^resumed from run/ckpt-$pause.safetensors at epoch 1, step $k\$" run-b.err ||
  { fail "--resume did not continue at epoch 1, step $k"; show run-b.err; }
check_eq "accuracies after --resume" "$(tail -n 1 never.out)" "$(cat run-b.out)"
cmp -s run/model.safetensors never/model.safetensors ||
  fail "the resumed run's model differs from the never-stopped run's"
pass "stopped in epoch 1 with layer4 training: --resume continued it bit for bit"

# ---- 3. The end of epoch 0 resumed at 3 ranks ---------------------------------------------------
mkdir -p ranks_3 && cp "${ckpts[0]}" ranks_3/ && basename "${ckpts[0]}" >ranks_3/latest
run_np 3 "$train" --resume --out ranks_3 >ranks_3.out 2>ranks_3.err ||
  { show ranks_3.err; fatal "the end of epoch 0 resumed at 3 ranks: exit $?"; }
grep -q "written by 2 ranks, this run has 3" ranks_3.err || fail "no notice of the changed rank count"
check_eq "3 ranks from epoch 1: bytes per step" "$(metric ranks_3 bytes_per_step)" \
  "$head_bytes $((head_bytes + 4 * layer4))"
same_tensors ranks_3/model.safetensors frozen/model.safetensors layer4. &&
  fail "resumed at 3 ranks, layer4 did not train"
pass "the end of epoch 0 resumed at 3 ranks: layer4 trained from epoch 1"

# ---- 4. --bn-mode eval trains layer4 through the unfolded model --------------------------------
run_np 2 "$train" "${common[@]}" "${unfreeze[@]}" --bn-mode eval --out eval >eval.out 2>eval.err ||
  { show eval.err; fatal "--bn-mode eval with layer4: exit $?"; }
PETS_UNFOLDED=1 run_np 2 -x PETS_UNFOLDED "$train" "${common[@]}" "${unfreeze[@]}" --bn-mode eval \
  --out eval_plain >eval_plain.out 2>eval_plain.err ||
  { show eval_plain.err; fatal "--bn-mode eval with layer4, PETS_UNFOLDED: exit $?"; }
check_eq "--bn-mode eval with layer4: accuracies against PETS_UNFOLDED" "$(cat eval.out)" "$(cat eval_plain.out)"
same_tensors eval/model.safetensors eval_plain/model.safetensors layer4. fc. ||
  fail "--bn-mode eval with layer4: the model differs from PETS_UNFOLDED's"
pass "--bn-mode eval with layer4: the same accuracies and model as the unfolded path"

# ---- 5. Checkpoints kept: the newest few and the best epoch's ----------------------------------
# kept_epochs DIR: the 0-based epoch each checkpoint in DIR ends ("mid" inside one), sorted.
kept_epochs() {
  for f in "$1"/ckpt-*.safetensors; do
    python3 - "$f" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    state = json.loads(json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]["pets_state"])
print(state["epoch"] - 1 if state["position"]["step"] == 0 else "mid")
PY
  done | sort -n | tr '\n' ' '
}
# expected_epochs DIR N: the epochs of the N newest end-of-epoch checkpoints and the best (first of
# the highest accuracies in metrics.jsonl), sorted.
expected_epochs() {
  python3 - "$1/metrics.jsonl" "$2" <<'PY' | tr '\n' ' '
import json, sys
acc = [json.loads(l)["accuracy"] for l in open(sys.argv[1]) if l.strip()]
kept = set(range(len(acc)))
kept = set(sorted(kept)[-int(sys.argv[2]):]) | {acc.index(max(acc))}
print("\n".join(str(e) for e in sorted(kept)))
PY
}
run_np 2 "$train" "${base[@]}" --epochs 5 "${unfreeze[@]}" --out kept >kept.out 2>kept.err ||
  { show kept.err; fatal "5 epochs with layer4: exit $?"; }
check_eq "--unfreeze layer4, the default: checkpoints of epochs" "$(kept_epochs kept)" \
  "$(expected_epochs kept 3)"
grep -q "(--keep-checkpoints 3: the newest and the best epoch's are kept)" kept.err ||
  fail "no notice of the checkpoints removed"
run_np 2 "$train" "${base[@]}" --epochs 4 --keep-checkpoints 1 --out kept_1 >kept_1.out 2>kept_1.err ||
  { show kept_1.err; fatal "--keep-checkpoints 1: exit $?"; }
check_eq "--keep-checkpoints 1, frozen: checkpoints of epochs" "$(kept_epochs kept_1)" \
  "$(expected_epochs kept_1 1)"
check_eq "--keep-checkpoints 1: latest" "$(cat kept_1/latest)" "$(basename "$(ls kept_1/ckpt-*.safetensors | sort -t- -k2 -n | tail -n 1)")"
check_eq "frozen, the default: every checkpoint kept" "$(ls frozen/ckpt-*.safetensors | wc -l)" 2
pass "checkpoints kept: the newest 3 with layer4, 1 when asked, every one frozen; the best epoch's too"

finish
