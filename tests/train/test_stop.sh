#!/usr/bin/env bash
# Ctrl-C as a user presses it. 1. SIGINT to a plain mpirun (Open MPI's default kill timeout, 1 s)
# while a step takes far longer: Open MPI passes it to the ranks as SIGTERM, rank 0 writes the
# checkpoint of the last step completed at once (each other rank its shard) and prints one line
# naming the step and `--resume --out DIR`, before mpirun kills the ranks; that command alone
# continues to the model of a run never stopped; at 2, 4 and 16 ranks, with the same bytes per
# step and per shard. A bad --data under a plain mpirun ends at once. 2. SIGINT to mpirun while rank 0 writes
# the final model, with Open MPI's default kill timeout (1 s): the writer is killed before its
# rename, so no model.safetensors, only its temporary file; the next start removes that file
# (its process is gone) but keeps those it cannot check (another host's, a running process's)
# and writes the whole model. 3. The same with the 10 s timeout: the SIGTERM that lands during
# the write does not cut it short: the model is complete, byte for byte the one of case 2. 4. One
# process without mpirun: SIGINT during the first checkpoint stops at that epoch boundary (the
# ranks agree after the checkpoint, not one step later), exit 75; a second SIGINT during a stop
# ends it at once. Markers (the writer's pause announced on stderr, checkpoint files) time the
# signals, never a fixed sleep.
# usage: test_stop.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 30 --seed 7 >/dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 >/dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --batch-size 2 --eval-batch-size 8 --max-lr 3e-2 --seed 42)

# Each rank runs under a shell that records pets_train's own exit status (mpirun reports only its
# own). The shell ignores TERM and INT; pets_train installs its handlers over that.
cat >rank.sh <<'EOF'
#!/usr/bin/env bash
trap '' TERM INT
"$@"
echo $? >"$RANK_STATUS.${OMPI_COMM_WORLD_RANK:-0}"
EOF
chmod +x rank.sh

# state_of CKPT [FORMAT]: "epoch E, step S" (or FORMAT, a Python format of the state's fields)
# from the checkpoint's own state.
state_of() {
  local format='epoch {epoch}, step {position[step]}'
  python3 - "$1" "${2:-$format}" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    state = json.loads(json.loads(f.read(n))["__metadata__"]["pets_state"])
print(sys.argv[2].format(**state))
PY
}

temps() { find "$1" -maxdepth 1 -name '*.tmp.*' -printf '%f\n' | sort; }

# ---- 1. Ctrl-C to a plain mpirun mid-epoch, during a long step -----------------------------------
# Open MPI's defaults: mpirun sends the ranks SIGTERM 1 s after Ctrl-C and SIGKILL 1 s later. Rank 0
# spends 60 s in the step after epoch 1, step K (5, or the epoch's middle when it is shorter), and
# Ctrl-C comes 2 s into it: the checkpoint of the last step completed (epoch 1, step K) must be on
# disk, rank 0's file and every other rank's shard of its BatchNorm statistics (--bn-mode train),
# and the line printed, before the kill. Then `--resume --out DIR` alone continues to the very
# accuracies and model of a run never stopped. At 2, 4 and 16 ranks: what each rank sends per
# step and writes at the stop does not grow.
run1_args=(--data pets.h5 --batch-size 2 --eval-batch-size 8 --max-lr 3e-2 --seed 42 --epochs 2)
# The bytes a rank hands to a step's collectives: the head's gradient (3 classes) and 3 numbers,
# in float64, at any number of ranks.
step_bytes=$(((2048 * 3 + 3 + 3) * 8))

# bytes_per_step of every epoch of run folder $1, one a line.
bytes_per_step() { python3 -c "import json, sys; [print(json.loads(l)['bytes_per_step']) for l in open(sys.argv[1]) if l.strip()]" "$1/metrics.jsonl"; }

