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
# progress streams to this terminal, and Ctrl-C stops the training as a preemption does: rank 0
# writes the checkpoint of the last step completed and prints the line to resume, every rank
# exits with status 75 after the step in flight (run this script again: it finds the checkpoint and resumes). With a
# terminal Ctrl-C reaches rank 0 through its pseudo-terminal; without one srun passes it to every
# rank (--disable-status). A second Ctrl-C quits at once, without a checkpoint. `kill -USR1 <srun
# pid>` stops the same way. Works without a terminal too (no --pty then): the tests drive it so.
# The arguments are pets_train's: pets_train checks them here, in one process, before anything is
# asked of Slurm (a typo ends the script with pets_train's error line and status 2, not after a
# wait in the queue). Where no Slurm answers (no srun, no slurm.conf, no controller) it says so
# and names the mpirun command to run instead (status 2).

# ---- what to run: edit here, or set these in the environment ----------------------------------
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PETS_BIN=${PETS_BIN:-${PETS_BUILD:-$here/build}}   # folder with pets_train (scripts/env.sh's PETS_BUILD)
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
usage_error() { echo "error: interactive.sh: $* (see --help)" >&2; exit 2; }

# PETS_BIN as the help shows it: whether pets_train is there yet.
bin_state() {
  if [ -x "$PETS_BIN/pets_train" ]; then
    echo "$PETS_BIN"
  else
    echo "$PETS_BIN (no pets_train there yet: make -f Makefile.cluster build, or set PETS_BIN)"
  fi
}

usage() {
  cat <<USAGE
Usage: jobs/interactive.sh [pets_train options...]   train as a Slurm job step (new or current allocation)
       jobs/interactive.sh --shell                    only an allocation (salloc) with a shell in it
       jobs/interactive.sh -h | --help                this text; requests nothing from Slurm

Settings (environment, or edit the top of this script); now:
  PETS_BIN=$(bin_state)
  PETS_DATA=$PETS_DATA
  PETS_OUT=$PETS_OUT
  PETS_NTASKS=$PETS_NTASKS  PETS_NODES=$PETS_NODES  PETS_CPUS_PER_TASK=$PETS_CPUS_PER_TASK  PETS_TIME=$PETS_TIME
  PETS_PARTITION=${PETS_PARTITION:-(default)}  PETS_GPUS_PER_NODE=${PETS_GPUS_PER_NODE:-(none)}  PETS_SRUN_ARGS=${PETS_SRUN_ARGS:-(none)}
A checkpoint in PETS_OUT is resumed (--resume=auto; pass --overwrite to start over). pets_train's own options: $PETS_BIN/pets_train --help
Without Slurm: mpirun -np $PETS_NTASKS $PETS_BIN/pets_train --data $PETS_DATA --out $PETS_OUT ...
USAGE
}
for arg in "$@"; do
  case $arg in
  -h | --help) usage; exit 0 ;;
  esac
done
if [ "${1:-}" = --shell ] && [ $# -gt 1 ]; then
  usage_error "--shell takes no other arguments, got: ${*:2}"
fi

# pets_train's options, checked by pets_train itself: --write-config parses them as the training
# would, writes the result and stops. A singleton run, outside any job step's environment; only
# its usage errors (status 2) stop the script: any other failure leaves the check to the ranks.
check_options() {
  local dir status
  if [ ! -x "$PETS_BIN/pets_train" ]; then
    echo "error: interactive.sh: no pets_train in PETS_BIN=$PETS_BIN (make -f Makefile.cluster" \
      "build, or set PETS_BIN)" >&2
    exit 2
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/pets-interactive.XXXXXX") || return 0
  # shellcheck disable=SC2046  # one -u NAME per variable
  env $(compgen -e | grep -E '^(SLURM|PMIX|PMI)_' | sed 's/^/-u /') \
    "$PETS_BIN/pets_train" "$@" --write-config "$dir/options.conf" >"$dir/log" 2>&1
  status=$?
  [ "$status" -eq 2 ] && grep '^error:' "$dir/log" >&2
  rm -rf "$dir"
  [ "$status" -ne 2 ] || exit 2
}
args=(--data "$PETS_DATA" --out "$PETS_OUT" --threads "$PETS_CPUS_PER_TASK")
# Unless told --resume or --overwrite: continue the run in PETS_OUT, or start one where there is
# none (--resume=auto).
resume_auto=0
case " $* " in
  *" --resume"* | *" --overwrite "*) ;;
  *) args+=(--resume=auto); resume_auto=1 ;;
esac
args+=("$@")
[ "${1:-}" = --shell ] || check_options "${args[@]}"

# Slurm must be there and answer before srun or salloc is run: without a configuration, srun only
# says "fatal: Could not establish a configuration source", and a SLURM_CONF naming no file makes
# it retry for a minute.
no_slurm() {
  echo "error: interactive.sh: no Slurm here ($1): run" \
    "mpirun -np $PETS_NTASKS $PETS_BIN/pets_train --data $PETS_DATA --out $PETS_OUT ... instead" >&2
  exit 2
}
command -v srun >/dev/null || no_slurm "srun not found: no Slurm client installed"
if [ -n "${SLURM_CONF:-}" ] && [ ! -f "$SLURM_CONF" ]; then
  no_slurm "SLURM_CONF=$SLURM_CONF is not a file"
fi
if command -v sinfo >/dev/null && ! sinfo_err=$(timeout 60 sinfo --noheader --format=%P 2>&1 >/dev/null); then
  case $sinfo_err in
  *"configuration source"* | *"Unable to process configuration"*)
    no_slurm "no Slurm configuration: SLURM_CONF is unset and there is no slurm.conf" ;;
  *) no_slurm "the Slurm controller does not answer: $(tail -n1 <<<"$sinfo_err")" ;;
  esac
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
    usage_error "--shell: already inside allocation $SLURM_JOB_ID; train in it with jobs/interactive.sh [options]"
  fi
  exec salloc "${resources[@]}"
fi

[ "$resume_auto" -eq 1 ] && [ -e "$PETS_OUT/latest" ] && say "checkpoint in $PETS_OUT: resuming"

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
