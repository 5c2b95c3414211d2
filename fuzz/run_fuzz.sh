#!/usr/bin/env bash
# Runs the libFuzzer targets of the sanitizer build (fuzz/CMakeLists.txt, built by
# scripts/sanitize.sh) for a bounded time each, seeded by the project's own tools. Exits 1 on any
# crash, leak, timeout, out-of-memory or sanitizer report, naming the input that caused it.
#
# usage: fuzz/run_fuzz.sh [options] TARGET [SECONDS] [-- LIBFUZZER_FLAGS...]
#   TARGET    safetensors | decode | store | config | all (a fuzz_ prefix is accepted)
#   SECONDS   fuzzing time per target (default 60)
# options:
#   --build DIR       sanitizer build holding the fuzz_* programs and pets_fuzz_seeds
#                     (default: $PETS_BUILD/sanitize, i.e. build/sanitize)
#   --work DIR        corpora, crash inputs and logs (default: <build>/fuzz_work); the corpus
#                     persists there, so each run starts where the last one stopped
#   --programs DIR    main build with pets_synth, pets_preprocess, pets_train (default: $PETS_BUILD)
#   --synth FILE, --preprocess FILE, --train FILE   those programs one by one (ctest passes them)
#   --mpiexec "CMD"   how to start one pets_preprocess process (default: mpiexec -n 1)
#   --rss-limit MB    libFuzzer's -rss_limit_mb and -malloc_limit_mb (default 2048)
#   --timeout S       libFuzzer's -timeout, seconds for one input (default 10)
#   after --          more libFuzzer flags, e.g. -fork=2 (two processes) or -only_ascii=1
# Exit status: 0 clean, 1 a finding (or a failed run), 2 bad usage, 77 the sanitizer build was
# skipped for want of clang (scripts/sanitize.sh said why).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"

usage() { sed -n '6,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

build="" work="" programs="$PETS_BUILD" synth="" preprocess="" train="" mpiexec="mpiexec -n 1"
rss_limit=2048 input_timeout=10
args=() libfuzzer_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; libfuzzer_flags=("$@"); break ;;
    --build) build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --programs) programs="$2"; shift 2 ;;
    --synth) synth="$2"; shift 2 ;;
    --preprocess) preprocess="$2"; shift 2 ;;
    --train) train="$2"; shift 2 ;;
    --mpiexec) mpiexec="$2"; shift 2 ;;
    --rss-limit) rss_limit="$2"; shift 2 ;;
    --timeout) input_timeout="$2"; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "run_fuzz.sh: unknown option $1" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage
target="${args[0]#fuzz_}"
seconds="${args[1]:-60}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "run_fuzz.sh: SECONDS must be a positive integer" >&2; exit 2; }
all_targets=(safetensors decode store config)
case "$target" in
  all) targets=("${all_targets[@]}") ;;
  safetensors | decode | store | config) targets=("$target") ;;
  *) echo "run_fuzz.sh: unknown target '$target' (${all_targets[*]} or all)" >&2; exit 2 ;;
esac
build=$(realpath -m "${build:-$PETS_BUILD/sanitize}")
work=$(realpath -m "${work:-$build/fuzz_work}")
synth="${synth:-$programs/pets_synth}"
preprocess="${preprocess:-$programs/pets_preprocess}"
train="${train:-$programs/pets_train}"

if [ ! -x "$build/pets_fuzz_seeds" ]; then
  if [ -f "$build/skipped_reason" ]; then
    echo "SKIPPED: fuzz ${targets[*]} ($(cat "$build/skipped_reason"))"
    exit 77
  fi
  echo "run_fuzz.sh: no sanitizer build in $build (run scripts/sanitize.sh --build-only $build)" >&2
  exit 1
fi

# The sanitizers' settings. UBSan aborts on its first report (the build has
# -fno-sanitize-recover); libFuzzer checks every input for leaks; lsan.supp holds the
# uninstrumented libraries' own leaks only.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ASAN_OPTIONS="detect_leaks=1:symbolize=1:detect_stack_use_after_return=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
for s in llvm-symbolizer-14 llvm-symbolizer; do
  if command -v "$s" >/dev/null; then export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$(command -v "$s")}"; break; fi
done

need_program() {
  [ -x "$1" ] && return 0
  echo "run_fuzz.sh: $1 not found; the $2 seed is written by the main build's $(basename "$1")" \
       "(build it: cmake --build build, or pass --programs DIR)" >&2
  return 1
}

