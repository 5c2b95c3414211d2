#!/usr/bin/env bash
# multinode_node_loss: a compute host dies mid-run. jobs/train.sbatch (--requeue) runs 4 ranks on
# 2 hosts; once the end-of-epoch-0 checkpoint is written, the host that does not run the batch
# script loses power (scripts/test_cluster.sh kill-host: its link goes down, every process on it
# is killed). Checks: the run ends within 60 s (nothing hangs), Slurm names the lost host, the
# latest checkpoint is intact (complete safetensors file); Slurm requeues the job onto the
# remaining hosts, it resumes from that checkpoint and ends bitwise equal to multinode_batch's
# uninterrupted 4-rank run. The host is started again at the end.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$TWO_HOST_RUN/model.safetensors" ] || fatal "no 2-host run in $TWO_HOST_RUN (multinode_batch failed?)"
kLimitSeconds=60

out=$WORK/node_loss
run=$out/run
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

start_train_job "$run" "$out" --nodes=2 --ntasks-per-node=2
at_exit "scancel $job 2>/dev/null"

# The end of epoch 0 written: from here on the run is in epoch 1.
for _ in $(seq 1 2400); do
  [ -s "$run/latest" ] && break
  [[ "$(job_field "$job" JobState)" =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] ||
    { show_logs "$log"; fatal "job $job ended before its first checkpoint"; }
  sleep 0.1
done
[ -s "$run/latest" ] || { show_logs "$log"; fatal "job $job wrote no checkpoint in 240 s"; }
mapfile -t hosts < <(job_hosts "$job")
batch_host=$(job_field "$job" BatchHost)
[ ${#hosts[@]} -eq 2 ] || fatal "job $job runs on ${hosts[*]}, not 2 hosts"
lost=${hosts[0]}
[ "$lost" = "$batch_host" ] && lost=${hosts[1]}
at_exit "bash '$CLUSTER' start-host '$CLUSTER_DIR' $lost"
# Rank 0 is on the batch host; the lost host holds ranks 2 and 3. All hosts share this machine's
# process table, so the ranks of both hosts are visible here.
mapfile -t ranks < <(pgrep -f "^$PETS_BIN/pets_train .*--out $run")
[ ${#ranks[@]} -eq 4 ] || fail "found ${#ranks[@]} pets_train processes of job $job, not 4"
killed_at=$(date +%s.%N)
bash "$CLUSTER" kill-host "$CLUSTER_DIR" "$lost" || fatal "kill-host $lost failed"
echo "killed host $lost after $(head -n1 "$run/latest") (job $job on ${hosts[*]}, batch host $batch_host)"

# The run ends: the job leaves RUNNING (requeued: PENDING) and every rank of it is gone.
state=$(wait_job_state "$job" 'PENDING|REQUEUED|REQUEUE_HOLD|COMPLETED|FAILED|CANCELLED|NODE_FAIL|TIMEOUT' \
  $((4 * (kLimitSeconds + 30))))
noticed=$(elapsed_since "$killed_at")
alive() {
  local p
  for p in "${ranks[@]}"; do
    [[ "$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" == "$PETS_BIN/pets_train "* ]] && return 0
  done
  return 1
}
for _ in $(seq 1 $((4 * (kLimitSeconds + 30)))); do
  alive || break
  sleep 0.25
done
ended=$(elapsed_since "$killed_at")
echo "host $lost died: Slurm ended the job's run after $noticed s (state $state), its last rank" \
  "exited after $ended s"
alive && fail "ranks of job $job still run $ended s after the node's death: nothing may hang"
python3 -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" "$ended" "$kLimitSeconds" ||
  fail "job $job took $ended s after the node's death to end, more than $kLimitSeconds s"

# Who says what about the lost host.
scontrol show node "$lost" >"$out/node.txt" 2>&1
grep -o 'State=[A-Z_+*]*' "$out/node.txt" | head -n1
grep -q "State=DOWN" "$out/node.txt" || fail "node $lost is not DOWN: $(cat "$out/node.txt")"
grep -h -E "$lost|node fail|NODE_FAIL" "$log" "$CLUSTER_DIR/log/slurmctld.log" |
  grep -E "$job|$lost" | tail -n 8 >"$out/messages.txt"
cat "$out/messages.txt"
grep -q "$lost" "$out/messages.txt" || fail "no message names the lost host $lost"

# The latest checkpoint is complete: its safetensors header is valid and its tensors end the file.
latest=$(head -n1 "$run/latest")
python3 - "$run/$latest" <<'PY' || fail "$run/$latest (named by latest) is not a complete checkpoint"
import json, os, struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
assert 8 + n + end == os.path.getsize(path), f"{path}: {os.path.getsize(path)} bytes, header says {8 + n + end}"
print(f"{path}: complete ({len(header) - 1} tensors)")
PY

# Requeued onto the remaining hosts, resumed, finished.
wait_job_completed "$job" "$log" "the requeued job $job"
check_eq "restarts of job $job" "$(job_field "$job" Restarts)" 1
mapfile -t second < <(job_hosts "$job")
[[ " ${second[*]} " == *" $lost "* ]] && fail "the requeued job ran on the lost host $lost"
echo "requeued run on ${second[*]}"
grep -q "checkpoint found in $run (restart 1): resuming" "$log" ||
  { show_logs "$log"; fail "the requeued run did not pass --resume"; }
grep -E "^resumed from .*$latest" "$log" || { show_logs "$log"; fail "the run did not resume from $latest"; }
epoch_lines "$log" >"$out/epochs.txt"
check_run_folder "$run" "$TRAIN_EPOCHS"
echo "resumed after the node loss vs uninterrupted (multinode_batch):"
if same_bits "$run" "$TWO_HOST_RUN"; then
  pass "job $job lost $lost, ended in $ended s, resumed on ${second[*]} with the uninterrupted results"
else
  fail "the resumed run differs from the uninterrupted one"
fi
finish
