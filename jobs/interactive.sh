#!/usr/bin/env bash
# Interactive training from a terminal (a JupyterLab terminal on a login node, or any shell):
# the counterpart of the tutorial's notebook_launcher.
#
#   jobs/interactive.sh [pets_train options...]    # new allocation, or the current one
#   jobs/interactive.sh --shell                    # only an allocation (salloc) with a shell in it;
#                                                  # run jobs/interactive.sh again inside it
#
# Outside an allocation it asks Slurm for one with `srun` (which allocates, runs, and releases);
# inside one (SLURM_JOB_ID set: salloc, sbatch, or an srun --pty shell) it runs the training as
# a step of that allocation. Either way the ranks are started by `srun --mpi=pmix`, rank 0's
# progress streams to this terminal, and Ctrl-C stops the training as a preemption does: the
# ranks finish the step, rank 0 writes a checkpoint, every rank exits with status 75 and rank 0
# prints the line to resume (run this script again: it finds the checkpoint and resumes). With a
# terminal Ctrl-C reaches rank 0 through its pseudo-terminal; without one srun passes it to every
# rank (--disable-status). A second Ctrl-C quits at once, without a checkpoint. `kill -USR1 <srun
# pid>` stops the same way. Works without a terminal too (no --pty then): the tests drive it so.

# ---- what to run: edit here, or set these in the environment ----------------------------------
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PETS_BIN=${PETS_BIN:-$here/build}
PETS_DATA=${PETS_DATA:-$here/work/pets.h5}
PETS_OUT=${PETS_OUT:-$here/work/interactive}
PETS_NTASKS=${PETS_NTASKS:-2}                  # ranks (one per GPU on GPU nodes)
PETS_NODES=${PETS_NODES:-1}
PETS_CPUS_PER_TASK=${PETS_CPUS_PER_TASK:-1}
PETS_TIME=${PETS_TIME:-01:00:00}
PETS_PARTITION=${PETS_PARTITION:-}             # empty: the cluster's default partition
PETS_GPUS_PER_NODE=${PETS_GPUS_PER_NODE:-}     # e.g. 4 on GPU nodes
PETS_SRUN_ARGS=${PETS_SRUN_ARGS:-}             # further srun/salloc options, word-split
# ------------------------------------------------------------------------------------------------

set -uo pipefail
say() { echo "interactive.sh: $*" >&2; }

usage() {
  cat <<USAGE
Usage: jobs/interactive.sh [pets_train options...]   train as a Slurm job step (new or current allocation)
       jobs/interactive.sh --shell                    only an allocation (salloc) with a shell in it
       jobs/interactive.sh -h | --help                this text; requests nothing from Slurm

Settings (environment, or edit the top of this script); now:
  PETS_BIN=$PETS_BIN
  PETS_DATA=$PETS_DATA
  PETS_OUT=$PETS_OUT
  PETS_NTASKS=$PETS_NTASKS  PETS_NODES=$PETS_NODES  PETS_CPUS_PER_TASK=$PETS_CPUS_PER_TASK  PETS_TIME=$PETS_TIME
  PETS_PARTITION=${PETS_PARTITION:-(default)}  PETS_GPUS_PER_NODE=${PETS_GPUS_PER_NODE:-(none)}  PETS_SRUN_ARGS=${PETS_SRUN_ARGS:-(none)}
A checkpoint in PETS_OUT is resumed (--resume=auto; pass --overwrite to start over). pets_train's own options: $PETS_BIN/pets_train --help
USAGE
}
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
esac

if ! command -v srun >/dev/null; then
  say "srun not found: this needs a Slurm client (or use: mpirun -np N $PETS_BIN/pets_train ...)"
  exit 2
fi

# shellcheck disable=SC2206  # PETS_SRUN_ARGS is meant to be split into words
resources=(--ntasks="$PETS_NTASKS" --cpus-per-task="$PETS_CPUS_PER_TASK" $PETS_SRUN_ARGS)
if [ -z "${SLURM_JOB_ID:-}" ]; then
  resources+=(--nodes="$PETS_NODES" --time="$PETS_TIME" --job-name=pets-interactive)
  [ -n "$PETS_PARTITION" ] && resources+=(--partition="$PETS_PARTITION")
  [ -n "$PETS_GPUS_PER_NODE" ] && resources+=(--gpus-per-node="$PETS_GPUS_PER_NODE")
fi

if [ "${1:-}" = --shell ]; then
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    say "already inside allocation $SLURM_JOB_ID"
    exit 2
  fi
  exec salloc "${resources[@]}"
fi

args=(--data "$PETS_DATA" --out "$PETS_OUT" --threads "$PETS_CPUS_PER_TASK")
# Unless told --resume or --overwrite: continue the run in PETS_OUT, or start one where there is
# none (--resume=auto).
case " $* " in
  *" --resume"* | *" --overwrite "*) ;;
  *)
    args+=(--resume=auto)
    [ -e "$PETS_OUT/latest" ] && say "checkpoint in $PETS_OUT: resuming"
    ;;
esac
args+=("$@")

# --disable-status: Ctrl-C goes to the ranks as SIGINT (pets_train's stop request) instead of
# printing the step's state; srun itself ends when they do.
step=(srun --mpi=pmix --disable-status --unbuffered "${resources[@]}")
# A terminal gets rank 0 on a pseudo-terminal (live progress bar); a pipe gets plain lines.
[ -t 0 ] && [ -t 1 ] && step+=(--pty)

if [ -n "${SLURM_JOB_ID:-}" ]; then
  say "inside allocation $SLURM_JOB_ID: running $PETS_NTASKS ranks as a job step"
else
  say "requesting $PETS_NTASKS tasks x $PETS_CPUS_PER_TASK CPUs for $PETS_TIME"
fi
export OMP_NUM_THREADS=$PETS_CPUS_PER_TASK
exec "${step[@]}" "$PETS_BIN/pets_train" "${args[@]}"
