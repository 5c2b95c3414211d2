#!/usr/bin/env bash
# multinode_nccl: the NCCL bootstrap across hosts, CPU-only as tests/comm does it on one host:
# test_comm_mpi's NcclBootstrap.UniqueId* cases under `srun -N2 -n4 --mpi=pmix`: the unique id
# made on the root rank (its socket bound on that host) is identical on every rank of both hosts.
# Skipped where the build has no NCCL (the cases are compiled only with CUDA and NCCL).
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
: "${PETS_COMM_TEST:?}"
[ -x "$PETS_COMM_TEST" ] || fatal "$PETS_COMM_TEST not built (target test_comm_mpi)"
"$PETS_COMM_TEST" --gtest_list_tests 2>/dev/null | grep -q '^  UniqueIdFromRootIsIdenticalOnEveryRank' ||
  skip "this build has no NCCL backend (no NcclBootstrap.UniqueId cases in $(basename "$PETS_COMM_TEST"))"

out=$WORK/nccl
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"
if srun --chdir="$out" --time=5 -N2 -n4 --ntasks-per-node=2 --mpi=pmix "$PETS_COMM_TEST" \
  --gtest_filter='NcclBootstrap.UniqueId*' >"$out/gtest.log" 2>&1; then
  # Rank 0 prints; the exit status is every rank's (tests/test_main.cpp agrees on it).
  check_eq "NcclBootstrap.UniqueId cases passed" \
    "$(grep -c '^\[  PASSED  \] 2 tests' "$out/gtest.log")" 1
  pass "the NCCL unique id is the same on all 4 ranks of 2 hosts"
else
  show "$out/gtest.log"
  fail "NcclBootstrap across 2 hosts failed"
fi
finish
