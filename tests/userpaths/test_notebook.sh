#!/usr/bin/env bash
# userpaths_notebook: jobs/pets_train.ipynb, headless, where Slurm's client is installed but no
# controller answers: the notebook must launch with mpirun, not fail on srun;
# run again with another epoch count it must train that run (not fail on the first run's
# checkpoint) and plot it; run again with the first epoch count it keeps its promise that
# "running this cell again continues": the finished run prints its final
# line (the store reused, so the checkpoint's store is the one given). PETS_LAUNCHER=bogus must
# be refused by the first cell. Jupyter's interrupt during training (notebook_interrupt.py) stops
# the job through a checkpoint, and the cell run again resumes there.
# Arguments: SOURCE_DIR BIN_DIR WORKDIR MPIEXEC NPFLAG PREFLAGS
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
src=$1 bin=$2
enter_workdir "$3"
use_mpiexec "$4" "$5" "${6:-}"
command -v jupyter-nbconvert >/dev/null || fatal "jupyter nbconvert is missing (scripts/install_deps.sh installs it)"
command -v sinfo >/dev/null || fatal "sinfo is missing (scripts/install_deps.sh installs slurm-wlm)"

no_cluster_conf nocluster.conf
export SLURM_CONF=$work/nocluster.conf
jupyter_home "$work/jupyter"
export PETS_REPO=$src PETS_BIN=$bin PETS_WORK=$work/nb PETS_NTASKS=2 PETS_CPUS_PER_TASK=1
export PETS_BATCH_SIZE=4 PETS_SYNTH_CLASSES=2 PETS_SYNTH_PER_CLASS=4
unset SLURM_JOB_ID PETS_LAUNCHER

# run_notebook NAME EPOCHS: execute it; check the cells, the launcher and the epoch lines.
run_notebook() {
  local name=$1 epochs=$2
  PETS_EPOCHS=$epochs capture "$name.log" jupyter nbconvert --to notebook --execute \
    --ExecutePreprocessor.timeout=300 --output-dir "$work" --output "$name.ipynb" "$src/jobs/pets_train.ipynb"
  if [ "$status" -ne 0 ]; then
    fail "$name: nbconvert --execute ended with status $status"
    show "$name.log"
    return
  fi
  python3 "$src/tests/lib/check_notebook.py" "$work/$name.ipynb" "$epochs" \
    --contains "Slurm: no controller answers sinfo; launching with mpirun" \
    --contains '$ mpirun -np 2' --lacks '$ srun' || fail "$name: the executed notebook is wrong (above)"
}
run_notebook first 1
run_notebook second 2
ls -d nb/run-* >/dev/null 2>&1 || fail "no run folder under nb/"
run_notebook again 1
grep -q "has finished its 1 epoch;" again.log again.ipynb 2>/dev/null ||
  { fail "run again, the finished run does not say it is finished"; show again.log; }
grep -q "using $work/nb/pets.h5" again.ipynb || fail "run again, the notebook made its store anew"

# The stop button during training: the job stops through a checkpoint (status 75), the cell says
# how to continue, and the cell run again resumes at that step.
PETS_EPOCHS=30 capture interrupt.log /usr/bin/python3 "$src/tests/userpaths/notebook_interrupt.py" \
  "$src/jobs/pets_train.ipynb" 600 120
if [ "$status" -eq 0 ]; then tail -n 1 interrupt.log; else
  fail "interrupting the training cell (status $status)"; show interrupt.log
fi

PETS_LAUNCHER=bogus capture bogus.log jupyter nbconvert --to notebook --execute \
  --output-dir "$work" --output bogus.ipynb "$src/jobs/pets_train.ipynb"
[ "$status" -ne 0 ] || fail "PETS_LAUNCHER=bogus: the notebook ran"
grep -q "PETS_LAUNCHER must be auto, srun or mpirun" bogus.log || { fail "PETS_LAUNCHER=bogus: no clear message"; show bogus.log; }
pass "the notebook falls back to mpirun without a controller, trains a second epoch count in its own run, stops through a checkpoint on an interrupt, refuses a bad launcher"
finish
