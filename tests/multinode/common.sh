# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Sourced by the multinode_* tests: the slurm tests' helpers (fail, pass, job_field, epoch_lines,
# check_run_folder, same_results, require_cluster; and through them tests/lib/testlib.sh's fail,
# fatal, pass, finish, skip) plus what several hosts need: job submission and waiting, bitwise
# comparison of runs (same_bits), the files of a mid-epoch checkpoint (check_shards).
# Expects PETS_TEST_DIR (this suite's folder under the build tree), PETS_BIN, PETS_SOURCE.
# The cluster's hosts, n1..nN: no shared-memory segment of theirs may be left in /dev/shm.
shm_hosts='n[0-9]*'
source "$PETS_SOURCE/tests/slurm/common.sh"

CLUSTER=$PETS_SOURCE/scripts/test_cluster.sh
# A few dozen images, 2 epochs: 48 images give 38 training images, 5 steps of 4 ranks x 2 (the
# node-loss test needs an epoch long enough to fall into).
SYNTH_CLASSES=3
SYNTH_PER_CLASS=16
TRAIN_EPOCHS=2
TRAIN_BATCH=2
# pets_train's options besides those jobs/train.sbatch passes (PETS_TRAIN_ARGS).
TRAIN_ARGS="--eval-batch-size 4 --device cpu"
# multinode_batch's 2-host, 4-rank run: the reference of the placement and node-loss tests.
TWO_HOST_RUN=$WORK/batch/run

# Seconds since a `date +%s.%N` time, to 0.1 s.
elapsed_since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

# The hosts of a job's allocation, one a line (n[1-2] -> n1 n2).
job_hosts() { scontrol show hostnames "$(job_field "$1" NodeList)"; }

# Waits for a job to reach one of the states in $2 (a regex); prints the state.
wait_job_state() {
  local job=$1 want=$2 tries=${3:-1200} state=""
  for _ in $(seq 1 "$tries"); do
    state=$(job_field "$job" JobState)
    [[ "$state" =~ ^($want)$ ]] && { echo "$state"; return 0; }
    sleep 0.25
  done
  echo "$state"
  return 1
}

# Submits jobs/train.sbatch on $DATA_H5 into run folder $1 with output folder $2, further sbatch
# flags after; prints the job id.
submit_train() {
  local run=$1 out=$2
  shift 2
  PETS_BIN=$PETS_BIN PETS_DATA=$DATA_H5 PETS_OUT=$run PETS_EPOCHS=$TRAIN_EPOCHS \
    PETS_BATCH_SIZE=$TRAIN_BATCH PETS_TRAIN_ARGS="$TRAIN_ARGS" \
    sbatch --parsable --chdir="$out" --output="$out/train-%j.out" --cpus-per-task=1 --time=10 \
    "$@" "$JOBS/train.sbatch" | cut -d';' -f1
}

# Submits jobs/train.sbatch as submit_train does (same arguments); sets job and log (the job's
# output file); stops the test when sbatch fails.
start_train_job() {
  job=$(submit_train "$@")
  [ -n "$job" ] || fatal "sbatch jobs/train.sbatch failed"
  log=$2/train-$job.out
}

# Waits for job $1 to end and stops the test, showing its log $2, unless it COMPLETED. $3 names
# the job in the messages.
wait_job_completed() {
  local job=$1 log=$2 what=${3:-"job $1"} state
  state=$(wait_job_state "$job" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY') ||
    { scancel "$job"; show_logs "$log"; fatal "$what did not end (state $state)"; }
  [ "$state" = COMPLETED ] || { show_logs "$log"; fatal "$what ended $state"; }
}

# Bitwise equality of two finished runs: every epoch's accuracy, correct count and loss, and
# the final model file.
same_bits() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY' || return 1
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
assert len(a) == len(b), f"{len(a)} epochs vs {len(b)}"
for x, y in zip(a, b):
    print(f"  epoch {x['epoch']}: accuracy {x['accuracy']!r} vs {y['accuracy']!r}, "
          f"loss {x['train_loss']!r} vs {y['train_loss']!r}")
    for k in ("epoch", "accuracy", "correct", "train_loss"):
        assert x[k] == y[k], f"epoch {x['epoch']}: {k} {x[k]!r} vs {y[k]!r}"
PY
  cmp "$1/model.safetensors" "$2/model.safetensors" || return 1
  echo "  model.safetensors identical ($(sha256sum <"$1/model.safetensors" | cut -c1-16))"
}