# ctrl_c_in_a_long_step NP: the case above at NP ranks; sets shard_size (bytes of rank 1's shard).
ctrl_c_in_a_long_step() {
  local np=$1 run=run1-np$1 never=run0-np$1 steps k pause ckpt r
  run_np "$np" "$train" "${run1_args[@]}" --out "$never" >"$never.out" 2>"$never.err" ||
    { show "$never.err"; fatal "run 1, $np ranks (never stopped): exit $?"; }
  check_eq "run 1, $np ranks: bytes per step of each epoch" "$(bytes_per_step "$never" | tr '\n' ' ')" \
    "$step_bytes $step_bytes "
  steps=$(sed -nE 's/.* ([0-9]+) steps\/epoch,.*/\1/p' "$never.err" | head -n1)
  [ -n "$steps" ] || { show "$never.err"; fatal "run 1, $np ranks: no steps per epoch in the start-up line"; }
  k=$((steps > 10 ? 5 : steps / 2))
  pause=$((steps + k)) # the steps taken before it: epoch 1, step K is the last completed
  ckpt=ckpt-$pause.safetensors
  rm -f status1.*
  RANK_STATUS=$PWD/status1 PETS_PAUSE_STEP=$pause:60 start_np "$np" -x RANK_STATUS -x PETS_PAUSE_STEP \
    ./rank.sh "$train" "${run1_args[@]}" --out "$run" >"$run.out" 2>"$run.err"
  wait_for "$run.err" "^pausing in step $pause " 600 "$np_pid" ||
    { show "$run.err"; fatal "run 1, $np ranks: rank 0 never reached step $pause"; }
  sleep 2 # Ctrl-C 2 s into the step
  start=$SECONDS
  kill -INT "$np_pid"
  wait_for "$run.err" '^stopped by' 10 "$np_pid" || fail "run 1, $np ranks: no stop line within 10 s of Ctrl-C"
  wait "$np_pid"
  np_status=$?
  echo "run 1, $np ranks: mpirun ended $((SECONDS - start)) s after SIGINT with status $np_status (Open MPI's own)"
  [ $((SECONDS - start)) -le 10 ] || fail "run 1, $np ranks: mpirun took more than 10 s to end"
  check_eq "run 1, $np ranks: stop lines (rank 0 only)" "$(grep -c '^stopped by signal' "$run.err")" 1
  stop=$(grep '^stopped by signal' "$run.err")
  echo "run 1, $np ranks: $stop"
  check_eq "run 1, $np ranks: the stop line" "$stop" "stopped by signal 15 at epoch 1, step $k (SIGTERM); \
checkpoint written in $run; continue with --resume: pets_train --resume --out $run (the checkpoint \
records every other option; jobs/train.sbatch and jobs/interactive.sh add --resume themselves)"
  check_eq "run 1, $np ranks: the latest checkpoint" "$(cat "$run/latest")" "$ckpt"
  check_eq "run 1, $np ranks: its state" "$(state_of "$run/$ckpt")" "epoch 1, step $k"
  for ((r = 1; r < np; r++)); do
    [ -s "$run/${ckpt%.safetensors}.epoch-1.step-$k.rank-$r.safetensors" ] ||
      fail "run 1, $np ranks: no shard of rank $r for $ckpt: $(ls "$run" | tr '\n' ' ')"
  done
  shard_size=$(stat -c %s "$run/${ckpt%.safetensors}.epoch-1.step-$k.rank-1.safetensors")
  echo "run 1, $np ranks: $ckpt $(stat -c %s "$run/$ckpt") bytes, each other rank's shard $shard_size bytes"
  [ ! -e "$run/model.safetensors" ] || fail "run 1, $np ranks: stopped, yet a final model was written"
  [ -z "$(temps "$run")" ] || fail "run 1, $np ranks: temporary files left: $(temps "$run")"
  # The ranks were still in the paused step when mpirun killed them: no status of their own.
  for ((r = 0; r < np; r++)); do
    echo "run 1, $np ranks: rank $r: $(cat "status1.$r" 2>/dev/null || echo 'killed by mpirun (no status)')"
  done
  run_np "$np" "$train" --resume --out "$run" >"$run-b.out" 2>"$run-b.err" ||
    { show "$run-b.err"; fatal "run 1, $np ranks: --resume --out $run exit $?"; }
  grep -q "^resumed from $run/$ckpt at epoch 1, step $k\$" "$run-b.err" ||
    { fail "run 1, $np ranks: --resume did not continue at epoch 1, step $k"; show "$run-b.err"; }
  check_eq "run 1, $np ranks: accuracies after --resume" "$(tail -n 1 "$never.out")" "$(cat "$run-b.out")"
  cmp -s "$run/model.safetensors" "$never/model.safetensors" ||
    fail "run 1, $np ranks: the resumed run's model differs from the never-stopped run's"
  pass "run 1, $np ranks: Ctrl-C to a plain mpirun in a long step: checkpoint of the last step, --resume continued it bit for bit"
}
ctrl_c_in_a_long_step 2
shard_2=$shard_size
ctrl_c_in_a_long_step 4
check_eq "run 1: a shard's bytes at 2 and at 4 ranks" "$shard_2" "$shard_size"
ctrl_c_in_a_long_step 16
check_eq "run 1: a shard's bytes at 2 and at 16 ranks" "$shard_2" "$shard_size"

