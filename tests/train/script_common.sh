# Sourced by the pets_train script tests, which all take the same arguments:
#   SCRIPT PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# Sets synth, preprocess, train, work, mpiexec, npflag, preflags; starts in a fresh WORKDIR.
# fail MESSAGE counts a failed check and goes on; finish reports and exits (1 if any failed).
set -u
synth=$1 preprocess=$2 train=$3 work=$4 mpiexec=$5 npflag=$6 preflags=$7
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run_np() { local np=$1; shift; $mpiexec $npflag "$np" $preflags "$@"; }
finish() {
  local name
  name=$(basename "$0" .sh)
  if [ "$failures" -eq 0 ]; then echo "$name: all checks passed"; exit 0; fi
  echo "$name: $failures check(s) failed"; exit 1
}
rm -rf "$work" && mkdir -p "$work"
cd "$work" || exit 1
