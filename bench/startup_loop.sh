#!/usr/bin/env bash
# The start-up loop: how often a job of many ranks on several hosts dies while starting, and
# whether a setting prevents it. Starts its own throw-away Slurm cluster of 4 hosts
# (scripts/test_cluster.sh --hosts 4 --link 1gbit, as the scaling run), makes a small data set,
# and runs --rounds rounds of two jobs of jobs/train.sbatch, as the scaling run and the multinode
# tests follow one job with the next:
#   1. a job stopped mid-epoch (4 ranks on 2 hosts, rank 0 held in step 2 by PETS_PAUSE_STEP,
#      SIGUSR1 to the batch step, not requeued: the ranks checkpoint and end);
#   2. at once (its ranks may still be ending), the measured job: one epoch of 12 or 16 ranks
#      (alternately) on 4 hosts.
# A measured job that does not complete is counted as a crash when its output holds a
# segmentation fault, as another failure otherwise.
#
#   bench/startup_loop.sh [--rounds N] [--no-stop] [--wait-quiet] [--report FILE] [-- VAR=VALUE...]
#
# --no-stop: measured jobs only, one after the other (no stopped job between them).
# --wait-quiet: the measured job waits until no pets_train of the stopped job is left.
# VAR=VALUE... after `--`: environment settings of every job (e.g. OMPI_MCA_... to try one of
# Open MPI's parameters), recorded in the report.
# The report (default $PETS_BUILD/bench-work/startup-loop.json): per measured job its ranks,
# state, whether it crashed, its wall time from submission and the pets_train processes of earlier
# jobs (those reading this script's data) still alive when it was submitted; and the totals. Needs root and Slurm, as the multinode tests do.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh
source "$here/scripts/env.sh"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

rounds=20
wait_between=0
stop_jobs=1
report=$PETS_BUILD/bench-work/startup-loop.json
settings=()
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=${2:?--rounds N}; shift 2 ;;
  --wait-quiet) wait_between=1; shift ;;
  --no-stop) stop_jobs=0; shift ;;
  --report) report=${2:?--report FILE}; shift 2 ;;
  --) shift; settings=("$@"); break ;;
  -h | --help) usage ;;
  *) echo "error: startup_loop.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: startup_loop.sh: --rounds takes a positive count, not '$rounds'" >&2; exit 2; }
for s in "${settings[@]}"; do
  [[ "$s" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "error: startup_loop.sh: '$s' is not VAR=VALUE" >&2; exit 2; }
done

bin=$PETS_BUILD
for p in pets_train pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "error: startup_loop.sh: no $bin/$p (build first)" >&2; exit 2; }
done
work=$PETS_BUILD/bench-work/startup-loop
cluster=$work/cluster
cluster_script=$here/scripts/test_cluster.sh
log() { echo "startup_loop.sh: $*" >&2; }

rm -rf "${work:?}/runs" "$work/data"
mkdir -p "$work/runs" "$work/data" "$work/tmp" "$(dirname "$report")"
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'bash "$cluster_script" stop "$cluster" >/dev/null 2>&1 || true' EXIT
bash "$cluster_script" start "$cluster" --hosts 4 --link 1gbit >"$work/cluster.txt" 2>&1 ||
  { cat "$work/cluster.txt" >&2; log "the cluster did not start"; exit 1; }
eval "$(bash "$cluster_script" env "$cluster")"
export SLURM_CONF TMPDIR=$work/tmp
# As the scaling run and multinode_scale16: 16 ranks share this machine's cores.
export OMPI_MCA_mpi_yield_when_idle=1
# shellcheck source-path=SCRIPTDIR source=cluster_jobs.sh
source "$here/bench/cluster_jobs.sh"

# multinode_scale16's set: 96 training images, 6 steps an epoch of 16 ranks x 1 image.
"$bin/pets_synth" --out "$work/data/images" --classes 3 --per-class 40 --seed 7 >/dev/null
"$bin/pets_preprocess" --images "$work/data/images" --out "$work/data/pets.h5" --max-side 96 \
  >"$work/data/preprocess.txt" 2>&1 || { cat "$work/data/preprocess.txt" >&2; exit 1; }

# submit RANKS HOSTS RUN [VAR=VALUE...]: jobs/train.sbatch, one epoch; prints the job id.
submit() {
  local n=$1 hosts=$2 run=$3
  shift 3
  env "${settings[@]}" "$@" PETS_BIN="$bin" PETS_DATA="$work/data/pets.h5" PETS_OUT="$run" \
    PETS_EPOCHS=1 PETS_BATCH_SIZE=1 PETS_REQUEUE=0 \
    PETS_TRAIN_ARGS="--eval-batch-size 4 --device cpu --image-size 64" \
    sbatch --parsable --chdir="$work/runs" --output="$run.out" --cpus-per-task=1 --time=15 \
    --nodes="$hosts" --ntasks="$n" --ntasks-per-node=$(((n + hosts - 1) / hosts)) \
    "$here/jobs/train.sbatch" | cut -d';' -f1
}

facts=$work/runs/facts.jsonl
: >"$facts"
for round in $(seq 1 "$rounds"); do
  # 1. stopped mid-epoch
  stop_state=none
  if [ "$stop_jobs" = 1 ]; then
    stop_run=$work/runs/r$round-stop
    job=$(submit 4 2 "$stop_run" PETS_PAUSE_STEP=2:4)
    wait_paused "$job" 2 "$stop_run.out" || log "round $round: the stop job never paused"
    scancel --signal=USR1 --batch "$job" 2>/dev/null || true
    stop_state=$(wait_ended "$job")
  fi
  # 2. measured
  [ "$wait_between" = 0 ] || wait_quiet
  ranks=$((round % 2 == 1 ? 16 : 12))
  run=$work/runs/r$round-np$ranks
  alive=$({ bench_ranks || true; } | wc -l)
  start=$(date +%s.%N)
  job=$(submit "$ranks" 4 "$run")
  state=$(wait_ended "$job")
  wall=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$start")
  crashed=false
  grep -qiE 'segmentation fault|signal 11|SIGSEGV' "$run.out" 2>/dev/null && crashed=true
  log "round $round: stop job $stop_state; $ranks ranks: job $job $state in $wall s, crash $crashed, $alive earlier pets_train alive at submission"
  [ "$state" = COMPLETED ] || tail -n 15 "$run.out" >&2
  printf '{"round": %d, "ranks": %d, "job": "%s", "state": "%s", "crashed": %s, "wall_s": %s, "earlier_alive": %d, "stop_state": "%s"}\n' \
    "$round" "$ranks" "$job" "$state" "$crashed" "$wall" "$alive" "$stop_state" >>"$facts"
done

python3 - "$facts" "$report" "$wait_between" "${settings[@]}" <<'PY'
import json, sys
facts, report, wait_between, settings = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
jobs = [json.loads(line) for line in open(facts)]
summary = {
    "settings": settings,
    "wait_quiet": wait_between,
    "jobs": len(jobs),
    "completed": sum(j["state"] == "COMPLETED" for j in jobs),
    "crashed": sum(j["crashed"] for j in jobs),
    "other_failures": sum(j["state"] != "COMPLETED" and not j["crashed"] for j in jobs),
    "runs": jobs,
}
json.dump(summary, open(report, "w"), indent=1)
print(f"{summary['jobs']} jobs: {summary['completed']} completed, {summary['crashed']} crashed, "
      f"{summary['other_failures']} failed otherwise; settings {settings or 'none'}")
PY
log "report: $report"
