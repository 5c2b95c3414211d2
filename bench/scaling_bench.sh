#!/usr/bin/env bash
# The scaling run of the benchmark harness: how pets_train's per-rank step time, traffic and
# checkpoint grow with the number of ranks when the ranks sit on several hosts joined by a link of
# a known rate. Starts its own throw-away Slurm cluster of 4 hosts (scripts/test_cluster.sh
# --hosts 4 --link RATE: every host's link shaped to RATE each way), makes a small synthetic data
# set, and for each rank count N (2 4 8 12 16; --smoke: 2 4) runs jobs/train.sbatch on min(N, 4)
# hosts, ceil(N / 4) ranks a host, twice: one uninterrupted epoch (batch 1 a rank, 64-pixel crops)
# for the step's figures, and one stopped mid-epoch (rank 0 held in the epoch's middle step by
# PETS_PAUSE_STEP while SIGUSR1 goes to the batch step; not requeued) for the checkpoint's files.
#
#   bench/scaling_bench.sh [--smoke] [--one-host] [--ranks "2 4 8"] [--link RATE|none]
#                          [--report FILE] [--per-class N] [--image-size S] [--batch-size B]
#
# --one-host: no cluster; a plain `mpirun --oversubscribe -np N` on this machine, N in 1 2 4 8 16
# (report default $PETS_BUILD/bench-work/scaling-one-host.json): what each rank hands to the
# step's collectives does not depend on where the ranks run.
#
# Per N, from the run folders (bench/scaling_report.py): step_ms (rank 0's training seconds over
# the epoch's steps), comm_share and bytes_per_step (metrics.jsonl's fields of those names),
# ckpt_bytes_rank0 (the mid-epoch ckpt-<S>.safetensors) and ckpt_bytes_per_other_rank (the mean of
# the shards ckpt-<S>.epoch-<E>.step-<P>.rank-<R>.safetensors it records, null when there are
# none), link_bytes (what the hosts sent over their links during the uninterrupted job, start-up
# and evaluation included). The JSON report goes to --report (default
# $PETS_BUILD/bench-work/scaling.json), the table to stderr. Needs root (network namespaces) and
# Slurm, as the multinode tests do; everything it writes is under $PETS_BUILD/bench-work/scaling,
# and the cluster is stopped however the script ends. Not a ctest test: a full run takes several
# minutes (about 15 s a job on 2 idle cores, more under load; 2 jobs a rank count).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh
source "$here/scripts/env.sh"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

ranks_list="2 4 8 12 16"
link=1gbit
report=""
one_host=0
per_class=4
image_size=64
batch_size=1
while [ $# -gt 0 ]; do
  case $1 in
  --smoke) ranks_list="2 4"; shift ;;
  --one-host) one_host=1; ranks_list="1 2 4 8 16"; link=none; shift ;;
  --ranks) ranks_list=${2:?--ranks LIST}; shift 2 ;;
  --link) link=${2:?--link RATE}; shift 2 ;;
  --report) report=${2:?--report FILE}; shift 2 ;;
  --per-class) per_class=${2:?--per-class N}; shift 2 ;;
  --image-size) image_size=${2:?--image-size S}; shift 2 ;;
  --batch-size) batch_size=${2:?--batch-size B}; shift 2 ;;
  -h | --help) usage ;;
  *) echo "error: scaling_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$report" ]; then
  report=$PETS_BUILD/bench-work/scaling.json
  [ "$one_host" = 0 ] || report=$PETS_BUILD/bench-work/scaling-one-host.json
fi
for n in $ranks_list; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -gt 16 ]; then
    echo "error: scaling_bench.sh: rank counts are 1 .. 16 (4 hosts of 4 CPUs), not '$n'" >&2
    exit 2
  fi
done

kHosts=4
kPauseSeconds=8
work=$PETS_BUILD/bench-work/scaling
cluster=$work/cluster
cluster_script=$here/scripts/test_cluster.sh
bin=$PETS_BUILD
for p in pets_train pets_synth pets_preprocess; do
  [ -x "$bin/$p" ] || { echo "error: scaling_bench.sh: no $bin/$p (build first)" >&2; exit 2; }
