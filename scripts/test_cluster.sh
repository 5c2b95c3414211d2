#!/usr/bin/env bash
# A throw-away Slurm cluster on this machine, everything under one folder DIR (nothing is written
# outside it but the namespaces, links and bridge of a multi-host cluster, all named after DIR).
#
#   test_cluster.sh start DIR [--hosts N] [--link RATE] [--delay MS]
#                 N = 0 (default): one node, the machine itself, on the loopback. N >= 1: N
#                 compute hosts n1..nN, each in its own network, UTS and mount namespace
#                 (hostname nI, address .I of a private /24 on a bridge this script creates,
#                 loopback up), slurmctld on host "ctl" in its own namespaces; this machine joins
#                 the bridge as the login host (.254) where sbatch, squeue, ... run. Starts munged,
#                 slurmctld and one slurmd per host, waits until every node is idle, records the
#                 daemons' pids in DIR/pids and the namespaces in DIR/net.
#                 --link RATE (N >= 1; tc's units: 100mbit, 1gbit, 10gbit, 50mbps): every compute
#                 host's link becomes a full-duplex port of RATE, a tbf qdisc on both ends of its
#                 veth pair (the namespace's eth0 shapes what the host sends, the bridge's end what
#                 it receives; burst 1 ms at RATE, at least 32 KiB; a queue of 10 ms at RATE, at
#                 least 1 MiB, so that TCP is not dropped into retransmissions), so that
#                 traffic between hosts, MPI's included, is rate-limited; ranks on one host talk
#                 through shared memory, unshaped. ctl's link is left unshaped (Slurm's messages).
#                 The shaping is recorded in DIR/link; `status` shows it with each end's counters.
#                 --delay MS adds MS to every packet a compute host sends (host to host: MS one
#                 way, 2 MS round trip). Delay needs tc's netem qdisc (sch_netem); where the kernel
#                 lacks it (as on many container hosts) no delay can be emulated, only the rate,
#                 and --delay fails with exit 2.
#   test_cluster.sh stop DIR                 cancels every job, stops the recorded daemons (TERM,
#                 then KILL), kills what is left in the hosts' namespaces, removes every namespace,
#                 link (with its shaping) and the bridge. Also runs when start fails.
#   test_cluster.sh env DIR                  the exports a client needs (SLURM_CONF)
#   test_cluster.sh status DIR               sinfo, each host's address and daemons, the links'
#                 shaping and their qdiscs' counters (bytes sent, drops, overlimits)
#   test_cluster.sh exec DIR HOST CMD...     runs CMD on HOST (its network, hostname and mounts)
#   test_cluster.sh kill-host DIR HOST       a power loss of HOST: its link goes down, then every
#                 process in its namespaces is killed (SIGKILL); Slurm notices within SlurmdTimeout
#   test_cluster.sh start-host DIR HOST      link up and slurmd started again (ReturnToService=2
#                 makes the node idle once it registers)
#
# Exit 77 from start: Slurm is not installed and cannot be, or (N >= 1) this machine does not let
# us create network namespaces; a line "SKIPPED: reason" is printed and DIR/skipped holds it.
set -euo pipefail

usage() {
  echo "usage: test_cluster.sh start DIR [--hosts N] [--link RATE] [--delay MS] | stop DIR |" \
    "env DIR | status DIR |" \
    "exec DIR HOST CMD... | kill-host DIR HOST | start-host DIR HOST" >&2
  exit 2
}
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || usage
shift 2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
conf=$dir/etc/slurm.conf
pids=$dir/pids
net=$dir/net
link=$dir/link
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "test_cluster.sh: $*" >&2; }

# The command line of a live pid, or nothing: used so that a recycled pid is never signalled.
cmdline_of() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" || true; }

# Names of the multi-host cluster's kernel objects, unique per DIR and short enough for link
# names (15 characters): netns "<tag>-<host>", root-side veth "<tag><host>", bridge "<tag>br".
tag=p$(printf '%s' "$dir" | md5sum | cut -c1-5)
bridge=${tag}br
netns_of() { echo "$tag-$1"; }
veth_of() { echo "$tag$1"; }

