#!/usr/bin/env bash
# The start-up loop: how often a job of many ranks on several hosts dies while starting, and
# whether a setting prevents it. Starts its own throw-away Slurm cluster of 4 hosts
# (scripts/test_cluster.sh --hosts 4 --link 1gbit, as the scaling run), makes a small data set,
# and runs --rounds rounds of two jobs of jobs/train.sbatch, as the scaling run and the multinode
# tests follow one job with the next:
#   1. a job stopped mid-epoch (4 ranks on 2 hosts, rank 0 held in step 2 by PETS_PAUSE_STEP,
#      SIGUSR1 to the batch step, not requeued: the ranks checkpoint and end);
#   2. at once (its ranks may still be ending), the measured job: one epoch of 12 or 16 ranks
#      (alternately; --ranks LIST: those counts in turn) on min(ranks, 4) hosts.
# A measured job that does not complete is counted as a crash when its output holds a
# segmentation fault, as another failure otherwise.
#
#   bench/startup_loop.sh [--rounds N] [--ranks "16 12"] [--no-stop] [--wait-quiet] [--report FILE]
#                         [-- VAR=VALUE...]
#
# --no-stop: measured jobs only, one after the other (no stopped job between them).
# --wait-quiet: the measured job waits until no pets_train of the stopped job is left.
# VAR=VALUE... after `--`: environment settings of every job (e.g. OMPI_MCA_... to try one of
# Open MPI's parameters), recorded in the report.
# The report (default $PETS_BUILD/bench-work/startup-loop.json): per measured job its ranks,
# state, whether it crashed, its wall time from submission, the seconds from submission to
# pets_train's start-up line (`pets_train: N ranks on H hosts, ...`, printed once the ranks have
# started MPI, counted the hosts, built and broadcast the model and opened the data) and to its
# first step's progress line, and the pets_train processes of earlier jobs (those reading this
# script's data) still alive when it was submitted; and the totals. Needs root and Slurm, as the
# multinode tests do.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh
source "$here/scripts/env.sh"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

rounds=20
ranks_list="16 12"
wait_between=0
stop_jobs=1
report=$PETS_BUILD/bench-work/startup-loop.json
settings=()
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=${2:?--rounds N}; shift 2 ;;
  --wait-quiet) wait_between=1; shift ;;
  --no-stop) stop_jobs=0; shift ;;
  --ranks) ranks_list=${2:?--ranks LIST}; shift 2 ;;
  --report) report=${2:?--report FILE}; shift 2 ;;
  --) shift; settings=("$@"); break ;;
  -h | --help) usage ;;
  *) echo "error: startup_loop.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: startup_loop.sh: --rounds takes a positive count, not '$rounds'" >&2; exit 2; }
read -r -a ranks_cycle <<<"$ranks_list"
for n in "${ranks_cycle[@]}"; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -gt 16 ]; then
    echo "error: startup_loop.sh: rank counts are 1 .. 16 (4 hosts of 4 CPUs), not '$n'" >&2
    exit 2
  fi
done
[ "${#ranks_cycle[@]}" -gt 0 ] || { echo "error: startup_loop.sh: --ranks names no rank count" >&2; exit 2; }
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

# Seconds since a `date +%s.%N` time, to 0.1 s.
since() { python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$1"; }

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
  ranks=${ranks_cycle[$(((round - 1) % ${#ranks_cycle[@]}))]}
  run=$work/runs/r$round-np$ranks
  alive=$({ bench_ranks || true; } | wc -l)
  start=$(date +%s.%N)
  job=$(submit "$ranks" $((ranks < 4 ? ranks : 4)) "$run")
  to_start_line=null to_first_step=null
  for _ in $(seq 1 2400); do
    if [ "$to_start_line" = null ] && grep -q "^pets_train: $ranks rank" "$run.out" 2>/dev/null; then
      to_start_line=$(since "$start")
    fi
    if grep -q "step 1/" "$run.out" 2>/dev/null; then to_first_step=$(since "$start"); break; fi
    [[ "$(job_field "$job" JobState)" =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] || break
    sleep 0.25
  done
  state=$(wait_ended "$job")
  wall=$(since "$start")
  crashed=false
  grep -qiE 'segmentation fault|signal 11|SIGSEGV' "$run.out" 2>/dev/null && crashed=true
  log "round $round: stop job $stop_state; $ranks ranks: job $job $state in $wall s, crash $crashed, $alive earlier pets_train alive at submission"
  [ "$state" = COMPLETED ] || tail -n 15 "$run.out" >&2
  printf '{"round": %d, "ranks": %d, "job": "%s", "state": "%s", "crashed": %s, "wall_s": %s, "to_start_line_s": %s, "to_first_step_s": %s, "earlier_alive": %d, "stop_state": "%s"}\n' \
    "$round" "$ranks" "$job" "$state" "$crashed" "$wall" "$to_start_line" "$to_first_step" "$alive" "$stop_state" >>"$facts"
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
# Per rank count: the median seconds from submission to the start-up line and to the first step.
by_ranks = {}
for j in jobs:
    by_ranks.setdefault(j["ranks"], []).append(j)
def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None
summary["startup_by_ranks"] = {
    str(n): {"jobs": len(js),
             "to_start_line_s_median": median(j.get("to_start_line_s") for j in js),
             "to_first_step_s_median": median(j.get("to_first_step_s") for j in js)}
    for n, js in sorted(by_ranks.items())}
json.dump(summary, open(report, "w"), indent=1)
print(f"{summary['jobs']} jobs: {summary['completed']} completed, {summary['crashed']} crashed, "
      f"{summary['other_failures']} failed otherwise; settings {settings or 'none'}")
for n, row in summary["startup_by_ranks"].items():
    print(f"{n} ranks: {row['jobs']} jobs, start-up line after {row['to_start_line_s_median']} s, "
          f"first step after {row['to_first_step_s_median']} s (medians, from submission)")
PY
log "report: $report"
