#!/usr/bin/env bash
# The CPU training step with a trained backbone (--unfreeze) against PyTorch's eager step for the
# same model on the same machine, in one run: images/s and the peak resident memory of one
# process per configuration, for each --unfreeze of --unfreeze-list (none layer4 all) and each
# precision (fp32 bf16), at --image-size (224) and --batch (64) with --threads (all cores).
#
#   bench/unfreeze_bench.sh [--smoke] [--repeats N] [--steps N] [--warmup N] [--threads N]
#                           [--batch B] [--image-size S] [--unfreeze-list "none layer4 all"]
#                           [--precisions "fp32 bf16"] [--sides "ours pytorch pytorch_retain"]
#                           [--phases] [--resume] [--report FILE]
#
# The sides, each one process per configuration and repeat (so that its peak is that
# configuration's):
#   ours            `pets_bench --step-only PRECISION.UNFREEZE`: pets_train's own step
#                   (pets::train::TrainStep: the frozen stages' forward under no_grad, the trained
#                   stages with autograd, fc, the summed cross-entropy, backward, the trained
#                   gradients' fp32 allreduce at one rank, Adam per group, the OneCycle schedules)
#                   with the allocator pets_train sets (pets::retain_freed_memory);
#   pytorch         bench/python_step.py --unfreeze U --precision P under Debian's /usr/bin/python3
#                   (python3-torch: the LibTorch 1.13 pets_train links): the same step in eager
#                   PyTorch, torch.optim.Adam and OneCycleLR included, no allreduce (one process),
#                   glibc's default allocator, as users run it;
#   pytorch_retain  the same with GLIBC_TUNABLES set to pets_train's allocator settings (mmap_max
#                   0, trim_threshold and top_pad as pets::retain_freed_memory sets them).
# Per repeat, every configuration runs each side once, back to back, the sides' order rotating
# from one configuration and repeat to the next; each process runs --warmup untimed steps, then
# --steps timed ones. Defaults: 2 repeats of 1 timed step after 1 warm-up (at 224 px and batch 64
# on 2 cores under a load average of 8, a step took 4-84 s and the run about 25 minutes; an idle
# machine steps 5-6 times faster); --phases adds ours' forward timed alone (pets_bench
# --step-phases; the PyTorch side times its phases inline).
# --smoke: batch 2, 64 px, 1 repeat, none and layer4 in fp32 (a minute). --resume keeps
# the runs an interrupted invocation recorded and runs only the missing ones of the repeats, sides
# and configurations given (the same sizes are expected).
#
# JSON to --report (default bench/results/unfreeze-step-cpu-<date>.json; bench/unfreeze_report.py):
# per configuration and side images/s (median, min, max over the repeats), peak RSS, the step's
# phases, and ours over each PyTorch side per repeat; every run with its wall time and the load
# average around it. The Markdown tables to stdout. Logs under $PETS_BUILD/bench-work/unfreeze.
# Exit status 1 when a run failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh
source "$here/scripts/env.sh"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

repeats=2
steps=1
warmup=1
threads=$(nproc)
batch=64
image_size=224
unfreeze_list="none layer4 all"
precisions="fp32 bf16"
sides="ours pytorch pytorch_retain"
phases=0
resume=0
report=""
python=${PETS_PYTHON:-/usr/bin/python3}
while [ $# -gt 0 ]; do
  case $1 in
  --smoke) repeats=1; steps=1; batch=2; image_size=64; unfreeze_list="none layer4"; precisions=fp32; shift ;;
  --repeats) repeats=${2:?--repeats N}; shift 2 ;;
  --steps) steps=${2:?--steps N}; shift 2 ;;
  --warmup) warmup=${2:?--warmup N}; shift 2 ;;
  --threads) threads=${2:?--threads N}; shift 2 ;;
  --batch) batch=${2:?--batch B}; shift 2 ;;
  --image-size) image_size=${2:?--image-size S}; shift 2 ;;
  --unfreeze-list) unfreeze_list=${2:?--unfreeze-list LIST}; shift 2 ;;
  --precisions) precisions=${2:?--precisions LIST}; shift 2 ;;
  --sides) sides=${2:?--sides LIST}; shift 2 ;;
  --phases) phases=1; shift ;;
  --resume) resume=1; shift ;;
  --report) report=${2:?--report FILE}; shift 2 ;;
  -h | --help) usage ;;
  *) echo "error: unfreeze_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in repeats steps threads batch image_size; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] ||
    { echo "error: unfreeze_bench.sh: --${v//_/-} must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "error: unfreeze_bench.sh: --warmup must be an integer" >&2; exit 2; }
for s in $sides; do
  case $s in ours | pytorch | pytorch_retain) ;; *)
    echo "error: unfreeze_bench.sh: --sides: unknown side '$s' (ours, pytorch, pytorch_retain)" >&2; exit 2 ;;
  esac
done
report=${report:-$here/bench/results/unfreeze-step-cpu-$(date -u +%F).json}