# ---- stop ---------------------------------------------------------------------------------------
# Kills (KILL) every process in a network namespace: only this cluster's daemons, job steps and
# tasks live there.
kill_netns_processes() {
  local ns=$1 p
  for _ in 1 2 3 4 5; do
    local left
    left=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$left" ] && return 0
    for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
    sleep 0.2
  done
}

stop_cluster() {
  export SLURM_CONF=$conf
  if [ -f "$conf" ] && command -v scancel >/dev/null && [ -f "$pids" ] &&
    grep -q '^slurmctld ' "$pids"; then
    # Jobs first, so that their slurmstepd and tasks end before slurmd does.
    timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 40); do
      [ -z "$(timeout 5 squeue -h -t running,completing,configuring 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
  if [ -f "$pids" ]; then
    # Reverse start order: slurmd, slurmctld, munged.
    tac "$pids" | while read -r name pid; do
      local prog=${name%%:*}  # "slurmd:n1" is the slurmd of host n1
      if [[ "$(cmdline_of "$pid")" == *"$prog"* ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do [[ "$(cmdline_of "$pid")" == *"$prog"* ]] || break; sleep 0.25; done
        if [[ "$(cmdline_of "$pid")" == *"$prog"* ]]; then
          log "$name ($pid) ignored TERM; KILL"
          kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $name ($pid)"
      fi
    done
    mv "$pids" "$pids.stopped"
  fi
  remove_network
}

# Removes every namespace and link in DIR/net (lines "netns NAME", "link NAME"), also those of
# a start that failed half-way; deleting a namespace deletes the veth pair in it. Then whatever
# else carries this DIR's tag (remove_tagged).
remove_network() {
  if [ ! -f "$net" ]; then
    remove_tagged
    return 0
  fi
  local kind name
  while read -r kind name; do
    [ "$kind" = netns ] || continue
    if [ -e "/run/netns/$name" ]; then
      kill_netns_processes "$name"
      ip netns del "$name" 2>/dev/null || log "cannot delete netns $name"
    fi
  done <"$net"
  while read -r kind name; do
    [ "$kind" = link ] || continue
    if ip link show "$name" >/dev/null 2>&1; then
      ip link del "$name" 2>/dev/null || log "cannot delete link $name"
    fi
  done <"$net"
  log "removed $(grep -c '^netns ' "$net" || true) namespaces and the bridge $bridge"
  mv "$net" "$net.removed"
  # The qdiscs went with the links.
  if [ -f "$link" ]; then mv "$link" "$link.removed"; fi
  remove_tagged
}

# Removes the namespaces and links named with this DIR's tag that DIR/net does not list: those of
# a cluster whose run was killed (no trap ran) and whose folder was then deleted with its record.
# The names derive from DIR alone, so they are this cluster's and would block its next start.
remove_tagged() {
  local name found=0
  for name in $(ip netns list 2>/dev/null | awk -v t="$tag-" 'index($1, t) == 1 { print $1 }'); do
    kill_netns_processes "$name"
    ip netns del "$name" 2>/dev/null || log "cannot delete netns $name"
    found=$((found + 1))
  done
  for name in $(ip -o link show 2>/dev/null |
    awk -F': ' -v t="$tag" '{ sub(/@.*/, "", $2) } index($2, t) == 1 { print $2 }'); do
    # A veth may go with its namespace's deletion while this loop runs.
    if ! ip link del "$name" 2>/dev/null && ip link show "$name" >/dev/null 2>&1; then
      log "cannot delete link $name"
    fi
    found=$((found + 1))
  done
  [ "$found" -eq 0 ] || log "removed $found namespaces and links of an earlier cluster in $dir"
}

print_env() {
  echo "export SLURM_CONF='$conf'"
}

# ---- start: common parts ------------------------------------------------------------------------
# Slurm's own daemons write their pid files after forking; wait for one and record it as NAME.
record_pid() {
  local name=$1 file=$2 logfile=$3
  for _ in $(seq 1 120); do
    if [ -s "$file" ]; then
      local pid
      pid=$(head -n1 "$file" | tr -dc 0-9)
      if [ -n "$pid" ] && [[ "$(cmdline_of "$pid")" == *"${name%%:*}"* ]]; then
        echo "$name $pid" >>"$pids"
        return 0
      fi
    fi
    sleep 0.25
  done
  log "$name did not start; its log:"
  tail -n 30 "$logfile" >&2 2>/dev/null || true
  return 1
}

skip() {
  echo "$1" >"$dir/skipped"
  echo "SKIPPED: $1"
  exit 77
}

require_slurm() {
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v munged >/dev/null; then
    log "Slurm or munge missing: trying scripts/install_deps.sh"
    "$here/scripts/install_deps.sh" >&2 || true
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
      ! command -v munged >/dev/null; then
      skip "Slurm (slurm-wlm) and munge are not installed and could not be installed"
    fi
  fi
}

start_munge() {
  # munged refuses group/other-writable folders on the way to its socket and key.
  install -d -m 0700 "$dir/munge"
  chmod go-w "$dir" "$dir/etc"
  # A fresh key for this cluster only (mungekey writes 1024 random bits).
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$dir/munge/munge.key" --force
  else
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=128 count=1 status=none
  fi
  chmod 0400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >/dev/null 2>&1
  record_pid munged "$dir/munge/munged.pid" "$dir/log/munged.log"
}

# The slurm.conf lines both layouts share; $1: SlurmctldHost=..., $2 and $3: the ports.
write_common_conf() {
  local user
  user=$(id -un)
  cat >"$conf" <<EOF
# Generated by scripts/test_cluster.sh: a throw-away cluster under $dir
ClusterName=pets-test
$1
SlurmctldPort=$2
SlurmdPort=$3
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (120 s by default).
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp
PlugStackConfig=$dir/etc/plugstack.conf
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Requeued jobs become eligible after cred_expire; start them without waiting for the 60 s loop.
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
JobRequeue=1
MinJobAge=300
InactiveLimit=0
Waittime=0
EOF
  : >"$dir/etc/plugstack.conf"
}

# Waits until every node in $@ is idle.
wait_idle() {
  local state=""
  for _ in $(seq 1 240); do
    state=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort || true)
    local all_idle=1 node
    for node in "$@"; do
      grep -qx "$node idle" <<<"$state" || all_idle=0
    done
    [ $all_idle = 1 ] && return 0
    sleep 0.5
  done
  log "nodes not all idle after 120 s: $(tr '\n' ' ' <<<"$state")"
  tail -n 20 "$dir/log/slurmctld.log" "$dir"/log/slurmd*.log >&2 || true
  return 1
}

# Two free TCP ports on the loopback, away from Slurm's defaults (6817/6818).
free_ports() {
  python3 - <<'EOF'
import socket
for base in range(26817, 40000, 10):
    ok = True
    for p in (base, base + 1):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            ok = False
        finally:
            s.close()
    if ok:
        print(base, base + 1)
        break
EOF
}

# ---- start: one node on the loopback ------------------------------------------------------------
start_single() {
  local host cpus ports ctld_port d_port
  host=$(hostname -s)
  cpus=$(nproc --all)
  ports=$(free_ports)
  ctld_port=${ports% *}
  d_port=${ports#* }
  mkdir -p "$dir/spool/$host"
  start_munge
  write_common_conf "SlurmctldHost=$host(127.0.0.1)" "$ctld_port" "$d_port"
  cat >>"$conf" <<EOF
SlurmdPidFile=$dir/run/slurmd.pid
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  slurmctld -f "$conf" -i </dev/null >>"$dir/log/slurmctld.out" 2>&1
  record_pid slurmctld "$dir/run/slurmctld.pid" "$dir/log/slurmctld.log"
  slurmd -f "$conf" -N "$host" </dev/null >>"$dir/log/slurmd.out" 2>&1
  record_pid slurmd "$dir/run/slurmd.pid" "$dir/log/slurmd.log"
  wait_idle "$host"
  log "cluster up: node $host idle ($cpus CPUs), slurmctld port $ctld_port, conf $conf"
}

# ---- start: several hosts in namespaces ---------------------------------------------------------
# A private /24 that no route of this machine touches: 10.A.B.0/24 from DIR's hash, else the next.
pick_subnet() {
  local h a b i routes
  h=$(printf '%s' "$dir" | md5sum | cut -c1-4)
  routes=$(ip -4 route show table all 2>/dev/null; ip -4 addr show 2>/dev/null)
  for i in $(seq 0 50); do
    a=$((200 + (0x${h:0:2} + i) % 50))
    b=$(((0x${h:2:2} + 7 * i) % 256))
    grep -q "10\.$a\.$b\." <<<"$routes" || { echo "10.$a.$b"; return 0; }
  done
  return 1
}

# Runs "$@" on HOST: inside its network namespace (nsenter, not `ip netns exec`, which remounts
# /sys without the cgroup hierarchy) and, once its daemon runs, its UTS and mount namespaces.
on_host() {
  local host=$1
  shift
  local pid
  pid=$(awk -v n="$( [ "$host" = ctl ] && echo slurmctld || echo "slurmd:$host")" \
    '$1 == n { print $2 }' "$pids" 2>/dev/null | tail -n1)
  if [ -n "$pid" ] && [ -e "/proc/$pid" ]; then
    nsenter -t "$pid" --net --uts --mount -- "$@"
  else
    nsenter --net="/run/netns/$(netns_of "$host")" -- "$@"
  fi
}

# Starts DAEMON-ARGS... on HOST in fresh UTS and mount namespaces (private propagation, so that
# nothing leaks to the machine): hostname HOST, the cluster's hosts file over /etc/hosts, and the
# host's own folder over TmpFS (the pmix plugin's per-step folders collide when hosts share it).
start_on_host() {
  local host=$1
  shift
  mkdir -p "$dir/hosts/$host/tmp" "$dir/spool/$host"
  nsenter --net="/run/netns/$(netns_of "$host")" -- \
    unshare --uts --mount --propagation private -- /bin/sh -c '
      set -e
      hostname "$1"
      mount --bind "$2/etc/hosts" /etc/hosts
      mount --bind "$2/hosts/$1/tmp" "$2/tmp"
      shift 2
      exec "$@"' sh "$host" "$dir" "$@" </dev/null >>"$dir/log/$host.out" 2>&1
}

add_host_network() {
  local host=$1 addr=$2 ns veth
  ns=$(netns_of "$host")
  veth=$(veth_of "$host")
  ip netns add "$ns"
  echo "netns $ns" >>"$net"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  echo "link $veth" >>"$net"
  ip link set "$veth" master "$bridge" up
  nsenter --net="/run/netns/$ns" -- sh -c \
    "ip link set lo up && ip link set eth0 up && ip addr add $addr/24 dev eth0"
}

# ---- start: shaped links -------------------------------------------------------------------------
# What --link and --delay asked for (start_cluster sets them); tbf's burst and queue limit (bytes)
# from the rate.
link_rate=""
link_delay=""
link_burst=""
link_limit=""

# tc's RATE (1gbit, 100mbit, 50mbps: SI prefixes; bit, or with bps bytes, per second) in bytes
# per second; status 1 for anything else.
rate_bytes() {
  [[ "${1,,}" =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)(bit|bps)$ ]] || return 1
  awk -v n="${BASH_REMATCH[1]}" -v p="${BASH_REMATCH[3]}" -v u="${BASH_REMATCH[4]}" 'BEGIN {
    b = n * (p == "" ? 1 : 10 ^ (3 * index("kmgt", p)))
    if (u == "bit") b /= 8
    if (b < 1000) exit 1
    printf "%.0f\n", b }'
}

