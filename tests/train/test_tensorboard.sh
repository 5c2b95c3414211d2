#!/usr/bin/env bash
# pets_train --tensorboard DIR under mpiexec -n 2 on a tiny synthetic store, read back with the
# real tensorboard package (scripts/install_tensorboard.sh installs it on first use) by
# check_tensorboard.py: one events file, from rank 0 only; the tags; a train/ point at every
# global step (--progress-interval 0) and eval/ points at each epoch's last step; eval/accuracy
# and the other epoch values equal to metrics.jsonl's. A run killed mid-epoch (rank 1 SIGKILLed)
# and resumed writes a second file whose steps continue, and the reader shows the same series as
# the uninterrupted run (the killed run's points past its checkpoint dropped); a new run into a
# used folder is shown alone. A DIR that is a file, or where no folder can be made, is refused
# with exit 2 before training.
# usage: test_tensorboard.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tb_python=$("$here/../../scripts/install_tensorboard.sh") ||
  fatal "scripts/install_tensorboard.sh could not provide the tensorboard package"
check() { "$tb_python" "$here/check_tensorboard.py" "$@"; }

"$synth" --out images --classes 3 --per-class 14 --seed 7 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --epochs 2 --batch-size 4 --eval-batch-size 8
        --progress lines --progress-interval 0)

# 1. A whole run.
run_np 2 "$train" "${common[@]}" --seed 42 --out run_a --tensorboard tb_a > a.out 2> a.err ||
  { show a.err; fatal "run_a exit $?"; }
all_steps=$(sed 's/^ckpt-0*\([0-9]*\)\.safetensors$/\1/' run_a/latest)
steps_per_epoch=$((all_steps / 2))
[ "$steps_per_epoch" -ge 3 ] || fatal "only $steps_per_epoch steps per epoch; the checks need 3"
files=(tb_a/events.out.tfevents.*)
check_eq "events files written by a run of 2 ranks" "${#files[@]}" 1
if ! problems=$(check tb_a run_a/metrics.jsonl "$steps_per_epoch"); then
  fail "tb_a read back by tensorboard:"
  echo "$problems"
fi
pass "one events file; tags, steps and epoch values as metrics.jsonl's"

# The check can fail: another run's metrics do not match these events.
sed 's/"accuracy":[0-9.e+-]*/"accuracy":12.5/' run_a/metrics.jsonl > wrong.jsonl
check tb_a wrong.jsonl "$steps_per_epoch" > /dev/null &&
  fail "check_tensorboard.py accepted accuracies that are not the run's"

# 2. Killed two steps into epoch 1 (rank 1 SIGKILLed before the step's allreduce), after the
#    checkpoint of epoch 0; then resumed.
kill_at=$((steps_per_epoch + 2))
PETS_INJECT_FAULT="sigkill:1:$kill_at" np_timeout=300 run_np 2 -x PETS_INJECT_FAULT "$train" \
  "${common[@]}" --seed 42 --out run_k --tensorboard tb_k > k1.out 2> k1.err
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { fail "the run with rank 1 killed exited $rc"; show k1.err; }
run_np 2 "$train" "${common[@]}" --seed 42 --out run_k --tensorboard tb_k --resume > k2.out 2> k2.err ||
  { fail "resume after the kill exit $?"; show k2.err; }
files=(tb_k/events.out.tfevents.*)
check_eq "events files of the killed run and its resume" "${#files[@]}" 2
if ! problems=$(check tb_k run_k/metrics.jsonl "$steps_per_epoch" tb_a); then
  fail "tb_k (killed and resumed) read back by tensorboard:"
  echo "$problems"
fi
pass "killed and resumed: a second file, the steps continuing, the same series as run_a"

# 3. A new run (another seed) into the same folders with --overwrite: a second file, and the
#    reader shows the new run alone (each step once, the new metrics.jsonl's values).
run_np 2 "$train" "${common[@]}" --seed 43 --out run_a --overwrite --tensorboard tb_a > o.out \
  2> o.err || { fail "the --overwrite run exit $?"; show o.err; }
files=(tb_a/events.out.tfevents.*)
check_eq "events files after a second run into tb_a" "${#files[@]}" 2
if ! problems=$(check tb_a run_a/metrics.jsonl "$steps_per_epoch"); then
  fail "tb_a after the --overwrite run read back by tensorboard:"
  echo "$problems"
fi
pass "a new run into a used folder: shown alone"

# 4. A DIR pets_train cannot use: one error line, exit 2, before anything is written.
echo x > a_file
expect_usage "--tensorboard naming a file" "--tensorboard a_file: 'a_file' is a file, not a folder" \
  run_np 2 "$train" "${common[@]}" --out run_bad --tensorboard a_file
expect_usage "--tensorboard where no folder can be made" "--tensorboard /proc/pets_tb:" \
  run_np 2 "$train" "${common[@]}" --out run_bad --tensorboard /proc/pets_tb
[ ! -e run_bad ] || fail "a refused --tensorboard left run_bad behind"
finish
