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
