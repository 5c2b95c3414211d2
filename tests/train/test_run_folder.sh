#!/usr/bin/env bash
# The --out folder and resume's edge cases under mpiexec -n 2:
#   2. a second run on the folder of a running one is refused at once (exit 2, one line naming the
#      folder and the holder) and the first finishes unmixed; a new run into a finished run's
#      folder is refused; --overwrite starts over, removing that run's files and no other;
#   3. a checkpoint resumed on another store with the same labels and steps is refused, naming
#      both stores;
#   4. --resume with a mistyped --out, or where every checkpoint is damaged, is refused (exit 2)
#      and creates nothing; --resume=auto starts a run where there is none; a finished run resumed
#      says so and prints its final line, exit 0, changing nothing, also given --out alone; given
#      settings other than the run's, all are named at once; more --epochs say how to train on.
# usage: test_run_folder.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 8 --seed 5 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
# The same images again: the same labels, split and steps per epoch, but another store file.
run_np 2 "$preprocess" --images images --out pets2.h5 > /dev/null || fatal "pets_preprocess (2) exit $?"
settings=(--batch-size 4 --eval-batch-size 8 --seed 42)
common=(--data pets.h5 --epochs 2 "${settings[@]}")
one_epoch=(--data pets.h5 --epochs 1 "${settings[@]}")
np_timeout=300
digest() { (cd "$1" && sha256sum -- * 2> /dev/null); }

# 2a. Two runs on one folder at once: the second is refused while the first holds the lock.
start_np 2 "$train" "${common[@]}" --out run_a > a.out 2> a.err
first=$np_pid
for _ in $(seq 1 600); do grep -q pid run_a/.pets_train.lock 2> /dev/null && break; sleep 0.1; done
grep -q pid run_a/.pets_train.lock 2> /dev/null || fail "the first run holds no lock naming itself"
np_timeout=120 expect_usage "a second run on the folder of a running one" \
  "--out run_a is in use by another pets_train run (pid " run_np 2 "$train" "${common[@]}" --out run_a
grep -q "^error: .*or choose another --out\$" usage.log || { fail "the refusal is not one plain line"; show usage.log; }
grep -q "on $(hostname), started " usage.log || { fail "the refusal does not name the holder's host"; show usage.log; }
wait "$first" || { fail "the first run exit $?"; show a.err; }
check_eq "epoch lines of the first run" "$(grep -c '^epoch' a.out)" 2
check_eq "lines in the first run's metrics.jsonl" "$(wc -l < run_a/metrics.jsonl)" 2
check_eq "checkpoints of the first run" "$(ls run_a/ckpt-*.safetensors | wc -l)" 2
cp -r run_a run_a.copy

# 2b. A new run into the folder of a finished one: refused, nothing changed.
expect_usage "a new run into an earlier run's folder" \
  "--out run_a holds an earlier run (confusion.json, latest, metrics.jsonl, model.safetensors and 2 checkpoints): continue it with --resume, start over with --overwrite" \
  run_np 2 "$train" "${common[@]}" --out run_a
[ "$(digest run_a)" = "$(digest run_a.copy)" ] || fail "the refused run changed run_a"

# 3. The same checkpoint on another store (same labels, same steps per epoch): refused, naming
#    the checkpoint and both stores.
expect_usage "a resume onto another store" "--data pets2.h5 is another store" \
  run_np 2 "$train" --data pets2.h5 --epochs 2 "${settings[@]}" --out run_a --resume
grep '^error:' usage.log | grep -q "run_a/ckpt-[0-9]*.safetensors was written from the image store $work/pets.h5 (store_id [0-9a-f]\{32\})" ||
  { fail "the refusal does not name the checkpoint and the store it was written from"; show usage.log; }

# 4a. A finished run resumed: it says so and prints its final line; nothing changes.
run_np 2 "$train" "${common[@]}" --out run_a --resume > fin.out 2> fin.err ||
  { fail "resuming a finished run exit $?"; show fin.err; }