# Checks, in the probe namespace $1, that tc can add what the options ask for: tbf for --link,
# netem for --delay (exit 2 where the kernel lacks it: no delay without netem).
probe_shaping() {
  local ns=$1
  [ -n "$link_rate" ] || [ -n "$link_delay" ] || return 0
  command -v tc >/dev/null || { log "--link and --delay need tc (iproute2): missing"; return 1; }
  if [ -n "$link_delay" ] &&
    ! nsenter --net="/run/netns/$ns" -- tc qdisc add dev lo root netem delay 1ms \
      2>"$dir/probe.err"; then
    ip netns del "$ns"
    echo "error: test_cluster.sh: --delay needs tc's netem qdisc, which this kernel lacks" \
      "($(head -c 200 "$dir/probe.err" | tr '\n' ' ')): only the rate can be shaped (--link)" >&2
    exit 2
  fi
  if [ -n "$link_rate" ] && [ -z "$link_delay" ] &&
    ! nsenter --net="/run/netns/$ns" -- tc qdisc add dev lo root tbf rate "$link_rate" \
      burst "$link_burst" limit "$link_limit" 2>"$dir/probe.err"; then
    ip netns del "$ns"
    log "tc cannot add a tbf qdisc ($(head -c 200 "$dir/probe.err")): no --link"
    return 1
  fi
}

