#!/usr/bin/env bash
# The slurm tests' throw-away single-node cluster: scripts/test_cluster.sh, whose default (no
# --hosts) is one node on the loopback. Same interface as before:
#   cluster.sh start DIR | stop DIR | env DIR      (exit 77 from start: no Slurm, SKIPPED line)
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../scripts/test_cluster.sh" "$@"
