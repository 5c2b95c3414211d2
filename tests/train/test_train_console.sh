#!/usr/bin/env bash
# What a user of pets_train sees around the training itself:
#  - one start-up line on stderr before the first step: ranks and hosts, device, threads,
#    precision, BN mode, input path, --data and its store_id, the images of each split, steps per
#    epoch, epochs, --out;
#  - progress without a terminal: under mpiexec rank 0's stderr is a file, so --progress auto
#    writes plain `[epoch N/E] step ...  ETA ...` lines at --progress-interval, and
#    `[epoch N/E] evaluating I/T` lines during the evaluation; `none` writes none, `bar` redraws
#    even into a file; every finished run ends with a `[run]` summary line;
#  - --threads above the cores of the rank's affinity mask: a warning, and the count is capped;
#  - bad paths refused before the model is built (no `randomly initialised` warning yet), each as
#    one `error:` line and exit 2 without an MPI_ABORT report: --write-config into a missing
#    folder, --config naming a folder, --out naming a file or a place where no folder can be
#    made, --data naming a folder; a config file starting with a UTF-8 byte-order mark is read;
#  - --pretrained given one of our checkpoints names --resume;
#  - Slurm's one-rank guard in every program (pets_preprocess too).
# usage: test_train_console.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 14 --seed 7 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > preprocess.out || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --batch-size 4 --eval-batch-size 8 --seed 42)
progress_re='^\[epoch [0-9]+/[0-9]+\] step [0-9]+/[0-9]+  [0-9.]+ img/s  loss [0-9.]+  ETA ([0-9]+h)?([0-9]+m)?[0-9]+s$'

# 1. --progress auto (the default) into a file: plain lines, one per step at interval 0; no
#    carriage return. --threads 1000 is capped to the cores with a warning. The summary ends it.
run_np 2 "$train" "${common[@]}" --epochs 2 --progress-interval 0 --threads 1000 --out run_lines \
  > lines.out 2> lines.err || { fail "lines run exit $?"; show lines.err; }
steps=$(grep -cE "$progress_re" lines.err)
all_steps=$(sed 's/^ckpt-0*\([0-9]*\)\.safetensors$/\1/' run_lines/latest 2> /dev/null)
check_eq "progress lines at --progress-interval 0 (one per step)" "$steps" "${all_steps:-?}"
! grep -q $'\r' lines.err || fail "carriage returns in a log that is no terminal"
grep -q -- "warning: --threads 1000 is more than the [0-9]* cores\? this rank may use; using [0-9]*" lines.err ||
  { fail "no warning capping --threads 1000"; show lines.err; }
summary=$(grep '^\[run\]' lines.err)
final=$(tail -1 lines.out | cut -d' ' -f3)
[[ "$summary" == "[run] 2 epochs"*"final accuracy $final %"*"best "*" at epoch "[01]"; "*" s wall, "*" train img/s; model run_lines/model.safetensors" ]] ||
  { fail "summary line: '$summary'"; show lines.err; }
# The default interval (30 s) still gives the first step's line at once.
run_np 2 "$train" "${common[@]}" --epochs 1 --out run_auto > auto.out 2> auto.err ||
  { fail "auto run exit $?"; show auto.err; }
[ "$(grep -cE "$progress_re" auto.err)" -ge 1 ] || { fail "--progress auto wrote no line into a file"; show auto.err; }
pass "progress lines, --threads warning, summary"

# 2. The start-up line of that run, its values from the store: pets_preprocess's counts, the
#    store_id attribute, the steps of 4 images on each of 2 ranks; then progress of each epoch of
#    the total, the evaluation's included.
train_images=$(grep -o '[0-9]* train' preprocess.out | cut -d' ' -f1)
eval_images=$(grep -o '[0-9]* eval' preprocess.out | cut -d' ' -f1)
store_id=$(h5dump -a /store_id pets.h5 | grep -o '"[0-9a-f]\{32\}"' | tr -d '"')
steps=$(((train_images + 7) / 8))
[ -n "$train_images" ] && [ -n "$eval_images" ] && [ -n "$store_id" ] || fatal "store facts: '$train_images' '$eval_images' '$store_id'"
startup="pets_train: 2 ranks on 1 host, cpu, [0-9]+ threads? each, fp32, BN train, input cpu, data pets.h5 \(store $store_id\), $train_images train / $eval_images eval images, $steps steps/epoch, 2 epochs, out run_lines"
check_eq "start-up lines" "$(grep -c '^pets_train: .* ranks\? on' lines.err)" 1
grep -qE "^$startup$" lines.err || { fail "start-up line: not /$startup/"; show lines.err; }
check_eq "the start-up line before the first step" \
  "$(grep -nE "^pets_train: |$progress_re" lines.err | head -1 | cut -d: -f2-)" "$(grep -E "^$startup$" lines.err)"
! grep -q '^pets_train: ' lines.out || fail "the start-up line went to stdout"
check_eq "stdout: only the tutorial's lines" "$(grep -cvE '^epoch [0-9]+: [0-9]+\.[0-9]{2}$' lines.out)" 0
for e in 1 2; do
  check_eq "epoch $e/2: progress lines" "$(grep -cE "^\[epoch $e/2\] step [0-9]+/$steps " lines.err)" "$steps"
  eval_re="^\[epoch $e/2\] evaluating [0-9]+/$eval_images  ETA ([0-9]+m)?[0-9]+s$"
  grep -qE "$eval_re" lines.err || { fail "epoch $e/2: no evaluation progress"; show lines.err; }
  check_eq "epoch $e/2: the evaluation's last progress line" \
    "$(grep -E "$eval_re" lines.err | tail -1 | cut -d' ' -f4)" "$eval_images/$eval_images"