done

log() { echo "scaling_bench.sh: $*" >&2; }

mkdir -p "$work" "$(dirname "$report")"
rm -rf "${work:?}/runs" "$work/data"
mkdir -p "$work/runs" "$work/data" "$work/tmp"
link_args=()
[ "$link" = none ] || link_args=(--link "$link")
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$one_host" = 0 ]; then
  trap 'bash "$cluster_script" stop "$cluster" >/dev/null 2>&1 || true' EXIT
  bash "$cluster_script" start "$cluster" --hosts $kHosts "${link_args[@]}" >"$work/cluster.txt" 2>&1 ||
    { cat "$work/cluster.txt" >&2; log "the cluster did not start"; exit 1; }
  eval "$(bash "$cluster_script" env "$cluster")"
  export SLURM_CONF
fi
export TMPDIR=$work/tmp
# shellcheck source-path=SCRIPTDIR source=cluster_jobs.sh
source "$here/bench/cluster_jobs.sh"
# Up to 16 ranks share this machine's cores: a rank waiting in a collective yields its core rather
# than spinning on it (Open MPI does so by itself only under an mpirun that knows it oversubscribes).
export OMPI_MCA_mpi_yield_when_idle=1

# The data set: the tutorial's 37 breeds (so that the step carries its head), --per-class images of
# each, 80 % of them training images, stored at 1.5 times the crop.
"$bin/pets_synth" --out "$work/data/images" --classes 37 --per-class "$per_class" --seed 7 >/dev/null
"$bin/pets_preprocess" --images "$work/data/images" --out "$work/data/pets.h5" \
  --max-side $((image_size * 3 / 2)) >"$work/data/preprocess.txt" 2>&1 ||
  { cat "$work/data/preprocess.txt" >&2; exit 1; }
log "data: $(tail -n1 "$work/data/preprocess.txt")"

# Bytes the compute hosts have sent over their links (their eth0 qdiscs' counters).
link_sent() {
  local total=0 h sent
  [ "$one_host" = 0 ] || { echo 0; return; }
  for h in $(seq -f 'n%g' 1 $kHosts); do
    sent=$(bash "$cluster_script" exec "$cluster" "$h" tc -s qdisc show dev eth0 2>/dev/null |
      awk '/Sent/ { print $2; exit }')
    total=$((total + ${sent:-0}))
  done
  echo "$total"
}

# Submits jobs/train.sbatch with N ranks into run folder $2 (output file $2.out), further
# environment settings after; prints the job id. The ranks are started by mpirun inside the
# allocation: srun --mpi=pmix loses a rank at start-up in about one job of 12-16 ranks in seven
# (bench/startup_loop.sh).
submit() {
  local n=$1 run=$2 hosts per_host
  shift 2
  wait_quiet
  hosts=$((n < kHosts ? n : kHosts))
  per_host=$(((n + hosts - 1) / hosts))
  env "$@" PETS_LAUNCHER=mpirun PETS_BIN="$bin" PETS_DATA="$work/data/pets.h5" PETS_OUT="$run" PETS_EPOCHS=1 \
    PETS_BATCH_SIZE="$batch_size" PETS_TRAIN_ARGS="--eval-batch-size 4 --device cpu --image-size $image_size" \
    sbatch --parsable --chdir="$work/runs" --output="$run.out" --cpus-per-task=1 --time=15 \
    --nodes="$hosts" --ntasks="$n" --ntasks-per-node="$per_host" "$here/jobs/train.sbatch" |
    cut -d';' -f1
}

