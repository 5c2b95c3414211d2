#!/usr/bin/env bash
# multinode_interactive: jobs/interactive.sh on 2 nodes without a terminal (stdin /dev/null,
# output to a file), as a JupyterLab terminal driven by a script would: from the login host it
# asks Slurm for 4 tasks on 2 nodes with srun; Ctrl-C (SIGINT to it) after the first epoch stops
# every rank on both nodes with a checkpoint (status 75, the line to resume); run again, it
# resumes and trains to the end; the results must be bitwise those of multinode_batch's 4 ranks
# on 2 hosts.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$TWO_HOST_RUN/model.safetensors" ] || fatal "no 2-host run in $TWO_HOST_RUN (multinode_batch failed?)"

out=$WORK/interactive
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"
export PETS_BIN PETS_DATA=$DATA_H5 PETS_OUT=$out/run PETS_NTASKS=4 PETS_NODES=2 \
  PETS_CPUS_PER_TASK=1 PETS_TIME=10 PETS_SRUN_ARGS=--ntasks-per-node=2
unset SLURM_JOB_ID

# 1. Ctrl-C once the first epoch is reported. Python starts it: a background job of a
#    non-interactive shell would ignore SIGINT.
rc=0
(cd "$out" && python3 "$PETS_SOURCE/tests/lib/ctrl_c.py" "$out/stop.log" 300 90 \
  "$JOBS/interactive.sh" --epochs $TRAIN_EPOCHS --batch-size $TRAIN_BATCH --eval-batch-size 4 \
  --device cpu) || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/stop.log"; fatal "Ctrl-C on 2 nodes failed"; }
stop=$(grep -E '^stopped by signal 2 at epoch [0-9]+, step [0-9]+ \(SIGINT\); checkpoint written in .*; continue with --resume' "$out/stop.log")
[ -n "$stop" ] || { show_logs "$out/stop.log"; fail "no stop line after Ctrl-C"; }
[ -s "$out/run/latest" ] || fail "no checkpoint after Ctrl-C"
pass "Ctrl-C on 2 nodes: $stop"

# 2. Again: it finds the checkpoint, resumes and trains to the end.
rc=0
(cd "$out" && "$JOBS/interactive.sh" --epochs $TRAIN_EPOCHS --batch-size $TRAIN_BATCH \
  --eval-batch-size 4 --device cpu </dev/null >"$out/run.log" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/run.log"; fatal "interactive.sh on 2 nodes ended with status $rc"; }
grep -q "requesting 4 tasks" "$out/run.log" || fail "interactive.sh did not ask for an allocation"
stop_at=$(sed -E 's/^stopped by signal [0-9]+ at (epoch [0-9]+, step [0-9]+).*/\1/' <<<"$stop")
grep -q "^resumed from .* at $stop_at" "$out/run.log" ||
  { show_logs "$out/run.log"; fail "the second run did not resume where Ctrl-C stopped the first"; }
job=$(squeue -h -t all -n pets-interactive -o '%i %N' 2>/dev/null | sort -n | tail -n1)
[ -n "$job" ] || job=$(scontrol -o show job 2>/dev/null | grep 'JobName=pets-interactive' | tail -n1 |
  sed -E 's/^JobId=([0-9]+).* NodeList=([^ ]+).*/\1 \2/')
echo "allocation: $job"
[[ "$job" =~ \ n\[[0-9][-,][0-9]\]$ ]] || fail "the interactive run was not on 2 nodes: '$job'"
cat "$out/stop.log" "$out/run.log" | epoch_lines /dev/stdin >"$out/epochs.txt"
check_eq "epoch lines (rank 0 alone)" "$(cut -d' ' -f1-2 "$out/epochs.txt" | tr '\n' ' ')" \
  "$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo -n "epoch $e: "; done)"
check_run_folder "$out/run" "$TRAIN_EPOCHS"
echo "interactive.sh on 2 nodes vs sbatch on 2 hosts:"
if same_bits "$out/run" "$TWO_HOST_RUN"; then
  pass "interactive.sh on 2 nodes, stopped by Ctrl-C and resumed: the batch run's results bit for bit"
else
  fail "interactive.sh on 2 nodes differs from the batch run"
fi
finish
