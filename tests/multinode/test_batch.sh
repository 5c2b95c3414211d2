#!/usr/bin/env bash
# multinode_batch: jobs/preprocess.sbatch and jobs/train.sbatch, unedited, with --nodes=2
# --ntasks-per-node=2 (4 ranks on 2 hosts). Checks: the HDF5 file written collectively from two
# hosts holds the same images, labels and split as a 1-rank file (h5diff over every dataset and
# attribute but the file's own store_id: pixels, shapes, labels and names of /train and /eval); the training job ran 4 tasks
# on 2 hosts (pets_train's start-up line says so), rank 0 alone printed one `epoch N: XX.XX` line per epoch, and the run folder is
# complete. Its run is the reference of the placement and node-loss tests.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster

out=$WORK/batch
rm -rf "$out" && mkdir -p "$out" || fatal "cannot make $out"
make_synth_images

# Runs jobs/preprocess.sbatch writing $1 (job name $2) with the sbatch flags after them; sets
# pre_log to the job's output file.
preprocess() {
  local h5=$1 name=$2 rc=0 id
  shift 2
  PETS_BIN=$PETS_BIN PETS_IMAGES=$WORK/data/images PETS_H5=$h5 PETS_MAX_SIDE=256 \
    sbatch --wait --parsable --chdir="$out" --output="$out/$name-%j.out" --cpus-per-task=1 \
    --time=10 "$@" "$JOBS/preprocess.sbatch" >"$out/sbatch-$name.txt" || rc=$?
  id=$(cut -d';' -f1 "$out/sbatch-$name.txt")
  pre_log=$out/$name-$id.out
  [ "$rc" -eq 0 ] || { show_logs "$pre_log"; fatal "$name job $id ended with status $rc"; }
  check_eq "$name job $id" "$(job_field "$id" JobState)" COMPLETED
  [ -s "$h5" ] || fatal "$h5 not written"
}

# --- the 1-rank file, then the 4-rank 2-host file ------------------------------------------------
preprocess "$WORK/data/pets-1rank.h5" preprocess-1 --nodes=1 --ntasks=1
grep -q "srun: 1 tasks" "$pre_log" || fail "the reference job did not run 1 task: $(cat "$pre_log")"
start=$(date +%s.%N)
preprocess "$DATA_H5" preprocess-2x2 --nodes=2 --ntasks-per-node=2
echo "2-host preprocessing job: $(elapsed_since "$start") s"
grep -q "srun: 4 tasks on n\[[0-9]-[0-9]\]" "$pre_log" ||
  fail "the preprocessing job did not run 4 tasks on 2 hosts: $(cat "$pre_log")"
h5ls -r "$DATA_H5" >"$out/h5ls.txt" 2>&1 || fatal "h5ls cannot read $DATA_H5: $(cat "$out/h5ls.txt")"
for d in /train/pixels /train/labels /train/names /eval/pixels /eval/labels /eval/names; do
  grep -q "^$d " "$out/h5ls.txt" || fail "$DATA_H5 has no $d: $(cat "$out/h5ls.txt")"
done
# Every file has a store_id of its own (random): everything else must be equal, the same objects
# (h5ls -r) and no difference but that attribute (h5diff -r).
h5diff -r "$WORK/data/pets-1rank.h5" "$DATA_H5" >"$out/h5diff.txt" 2>&1
differing=$(awk '/^(attribute|dataset|group|datatype)/ { what = $0 }
  /differences found$/ && $1 != "0" { print what }' "$out/h5diff.txt")
if [ "$(h5ls -r "$WORK/data/pets-1rank.h5")" = "$(h5ls -r "$DATA_H5")" ] &&
  [ "$differing" = "attribute: <store_id of </>> and <store_id of </>>" ]; then
  pass "the 2-host HDF5 file equals the 1-rank file (h5diff -r: no difference but store_id)"
else
  show "$out/h5diff.txt"
  fail "the 2-host HDF5 file differs from the 1-rank file"
fi

# --- training on 2 hosts -------------------------------------------------------------------------
start=$(date +%s.%N)
start_train_job "$TWO_HOST_RUN" "$out" --nodes=2 --ntasks-per-node=2
wait_job_completed "$job" "$log" "train job $job"
wall=$(elapsed_since "$start")
echo "$wall" >"$out/train-wall-s.txt"
check_eq "restarts of job $job" "$(job_field "$job" Restarts)" 0
grep -q "srun: 4 tasks x 1 threads on n\[[0-9]-[0-9]\]" "$log" ||
  { show_logs "$log"; fail "train job did not run 4 tasks on 2 hosts"; }
grep -q "pets_train: 4 ranks on 2 hosts, " "$log" ||
  { show_logs "$log"; fail "pets_train's start-up line does not say 4 ranks on 2 hosts"; }
# Rank 0 alone prints the epoch lines: each epoch once, in order (4 printing ranks would repeat).
epoch_lines "$log" >"$out/epochs.txt"
expected=$(for ((e = 0; e < TRAIN_EPOCHS; e++)); do echo "epoch $e:"; done)
[ "$(cut -d' ' -f1-2 "$out/epochs.txt")" = "$expected" ] ||
  { show_logs "$log"; fail "epoch lines of job $job: $(cat "$out/epochs.txt")"; }
check_run_folder "$TWO_HOST_RUN" "$TRAIN_EPOCHS"
python3 - "$out/epochs.txt" "$TWO_HOST_RUN/metrics.jsonl" <<'PY' || fail "epoch lines and metrics.jsonl disagree"
import json, sys
printed = [float(l.split()[2]) for l in open(sys.argv[1])]
logged = [round(json.loads(l)["accuracy"], 2) for l in open(sys.argv[2]) if l.strip()]
assert printed == logged, (printed, logged)
PY
pass "train job $job on $(job_field "$job" NodeList) in $wall s: $(tr '\n' ' ' <"$out/epochs.txt")"
finish
