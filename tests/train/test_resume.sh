#!/usr/bin/env bash
# Resume equals uninterrupted: a run interrupted after each epoch in turn and
# resumed gives bitwise the accuracies and final weights of the uninterrupted run at the same rank
# count; resumed with another rank count, it continues the schedule as a run at the new count
# would and reaches a consistent accuracy (tolerance below); a mid-epoch checkpoint is refused at
# another rank count. Every epoch's lr in metrics.jsonl, at 2 and 3 ranks and across the rank
# change, is that of the epoch's last step of Accelerate's OneCycle at as many processes
# (tests/fixtures/onecycle_accelerate).
# The interrupted runs start from copies of the uninterrupted run's own end-of-epoch checkpoints:
# each is, byte for byte, what a run stopped after that epoch leaves (the run continues from it
# in memory exactly as a resumed one does from the file, which is what this test checks).
# A checkpoint of an earlier pets_train, from before Accelerate's batching, is refused at 2 ranks
# and resumed at 1.
# usage: test_resume.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 30 --seed 11 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > preprocess.out || fatal "pets_preprocess exit $?"
epochs=4 batch=4
common=(--data pets.h5 --epochs "$epochs" --batch-size "$batch" --eval-batch-size 16 --max-lr 3e-2 --seed 42)
n_train=$(sed -n 's/.* \([0-9]*\) train, .*/\1/p' preprocess.out)
[ -n "$n_train" ] || { show preprocess.out; fatal "no training image count in pets_preprocess's output"; }
fixture=$(dirname "${BASH_SOURCE[0]}")/../fixtures/onecycle_accelerate/onecycle_accelerate.json

# epoch_lrs_match WHAT METRICS RANKS...: every epoch e of METRICS (a metrics.jsonl) has the lr of
# the last step of epoch e of the fixture's case of this run's shape at RANKS[e] processes (1e-9
# relative).
epoch_lrs_match() {
  local what=$1 metrics=$2
  shift 2
  python3 - "$fixture" "$metrics" "$n_train" "$batch" "$epochs" "$@" <<'PY' || fail "$what: metrics.jsonl's lr is not Accelerate's"
import json, sys
fixture, metrics, n_train, batch, epochs = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
ranks = [int(r) for r in sys.argv[6:]]
cases = {(c["n_train"], c["batch_size"], c["epochs"], c["processes"]): c
         for c in json.load(open(fixture))["cases"]}
lines = [json.loads(line) for line in open(metrics)]
ok = len(lines) == epochs
if not ok:
    print(f"{metrics}: {len(lines)} epochs, not {epochs}")
for line in lines:
    e = line["epoch"]
    case = cases.get((n_train, batch, epochs, ranks[e]))
    if case is None:
        sys.exit(f"no case n_train {n_train}, batch {batch}, epochs {epochs}, {ranks[e]} processes "
                 "in the fixture: add the shape to its make_fixture.py")
    want = case["lr"][(e + 1) * case["steps_per_epoch"] - 1]
    if abs(line["lr"] - want) > 1e-9 * abs(want):
        print(f"epoch {e} at {ranks[e]} ranks: lr {line['lr']!r}, Accelerate's {want!r}")
        ok = False
sys.exit(0 if ok else 1)
PY
}

run_np 2 "$train" "${common[@]}" --out full > full.out 2> full.err ||
  { rc=$?; show full.err; fatal "the uninterrupted run, which the others are compared with, exit $rc"; }
[ "$(wc -l < full.out)" -eq $epochs ] || { fail "uninterrupted run printed $(wc -l < full.out) epochs"; show full.out; }
# Checkpoints are ckpt-<global step>.safetensors: the end of epoch k is the k-th smallest.
mapfile -t ckpts < <(ls full/ckpt-*.safetensors | sed 's/.*ckpt-\([0-9]*\)\.safetensors/\1/' | sort -n)
[ "${#ckpts[@]}" -eq $epochs ] || fatal "expected $epochs checkpoints, found ${#ckpts[@]}"
epoch_lrs_match "-np 2" full/metrics.jsonl 2 2 2 2

# A folder holding what a run stopped after epoch k leaves.
stopped_after() {
  local dir=$2 name="ckpt-${ckpts[$(($1 - 1))]}.safetensors"
  rm -rf "$dir" && mkdir -p "$dir" && cp "full/$name" "$dir/" && printf '%s\n' "$name" > "$dir/latest"
}

# 1. Same rank count, stopped after each epoch in turn: bitwise the same.
for k in $(seq 1 $((epochs - 1))); do
  stopped_after "$k" "after_$k"
  run_np 2 "$train" "${common[@]}" --out "after_$k" --resume > "after_$k.out" 2> "after_$k.err" ||
    { fail "resume after epoch $k exit $?"; show "after_$k.err"; continue; }
  grep -q "resumed from .* at epoch $k, step 0" "after_$k.err" || fail "after epoch $k: no resume notice"
  tail -n +$((k + 1)) full.out | cmp -s - "after_$k.out" ||
    { fail "resumed after epoch $k: accuracies differ"; diff <(tail -n +$((k + 1)) full.out) "after_$k.out"; }
  cmp -s full/model.safetensors "after_$k/model.safetensors" ||
    fail "resumed after epoch $k: final weights differ from the uninterrupted run's"
  # Timings differ; the epochs' results do not (the earlier ones come from the checkpoint).
  results() { sed -E 's/"(eval_images_per_s|eval_seconds|loader_wait_share|upload_share|comm_share|train_images_per_s|train_seconds)":[^,}]*,?//g' "$1"; }
  [ "$(results full/metrics.jsonl)" = "$(results "after_$k/metrics.jsonl")" ] ||
    fail "resumed after epoch $k: metrics.jsonl lost or changed the results of some epoch"
