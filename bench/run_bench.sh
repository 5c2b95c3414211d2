#!/usr/bin/env bash
# The benchmark harness (pets_bench), one command:
#
#   bench/run_bench.sh [--smoke] [--check] [pets_bench options...]
#
# runs build/pets_bench (PETS_BUILD selects another build folder), which synthesises a data set,
# preprocesses it with `mpirun -np 2 pets_preprocess`, measures the roofline, the model's FLOPs,
# the model-only and loader-only throughput and three pets_train runs, writes the JSON report to
# --report (default $WORK/report.json) and stdout, and a table to stderr. --check then validates
# the report (every section present, every number positive): that is the ctest `bench_smoke`.
# `build/pets_bench --help` lists the sizes; see bench/README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${PETS_BUILD:-$here/../build}"
bench="" check=0 work="" report="" args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --work) work="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
bench="${bench:-$build/pets_bench}"
work="${work:-$build/bench-work}"
report="${report:-$work/report.json}"
has() { local a; for a in "${args[@]+"${args[@]}"}"; do [[ "$a" == "$1" ]] && return 0; done; return 1; }
has --train || args+=(--train "$build/pets_train")
has --preprocess || args+=(--preprocess "$build/pets_preprocess")
has --synth || args+=(--synth "$build/pets_synth")
[[ -x "$bench" ]] || { echo "run_bench.sh: $bench is not built (cmake --build $build --target pets_bench)" >&2; exit 3; }

# Open MPI refuses root without these; harmless elsewhere.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
echo "run_bench.sh: $(uptime)" >&2
"$bench" --work "$work" --report "$report" "${args[@]+"${args[@]}"}"
echo "run_bench.sh: $(uptime)" >&2
if [[ $check -eq 1 ]]; then
  "$bench" --check "$report"
fi
