# shellcheck shell=bash
# Sourced by the benchmark scripts that run jobs/train.sbatch on a test cluster
# (scripts/test_cluster.sh): reading a job's state, waiting for its end, and for the last job's
# ranks to be gone. Expects SLURM_CONF exported, log() defined and work set.

# scontrol's view of one field of a job.
job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

# Waits until job $1 has ended (at most 600 s); prints its state.
wait_ended() {
  local state=""
  for _ in $(seq 1 2400); do
    state=$(job_field "$1" JobState)
    [[ "$state" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]] && break
    sleep 0.25
  done
  echo "$state"
}

# The pets_train processes of the caller's jobs (those whose command line names its folder $work).
# shellcheck disable=SC2154  # work: the sourcing script's folder
bench_ranks() { pgrep -f "pets_train .*$work/"; }

# Waits (at most 60 s) until no pets_train of an earlier job is left on this machine (the cluster's
# hosts share its processes): jobs never overlap, in the figures or in Open MPI's start-up.
wait_quiet() {
  local i
  for i in $(seq 0 240); do
    if ! bench_ranks >/dev/null; then
      [ "$i" = 0 ] || log "waited $((i / 4)) s for an earlier job's pets_train to end"
      return 0
    fi
    sleep 0.25
  done
  log "pets_train processes of an earlier job still running: $(bench_ranks | tr '\n' ' ')"
}

# Waits (at most 600 s) until `pausing in step $2 ` is in file $3 or job $1 has left the queue's
# running states.
wait_paused() {
  for _ in $(seq 1 2400); do
    grep -q "^pausing in step $2 " "$3" 2>/dev/null && return 0
    [[ "$(job_field "$1" JobState)" =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] || return 1
    sleep 0.25
  done
  return 1
}