check_eq "a finished run resumed prints its final line" "$(cat fin.out)" "$(tail -1 a.out)"
grep -q "has finished its 2 epochs" fin.err || { fail "a finished run resumed does not say it is finished"; show fin.err; }
[ "$(digest run_a)" = "$(digest run_a.copy)" ] || fail "resuming the finished run changed run_a"

# 4e. --resume --out alone: the checkpoint gives --data and every setting.
run_np 2 "$train" --out run_a --resume > alone.out 2> alone.err ||
  { fail "--resume --out alone exit $?"; show alone.err; }
check_eq "--resume --out alone prints the final line" "$(cat alone.out)" "$(tail -1 a.out)"
# Given settings that differ: every one named at once, spelled as options.
expect_usage "a resume given other settings" \
  "--resume: the run in run_a was started with other settings: --batch-size 4 (given: 8), --seed 42 (given: 3)" \
  run_np 2 "$train" --out run_a --resume --batch-size 8 --seed 3 --threads 1
# A finished run given more epochs: it cannot be extended; how to train on from its model.
expect_usage "a finished run given more epochs" \
  "A finished run cannot be extended: its OneCycle schedule spanned its 2 epochs and has ended. To train on from its model, start a new run from it: --pretrained run_a/model.safetensors --out NEW_DIR" \
  run_np 2 "$train" --out run_a --resume --epochs 4
[ "$(digest run_a)" = "$(digest run_a.copy)" ] || fail "the refused resumes changed run_a"

# 2c. --overwrite: starts over (1 epoch this time); the earlier run's files go, the user's stay.
echo "my notes" > run_a/notes.txt
run_np 2 "$train" "${one_epoch[@]}" --out run_a --overwrite > over.out 2> over.err ||
  { fail "--overwrite exit $?"; show over.err; }
check_eq "--overwrite: epoch lines" "$(grep -c '^epoch' over.out)" 1
check_eq "--overwrite: lines in metrics.jsonl" "$(wc -l < run_a/metrics.jsonl)" 1
check_eq "--overwrite: checkpoints left" "$(ls run_a/ckpt-*.safetensors | wc -l)" 1
check_eq "--overwrite: the user's file" "$(cat run_a/notes.txt 2> /dev/null)" "my notes"
grep -q "removed the earlier run's 6 files" over.err || { fail "--overwrite does not say what it removed"; show over.err; }

# 4b. --resume with a mistyped --out: refused, and no folder appears there.
expect_usage "--resume with a mistyped --out" \
  "--resume: run_b does not exist, so there is no run to continue" \
  run_np 2 "$train" "${common[@]}" --out run_b --resume
[ ! -e run_b ] || fail "--resume with a mistyped --out created it"

# 4c. Every checkpoint damaged: refused with each one named, not a fresh start.
cp -r run_a.copy run_d
for f in run_d/ckpt-*.safetensors; do printf 'XXXXXXXX' | dd of="$f" bs=1 seek=200 conv=notrunc 2> /dev/null; done
expect_usage "--resume where every checkpoint is damaged" \
  "--resume: no checkpoint in run_d can be read (2 refused, above)" \
  run_np 2 "$train" "${common[@]}" --out run_d --resume
[ "$(grep -c '^warning: run_d/ckpt-.*falling back' usage.log)" -eq 2 ] ||
  { fail "the damaged checkpoints are not each named"; show usage.log; }
[ "$(ls run_d/ckpt-* | wc -l)" -eq 2 ] && cmp -s run_d/model.safetensors run_a.copy/model.safetensors &&
  cmp -s run_d/metrics.jsonl run_a.copy/metrics.jsonl || fail "a refused resume changed run_d"

# 4d. --resume=auto where there is no run yet (a job's first start): a new run.
run_np 2 "$train" "${one_epoch[@]}" --out run_auto --resume=auto > auto.out 2> auto.err ||
  { fail "--resume=auto into a new folder exit $?"; show auto.err; }
grep -q "no run in run_auto yet; starting a new one" auto.err || { fail "--resume=auto: no notice"; show auto.err; }
check_eq "--resume=auto: epoch lines" "$(grep -c '^epoch' auto.out)" 1

finish