done

# 2. Another rank count (2 -> 1, after epoch 1): the per-rank batch stays, so the global batch
#    halves and an epoch has twice the steps. OneCycle's length counts one process's batches
#    whatever the ranks, and from epoch 1 on the schedule is that of a run at 1 rank: the epochs'
#    lr are Accelerate's at 2 processes for epoch 0 (from the checkpoint), at 1 for the others.
#    Tolerance on the final accuracy: within 25 percentage points of the uninterrupted run and at
#    least 60 % (chance is 33.33 %); it trained on the same images with other batches, so not
#    bitwise.
stopped_after 1 ranks_1
run_np 1 "$train" "${common[@]}" --out ranks_1 --resume > ranks_1.out 2> ranks_1.err ||
  { fail "resume with 1 rank exit $?"; show ranks_1.err; }
grep -q "written by 2 ranks, this run has 1" ranks_1.err || fail "no notice of the changed rank count"
[ "$(wc -l < ranks_1.out)" -eq $((epochs - 1)) ] || { fail "-np 1 resume printed the wrong epochs"; show ranks_1.out; }
epoch_lrs_match "2 ranks, then 1" ranks_1/metrics.jsonl 2 1 1 1
a=$(tail -1 full.out | cut -d' ' -f3) b=$(tail -1 ranks_1.out | cut -d' ' -f3)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b >= 60.0 && d <= 25.0) }' ||
  fail "final accuracy $b after resuming with 1 rank is not within 25 points of $a"

# 3. -np 3: an epoch of ceil(n_train / 12) steps, each 3 of OneCycle's.
run_np 3 "$train" "${common[@]}" --out ranks_3 > ranks_3.out 2> ranks_3.err ||
  { fail "-np 3 exit $?"; show ranks_3.err; }
epoch_lrs_match "-np 3" ranks_3/metrics.jsonl 3 3 3 3

# 4. A mid-epoch checkpoint holds each rank's BatchNorm statistics: another rank count is refused.
# The stop checkpoints the last step completed: SIGUSR1 while rank 0 is held in global step 12
# (epoch 1, 9 steps an epoch) lands at epoch 1, step 3.
PETS_PAUSE_STEP=12:3 start_np 2 -x PETS_PAUSE_STEP "$train" "${common[@]}" --out mid > mid.out 2> mid.err
wait_for mid.err "^pausing in step 12 " 600 "$np_pid" || fail "rank 0 never paused in step 12"
kill -USR1 "$np_pid"
wait "$np_pid"; status=$?
[ "$status" -eq 75 ] || { fail "stop by SIGUSR1 exited $status, not 75"; show mid.err; }
if grep -q "stopped by .* step [1-9]" mid.err; then
  expect_usage "a mid-epoch checkpoint resumed at another rank count" \
    "mid-epoch checkpoint of 2 ranks; resume it with as many" \
    run_np 1 "$train" "${common[@]}" --out mid --resume
else
  fail "the stop did not land mid-epoch"; show mid.err
fi

# 5. A checkpoint of an earlier pets_train, from before Accelerate's batching (it records neither
#    a version nor a batching, and no --image-size): refused at 2 ranks, naming what to do, and
#    resumed at 1, where the batches are the same. Every checkpoint records both now.
[ -x "${PETS_EARLIER_CHECKPOINT:-}" ] || fatal "PETS_EARLIER_CHECKPOINT names no program (ctest sets it)"
python3 - "full/ckpt-${ckpts[1]}.safetensors" <<'PY' || fail "a checkpoint lacks its version or batching"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
state = json.loads(header["__metadata__"]["pets_state"])
sys.exit(0 if state.get("version") and state.get("batching") == "accelerate-even-batches" else 1)
PY
"$PETS_EARLIER_CHECKPOINT" "full/ckpt-${ckpts[1]}.safetensors" earlier ||
  fatal "earlier_checkpoint exit $?"
expect_usage "an earlier batching's checkpoint resumed at 2 ranks" \
  "written at 2 ranks by an earlier pets_train (it records no --image-size)" \
  run_np 2 "$train" "${common[@]}" --out earlier --resume
run_np 1 "$train" "${common[@]}" --out earlier --resume > earlier.out 2> earlier.err ||
  { fail "an earlier batching's checkpoint resumed at 1 rank: exit $?"; show earlier.err; }
grep -q "resumed from .* at epoch 2, step 0" earlier.err || fail "earlier batching at 1 rank: no resume notice"
[ "$(wc -l < earlier.out)" -eq $((epochs - 2)) ] || { fail "earlier batching at 1 rank: wrong epochs"; show earlier.out; }

finish