# Shapes compute host HOST's link: tbf at the rate on both ends of its veth pair (the bridge's end
# limits what the host receives, eth0 what it sends); with --delay, eth0 gets netem (the delay,
# and the rate if any) instead of tbf.
shape_host() {
  local host=$1 veth ns
  veth=$(veth_of "$host")
  ns=$(netns_of "$host")
  if [ -n "$link_rate" ]; then
    tc qdisc replace dev "$veth" root tbf rate "$link_rate" burst "$link_burst" \
      limit "$link_limit"
  fi
  if [ -n "$link_delay" ]; then
    local rate=()
    [ -n "$link_rate" ] && rate=(rate "$link_rate")
    nsenter --net="/run/netns/$ns" -- \
      tc qdisc replace dev eth0 root netem delay "${link_delay}ms" "${rate[@]}" limit 10000
  elif [ -n "$link_rate" ]; then
    nsenter --net="/run/netns/$ns" -- \
      tc qdisc replace dev eth0 root tbf rate "$link_rate" burst "$link_burst" limit "$link_limit"
  fi
}

# Records the shaping of hosts $@ in DIR/link (what status shows).
record_shaping() {
  {
    if [ -n "$link_rate" ]; then
      echo "rate $link_rate ($(rate_bytes "$link_rate") bytes/s each way) burst $link_burst" \
        "limit $link_limit: tbf on both ends of each compute host's veth pair"
    else
      echo "rate unlimited"
    fi
    if [ -n "$link_delay" ]; then
      echo "delay ${link_delay}ms on what each compute host sends (netem)"
    else
      echo "delay none"
    fi
    echo "hosts $*"
  } >"$link"
}

