#!/usr/bin/env bash
# multinode_mpirun: Open MPI's own launcher inside a 2-node allocation (jobs/train.sbatch with
# PETS_LAUNCHER=mpirun: mpirun reads the allocation and starts its daemons on the other host
# through Slurm), the documented alternative to `srun --mpi=pmix`. 4 ranks on 2 hosts must end
# bitwise equal to multinode_batch's srun run; rank_identity under mpirun shows 2 ranks per host.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
[ -s "$TWO_HOST_RUN/model.safetensors" ] || fatal "no 2-host run in $TWO_HOST_RUN (multinode_batch failed?)"

out=$WORK/mpirun
run=$out/run
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

# Where mpirun puts the ranks of a 2-node allocation.
if [ -x "${PETS_RANK_IDENTITY:-}" ]; then
  sbatch --wait --chdir="$out" --output="$out/identity.txt" --nodes=2 --ntasks-per-node=2 \
    --cpus-per-task=1 --time=2 --wrap "mpirun --bind-to none $PETS_RANK_IDENTITY" >/dev/null ||
    { show "$out/identity.txt"; fatal "mpirun rank_identity in a 2-node allocation failed"; }
  cat "$out/identity.txt"
  check_identity "$out/identity.txt" mpirun
  pass "mpirun: 4 ranks on 2 hosts, node-local ranks 0 and 1 on each"
else
  fail "${PETS_RANK_IDENTITY:-PETS_RANK_IDENTITY} not built (target multinode_rank_identity)"
fi

start=$(date +%s.%N)
PETS_LAUNCHER=mpirun start_train_job "$run" "$out" --nodes=2 --ntasks-per-node=2
wait_job_completed "$job" "$log" "train job $job"
wall=$(elapsed_since "$start")
grep -q "mpirun: 4 tasks x 1 threads on n\[[0-9]-[0-9]\]" "$log" ||
  { show_logs "$log"; fail "train job did not launch 4 tasks on 2 hosts through mpirun"; }
epoch_lines "$log" >"$out/epochs.txt"
check_eq "epoch lines (rank 0 alone)" "$(cut -d' ' -f1-2 "$out/epochs.txt" | tr '\n' ' ')" \
  "$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo -n "epoch $e: "; done)"
check_run_folder "$run" "$TRAIN_EPOCHS"
echo "mpirun, 4 ranks on $(job_field "$job" NodeList) (${wall} s) vs srun --mpi=pmix on 2 hosts:"
if same_bits "$run" "$TWO_HOST_RUN"; then
  pass "mpirun inside the 2-node allocation gives the srun run's results bit for bit"
else
  fail "the mpirun run differs from the srun run"
fi
finish
