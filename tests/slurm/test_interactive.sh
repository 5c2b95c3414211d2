#!/usr/bin/env bash
# slurm_interactive: jobs/interactive.sh driven without a terminal (stdin from /dev/null, output
# to a pipe), as a JupyterLab terminal driven by a script would. First from outside any
# allocation (it asks Slurm for one with srun), stopped by SIGUSR1 while training; then inside an
# allocation (salloc), where it runs as a job step and, finding the checkpoint, resumes. Also checks
# that a Slurm launch without PMIx is refused with a message naming --mpi=pmix.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$DATA_H5" ] || fatal "no data set $DATA_H5 (slurm_batch failed?)"

out=$WORK/interactive
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"
export PETS_BIN PETS_DATA=$DATA_H5 PETS_OUT=$out/run PETS_NTASKS=2 PETS_CPUS_PER_TASK=1 PETS_TIME=10
unset SLURM_JOB_ID

# 1. From a login shell: a new allocation. Stopped with SIGUSR1 to srun (the
#    script execs it) once training runs, as the header of interactive.sh documents: checkpoint, status 75.
"$JOBS/interactive.sh" --epochs $TRAIN_EPOCHS --batch-size $TRAIN_BATCH --eval-batch-size 4 \
  </dev/null >"$out/first.log" 2>&1 &
srun_pid=$!
at_exit 'kill -INT $srun_pid 2>/dev/null || true'
wait_training_started "$out/run" "$out/first.log" "pid:$srun_pid" ||
  { show_logs "$out/first.log"; fatal "interactive.sh: training did not start"; }
kill -USR1 $srun_pid
rc=0
wait $srun_pid || rc=$?
drop_at_exit 'kill -INT $srun_pid 2>/dev/null || true'
[ "$rc" -eq 75 ] || { show_logs "$out/first.log"; fail "interactive.sh after SIGUSR1: status $rc, want 75"; }
grep -q "requesting 2 tasks" "$out/first.log" || fail "interactive.sh did not ask for an allocation"
grep -q "^stopped by signal 10 at epoch" "$out/first.log" || fail "pets_train did not checkpoint on SIGUSR1"
pass "interactive.sh in a new allocation: $(grep "^stopped by signal" "$out/first.log"), status 75"

# 2. Inside an allocation (salloc runs the script as its command, no terminal either): a job
#    step, which finds the checkpoint and resumes.
rc=0
salloc --ntasks=2 --cpus-per-task=1 --time=10 --job-name=pets-salloc-test \
  "$JOBS/interactive.sh" --epochs $TRAIN_EPOCHS --batch-size $TRAIN_BATCH --eval-batch-size 4 \
  </dev/null 2>&1 | cat >"$out/second.log" || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/second.log"; fail "interactive.sh inside salloc ended with status $rc"; }
grep -q "inside allocation [0-9]*: running 2 ranks as a job step" "$out/second.log" ||
  { show_logs "$out/second.log"; fail "interactive.sh did not run as a step of the salloc allocation"; }
grep -q "^resumed from .* at epoch [0-9]*, step" "$out/second.log" ||
  { show_logs "$out/second.log"; fail "interactive.sh did not resume from the first run's checkpoint"; }
expected=$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo "epoch $e:"; done)
[ "$(cat "$out/first.log" "$out/second.log" | epoch_lines /dev/stdin | cut -d' ' -f1-2)" = "$expected" ] ||
  { show_logs "$out/first.log" "$out/second.log"; fail "interactive.sh: epoch lines over both runs are not each epoch once"; }
check_run_folder "$out/run" $TRAIN_EPOCHS
pass "interactive.sh inside an allocation resumed: $(grep "^resumed from" "$out/second.log")"
same_results "$out/run" "$REFERENCE_RUN" || fail "stopped + resumed interactive run differs from the uninterrupted one"

# 3. srun without PMIx would start N one-rank worlds. Debian's Open MPI already refuses a direct
#    launch without PMI in MPI_Init; where an MPI would run on as singletons, pets_train's own
#    guard (SLURM_NTASKS > 1 in a step, world of 1) refuses and names --mpi=pmix.
rc=0
srun --mpi=none --ntasks=2 --cpus-per-task=1 --time=5 "$PETS_BIN/pets_train" --data "$DATA_H5" \
  --out "$out/singleton" --epochs 1 </dev/null >"$out/singleton.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "pets_train under srun --mpi=none ran as singletons"
[ ! -e "$out/singleton/latest" ] || fail "the refused run wrote a checkpoint"
grep -q -- "--mpi=pmix" "$out/singleton.log" || grep -q 'direct launched using "srun"' "$out/singleton.log" ||
  { show_logs "$out/singleton.log"; fail "srun --mpi=none: no refusal message"; }
pass "srun --mpi=none refused (status $rc)"
rc=0
SLURM_NTASKS=2 SLURM_STEP_ID=0 "$PETS_BIN/pets_train" --data "$DATA_H5" --out "$out/singleton" \
  --epochs 1 </dev/null >"$out/guard.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "srun --mpi=pmix" "$out/guard.log" ||
  { show_logs "$out/guard.log"; fail "pets_train's singleton guard: status $rc, want 2 and a message naming srun --mpi=pmix"; }
pass "one-rank world in a 2-task Slurm step refused: $(grep -m1 -- '--mpi=pmix' "$out/guard.log")"

# 4. One Ctrl-C (SIGINT to the srun that interactive.sh execs): srun passes it to the ranks
#    (--disable-status), which checkpoint at that step and exit 75 with the line to resume; the
#    ranks and the allocation are gone. Python starts it: a background job of a non-interactive
#    shell would ignore SIGINT.
rc=0
PETS_OUT=$out/ctrlc python3 "$PETS_SOURCE/tests/lib/ctrl_c.py" "$out/ctrlc.log" 240 60 \
  "$JOBS/interactive.sh" --epochs 50 --batch-size 2 || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/ctrlc.log"; fail "Ctrl-C check failed"; }
stop=$(grep -E '^stopped by signal 2 at epoch [0-9]+, step [0-9]+ \(SIGINT\); checkpoint written in .*; continue with --resume' "$out/ctrlc.log")
[ -n "$stop" ] || { show_logs "$out/ctrlc.log"; fail "no stop line after Ctrl-C"; }
[ "$(grep -c '^stopped by signal' "$out/ctrlc.log")" -eq 1 ] || fail "the stop line is not printed once"
[ -s "$out/ctrlc/latest" ] || fail "no checkpoint after Ctrl-C"
sleep 1
if pgrep -f "pets_train.*$out/ctrlc" >/dev/null; then
  fail "ranks still running after Ctrl-C: $(pgrep -af "pets_train.*$out/ctrlc")"
fi
[ -z "$(squeue -h -n pets-interactive)" ] || fail "the allocation outlived Ctrl-C: $(squeue -h -n pets-interactive)"
pass "one Ctrl-C: $stop; status 75, no rank and no allocation left"
finish
