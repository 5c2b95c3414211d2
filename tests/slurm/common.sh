# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Sourced by the slurm_* tests: where things are, and small checks. Checks, failure and
# skipping: tests/lib/testlib.sh.
# Expects PETS_TEST_DIR (this suite's folder under the build tree), PETS_BIN, PETS_SOURCE.
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"

[ -n "${PETS_TEST_DIR:-}" ] && [ -n "${PETS_BIN:-}" ] && [ -n "${PETS_SOURCE:-}" ] ||
  fatal "set PETS_TEST_DIR, PETS_BIN and PETS_SOURCE (tests/slurm/CMakeLists.txt does)"
CLUSTER_DIR=$PETS_TEST_DIR/cluster
WORK=$PETS_TEST_DIR/work
JOBS=$PETS_SOURCE/jobs
export SLURM_CONF=$CLUSTER_DIR/etc/slurm.conf
# Everything the jobs, MPI and Jupyter write goes under the test folder.
export TMPDIR=$PETS_TEST_DIR/tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$TMPDIR" "$WORK" || fatal "cannot make $TMPDIR and $WORK"
# The jobs' shared-memory segments go to this test's own folder, removed at its end (a killed rank
# leaves its segment; a job step started by srun has no Open MPI daemon to remove them). The
# multinode tests also check that /dev/shm holds no new segment of their hosts (shm_hosts).
own_shm_segments "${shm_hosts:-}"

# The one tiny problem every training test uses, so that their accuracies can be compared.
SYNTH_CLASSES=3
SYNTH_PER_CLASS=4
TRAIN_EPOCHS=3
TRAIN_BATCH=2
DATA_H5=$WORK/data/pets.h5
REFERENCE_RUN=$WORK/batch/run


# Makes the synthetic images every training test uses in $WORK/data/images (a new $WORK/data).
make_synth_images() {
  rm -rf "$WORK/data" && mkdir -p "$WORK/data" || fatal "cannot make $WORK/data"
  "$PETS_BIN/pets_synth" --out "$WORK/data/images" --classes $SYNTH_CLASSES \
    --per-class $SYNTH_PER_CLASS --seed 7 >/dev/null || fatal "pets_synth exit $?"
  local n_images
  n_images=$(find "$WORK/data/images" -name '*.jpg' | wc -l)
  [ "$n_images" -eq $((SYNTH_CLASSES * SYNTH_PER_CLASS)) ] || fatal "pets_synth wrote $n_images images"
}

# Waits until a training run has started its epochs: pets_train creates --out right before it
# installs its SIGUSR1/SIGTERM handlers and enters the first step; the signal sent after that,
# through Slurm, lands in epoch 0 on a fast machine and later on a slow one.
wait_training_started() {
  local run=$1 log=$2 pid_or_job=$3
  for _ in $(seq 1 1200); do
    [ -d "$run" ] && grep -q "frozen backbone\|^notice\|^resumed" "$log" 2>/dev/null && return 0
    if [[ "$pid_or_job" == pid:* ]]; then
      kill -0 "${pid_or_job#pid:}" 2>/dev/null || return 1
    fi
    sleep 0.1
  done
  return 1
}

# The test is skipped (ctest's SKIP_RETURN_CODE 77) only when the fixture found no Slurm.
require_cluster() {
  [ ! -f "$CLUSTER_DIR/skipped" ] || skip "$(cat "$CLUSTER_DIR/skipped")"
  [ -f "$CLUSTER_DIR/pids" ] || fatal "no cluster running under $CLUSTER_DIR (slurm_cluster_start failed?)"
  sinfo -h >/dev/null || fatal "sinfo cannot reach the test cluster ($SLURM_CONF)"
}

# scontrol's view of one field of a job (Slurm keeps finished jobs for MinJobAge = 300 s).
job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# Rank 0's tutorial lines "epoch N: XX.XX" in a file, one per line.
epoch_lines() { grep -E '^epoch [0-9]+: [0-9]+\.[0-9]{2}$' "$1" || true; }

# Checks that a run folder holds a finished training of $2 epochs.
check_run_folder() {
  local run=$1 epochs=$2
  [ -s "$run/model.safetensors" ] || fail "$run/model.safetensors missing"
  [ -s "$run/latest" ] || { fail "$run/latest missing"; return; }
  local latest
  latest=$(head -n1 "$run/latest")
  [[ "$latest" == ckpt-*.safetensors ]] && [ -s "$run/$latest" ] ||
    fail "$run/latest names '$latest', not a checkpoint there: $(ls "$run")"
  python3 - "$run/metrics.jsonl" "$epochs" <<'EOF' || fail "$run/metrics.jsonl is wrong"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
want = int(sys.argv[2])
assert [r["epoch"] for r in rows] == list(range(want)), [r["epoch"] for r in rows]
for r in rows:
    assert 0.0 <= r["accuracy"] <= 100.0, r
    assert math.isfinite(r["train_loss"]) and r["train_loss"] > 0.0, r
    assert r["lr"] > 0.0 and r["train_images_per_s"] > 0.0, r
EOF
}

# Compares the per-epoch results of two runs: accuracies and correct counts exactly, losses to
# 1e-5 relative (separate processes differ by ~1e-7 from BLAS kernel choices; a resume that
# repeats or skips a step moves the loss by far more).
same_results() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'EOF'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
assert len(a) == len(b), f"{len(a)} epochs vs {len(b)}"
bad = []
for x, y in zip(a, b):
    print(f"  epoch {x['epoch']}: accuracy {x['accuracy']:.2f} vs {y['accuracy']:.2f}, "
          f"loss {x['train_loss']:.8f} vs {y['train_loss']:.8f}")
    if x["epoch"] != y["epoch"] or x["accuracy"] != y["accuracy"] or x["correct"] != y["correct"]:
        bad.append(x["epoch"])
    elif abs(x["train_loss"] - y["train_loss"]) > 1e-5 * max(1.0, abs(y["train_loss"])):
        bad.append(x["epoch"])
sys.exit(f"epochs differ: {bad}" if bad else 0)
EOF
}

# Shows the end of a job's output and the daemons' logs, for a failing check.
show_logs() {
  for f in "$@"; do
    [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }
  done
  echo "---- slurmctld.log"
  tail -n 15 "$CLUSTER_DIR/log/slurmctld.log" 2>/dev/null || true
  echo "---- slurmd.log"
  tail -n 15 "$CLUSTER_DIR/log/slurmd.log" 2>/dev/null || true
}
