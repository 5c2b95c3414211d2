#!/usr/bin/env bash
# multinode_placement: where a rank lives does not change results. jobs/train.sbatch with 4 ranks
# on ONE host (--nodes=1 --ntasks-per-node=4), same data, seed and options as multinode_batch's
# 4 ranks on two hosts: every epoch's accuracy, correct count and loss, and the final
# model.safetensors, must be bitwise equal. Prints both wall times.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$TWO_HOST_RUN/model.safetensors" ] || fatal "no 2-host run in $TWO_HOST_RUN (multinode_batch failed?)"

out=$WORK/placement
run=$out/run
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

start=$(date +%s.%N)
start_train_job "$run" "$out" --nodes=1 --ntasks-per-node=4
wait_job_completed "$job" "$log" "train job $job"
wall=$(elapsed_since "$start")
grep -q "srun: 4 tasks x 1 threads on n[0-9]$" "$log" ||
  { show_logs "$log"; fail "train job did not run 4 tasks on one host"; }
check_run_folder "$run" "$TRAIN_EPOCHS"
echo "4 ranks on 1 host ($(job_field "$job" NodeList), ${wall} s) vs 4 ranks on 2 hosts" \
  "($(cat "$WORK/batch/train-wall-s.txt" 2>/dev/null || echo '?') s):"
if same_bits "$run" "$TWO_HOST_RUN"; then
  pass "1-host and 2-host runs bitwise equal (accuracies, losses, final weights)"
else
  fail "the 1-host and 2-host runs differ"
fi
finish