done
! grep -q '^\[epoch 0/' lines.err || fail "progress counts epochs from 0"
pass "start-up line, progress of epoch N/E and of the evaluation"

# 3. --progress none: no progress at all; --progress bar: the redrawn line even into a file.
run_np 2 "$train" "${common[@]}" --epochs 1 --progress none --out run_none > none.out 2> none.err ||
  { fail "--progress none exit $?"; show none.err; }
[ "$(grep -cE "$progress_re|step [0-9]+/|evaluating" none.err)" -eq 0 ] || { fail "--progress none wrote progress"; show none.err; }
grep -q '^\[run\]' none.err || fail "--progress none: no summary line"
run_np 2 "$train" "${common[@]}" --epochs 1 --progress bar --out run_bar > bar.out 2> bar.err ||
  { fail "--progress bar exit $?"; show bar.err; }
grep -q $'\r\\[epoch 1/1\\] step 1/' bar.err || { fail "--progress bar drew no line"; show bar.err; }
expect_usage "bad --progress" "--progress must be one of auto, bar, lines, none" \
  run_np 2 "$train" --data pets.h5 --progress fancy

# 4. Paths refused at start, before the model is built.
# before_model WHAT: the refusal in usage.log came before the model was built.
before_model() {
  ! grep -q "randomly initialised" usage.log || fail "$1: refused only after the model was built"
  ! grep -qi "HDF5-DIAG\|bytes actually read\|\.tmp\.\|ORTE_ERROR_LOG" usage.log ||
    { fail "$1: raw library output"; show usage.log; }
}
expect_usage "--write-config into a missing folder" "--write-config nodir/c.cfg: no folder 'nodir'" \
  run_np 2 "$train" --data pets.h5 --write-config nodir/c.cfg
before_model "--write-config nodir/c.cfg"
[ ! -e nodir ] || fail "--write-config made the folder"
mkdir -p cfgdir
expect_usage "--config naming a folder" "--config: 'cfgdir' is a folder, not a file" \
  run_np 2 "$train" --data pets.h5 --config cfgdir
before_model "--config cfgdir"
printf '\xef\xbb\xbfepochs = 3\ndata = pets.h5\n' > bom.cfg
run_np 2 "$train" --config bom.cfg --write-config from_bom.cfg > bom.log 2>&1 ||
  { fail "config file with a byte-order mark: exit $?"; show bom.log; }
grep -q '^epochs = 3$' from_bom.cfg 2> /dev/null || fail "config file with a byte-order mark: epochs not read"
touch afile
expect_usage "--out naming a file" "--out afile: 'afile' is a file, not a folder" \
  run_np 2 "$train" "${common[@]}" --out afile
before_model "--out afile"
expect_usage "--out below a file" "--out afile/run: 'afile' is a file, not a folder" \
  run_np 2 "$train" "${common[@]}" --out afile/run
before_model "--out afile/run"
# A place where no folder can be made, also for root: /proc takes no new folder.
expect_usage "--out where no folder can be made" "--out /proc/pets_run: cannot make a folder in '/proc'" \
  run_np 2 "$train" "${common[@]}" --out /proc/pets_run
before_model "--out /proc/pets_run"
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p readonly && chmod 555 readonly
  expect_usage "--out in a read-only folder" "--out readonly/run: cannot make a folder in 'readonly'" \
    run_np 2 "$train" "${common[@]}" --out readonly/run
fi
mkdir -p datadir
expect_usage "--data naming a folder" "--data: 'datadir' is a folder, not a file" \
  run_np 2 "$train" --data datadir --out run_e
before_model "--data datadir"
expect_usage "--pretrained naming a folder" "--pretrained: 'datadir' is a folder, not a file" \
  run_np 2 "$train" "${common[@]}" --pretrained datadir --out run_e
before_model "--pretrained datadir"

# 5. One of our checkpoints given as --pretrained: it names --resume.
ckpt=run_lines/$(cat run_lines/latest 2> /dev/null)
expect_usage "--pretrained naming a checkpoint" "is a pets_train checkpoint, not model weights: continue its run with --resume --out run_lines" \
  run_np 2 "$train" "${common[@]}" --pretrained "$ckpt" --out run_e

# 6. Slurm's one-rank guard, in every program: a 2-task step whose task has a world of 1.
SLURM_NTASKS=2 SLURM_STEP_ID=0 expect_usage "pets_preprocess as one of 2 Slurm tasks" \
  "Slurm started 2 tasks but this MPI world has 1 rank" "$preprocess" --images images --out guard.h5
[ ! -e guard.h5 ] || fail "the refused pets_preprocess wrote its file"
SLURM_NTASKS=2 SLURM_STEP_ID=0 expect_usage "pets_train as one of 2 Slurm tasks" \
  "srun --mpi=pmix" "$train" "${common[@]}" --out run_guard
before_model "pets_train as one of 2 Slurm tasks"

finish
