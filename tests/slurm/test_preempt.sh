#!/usr/bin/env bash
# slurm_preempt: submits jobs/train.sbatch on the slurm_batch data, sends SIGUSR1 to the batch
# step once training is under way (what Slurm's --signal=B:USR1@120 does before the time limit), and
# checks: the training step checkpointed mid-epoch and exited 75, the script requeued the job,
# the requeued run resumed from that checkpoint by itself, and the job finished with the same
# accuracies and losses as slurm_batch's uninterrupted run.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$REFERENCE_RUN/metrics.jsonl" ] || fatal "no reference run in $REFERENCE_RUN (slurm_batch failed?)"

out=$WORK/preempt
run=$out/run
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

job=$(PETS_BIN=$PETS_BIN PETS_DATA=$DATA_H5 PETS_OUT=$run PETS_EPOCHS=$TRAIN_EPOCHS \
  PETS_BATCH_SIZE=$TRAIN_BATCH PETS_TRAIN_ARGS="--eval-batch-size 4" \
  sbatch --parsable --chdir="$out" --output="$out/train-%j.out" --ntasks=2 --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 --time=10 "$JOBS/train.sbatch") || fatal "sbatch exit $?: $job"
job=${job%%;*}
log=$out/train-$job.out
cancel_job() { scancel "$job" 2>/dev/null || true; }
at_exit cancel_job

# Signal once training has started: the stop then falls inside an epoch.
wait_training_started "$run" "$log" "job:$job" || { show_logs "$log"; fatal "job $job: training did not start in 120 s"; }
scancel --signal=USR1 --batch "$job" || fatal "scancel --signal=USR1 --batch $job"
pass "sent SIGUSR1 to the batch step of job $job"

# The job must go round once: preempted, requeued (pending), running again, completed.
final=""
for _ in $(seq 1 480); do
  state=$(job_field "$job" JobState)
  restarts=$(job_field "$job" Restarts)
  if [ "$state" = COMPLETED ] || { [ "${restarts:-0}" -ge 1 ] &&
    [[ "$state" =~ ^(FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]]; }; then
    final=$state
    break
  fi
  sleep 0.5
done
drop_at_exit cancel_job
[ -n "$final" ] || { cancel_job; show_logs "$log"; fatal "job $job did not finish after its requeue (state $state)"; }
[ "$final" = COMPLETED ] || { show_logs "$log"; fail "job $job ended $final"; }
[ "$(job_field "$job" Restarts)" = 1 ] || { show_logs "$log"; fail "job $job restarts: $(job_field "$job" Restarts), want 1"; }
[ "$(job_field "$job" ExitCode)" = 0:0 ] || fail "job $job exit code $(job_field "$job" ExitCode)"

# What the log (both runs, --open-mode=append) must tell, in order.
grep -q "SIGUSR1 received" "$log" || { show_logs "$log"; fail "the batch shell did not take SIGUSR1"; }
stop_line=$(grep -E '^stopped by signal [0-9]+ at epoch [0-9]+, step [0-9]+' "$log" | head -n1) ||
  { show_logs "$log"; fail "pets_train did not report a checkpoint on the signal"; }
grep -q "training step checkpointed and stopped (status 75)" "$log" ||
  { show_logs "$log"; fail "the training step did not exit 75"; }
grep -q "requeueing job $job" "$log" || { show_logs "$log"; fail "the script did not requeue"; }
grep -q "checkpoint found in $run (restart 1): resuming" "$log" ||
  { show_logs "$log"; fail "the requeued run did not pass --resume"; }
resume_line=$(grep -E '^resumed from .* at epoch [0-9]+, step [0-9]+' "$log" | head -n1) ||
  { show_logs "$log"; fail "pets_train did not resume from the checkpoint"; }
stop_at=$(sed -E 's/.* at (epoch [0-9]+, step [0-9]+).*/\1/' <<<"$stop_line")
resume_at=$(sed -E 's/.* at (epoch [0-9]+, step [0-9]+).*/\1/' <<<"$resume_line")
check_eq "resumed at where it stopped" "$resume_at" "$stop_at"
pass "job $job: $stop_line"
pass "job $job: $resume_line"
[[ "$stop_at" =~ step\ 0$ ]] && echo "note: the stop fell on an epoch boundary, not mid-epoch"

# Every epoch printed exactly once over the two runs.
epoch_lines "$log" >"$out/epochs.txt"
expected=$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo "epoch $e:"; done)
[ "$(cut -d' ' -f1-2 "$out/epochs.txt")" = "$expected" ] ||
  { show_logs "$log"; fail "epoch lines over both runs: $(cat "$out/epochs.txt")"; }
check_run_folder "$run" "$TRAIN_EPOCHS"
echo "preempted and resumed vs uninterrupted (slurm_batch):"
same_results "$run" "$REFERENCE_RUN" || fail "the preempted job's results differ from the uninterrupted run"
pass "job $job finished after preemption + requeue with the uninterrupted run's results"
finish