bench=$PETS_BUILD/pets_bench
case " $sides " in *" ours "*)
  [ -x "$bench" ] || { echo "error: unfreeze_bench.sh: no $bench (build the pets_bench target)" >&2; exit 2; }
  [[ "$("$bench" --help 2>&1 || true)" == *--step-only* ]] ||
    { echo "error: unfreeze_bench.sh: $bench has no --step-only (rebuild it)" >&2; exit 2; } ;;
esac
case " $sides " in *" pytorch"*)
  "$python" -c "import torch" 2>/dev/null ||
    { echo "error: unfreeze_bench.sh: $python has no torch (bench/reference_python.sh installs python3-torch)" >&2; exit 2; } ;;
esac
log() { echo "unfreeze_bench.sh: $*" >&2; }

work=$PETS_BUILD/bench-work/unfreeze
facts=$work/facts.jsonl
if [ "$resume" = 0 ] || [ ! -f "$facts" ]; then
  rm -rf "${work:?}"
  mkdir -p "$work/logs"
  : >"$facts"
  uptime >"$work/uptime_start"
else
  uptime >>"$work/uptime_resumed"
fi
trap 'exit 130' INT
trap 'exit 143' TERM
# pets_train's allocator settings (src/util/memory.cpp) as glibc tunables, for pytorch_retain.
retain_tunables=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647:glibc.malloc.top_pad=67108864

uptime_start=$(head -n 1 "$work/uptime_start")
log "$(uptime)"
read -r -a side_list <<<"$sides"
failed=0
order=0
for repeat in $(seq 1 "$repeats"); do
  slot=$((repeat - 1))
  for precision in $precisions; do
    for unfreeze in $unfreeze_list; do
      config=$precision.$unfreeze
      # The sides in turn, starting one further at each configuration and at each repeat, so that
      # each side goes first about as often, and a configuration's order changes between repeats.
      n=${#side_list[@]}
      for i in $(seq 0 $((n - 1))); do
        side=${side_list[$(((slot + i) % n))]}
        order=$((order + 1))
        name=$work/logs/$repeat-$config-$side
        if [ "$resume" = 1 ] && python3 - "$facts" "$side" "$precision" "$unfreeze" "$repeat" <<'PY'
import json, sys
facts, side, precision, unfreeze, repeat = sys.argv[1:]
with open(facts) as f:
    done = [json.loads(line) for line in f if line.strip()]
sys.exit(0 if any(d["side"] == side and d["precision"] == precision and d["unfreeze"] == unfreeze
                  and d["repeat"] == int(repeat) and d["rc"] == 0 for d in done) else 1)
PY
        then
          continue
        fi
        common=(--facts "$facts" --side "$side" --precision "$precision" --unfreeze "$unfreeze"
          --repeat "$repeat" --order "$order" --log "$name.log")
        case $side in
        ours)
          cmd=("$bench" --step-only "$config" --threads "$threads" --batch "$batch"
            --image-size "$image_size" --warmup "$warmup" --min-iters "$steps" --min-seconds 0
            --report "$name.json")
          [ "$phases" = 0 ] || cmd+=(--step-phases)
          python3 "$here/bench/unfreeze_report.py" time "${common[@]}" --json "$name.json" -- "${cmd[@]}" ||
            { failed=1; tail -n 5 "$name.log" >&2; }
          ;;
        pytorch | pytorch_retain)
          env=()
          [ "$side" = pytorch ] || env=(env "GLIBC_TUNABLES=$retain_tunables")
          python3 "$here/bench/unfreeze_report.py" time "${common[@]}" -- "${env[@]}" "$python" \
            "$here/bench/python_step.py" --threads "$threads" --batch "$batch" \
            --image-size "$image_size" --steps "$steps" --warmup "$warmup" --unfreeze "$unfreeze" \
            --precision "$precision" || { failed=1; tail -n 5 "$name.log" >&2; }
          ;;
        esac
        log "$repeat $config $side: $(tail -n 1 "$facts" | python3 -c 'import json,sys; f=json.loads(sys.stdin.read()); r=f["result"] or {}; print("%.2f images/s, peak %.0f MiB, %.0f s, load %.1f" % (r.get("images_per_s", 0), r.get("maxrss_kib", 0) / 1024, f["wall_seconds"], f["loadavg_before"][0]))')"
      done
      slot=$((slot + 1))
    done
  done
done
uptime_end=$(uptime)
log "$uptime_end"

rev=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+changes"
python3 "$here/bench/unfreeze_report.py" report --facts "$facts" --report "$report" \
  --setting "repeats=$repeats" --setting "timed_steps_per_run=$steps" \
  --setting "warmup_steps_per_run=$warmup" --setting "threads=$threads" --setting "batch=$batch" \
  --setting "image_size=$image_size" --setting "commit=$rev" --setting "pets_bench=$bench" \
  --setting "python=$python" --setting "torch=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)" \
  --setting "cpu=$(lscpu | sed -n 's/^Model name: *//p')" --setting "cores=$(nproc)" \
  --setting "uptime_start=$uptime_start" --setting "uptime_end=$uptime_end" \
  --setting "uptime_resumed=$(paste -sd '|' "$work/uptime_resumed" 2>/dev/null || true)" \
  --setting "retain_tunables=$retain_tunables" || failed=1
log "report: $report"
exit "$failed"