# A mistake under a plain mpirun ends the job at once: one error line, status 2.
start=$SECONDS
run_np 2 "$train" --data nope.h5 --out runx >runx.out 2>runx.err
check_eq "bad --data under mpirun: status" "$?" 2
check_eq "bad --data: error lines" "$(grep -c '^error: ' runx.err)" 1
[ $((SECONDS - start)) -le 10 ] || fail "bad --data: mpirun took $((SECONDS - start)) s to end"
pass "bad --data under mpirun: one error line, status 2, after $((SECONDS - start)) s"

# ---- 2. Ctrl-C during the final export, Open MPI's default kill timeout (1 s) --------------------
PETS_PAUSE_WRITE=model.safetensors:60 start_np 2 -x PETS_PAUSE_WRITE "$train" "${common[@]}" \
  --epochs 1 --out run2 >run2.out 2>run2.err
wait_for run2.err '^pausing before renaming .*model\.safetensors\.tmp\.' 600 "$np_pid" ||
  { show run2.err; fatal "run 2: rank 0 never reached the final model's rename"; }
kill -INT "$np_pid"
wait "$np_pid"
echo "run 2: mpirun status $? after SIGINT during the export"
[ ! -e run2/model.safetensors ] || fail "run 2: a model.safetensors although the writer was killed"
left=$(temps run2)
[[ "$left" =~ ^model\.safetensors\.tmp\.[A-Za-z0-9._-]+\.[0-9]+$ ]] ||
  fail "run 2: expected the killed writer's model.safetensors.tmp.<host>.<pid>, found '$left'"