# The files of a mid-epoch checkpoint of $2 ranks, the one run folder $1's `latest` names: rank
# 0's ckpt-<N>.safetensors, recording shards of $2 ranks, and the shard
# ckpt-<N>.epoch-<E>.step-<S>.rank-<R>.safetensors it records of each other rank R = 1 .. $2-1,
# each a complete safetensors file (its header's tensors end the file), and no shard of a rank
# beyond. Prints their sizes; a failed check (and status 1) when one is missing or incomplete.
check_shards() {
  local run=$1 ranks=$2
  python3 - "$run" "$ranks" <<'PY' ||
import json, os, re, struct, sys
run, ranks = sys.argv[1], int(sys.argv[2])
latest = open(os.path.join(run, "latest")).read().split()[0]
m = re.fullmatch(r"ckpt-(\d+)\.safetensors", latest)
assert m, f"latest names {latest!r}, not a checkpoint"
n = m.group(1)
with open(os.path.join(run, latest), "rb") as f:
    (h,) = struct.unpack("<Q", f.read(8))
    state = json.loads(json.loads(f.read(h))["__metadata__"]["pets_state"])
# The shards rank 0's checkpoint records as its own: ckpt-N.epoch-E.step-S.rank-R.safetensors.
record = state.get("shards")
assert record, f"{latest} records no shards (state keys: {sorted(state)})"
assert record["ranks"] == ranks, f"{latest} records shards of {record['ranks']} ranks, not {ranks}"
part = f"ckpt-{n}.epoch-{record['epoch']}.step-{record['step']}.rank-"

def problem(path):
    if not os.path.exists(path):
        return "missing"
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        (h,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(h))
    end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"], default=0)
    return None if 8 + h + end == size else f"{size} bytes, its header says {8 + h + end}"

want = [(0, latest)] + [(r, f"{part}{r}.safetensors") for r in range(1, ranks)]
bad = []
for r, name in want:
    path = os.path.join(run, name)
    p = problem(path)
    print(f"  rank {r:2}: {name}: " + (p if p else f"{os.path.getsize(path)} bytes"))
    if p:
        bad.append(f"{name} ({p})")
shard = re.compile(re.escape(part) + r"(\d+)\.safetensors")
beyond = sorted(f for f in os.listdir(run) if shard.fullmatch(f) and int(shard.fullmatch(f)[1]) >= ranks)
if beyond:
    bad.append(f"shards of ranks beyond {ranks - 1}: {beyond}")
if bad:
    sys.exit(f"{len(bad)} problem(s): " + "; ".join(bad[:3]) + (" ..." if len(bad) > 3 else ""))
PY
    { fail "$run: not the files of a mid-epoch checkpoint of $ranks ranks"; return 1; }
}

# Checks rank_identity's output $1 for 4 ranks on 2 hosts ($2: the launch, for the message):
# two distinct hostnames, node-local ranks 0 and 1 on each, node-local communicators that group
# exactly the ranks of one host, and an allreduce across the hosts that sums every rank.
check_identity() {
  python3 - "$1" <<'PY' || fail "the ranks' placement is wrong (${2:-srun})"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = {}
for l in lines:
    m = re.fullmatch(r"rank (\d+) of (\d+) on (\S+): local rank (\d+) of (\d+), host ranks ([\d,]+)", l)
    if m:
        r, w, host, lr, ls, peers = m.groups()
        rows[int(r)] = (int(w), host, int(lr), int(ls), [int(p) for p in peers.split(",")])
assert sorted(rows) == [0, 1, 2, 3], f"ranks reported: {sorted(rows)}"
assert all(v[0] == 4 for v in rows.values()), "world size is not 4 everywhere"
hosts = {}
for r, (_, host, lr, ls, peers) in rows.items():
    hosts.setdefault(host, []).append(r)
    assert ls == 2, f"rank {r}: node-local size {ls}, want 2"
    assert peers.index(r) == lr, f"rank {r}: local rank {lr} but host ranks {peers}"
assert len(hosts) == 2, f"hosts: {hosts}"
for host, ranks in hosts.items():
    local = sorted(rows[r][2] for r in ranks)
    assert local == [0, 1], f"{host}: local ranks {local}"
    for r in ranks:
        assert sorted(rows[r][4]) == sorted(ranks), f"rank {r}: local group {rows[r][4]} vs {ranks}"
assert "allreduce: 10" in lines, "allreduce over the hosts did not sum 1+2+3+4"
print("hosts:", {h: sorted(r) for h, r in sorted(hosts.items())})
PY
}
