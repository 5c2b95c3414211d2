#!/usr/bin/env bash
# slurm_batch: sbatch --wait jobs/preprocess.sbatch, then jobs/train.sbatch, with 2 tasks each on
# a tiny synthetic set; checks the HDF5 file, the epoch lines, checkpoints, metrics and the model.
# Its training run is the reference the preemption test compares against.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster

out=$WORK/batch
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"
make_synth_images

# --- preprocessing job ---------------------------------------------------------------------------
rc=0
PETS_BIN=$PETS_BIN PETS_IMAGES=$WORK/data/images PETS_H5=$DATA_H5 PETS_MAX_SIDE=256 \
  sbatch --wait --chdir="$out" --output="$out/preprocess-%j.out" --ntasks=2 --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 --time=10 "$JOBS/preprocess.sbatch" >"$out/sbatch-pre.txt" || rc=$?
pre_id=$(grep -o '[0-9]\+' "$out/sbatch-pre.txt" | head -n1)
[ "$rc" -eq 0 ] || { show_logs "$out"/preprocess-*.out; fatal "preprocess job $pre_id ended with status $rc"; }
pre_log=$out/preprocess-$pre_id.out
grep -q "srun: 2 tasks" "$pre_log" || fail "preprocess job did not run 2 tasks: $(cat "$pre_log")"
[ "$(job_field "$pre_id" JobState)" = COMPLETED ] || fail "job $pre_id: $(job_field "$pre_id" JobState)"
[ -s "$DATA_H5" ] || fatal "$DATA_H5 not written"
h5ls -r "$DATA_H5" >"$out/h5ls.txt" 2>&1 || fail "h5ls cannot read $DATA_H5: $(cat "$out/h5ls.txt")"
[ "$(wc -l <"$out/h5ls.txt")" -ge 2 ] || fail "$DATA_H5 holds nothing: $(cat "$out/h5ls.txt")"
pass "preprocess job $pre_id: $DATA_H5 ($(wc -l <"$out/h5ls.txt") objects)"

# --- training job --------------------------------------------------------------------------------
rc=0
PETS_BIN=$PETS_BIN PETS_DATA=$DATA_H5 PETS_OUT=$REFERENCE_RUN PETS_EPOCHS=$TRAIN_EPOCHS \
  PETS_BATCH_SIZE=$TRAIN_BATCH PETS_TRAIN_ARGS="--eval-batch-size 4" \
  sbatch --wait --chdir="$out" --output="$out/train-%j.out" --ntasks=2 --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 --time=10 "$JOBS/train.sbatch" >"$out/sbatch-train.txt" || rc=$?
train_id=$(grep -o '[0-9]\+' "$out/sbatch-train.txt" | head -n1)
log=$out/train-$train_id.out
[ "$rc" -eq 0 ] || { show_logs "$log"; fatal "train job $train_id ended with status $rc"; }
[ "$(job_field "$train_id" JobState)" = COMPLETED ] || fail "job $train_id: $(job_field "$train_id" JobState)"
[ "$(job_field "$train_id" Restarts)" = 0 ] || fail "job $train_id was restarted"
grep -q "srun: 2 tasks x 1 threads" "$log" || fail "train job did not run 2 tasks x 1 thread"
grep -q -- "resuming" "$log" && fail "a fresh run folder must not resume"
epoch_lines "$log" >"$out/epochs.txt"
expected=$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo "epoch $e:"; done)
[ "$(cut -d' ' -f1-2 "$out/epochs.txt")" = "$expected" ] ||
  { show_logs "$log"; fail "epoch lines of job $train_id: $(cat "$out/epochs.txt")"; }
check_run_folder "$REFERENCE_RUN" "$TRAIN_EPOCHS"
# The printed accuracies are those of metrics.jsonl.
python3 - "$out/epochs.txt" "$REFERENCE_RUN/metrics.jsonl" <<'PY' || fail "epoch lines and metrics.jsonl disagree"
import json, sys
printed = [float(l.split()[2]) for l in open(sys.argv[1])]
logged = [round(json.loads(l)["accuracy"], 2) for l in open(sys.argv[2]) if l.strip()]
assert printed == logged, (printed, logged)
PY
pass "train job $train_id: $(tr '\n' ' ' <"$out/epochs.txt")"
finish
