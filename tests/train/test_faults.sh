#!/usr/bin/env bash
# A rank that dies in the middle of an epoch, while its peer waits in the step's allreduce (SIGKILL,
# abort(), exit(1), exit(0) before MPI_Finalize, an uncaught fault, and SIGTERM to that one rank):
# mpiexec must end non-zero within 30 s, say which rank failed, and leave no pets_train behind.
# usage: test_faults.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 2 --per-class 10 --seed 5 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"

# No process of this test may outlive its job: their command lines name this folder's outputs.
leftovers() { pgrep -f -- "--out $work/run_" || true; }

for kind in sigkill abort exit1 exit0 throw; do
  start=$(date +%s)
  before=$failures
  PETS_INJECT_FAULT="$kind:1:2" np_timeout=120 run_np 2 -x PETS_INJECT_FAULT \
    "$train" --data pets.h5 --epochs 2 --batch-size 2 --out "$work/run_$kind" > "$kind.out" 2> "$kind.err"
  status=$?
  elapsed=$(( $(date +%s) - start ))
  [ "$status" -ne 0 ] || fail "$kind: mpiexec exited 0"
  [ "$status" -ne 124 ] || fail "$kind: the job hung (killed by timeout)"
  [ "$elapsed" -le 30 ] || fail "$kind: took ${elapsed}s to end (limit 30 s)"
  grep -q "injecting fault '$kind' on rank 1" "$kind.err" || fail "$kind: the fault was not injected"
  # The failed rank is named: by our message (throw) or by mpiexec's report of the dead process.
  grep -v "^injecting fault" "$kind.err" |
    grep -cE "process rank 1 |Process name: \[\[[0-9]+,[0-9]+\],1\]|, rank 1\)" > /dev/null ||
    { fail "$kind: no message names rank 1"; show "$kind.err"; }
  sleep 1
  [ -z "$(leftovers)" ] || { fail "$kind: processes left behind: $(leftovers)"; pkill -9 -f -- "--out $work/run_" ; }
  [ "$failures" -eq "$before" ] && echo "ok: $kind on rank 1 -> exit $status after ${elapsed}s"
done

# SIGTERM to one rank only: the ranks agree at the next step and stop after a checkpoint (75).
start_np 2 "$train" --data pets.h5 --epochs 2 --batch-size 2 --out "$work/run_term" > term.out 2> term.err
mpi_pid=$np_pid
for _ in $(seq 1 600); do
  [ -s "$work/run_term/latest" ] && break
  sleep 0.1
done
ranks=$(pgrep -f -- "$train --data pets.h5 --epochs 2 --batch-size 2 --out $work/run_term" | grep -v "^$mpi_pid\$")
victim=$(echo "$ranks" | tail -1)
if [ -n "$victim" ]; then kill -TERM "$victim"; else fail "SIGTERM to one rank: no rank of run_term found"; fi
start=$(date +%s)
wait "$mpi_pid"; status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -eq 75 ] || { fail "SIGTERM to one rank: exit $status, not 75"; show term.err; }
[ "$elapsed" -le 30 ] || fail "SIGTERM to one rank: took ${elapsed}s"
grep -q "continue with --resume" term.err || fail "SIGTERM to one rank: no checkpoint notice"
[ -z "$(leftovers)" ] || fail "SIGTERM: processes left behind"

finish
