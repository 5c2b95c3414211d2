#!/usr/bin/env bash
# All slurm tests in one go, outside ctest: tests/slurm/run_all.sh [BUILD_DIR]
# Starts the throw-away cluster, runs every check, and stops the daemons on exit, also on failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
source=$(cd "$here/../.." && pwd)
export PETS_TEST_DIR=$build/slurm-test PETS_BIN=$build PETS_SOURCE=$source
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trap 'bash "$here/cluster.sh" stop "$PETS_TEST_DIR/cluster"' EXIT
bash "$here/cluster.sh" start "$PETS_TEST_DIR/cluster"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || exit $rc
failed=()
for t in batch preempt interactive notebook; do
  echo "== slurm_$t"
  bash "$here/test_$t.sh" || failed+=("slurm_$t")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all slurm tests passed"
