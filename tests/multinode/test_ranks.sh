#!/usr/bin/env bash
# multinode_ranks: every compute host is idle, and `srun -N2 -n4 --mpi=pmix` starts one MPI world
# over two hosts: rank_identity (pets' MpiComm) reports two distinct hostnames, node-local ranks
# 0 and 1 on each, node-local communicators that group exactly the ranks of one host, and an
# allreduce across the hosts that sums every rank.
source "$(dirname "$0")/common.sh"
require_cluster
: "${PETS_RANK_IDENTITY:?}"
[ -x "$PETS_RANK_IDENTITY" ] || fatal "$PETS_RANK_IDENTITY not built (target multinode_rank_identity)"

out=$WORK/ranks
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"

sinfo -h -N -o '%N %T' | sort >"$out/sinfo.txt"
cat "$out/sinfo.txt"
[ "$(wc -l <"$out/sinfo.txt")" -ge 3 ] || fail "fewer than 3 compute hosts: $(cat "$out/sinfo.txt")"
grep -v ' idle$' "$out/sinfo.txt" && fail "not every node is idle"
pass "$(wc -l <"$out/sinfo.txt") hosts idle"

srun --chdir="$out" --time=2 -N2 -n4 --ntasks-per-node=2 --mpi=pmix "$PETS_RANK_IDENTITY" \
  >"$out/identity.txt" 2>"$out/identity.err" ||
  { show "$out/identity.txt" "$out/identity.err"; fatal "srun -N2 -n4 --mpi=pmix rank_identity failed"; }
cat "$out/identity.txt"
check_identity "$out/identity.txt"
pass "4 ranks on 2 hosts, node-local ranks 0 and 1 on each, allreduce across hosts"
finish