start_slurmd() {
  local host=$1
  rm -f "$dir/run/slurmd-$host.pid"
  start_on_host "$host" slurmd -f "$conf" -N "$host"
  record_pid "slurmd:$host" "$dir/run/slurmd-$host.pid" "$dir/log/slurmd-$host.log"
}

start_multi() {
  local n=$1 cpus subnet i
  # Every host claims at least 4 CPUs (config_overrides: slurmd does not count its own), so that a
  # 4-rank job fits on one host as well as on two; the hosts share this machine's cores.
  cpus=$(nproc --all)
  [ "$cpus" -ge 4 ] || cpus=4
  # Namespaces need CAP_SYS_ADMIN; try the cheapest one before anything else.
  if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
    log "ip, nsenter or unshare missing: trying scripts/install_deps.sh"
    "$here/scripts/install_deps.sh" >&2 || true
  fi
  if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
    skip "ip (iproute2), nsenter or unshare (util-linux) missing: no multi-host cluster"
  fi
  local probe=${tag}-probe
  if ! ip netns add "$probe" 2>"$dir/probe.err"; then
    skip "cannot create a network namespace ($(head -c 200 "$dir/probe.err")): no multi-host cluster"
  fi
  probe_shaping "$probe" || { ip netns del "$probe" 2>/dev/null; return 1; }
  ip netns del "$probe"
  if ! unshare --uts --mount true 2>"$dir/probe.err"; then
    skip "cannot create UTS/mount namespaces ($(head -c 200 "$dir/probe.err")): no multi-host cluster"
  fi
  subnet=$(pick_subnet) || { log "no free 10.x.y.0/24 for the test subnet"; return 1; }

  # Network: the bridge (the machine's own address on it makes it the login host), then a veth
  # pair per host.
  : >"$net"
  ip link add "$bridge" type bridge
  echo "link $bridge" >>"$net"
  # The hosts' traffic stays off the machine's firewall (br_netfilter would pass bridged packets
  # through iptables' FORWARD chain, which Docker, for one, sets to DROP).
  ip link set "$bridge" type bridge nf_call_iptables 0 nf_call_ip6tables 0 nf_call_arptables 0 \
    2>/dev/null || true
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  {
    echo "127.0.0.1 localhost"
    echo "$subnet.250 ctl"
    for i in $(seq 1 "$n"); do echo "$subnet.$i n$i"; done
    echo "$subnet.254 login"
  } >"$dir/etc/hosts"
  add_host_network ctl "$subnet.250"
  for i in $(seq 1 "$n"); do add_host_network "n$i" "$subnet.$i"; done
  if [ -n "$link_rate" ] || [ -n "$link_delay" ]; then
    for i in $(seq 1 "$n"); do shape_host "n$i"; done
    # shellcheck disable=SC2046  # one word per host
    record_shaping $(seq -f 'n%g' 1 "$n")
  fi

  start_munge
  write_common_conf "SlurmctldHost=ctl($subnet.250)" 6817 6818
  local nodes
  nodes=$(seq -s, -f 'n%g' 1 "$n")
  cat >>"$conf" <<EOF
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
# Failures show within seconds: a silent slurmd is DOWN after SlurmdTimeout, its jobs end (and
# requeue, with --requeue), their tasks killed KillWait after SIGTERM; messages give up after
# MessageTimeout.
SlurmctldTimeout=10
SlurmdTimeout=5
MessageTimeout=5
TCPTimeout=2
KillWait=5
SlurmdParameters=config_overrides
EOF
  for i in $(seq 1 "$n"); do
    echo "NodeName=n$i NodeAddr=$subnet.$i NodeHostname=n$i CPUs=$cpus State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" \
    >>"$conf"

  start_on_host ctl slurmctld -f "$conf" -i
  record_pid slurmctld "$dir/run/slurmctld.pid" "$dir/log/slurmctld.log"
  for i in $(seq 1 "$n"); do start_slurmd "n$i"; done
  # shellcheck disable=SC2046  # one word per node
  wait_idle $(seq -f 'n%g' 1 "$n")
  log "cluster up: $n hosts ($nodes, $cpus CPUs each) on $subnet.0/24 (bridge $bridge, this" \
    "machine $subnet.254), slurmctld on ctl $subnet.250, conf $conf"
  if [ -f "$link" ]; then log "links: $(head -n2 "$link" | tr '\n' ';')"; fi
}

