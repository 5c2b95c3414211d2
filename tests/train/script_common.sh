# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Sourced by the pets_train script tests, which all take the same arguments:
#   SCRIPT PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# Sets synth, preprocess, train, work and the launcher of run_np/start_np; starts in a fresh
# WORKDIR. Checks, failure and skipping: tests/lib/testlib.sh.
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
[ $# -eq 7 ] || fatal "usage: $(basename "$0") PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS"
synth=$1 preprocess=$2 train=$3
use_mpiexec "$5" "$6" "$7"
enter_workdir "$4"

# The tensors of safetensors files (tests/lib/safetensors_tensors.py says what each prints):
# tensors FILE: "name count" a line; same_tensors A B PREFIX...: whether A's tensors named
# PREFIX... (at least one) are byte for byte B's; differing A B PREFIX: "N M", N of the M
# parameters named PREFIX (BatchNorm statistics left out) differ.
safetensors_tensors="$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/safetensors_tensors.py"
tensors() { python3 "$safetensors_tensors" list "$@"; }
same_tensors() { python3 "$safetensors_tensors" same "$@"; }
differing() { python3 "$safetensors_tensors" differing "$@"; }

# wait_for FILE PATTERN SECONDS PID: until FILE has a line matching PATTERN; false if PID ends or
# time runs out first.
wait_for() {
  local file=$1 pattern=$2 seconds=$3 pid=$4 i
  for ((i = 0; i < seconds * 10; i++)); do
    grep -qE -- "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { grep -qE -- "$pattern" "$file" 2>/dev/null; return; }
    sleep 0.1
  done
  return 1
}
