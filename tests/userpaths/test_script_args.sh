#!/usr/bin/env bash
# userpaths_script_args: the arguments of the scripts in data/ and jobs/, outside a Slurm cluster.
#   -h/--help: usage, status 0, nothing made (no folder named --help), nothing asked of Slurm or
#              the network; an unknown option (or a stray argument): status 2, one error line.
#   interactive.sh where no Slurm answers (no srun, no slurm.conf, a SLURM_CONF naming no file, a
#              controller that is not there): "no Slurm here (why)" and the mpirun command to run
#              instead, status 2, before srun says anything; its help's PETS_BIN says whether
#              pets_train is there.
#   preprocess.sbatch with PETS_SPLIT_MODE and PETS_LIST: the store is split as it says, from the
#              images the list names (its summary line).
#   train.sbatch with PETS_CONFIG: the file's values win over the script's defaults, the
#              variables set in the environment win over the file, the defaults fill in the keys
#              the file lacks (read back through pets_train --write-config, run by the script).
# Arguments: SOURCE_DIR BIN_DIR WORKDIR
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
src=$1 bin=$2
enter_workdir "$3"

# Nothing from the caller's environment decides what the scripts do: no settings, no Slurm job,
# and no way to the internet (a proxy on a closed port) should one of them start a download.
clean_env=(env -u SLURM_CONF -u SLURM_JOB_ID -u SLURM_CPUS_PER_TASK -u SLURM_SUBMIT_DIR
  -u PETS_BIN -u PETS_BUILD -u PETS_DATA -u PETS_OUT -u PETS_THREADS -u PETS_EPOCHS
  -u PETS_BATCH_SIZE -u PETS_MAX_LR -u PETS_MIXED_PRECISION -u PETS_SEED -u PETS_PRETRAINED
  -u PETS_CONFIG -u PETS_TRAIN_ARGS -u PETS_LAUNCHER -u PETS_IMAGES -u PETS_H5
  -u PETS_PREPROCESS_ARGS -u PETS_LAYOUT -u PETS_SPLIT_MODE -u PETS_LIST
  http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
  ALL_PROXY=http://127.0.0.1:9 HF_ENDPOINT=http://127.0.0.1:9)
no_cluster_conf "$work/nocluster.conf"

# ---- -h/--help and unknown options ---------------------------------------------------------
scripts=(data/fetch_pets.sh data/fetch_weights.sh data/download.sh jobs/interactive.sh
  jobs/train.sbatch jobs/preprocess.sbatch)
for script in "${scripts[@]}"; do
  name=$(basename "$script")
  for flag in --help -h; do
    enter_workdir "$3/help"
    capture help.log "${clean_env[@]}" SLURM_CONF="$3/nocluster.conf" bash "$src/$script" "$flag"
    check_eq "$name $flag: status" "$status" 0
    grep -q "^Usage: .*$name" help.log || { fail "$name $flag: no usage line naming $name"; show help.log; }
    left=$(find . -mindepth 1 -maxdepth 1 ! -name help.log)
    [ -z "$left" ] || fail "$name $flag made files in the current folder: $left"
    grep -qi '^srun\|slurm_load\|unable to contact\|curl:\|% Total\|resolving\|requesting' help.log &&
      { fail "$name $flag: it went to Slurm or the network"; show help.log; }
  done
  expect_usage "$name --no-such-option" "--no-such-option" "${clean_env[@]}" PETS_BIN="$bin" \
    bash "$src/$script" --no-such-option
  left=$(find . -mindepth 1 -maxdepth 1 ! -name help.log ! -name usage.log)
  [ -z "$left" ] || fail "$name --no-such-option made files in the current folder: $left"
done
enter_workdir "$3"
no_cluster_conf "$work/nocluster.conf"
for script in data/fetch_pets.sh data/fetch_weights.sh; do
  expect_usage "$(basename "$script") with two folders" "one DIR" "${clean_env[@]}" bash "$src/$script" a b
done
for script in jobs/train.sbatch jobs/preprocess.sbatch; do
  expect_usage "$(basename "$script") with an argument" "takes no arguments" "${clean_env[@]}" bash "$src/$script" x
done
expect_usage "interactive.sh --shell with more" "--shell takes no other arguments" \
  "${clean_env[@]}" bash "$src/jobs/interactive.sh" --shell --epochs 1
left=$(find . -mindepth 1 -maxdepth 1 ! -name usage.log ! -name nocluster.conf)
[ -z "$left" ] || fail "the refused commands made files: $left"
pass "every script in data/ and jobs/ answers -h/--help (status 0, nothing made) and refuses unknown options (status 2)"

# ---- interactive.sh without Slurm ----------------------------------------------------------
# Each: what the environment lacks, the text the reason must hold, the command's settings.
no_slurm() {
  local what=$1 text=$2
  shift 2
  expect_usage "interactive.sh, $what" "no Slurm here ($text" "${clean_env[@]}" "$@" PETS_BIN="$bin" \
    PETS_NTASKS=3 bash "$src/jobs/interactive.sh" --epochs 1
  grep -qF "run mpirun -np 3 $bin/pets_train --data" usage.log ||
    { fail "interactive.sh, $what: no mpirun command to run instead"; show usage.log; }
  grep -q '^srun\|fatal' usage.log && { fail "interactive.sh, $what: srun was run"; show usage.log; }
  [ "$seconds" -lt 20 ] || fail "interactive.sh, $what: took $seconds s"
}
no_slurm "a controller that is not there" "the Slurm controller does not answer" \
  SLURM_CONF="$work/nocluster.conf"
no_slurm "SLURM_CONF naming no file" "SLURM_CONF=$work/missing.conf is not a file" \
  SLURM_CONF="$work/missing.conf"
# No srun: a PATH with only the tools the script needs before it looks for Slurm.
mkdir -p nosrun
for tool in bash dirname cat tail timeout; do ln -sf "$(command -v "$tool")" "nosrun/$tool"; done
no_slurm "no srun" "srun not found" PATH="$work/nosrun"
# No configuration at all: only where this machine has none (sinfo says so by itself).
if ! "${clean_env[@]}" sinfo --noheader >sinfo.log 2>&1 && grep -q 'configuration source\|configuration file' sinfo.log; then
  no_slurm "no slurm.conf" "no Slurm configuration"
else
  echo "note: this machine has a Slurm configuration: the case without one is not checked here"
fi
pass "interactive.sh without a reachable Slurm says so and names the mpirun command, status 2"

# Its help's PETS_BIN: the folder, and whether pets_train is there.
capture help.log "${clean_env[@]}" PETS_BIN="$bin" bash "$src/jobs/interactive.sh" --help
grep -qx "  PETS_BIN=$bin" help.log || { fail "interactive.sh --help: no line PETS_BIN=$bin"; show help.log; }
capture help.log "${clean_env[@]}" PETS_BIN="$work/nowhere" bash "$src/jobs/interactive.sh" --help
grep -qF "PETS_BIN=$work/nowhere (no pets_train there yet" help.log ||
  { fail "interactive.sh --help: PETS_BIN=$work/nowhere is not said to lack pets_train"; show help.log; }
capture help.log "${clean_env[@]}" PETS_BUILD="$bin" bash "$src/jobs/interactive.sh" --help
grep -qx "  PETS_BIN=$bin" help.log || { fail "interactive.sh --help: PETS_BUILD=$bin is not its PETS_BIN"; show help.log; }
pass "interactive.sh --help names PETS_BIN and says whether pets_train is there"

# ---- train.sbatch: PETS_CONFIG against the script's defaults and the environment -------------
[ -x "$bin/pets_train" ] || fatal "no $bin/pets_train: build it first"
# One rank (mpirun outside Slurm would start one per core otherwise).
echo "localhost slots=1" >hostfile
cat >run.conf <<'CONF'
# a config file as a user writes one: no out, no batch-size
data = config.h5
threads = 3
epochs = 7
seed = 11
CONF
# The script run as plain bash (no Slurm), PETS_LAUNCHER=mpirun; pets_train writes the options
# it would train with to $1 and stops. Further settings after $1.
effective() {
  local file=$1
  shift
  capture "$file.log" "${clean_env[@]}" OMPI_MCA_orte_default_hostfile="$work/hostfile" \
    PETS_BIN="$bin" PETS_LAUNCHER=mpirun PETS_REQUEUE=0 PETS_TRAIN_ARGS="--write-config $work/$file" \
    "$@" bash "$src/jobs/train.sbatch"
  if [ "$status" -ne 0 ] || [ ! -s "$file" ]; then
    fail "train.sbatch ($file): status $status, no $file"
    show "$file.log"
  fi
}
# The value of KEY in config file FILE.
key() { sed -n "s/^$2 = //p" "$1"; }

effective config_only.conf PETS_CONFIG="$work/run.conf"
check_eq "PETS_CONFIG alone: data" "$(key config_only.conf data)" config.h5
check_eq "PETS_CONFIG alone: threads" "$(key config_only.conf threads)" 3
check_eq "PETS_CONFIG alone: epochs" "$(key config_only.conf epochs)" 7
check_eq "PETS_CONFIG alone: seed" "$(key config_only.conf seed)" 11
check_eq "PETS_CONFIG alone: out (the file has none: the script's default)" "$(key config_only.conf out)" "$work/work/run"
check_eq "PETS_CONFIG alone: batch-size (the script's default)" "$(key config_only.conf batch-size)" 64
grep -q "tasks x 3 threads" config_only.conf.log || { fail "train.sbatch does not report the config's 3 threads"; show config_only.conf.log; }
pass "train.sbatch: PETS_CONFIG's values win over the script's defaults, which fill in the rest"

effective with_env.conf PETS_CONFIG="$work/run.conf" PETS_DATA="$work/env.h5" PETS_THREADS=2 \
  PETS_EPOCHS=4 PETS_OUT="$work/envrun"
check_eq "PETS_CONFIG and PETS_DATA: data" "$(key with_env.conf data)" "$work/env.h5"
check_eq "PETS_CONFIG and PETS_THREADS: threads" "$(key with_env.conf threads)" 2
check_eq "PETS_CONFIG and PETS_EPOCHS: epochs" "$(key with_env.conf epochs)" 4
check_eq "PETS_CONFIG and PETS_OUT: out" "$(key with_env.conf out)" "$work/envrun"
check_eq "PETS_CONFIG, no PETS_SEED: seed" "$(key with_env.conf seed)" 11
pass "train.sbatch: the variables set in the environment win over PETS_CONFIG's values"

effective no_config.conf PETS_DATA="$work/env.h5" PETS_EPOCHS=2
check_eq "no PETS_CONFIG: data" "$(key no_config.conf data)" "$work/env.h5"
check_eq "no PETS_CONFIG: epochs" "$(key no_config.conf epochs)" 2
check_eq "no PETS_CONFIG: out" "$(key no_config.conf out)" "$work/work/run"
check_eq "no PETS_CONFIG: threads" "$(key no_config.conf threads)" 1
pass "train.sbatch without PETS_CONFIG passes its settings"

# ---- preprocess.sbatch: PETS_SPLIT_MODE ------------------------------------------------------
"$bin/pets_synth" --out strat_images --classes 3 --per-class 3 --seed 5 >/dev/null ||
  fatal "pets_synth exit $?"
capture strat.log "${clean_env[@]}" OMPI_MCA_orte_default_hostfile="$work/hostfile" \
  PETS_BIN="$bin" PETS_LAUNCHER=mpirun PETS_IMAGES="$work/strat_images" PETS_H5="$work/strat.h5" \
  PETS_SPLIT_MODE=stratified PETS_MAX_SIDE=64 bash "$src/jobs/preprocess.sbatch"
check_eq "preprocess.sbatch with PETS_SPLIT_MODE=stratified: status" "$status" 0
grep -q "strat.h5: layout names (auto); 9 stored, 0 skipped; 6 train, 3 eval (stratified), 3 labels$" strat.log ||
  { fail "preprocess.sbatch: PETS_SPLIT_MODE=stratified did not reach pets_preprocess"; show strat.log; }
(cd strat_images && ls | head -4 | awk -F_ '{ print $0 "," $1 }') | sed '1i path,label' >strat_images/list.csv
capture list.log "${clean_env[@]}" OMPI_MCA_orte_default_hostfile="$work/hostfile" \
  PETS_BIN="$bin" PETS_LAUNCHER=mpirun PETS_LIST="$work/strat_images/list.csv" \
  PETS_H5="$work/list.h5" PETS_TRAIN_FRACTION=0.5 PETS_MAX_SIDE=64 bash "$src/jobs/preprocess.sbatch"
check_eq "preprocess.sbatch with PETS_LIST: status" "$status" 0
grep -q "list.h5: layout list; 4 stored, 0 skipped; 2 train, 2 eval, 2 labels$" list.log ||
  { fail "preprocess.sbatch: PETS_LIST did not reach pets_preprocess"; show list.log; }
pass "preprocess.sbatch passes PETS_SPLIT_MODE and PETS_LIST"
finish