start_cluster() {
  local hosts=0
  while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=${2:?--hosts N}; shift 2 ;;
    --hosts=*) hosts=${1#--hosts=}; shift ;;
    --link) link_rate=${2:?--link RATE}; shift 2 ;;
    --link=*) link_rate=${1#--link=}; shift ;;
    --delay) link_delay=${2:?--delay MS}; shift 2 ;;
    --delay=*) link_delay=${1#--delay=}; shift ;;
    *) usage ;;
    esac
  done
  [[ "$hosts" =~ ^[0-9]+$ ]] || usage
  if [ -n "$link_rate" ] || [ -n "$link_delay" ]; then
    if [ "$hosts" -eq 0 ]; then
      echo "error: test_cluster.sh: --link and --delay shape the links of --hosts N >= 1" >&2
      exit 2
    fi
  fi
  if [ -n "$link_rate" ]; then
    local bytes
    bytes=$(rate_bytes "$link_rate") || {
      echo "error: test_cluster.sh: --link '$link_rate' is not a rate such as 100mbit, 1gbit," \
        "10gbit or 50mbps (at least 8kbit)" >&2
      exit 2
    }
    # A burst of 1 ms at the rate, at least 32 KiB (a few full-size packets at low rates). A queue
    # of 10 ms at the rate, at least 1 MiB: TCP's small queues put up to 1 MiB a socket in the
    # qdisc, and a drop costs a collective a retransmission timeout (200 ms), far more than the
    # queue's wait.
    link_burst=$((bytes / 1000 > 32768 ? bytes / 1000 : 32768))
    link_limit=$((bytes / 100 > 1048576 ? bytes / 100 : 1048576))
  fi
  if [ -n "$link_delay" ] && ! [[ "$link_delay" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "error: test_cluster.sh: --delay '$link_delay' is not milliseconds (e.g. 2 or 0.5)" >&2
    exit 2
  fi
  require_slurm
  rm -f "$dir/skipped"
  if [ -f "$pids" ] || [ -f "$net" ]; then
    log "a cluster from an earlier run is recorded in $dir: stopping it first"
    stop_cluster
  else
    remove_tagged
  fi
  rm -rf "${dir:?}/etc" "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/munge" \
    "$dir/tmp" "$dir/hosts" "$link" "$link.removed"
  mkdir -p "$dir/etc" "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/tmp"
  export SLURM_CONF=$conf
  if [ "$hosts" -eq 0 ]; then start_single; else start_multi "$hosts"; fi
}

status() {
  export SLURM_CONF=$conf
  sinfo -N -o '%N %T %c %O' || true
  [ -f "$pids" ] && cat "$pids"
  [ -f "$dir/etc/hosts" ] && cat "$dir/etc/hosts"
  [ -f "$link" ] && show_shaping
  return 0
}

# The recorded shaping, and each shaped end's qdisc with its counters.
show_shaping() {
  echo "links:"
  sed 's/^/  /' "$link"
  local host hosts
  read -ra hosts < <(sed -n 's/^hosts //p' "$link")
  for host in "${hosts[@]}"; do
    [ -e "/run/netns/$(netns_of "$host")" ] || continue
    echo "  $host sends (eth0): $(nsenter --net="/run/netns/$(netns_of "$host")" -- \
      tc -s qdisc show dev eth0 2>/dev/null | head -n2 | tr -s ' \n' ' ' | sed 's/ $//')"
    echo "  $host receives ($(veth_of "$host")): $(tc -s qdisc show dev "$(veth_of "$host")" \
      2>/dev/null | head -n2 | tr -s ' \n' ' ' | sed 's/ $//')"
  done
}

kill_host() {
  local host=${1:?HOST}
  local ns
  ns=$(netns_of "$host")
  [ -e "/run/netns/$ns" ] || { log "no host $host in $dir"; return 1; }
  # Link first: the killed processes' FIN/RST never reach the others, as when power fails.
  ip link set "$(veth_of "$host")" down
  kill_netns_processes "$ns"
  log "host $host: link down, every process killed"
}

start_host() {
  local host=${1:?HOST}
  export SLURM_CONF=$conf
  ip link set "$(veth_of "$host")" up
  start_slurmd "$host"
  wait_idle "$host"
  log "host $host back and idle"
}

case $cmd in
start)
  # A failed start leaves nothing running and no namespace behind.
  # shellcheck disable=SC2154  # rc is assigned inside the trap
  trap 'rc=$?; if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then stop_cluster; fi' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start_cluster "$@"
  ;;
stop) stop_cluster ;;
env) print_env ;;
status) status ;;
exec)
  [ $# -ge 2 ] || usage
  on_host "$@"
  ;;
kill-host) kill_host "$@" ;;
start-host) start_host "$@" ;;
*) usage ;;
esac
