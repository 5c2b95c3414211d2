#!/usr/bin/env bash
# The serial programs (pets::run_program): pets_synth, pets_bench and loader_bench. Bad options
# exit 2 with one `error:` line naming the option (pets_synth's --seed -1 included: no wrap-around
# to 2^64-1); pets_bench's step section runs pets::train::TrainStep on make_backend's backend in a
# one-process MPI world, and the loader section after it still runs.
# Usage: test_serial_programs.sh PETS_SYNTH PETS_PREPROCESS PETS_BENCH LOADER_BENCH WORKDIR
#        MPIEXEC NUMPROC_FLAG "PREFLAGS"
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
[ $# -eq 8 ] || fatal "usage: test_serial_programs.sh PETS_SYNTH PETS_PREPROCESS PETS_BENCH LOADER_BENCH WORKDIR MPIEXEC NUMPROC_FLAG PREFLAGS"
synth=$1 prep=$2 bench=$3 loader_bench=$4
use_mpiexec "$6" "$7" "$8"
enter_workdir "$5"

# pets_synth
expect_usage "pets_synth --seed -1" "--seed must be an integer in 0 .. 2^64-1, got '-1'" \
  "$synth" --out s1 --per-class 1 --seed -1
[ ! -e s1 ] || fail "pets_synth --seed -1 made its --out folder"
expect_usage "pets_synth --seed 2^64" "--seed must be an integer in 0 .. 2^64-1" \
  "$synth" --out s1 --per-class 1 --seed 18446744073709551616
expect_usage "pets_synth --per-class x" "'--per-class'" "$synth" --out s1 --per-class x
expect_usage "pets_synth with a stray argument" "pets_synth: too many positional options" \
  "$synth" --out s1 --per-class 1 extra
capture synth_max.log "$synth" --out max --per-class 1 --classes 2 --seed 18446744073709551615
check_eq "pets_synth --seed 2^64-1: exit status" "$status" 0
check_eq "pets_synth --seed 2^64-1: images" "$(find max -name '*.jpg' | wc -l)" 2
pass "pets_synth: --seed is 0 .. 2^64-1, anything else a usage error"

# pets_bench's options
expect_usage "pets_bench --bogus" "pets_bench: unrecognised option '--bogus'" "$bench" --bogus
expect_usage "pets_bench --batch -1" "--batch must be positive, got -1" "$bench" --batch -1
expect_usage "pets_bench --threads x" "'--threads'" "$bench" --threads x
expect_usage "pets_bench --loader-sweep 1,0" "--loader-sweep needs worker counts of at least 1" \
  "$bench" --loader-sweep 1,0
expect_usage "pets_bench --check with another option" "--check FILE takes no other option" \
  "$bench" --check report.json --smoke
capture help.log "$bench" --help
check_eq "pets_bench --help: exit status" "$status" 0
for option in --smoke --loader-sweep --e2e-args --np1-preflags --check; do
  grep -q -- "$option" help.log || fail "pets_bench --help does not list $option"
done
pass "pets_bench: bad options are usage errors"

# loader_bench's options
expect_usage "loader_bench --workers 1,x" "--workers needs worker counts of at least 1" \
  "$loader_bench" --data none.h5 --workers 1,x
expect_usage "loader_bench without --data" "'--data'" "$loader_bench"

# pets_bench's step: the product's TrainStep and backend, then the loader after MPI has ended.
capture data.log "$synth" --out images --per-class 4 --classes 3 --seed 1 || { show data.log; fatal "pets_synth: exit $status"; }
capture prep.log run_np 1 "$prep" --images images --out pets.h5 || { show prep.log; fatal "pets_preprocess: exit $status"; }
capture bench.log "$bench" --smoke --no-e2e --threads 1 --data pets.h5 --loader-sweep 1 \
  --work bench --report report.json
[ "$status" -eq 0 ] || { show bench.log; fatal "pets_bench --smoke --no-e2e: exit $status"; }
python3 - report.json <<'PY' || fail "pets_bench's model_step is not TrainStep's"
import json, math, sys
r = json.load(open(sys.argv[1]))
for section in ("model_step", "model_step_default_malloc"):
    m = r[section]
    assert "TrainStep" in m["step"] and "make_backend" in m["step"], m["step"]
    for p in ("fp32", "bf16"):
        s = m[p]
        assert s["steps"] >= 2 and math.isfinite(s["images_per_s"]) and s["images_per_s"] > 0, s
        assert abs(s["images_per_s"] * s["seconds_per_step"] - m["batch"]) < 1e-6 * m["batch"], s
        assert "loss_scale" not in s, s  # loss scaling is fp16's, which the CPU does not run
assert r["loader"]["images_per_s"] > 0
PY
capture check.log "$bench" --check report.json
check_eq "pets_bench --check of a --no-e2e report: exit status" "$status" 1
grep -q "end_to_end/runs/np2/wall_seconds: missing" check.log || { fail "--check: no end-to-end runs missing"; show check.log; }
pass "pets_bench: the step section runs TrainStep, the loader section after it"
finish