# Beside it: another host's temporary file and one of a process that runs: the next start keeps
# both. (The killed writer's pid is checked on this host, where it is gone.)
host_tag=$(sed -E 's/^model\.safetensors\.tmp\.(.+)\.[0-9]+$/\1/' <<<"$left")
# The killed writer may outlive mpirun by a moment (killed, not yet gone): wait for it.
writer=${left##*.}
for _ in $(seq 1 100); do kill -0 "$writer" 2>/dev/null || break; sleep 0.1; done
sleep 300 &
alive=$!
at_exit "kill $alive 2>/dev/null || true"
echo partial >"run2/ckpt-99.safetensors.tmp.$host_tag.$alive"
echo partial >run2/latest.tmp.another-node.12345
run_np 2 "$train" "${common[@]}" --epochs 1 --out run2 --resume >run2b.out 2>run2b.err ||
  { fail "run 2: the next start exit $?"; show run2b.err; }
grep -q "^removed run2/$left (its writer is gone)" run2b.err ||
  { fail "run 2: the next start did not report removing $left"; show run2b.err; }
grep -q "^notice: kept run2/latest.tmp.another-node.12345 (written by host another-node" run2b.err ||
  { fail "run 2: no notice for the other host's temporary file"; show run2b.err; }
grep -q "^notice: kept run2/ckpt-99.safetensors.tmp.$host_tag.$alive (process $alive still runs)" run2b.err ||
  { fail "run 2: no notice for the running process's temporary file"; show run2b.err; }
check_eq "run 2: temporary files after the next start" "$(temps run2 | tr '\n' ' ')" \
  "ckpt-99.safetensors.tmp.$host_tag.$alive latest.tmp.another-node.12345 "
[ -s run2/model.safetensors ] || fail "run 2: the next start wrote no final model"
pass "run 2: export killed by SIGKILL left only its temporary file; the next start removed it"

# ---- 3. Ctrl-C during the final export, kill timeout 10 s ---------------------------------------
rm -f status3.*
RANK_STATUS=$PWD/status3 PETS_PAUSE_WRITE=model.safetensors:13 OMPI_MCA_odls_base_sigkill_timeout=10 \
  start_np 2 -x RANK_STATUS -x PETS_PAUSE_WRITE ./rank.sh "$train" "${common[@]}" --epochs 1 \
  --out run3 >run3.out 2>run3.err
wait_for run3.err '^pausing before renaming .*model\.safetensors\.tmp\.' 600 "$np_pid" ||
  { show run3.err; fatal "run 3: rank 0 never reached the final model's rename"; }
kill -INT "$np_pid"
wait "$np_pid"
echo "run 3: mpirun status $? after SIGINT during the export"
check_eq "run 3: rank 0 exit status (the run had finished training)" "$(cat status3.0 2>/dev/null || echo 'none (killed)')" 0
[ -z "$(temps run3)" ] || fail "run 3: temporary files left: $(temps run3)"
grep -q '^\[run\] .*; model run3/model.safetensors$' run3.err || { fail "run 3: no final model line"; show run3.err; }
cmp -s run3/model.safetensors run2/model.safetensors ||
  fail "run 3: the model written through a SIGTERM differs from the one written after a restart"
pass "run 3: a SIGTERM during the export let it finish: the whole model, no temporary file"

# ---- 4. One process, SIGINT straight to it -------------------------------------------------------
# During the first end-of-epoch checkpoint (the writer pauses before renaming `latest`): the stop
# is agreed right after it, at epoch 1, step 0, without another step.
PETS_PAUSE_WRITE=latest:3 "$train" "${common[@]}" --epochs 3 --out run4 </dev/null >run4.out 2>run4.err &
pid=$!
wait_for run4.err '^pausing before renaming .*latest\.tmp\.' 600 "$pid" ||
  { show run4.err; fatal "run 4: pets_train never wrote its first checkpoint"; }
kill -INT "$pid"
wait "$pid"
check_eq "run 4: exit status after SIGINT" "$?" 75
grep -q '^pets_train: stop requested: rank 0 writes the checkpoint of the last step completed now' run4.err ||
  fail "run 4: no notice when the signal came"
grep -q '^stopped by signal 2 at epoch 1, step 0 (SIGINT); checkpoint written in run4; continue with --resume' run4.err ||
  { fail "run 4: not stopped at epoch 1, step 0 right after the checkpoint"; show run4.err; }
check_eq "run 4: the latest checkpoint" "$(state_of "run4/$(cat run4/latest)")" "epoch 1, step 0"
# A second SIGINT while a stop is under way (the first one asked for the step's end): the process
# ends at once, killed by SIGINT. Sent as soon as its start-up has begun. When the start-up ended
# between the two, the first one's checkpoint (of the start, epoch 0, step 0) was written and its
# line printed; otherwise there is neither.
"$train" "${common[@]}" --epochs 3 --out run5 </dev/null >run5.out 2>run5.err &
pid=$!
wait_for run5.err '^warning: no --pretrained' 600 "$pid" || { show run5.err; fatal "run 5: no start-up"; }
kill -INT "$pid"
wait_for run5.err '^pets_train: stop requested' 60 "$pid" || fail "run 5: no notice for the first SIGINT"
start=$SECONDS
kill -INT "$pid"
wait "$pid"
check_eq "run 5: status after a second SIGINT (killed by SIGINT)" "$?" 130
[ $((SECONDS - start)) -lt 20 ] || fail "run 5: the second SIGINT did not end it at once"
if grep -q '^stopped by' run5.err; then
  grep -q '^stopped by signal 2 at epoch 0, step 0 (SIGINT); checkpoint written in run5' run5.err ||
    { fail "run 5: a checkpoint line for another point than the start"; show run5.err; }
  if [ -s run5/latest ]; then
    check_eq "run 5: the checkpoint its line names" "$(state_of "run5/$(cat run5/latest)")" \
      "epoch 0, step 0"
  else
    fail "run 5: a checkpoint line without the checkpoint"
  fi
fi
pass "run 4/5: one process: SIGINT stops at the epoch boundary (75), a second one quits at once"

# ---- 6. A stop during the evaluation, mpirun -np 2 -----------------------------------------------
# Rank 0 pauses after the evaluation's first batch; SIGUSR1 to mpirun (forwarded to both ranks):
# they agree before the next batch, abandon the evaluation and checkpoint the epoch's last step.
# The resumed run trains no step, evaluates, and ends with the very model and accuracy of a run
# that was never stopped.
eval_args=(--data pets.h5 --batch-size 8 --eval-batch-size 2 --max-lr 3e-2 --seed 42 --epochs 1)
run_np 2 "$train" "${eval_args[@]}" --out run7 >run7.out 2>run7.err ||
  { show run7.err; fatal "run 7 (never stopped): exit $?"; }
PETS_PAUSE_EVAL=300 start_np 2 -x PETS_PAUSE_EVAL "$train" "${eval_args[@]}" --out run6 \
  >run6.out 2>run6.err
wait_for run6.err '^pausing in the evaluation' 600 "$np_pid" ||
  { show run6.err; fatal "run 6: rank 0 never paused in the evaluation"; }
start=$SECONDS
kill -USR1 "$np_pid"
wait "$np_pid"
check_eq "run 6: status after SIGUSR1 during the evaluation" "$?" 75
[ $((SECONDS - start)) -lt 120 ] || fail "run 6: the stop waited for the pause's end"
steps=$(state_of "run6/$(cat run6/latest)" '{steps_per_epoch}')
grep -q "^stopped by signal 10 at epoch 0, step ${steps:-?} (SIGUSR1); checkpoint written in run6" run6.err ||
  { fail "run 6: not stopped at epoch 0, step ${steps:-?} (the epoch's last)"; show run6.err; }
check_eq "run 6: the latest checkpoint" "$(state_of "run6/$(cat run6/latest)")" "epoch 0, step $steps"
grep -q '^epoch 0:' run6.out && fail "run 6: an accuracy printed for an abandoned evaluation"
run_np 2 "$train" "${eval_args[@]}" --out run6 --resume >run6b.out 2>run6b.err ||
  { show run6b.err; fatal "run 6: --resume exit $?"; }
check_eq "run 6: --resume prints the accuracy of the run never stopped" "$(cat run6b.out)" \
  "$(cat run7.out)"
cmp -s run6/model.safetensors run7/model.safetensors ||
  fail "run 6: the resumed run's model differs from the never-stopped run's"
pass "run 6: a stop in the evaluation: checkpoint at the epoch's last step, --resume evaluates it"
finish
