#!/usr/bin/env bash
# pets_train under mpiexec -n 2 writing --out to a filesystem that fills up: a tmpfs the test
# mounts, sized so that the first epoch's checkpoint fits and the second's does not. The run
# must fail (not exit 0, not hang) with an error naming the full disk; `latest` must still name
# the first checkpoint, no temporary file may be left; after the filesystem is made bigger,
# --resume continues from that checkpoint and prints the same accuracies as a run that never
# ran out of space. Then a stop (SIGTERM) whose checkpoint does not fit: reported exactly once.
# Needs mount(2) (root): elsewhere it prints SKIPPED and exits 77.
# usage: test_small_fs.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
small="$4/small"
if mountpoint -q "$small" 2>/dev/null; then umount "$small"; fi  # left by a killed earlier run
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
np_timeout=300
mkdir -p "$small"
if ! why=$(mount -t tmpfs -o size=64k tmpfs "$small" 2>&1); then
  skip "cannot mount a small tmpfs to fill (${why:-mount failed}); needs root"
fi
at_exit 'cd / && umount "$small"'

"$synth" --out images --classes 3 --per-class 6 --seed 9 > /dev/null || fatal "pets_synth exit $?"
run_np 1 "$preprocess" --images images --out pets.h5 --max-side 64 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data "$work/pets.h5" --epochs 3 --batch-size 4 --eval-batch-size 8 --seed 42)

# The reference: the same run with room to spare, for the checkpoint size and the accuracies.
run_np 2 "$train" "${common[@]}" --out "$work/roomy" > roomy.out 2> roomy.err ||
  { rc=$?; show roomy.err; fatal "the run with room to spare exit $rc"; }
first=$(cd roomy && ls ckpt-*.safetensors | sort -t- -k2 -n | head -1)
size=$(stat -c %s "roomy/$first")
[ "$(ls roomy/ckpt-*.safetensors | wc -l)" -eq 3 ] || fail "the roomy run did not keep one checkpoint per epoch"

# One and a half checkpoints: the first (plus `latest` and metrics.jsonl) fits, the second's
# temporary file runs out of space part-way.
kb=$(( (size * 3 / 2) / 1024 ))
mount -o remount,size=${kb}k "$small" || fatal "cannot resize the tmpfs"
run_np 2 "$train" "${common[@]}" --out "$small/run" > full.out 2> full.err
rc=$?
echo "disk-full run: exit $rc (checkpoint $size bytes, filesystem ${kb} KiB)"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "the run on a full disk exited $rc"; fi
grep -q '^error: .*ckpt-.*No space left on device' full.err ||
  { fail "no error line naming the checkpoint and the full disk"; show full.err; }
[ "$(grep -c '^error:' full.err)" -eq 1 ] || { fail "not exactly one error line"; show full.err; }
[ "$(cat "$small/run/latest" 2>/dev/null)" = "$first" ] ||
  fail "latest names '$(cat "$small/run/latest" 2>/dev/null)', not the complete $first"
# Epoch 0's line, and epoch 1's when it was printed before its checkpoint failed to write.
lines=$(wc -l < full.out)
[ "$lines" -ge 1 ] && [ "$lines" -le 2 ] && cmp -s <(head -n "$lines" roomy.out) full.out ||
  { fail "the full-disk run's output is not the roomy run's first epochs"; show full.out; }
leftovers=$(find "$small/run" -maxdepth 1 -name '*.tmp.*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"

# Room again (as after clearing the disk): --resume takes the first checkpoint and finishes
# exactly as the run that always had room.
mount -o remount,size=512m "$small" || fatal "cannot grow the tmpfs"
run_np 2 "$train" "${common[@]}" --out "$small/run" --resume > resumed.out 2> resumed.err ||
  { fail "resume after the full disk exited $?"; show resumed.err; }
grep -q "resumed from .*$first" resumed.err || { fail "resume did not start from $first"; show resumed.err; }
# The first checkpoint holds epoch 0: the resumed run prints epochs 1 and 2 as the roomy run did.
cmp -s <(tail -n +2 roomy.out) resumed.out ||
  { fail "accuracies after the full disk differ from the roomy run"; diff <(tail -n +2 roomy.out) resumed.out; }
cmp -s roomy/model.safetensors "$small/run/model.safetensors" ||
  fail "the final model after the full disk differs from the roomy run's"

# A stop whose checkpoint does not fit: one process on the small filesystem again, paused in
# epoch 1's second step, SIGTERM: rank 0's stop thread fails to write at once, the run ends at
# the step's end with the failure reported exactly once (the job's one error line).
rm -rf "$small/run"
mount -o remount,size=${kb}k "$small" || fatal "cannot shrink the tmpfs"
steps=$(sed -nE 's/.* ([0-9]+) steps\/epoch,.*/\1/p' roomy.err | head -n1)
[ -n "$steps" ] || { show roomy.err; fatal "no steps per epoch in the start-up line"; }
# At one rank an epoch has 2 S - 1 or 2 S steps (S: two ranks'), so global step 2 S + 1 is in
# epoch 1, after at least one of its steps.
pause=$((2 * steps + 1))
PETS_PAUSE_STEP=$pause:5 "$train" "${common[@]}" --out "$small/stop" </dev/null >stop.out 2>stop.err &
pid=$!
wait_for stop.err "^pausing in step $pause " 300 "$pid" ||
  { show stop.err; fatal "the stop run never reached step $pause"; }
kill -TERM "$pid"
wait "$pid"
rc=$?
echo "stop on a full disk: exit $rc"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 75 ]; then fail "the stop on a full disk exited $rc"; fi
grep -q "^error: the stop's checkpoint was not written: .*No space left on device" stop.err ||
  { fail "no error line naming the stop's checkpoint and the full disk"; show stop.err; }
check_eq "stop on a full disk: lines naming the full disk" "$(grep -c 'No space left on device' stop.err)" 1
check_eq "stop on a full disk: error lines" "$(grep -c '^error:' stop.err)" 1
grep -q '^stopped by' stop.err && fail "a stop line for a checkpoint that was not written"
kept=$(cd "$small/stop" && ls ckpt-*.safetensors 2>/dev/null)
[ "$(echo "$kept" | wc -w)" -eq 1 ] && [ "$(cat "$small/stop/latest" 2>/dev/null)" = "$kept" ] ||
  fail "after the failed stop, latest names '$(cat "$small/stop/latest" 2>/dev/null)', not the epoch's checkpoint ($kept)"
leftovers=$(find "$small/stop" -maxdepth 1 -name '*.tmp.*')
[ -z "$leftovers" ] || fail "the stop left temporary files: $leftovers"

finish