# --one-host: the same runs under a plain mpirun on this machine, in the background; pid in
# mpirun_pid, output in $2.out. Environment settings after N and the run folder.
start_mpirun() {
  local n=$1 run=$2
  shift 2
  wait_quiet
  env "$@" mpirun --oversubscribe -np "$n" "$bin/pets_train" --data "$work/data/pets.h5" --out "$run" \
    --epochs 1 --batch-size "$batch_size" --eval-batch-size 4 --device cpu --image-size "$image_size" \
    --threads 1 >"$run.out" 2>&1 </dev/null &
  mpirun_pid=$!
}
facts=$work/runs/facts.jsonl
: >"$facts"
for n in $ranks_list; do
  hosts=$((n < kHosts ? n : kHosts))
  [ "$one_host" = 0 ] || hosts=1
  # --- one uninterrupted epoch ---
  run=$work/runs/np$n
  sent_before=$(link_sent)
  start=$(date +%s.%N)
  if [ "$one_host" = 0 ]; then
    job=$(submit "$n" "$run")
    state=$(wait_ended "$job")
  else
    job="mpirun"
    start_mpirun "$n" "$run"
    if wait "$mpirun_pid"; then state=COMPLETED; else state="FAILED (exit $?)"; fi
  fi
  wall=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$start")
  link_bytes=$(($(link_sent) - sent_before))
  if [ "$state" != COMPLETED ]; then
    tail -n 30 "$run.out" >&2
    log "$n ranks: job $job ended $state"
    echo "{\"ranks\": $n, \"hosts\": $hosts, \"error\": \"job $job ended $state\"}" >>"$facts"
    continue
  fi
  steps=$(sed -n 's/.*, \([0-9]*\) steps\/epoch, .*/\1/p' "$run.out" | head -n1)
  log "$n ranks on $hosts hosts: $steps steps in job $job, $wall s"

  # --- stopped mid-epoch: the checkpoint's files ---
  stop_run=$work/runs/np$n-stop
  stop_line=""
  pause=$((${steps:-0} / 2))
  if [ "$pause" -ge 1 ] && [ "$one_host" = 1 ]; then
    PETS_PAUSE_STEP="$pause:$kPauseSeconds" OMPI_MCA_mca_base_env_list=PETS_PAUSE_STEP \
      start_mpirun "$n" "$stop_run"
    for _ in $(seq 1 2400); do
      grep -q "^pausing in step $pause " "$stop_run.out" 2>/dev/null && break
      kill -0 "$mpirun_pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -USR1 "$mpirun_pid" 2>/dev/null || true # mpirun forwards SIGUSR1 to every rank
    wait "$mpirun_pid" && state=COMPLETED || state="exit $?"
    stop_line=$(grep -m1 -E '^stopped by signal [0-9]+ at epoch' "$stop_run.out" || true)
    [ -n "$stop_line" ] || { tail -n 20 "$stop_run.out" >&2; log "$n ranks: the stop run ($state) did not stop"; }
  elif [ "$pause" -ge 1 ]; then
    job=$(submit "$n" "$stop_run" PETS_PAUSE_STEP="$pause:$kPauseSeconds" PETS_REQUEUE=0)
    wait_paused "$job" "$pause" "$stop_run.out" || true
    scancel --signal=USR1 --batch "$job" 2>/dev/null || true
    state=$(wait_ended "$job")
    stop_line=$(grep -m1 -E '^stopped by signal [0-9]+ at epoch' "$stop_run.out" || true)
    [ -n "$stop_line" ] || { tail -n 20 "$stop_run.out" >&2; log "$n ranks: the stop run ($state) did not stop"; }
  else
    log "$n ranks: $steps step(s) an epoch, no mid-epoch stop"
  fi
  python3 - "$n" "$hosts" "$run" "$stop_run" "$wall" "$link_bytes" "$stop_line" >>"$facts" <<'PY'
import json, sys
n, hosts, run, stop_run, wall, link_bytes, stop_line = sys.argv[1:8]
print(json.dumps({"ranks": int(n), "hosts": int(hosts), "run": run, "stop_run": stop_run,
                  "wall_s": float(wall), "link_bytes": int(link_bytes), "stop_line": stop_line}))
PY
done

python3 "$here/bench/scaling_report.py" --facts "$facts" --link "$link" --report "$report" \
  --image-size "$image_size" --batch-size "$batch_size" --cores "$(nproc)"
log "report: $report"