# Writes the seed inputs of one target into $1 (emptied first), with the project's own tools.
make_seeds() {
  local t="$1" dir="$2"
  rm -rf "$dir" && mkdir -p "$dir" || return 1
  case "$t" in
    safetensors | decode)
      # One folder per target: the safetensors and decode targets may make their seeds at once.
      local all="$work/seeds/.writer-$t"
      rm -rf "$all"
      "$build/pets_fuzz_seeds" "$all" || return 1
      if [ "$t" = safetensors ]; then cp "$all"/safetensors/* "$dir"/; else cp "$all"/images/* "$dir"/; fi
      ;;
    store)
      # A store as small as pets_preprocess writes one: 2 breeds x 2 images, 8 pixels a side.
      # Its pixel datasets come in 1 MiB chunks (2 MiB of a 2.6 KB image set), too big an input
      # to mutate, so the seeds are that file repacked by h5repack, in the store's format (HDF5
      # 1.10's newest, --low=2 --high=2) with its Fletcher32 checksums: pixels in 512-byte
      # chunks, and every dataset in chunks of one row (64 pixel bytes), whose chunk indexes
      # (extensible arrays) have more structures for the raw-byte mutations to damage.
      need_program "$synth" store && need_program "$preprocess" store || return 1
      command -v h5repack >/dev/null || { echo "run_fuzz.sh: h5repack (hdf5-tools) not found" >&2; return 1; }
      local tmp="$work/seeds/.store"
      rm -rf "$tmp" && mkdir -p "$tmp"
      "$synth" --out "$tmp/images" --classes 2 --per-class 2 --seed 3 >/dev/null &&
        $mpiexec "$preprocess" --images "$tmp/images" --out "$tmp/pets.h5" --max-side 8 \
          >"$tmp/preprocess.log" 2>&1 || { cat "$tmp/preprocess.log" >&2; return 1; }
      local rows=/train/offsets,/train/labels,/train/names,/eval/offsets,/eval/labels,/eval/names
      h5repack --low=2 --high=2 -l /train/pixels,/eval/pixels:CHUNK=512 "$tmp/pets.h5" \
          "$dir/chunked.h5" &&
        h5repack --low=2 --high=2 -l /train/pixels,/eval/pixels:CHUNK=64 -l "$rows:CHUNK=1" \
          -l /train/shapes,/eval/shapes:CHUNK=1x3 "$tmp/pets.h5" "$dir/small_chunks.h5" || return 1
      ;;
    config)
      # What --write-config writes: the defaults, and every option away from its default.
      need_program "$train" config || return 1
      "$train" --data pets.h5 --write-config "$dir/defaults.cfg" >/dev/null &&
        "$train" --data /data/pets.h5 --epochs 3 --batch-size 16 --eval-batch-size 32 \
          --max-lr 0.001 --mixed-precision bf16 --seed 18446744073709551615 \
          --pretrained w.safetensors --bn-mode eval --device cpu --threads 2 --out runs/x \
          --resume --write-config "$dir/all.cfg" >/dev/null || return 1
      ;;
  esac
  [ -n "$(ls -A "$dir")" ] || { echo "run_fuzz.sh: no seeds written for $t" >&2; return 1; }
  # Inputs that once failed (fuzz/regressions/TARGET, kept in git): run first, every time.
  if [ -d "$here/regressions/$t" ]; then cp "$here/regressions/$t"/* "$dir"/; fi
}

# Runs one target; prints one summary line, or the report and the reproducer on a finding.
fuzz_one() {
  local t="$1" fuzzer="$build/fuzz_$1"
  local seeds="$work/seeds/$t" corpus="$work/corpus/$t" crashes="$work/crashes/$t"
  local log="$work/logs/$t.log"
  [ -x "$fuzzer" ] || { echo "FAIL: fuzz_$t: $fuzzer not built"; return 1; }
  mkdir -p "$corpus" "$crashes" "$work/logs"
  if ! make_seeds "$t" "$seeds"; then
    echo "FAIL: fuzz_$t: cannot write the seed corpus"
    return 1
  fi
  # fuzz_store's inputs are whole HDF5 files, which its mutator may grow by a few KB at once.
  # No cross-over: splicing two files puts whole blocks, each with a valid checksum, where
  # the other file's structures were (forgery, not damage: fuzz/README.md).
  local extra=()
  [ "$t" != store ] || extra=(-max_len=65536 -len_control=0 -cross_over=0)
  local before
  before=$(ls "$crashes")
  # The corpus folder comes first: libFuzzer writes new inputs there and only reads the seeds.
  # Exit codes are set apart from ctest's skip code (77, libFuzzer's default for a crash).
  # The scratch files of fuzz_util.hpp carry the fuzzer's pid, so a killed run leaves at most
  # one small file in /dev/shm.
  "$fuzzer" -max_total_time="$seconds" -timeout="$input_timeout" \
      -rss_limit_mb="$rss_limit" -malloc_limit_mb="$rss_limit" -error_exitcode=1 \
      -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$crashes/" "${extra[@]}" "${libfuzzer_flags[@]}" \
      "$corpus" "$seeds" >"$log" 2>&1
  local rc=$?
  local found
  found=$(comm -13 <(printf '%s\n' "$before") <(ls "$crashes") | grep -v '^$')
  if [ $rc -eq 0 ] && [ -z "$found" ]; then
    local runs cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' "$log" | tail -1)
    echo "fuzz_$t: clean, ${runs:-?} inputs in ${seconds}s ($cov); log $log"
    return 0
  fi
  echo "FAIL: fuzz_$t exited $rc after fuzzing (log $log); the report:"
  # From the first line of the report: a sanitizer's, libFuzzer's or a broken FUZZ_CHECK.
  local first
  first=$(grep -nE '^==[0-9]+==(ERROR|WARNING)|runtime error:|fuzz invariant failed|ERROR: libFuzzer|^ALARM|deadly signal|out-of-memory|Leak' \
          "$log" | head -1 | cut -d: -f1)
  if [ -n "$first" ]; then tail -n +"$first" "$log" | head -80; else tail -40 "$log"; fi
  local f
  for f in $found; do
    echo "reproducer: $crashes/$f"
    echo "  rerun it: ${fuzzer} $crashes/$f"
  done
  [ -n "$found" ] || echo "(no input was saved: the fuzzer failed outside an input, see the log)"
  return 1
}

mkdir -p "$work" || exit 1
status=0
for t in "${targets[@]}"; do
  fuzz_one "$t" || status=1
done
exit $status
