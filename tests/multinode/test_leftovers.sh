#!/usr/bin/env bash
# multinode_cluster_leftovers: what a killed run leaves behind does not outlive the next stop or
# start at the same folder. A cluster's namespaces and links are named from its folder
# (scripts/test_cluster.sh: "<tag>-<host>", "<tag><host>", "<tag>br"); a run killed before its
# trap, whose folder was then deleted with its record, leaves them unlisted, and the next
# `start` at that folder could not make them again. Here such objects are made for a fresh
# folder, one of them with a process inside, and `test_cluster.sh stop DIR` must remove them all
# and end the process. Needs what the multi-host cluster needs (root, network namespaces);
# otherwise SKIPPED (77). Slurm is not used.
source "$(dirname "$0")/../lib/testlib.sh"
: "${PETS_SOURCE:?}" "${PETS_TEST_DIR:?}"
cluster="$PETS_SOURCE/scripts/test_cluster.sh"

enter_workdir "$PETS_TEST_DIR/leftovers"
mkdir -p cluster || fatal "cannot make $PETS_TEST_DIR/leftovers/cluster"
dir=$(cd cluster && pwd)
tag=p$(printf '%s' "$dir" | md5sum | cut -c1-5)
tagged() {
  { ip netns list | awk '{ print $1 }'; ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; } |
    grep "^$tag" || true
}
# Whatever the checks find, nothing of this test's stays.
at_exit 'for n in $(ip netns list | awk -v t="$tag-" "index(\$1, t) == 1 { print \$1 }"); do ip netns pids "$n" | xargs -r kill -KILL; ip netns del "$n"; done; ip link del "${tag}br" 2>/dev/null || true'

ip netns add "$tag-n1" 2>"$dir/netns.err" || skip "cannot create a network namespace: $(head -c 200 "$dir/netns.err")"
ip link add "${tag}br" type bridge || fatal "cannot make the bridge ${tag}br"
ip link add "${tag}n1" type veth peer name eth0 netns "$tag-n1" || fatal "cannot make the veth ${tag}n1"
ip link set "${tag}n1" master "${tag}br" || fatal "cannot put ${tag}n1 on the bridge"
ip netns exec "$tag-n1" sleep 600 &
sleeper=$!
check_eq "objects made with the folder's tag" "$(tagged | sort | tr '\n' ' ')" "${tag}-n1 ${tag}br ${tag}n1 "
[ -e "$dir/net" ] && fatal "$dir/net exists: the objects would not be unlisted"

bash "$cluster" stop "$dir" >stop.out 2>&1 || { show stop.out; fail "test_cluster.sh stop exit $?"; }
check_eq "namespaces and links left with the folder's tag after stop" "$(tagged | tr '\n' ' ')" ""
grep -q "of an earlier cluster in $dir" stop.out || { show stop.out; fail "stop did not say what it removed"; }
for _ in $(seq 1 50); do kill -0 "$sleeper" 2>/dev/null || break; sleep 0.1; done
kill -0 "$sleeper" 2>/dev/null && fail "the process in $tag-n1 outlived its namespace's removal"
pass "stop removes the namespace, veth and bridge of a cluster nobody recorded, and the process in it"
finish
