#!/usr/bin/env bash
# All slurm tests in one go, outside ctest: tests/slurm/run_all.sh [BUILD_DIR]
# Starts the throw-away cluster, runs every check, and stops the daemons on exit, also on failure.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/testlib.sh
source "$here/../lib/testlib.sh"
build=$(cd "${1:-$here/../../build}" && pwd) || fatal "no build folder ${1:-$here/../../build}"
source=$(cd "$here/../.." && pwd)
export PETS_TEST_DIR=$build/slurm-test PETS_BIN=$build PETS_SOURCE=$source
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
at_exit 'bash "$here/cluster.sh" stop "$PETS_TEST_DIR/cluster"'
bash "$here/cluster.sh" start "$PETS_TEST_DIR/cluster"
rc=$?
[ $rc -ne 77 ] || skip "no Slurm cluster ($(cat "$PETS_TEST_DIR/cluster/skipped" 2>/dev/null))"
[ $rc -eq 0 ] || fatal "cluster.sh start exit $rc"
# Each test reports its own checks; a skip with the cluster up is a failure too.
for t in batch preempt interactive notebook; do
  echo "== slurm_$t"
  bash "$here/test_$t.sh"
  rc=$?
  [ $rc -eq 0 ] || fail "slurm_$t exit $rc"
done
finish
