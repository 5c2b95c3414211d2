#!/usr/bin/env bash
# multinode_preempt: preemption across hosts. SIGUSR1 to the batch step of a 2-host, 4-rank
# jobs/train.sbatch (what --signal=B:USR1@120 does before the time limit) once training is under
# way: the batch shell passes it to srun, srun to the 4 ranks on both hosts; they stop at one
# step, rank 0 writes one checkpoint, the step exits 75, the script requeues the job, the requeued
# run resumes from that checkpoint and ends bitwise equal to multinode_batch's uninterrupted run.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$TWO_HOST_RUN/model.safetensors" ] || fatal "no 2-host run in $TWO_HOST_RUN (multinode_batch failed?)"

out=$WORK/preempt
run=$out/run
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

start_train_job "$run" "$out" --nodes=2 --ntasks-per-node=2
at_exit "scancel $job 2>/dev/null"

wait_training_started "$run" "$log" "job:$job" || { show_logs "$log"; fatal "job $job: training did not start"; }
first_hosts=$(job_field "$job" NodeList)
scancel --signal=USR1 --batch "$job" || fatal "scancel --signal=USR1 --batch $job"
echo "sent SIGUSR1 to the batch step of job $job on $first_hosts"

wait_job_completed "$job" "$log" "job $job (after its requeue)"
check_eq "restarts of job $job" "$(job_field "$job" Restarts)" 1
[[ "$first_hosts" =~ ^n\[[0-9]-[0-9]\]$|^n\[[0-9],[0-9]\]$ ]] || fail "the first run was not on 2 hosts: $first_hosts"

grep -q "SIGUSR1 received" "$log" || { show_logs "$log"; fatal "the batch shell did not take SIGUSR1"; }
# Every rank that reports its stop names the same step (the ranks agree through the step's
# allreduce), and the step as a whole ended 75.
grep -E '^stopped by (signal [0-9]+|a signal to another rank) at epoch [0-9]+, step [0-9]+' "$log" |
  sed -E 's/.* at (epoch [0-9]+, step [0-9]+).*/\1/' | sort -u >"$out/stops.txt"
[ "$(wc -l <"$out/stops.txt")" -eq 1 ] || { show_logs "$log"; fail "ranks stopped at: $(tr '\n' ';' <"$out/stops.txt")"; }
stop_at=$(head -n1 "$out/stops.txt")
grep -q "training step checkpointed and stopped (status 75)" "$log" ||
  { show_logs "$log"; fail "the training step did not exit 75"; }
grep -q "requeueing job $job" "$log" || { show_logs "$log"; fail "the script did not requeue"; }
resume_line=$(grep -E '^resumed from .* at epoch [0-9]+, step [0-9]+' "$log" | head -n1) ||
  { show_logs "$log"; fatal "pets_train did not resume from the checkpoint"; }
resume_at=$(sed -E 's/.* at (epoch [0-9]+, step [0-9]+).*/\1/' <<<"$resume_line")
check_eq "resumed where the 4 ranks stopped" "$resume_at" "$stop_at"
pass "job $job: 4 ranks on 2 hosts stopped at $stop_at; $resume_line"
[[ "$stop_at" =~ step\ 0$ ]] && echo "note: the stop fell on an epoch boundary, not mid-epoch"

epoch_lines "$log" >"$out/epochs.txt"
check_eq "epoch lines over both runs" "$(cut -d' ' -f1-2 "$out/epochs.txt" | tr '\n' ' ')" \
  "$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo -n "epoch $e: "; done)"
check_run_folder "$run" "$TRAIN_EPOCHS"
echo "preempted and resumed vs uninterrupted (multinode_batch):"
if same_bits "$run" "$TWO_HOST_RUN"; then
  pass "job $job finished after preemption + requeue with the uninterrupted run's results"
else
  fail "the preempted job's results differ from the uninterrupted run"
fi
finish
