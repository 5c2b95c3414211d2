#!/usr/bin/env bash
# multinode_notebook: jobs/pets_train.ipynb, unedited, executed headless (jupyter nbconvert
# --execute) from the login host against the multi-host cluster, with its steps on 2 nodes: the
# notebook's `srun --ntasks=4` takes the node count from srun's input variables SLURM_NNODES=2
# and SLURM_NTASKS_PER_NODE=2. Checks: every cell ran without error, the training cell streamed
# one `epoch N:` line per epoch, and both of its Slurm steps (preprocessing, training) ran on 2
# nodes.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
command -v jupyter-nbconvert >/dev/null || jupyter nbconvert --version >/dev/null 2>&1 ||
  fatal "jupyter nbconvert is missing (scripts/install_deps.sh installs jupyter-nbconvert)"

out=$WORK/notebook
rm -rf "$out"
jupyter_home "$out/jupyter"
export PETS_REPO=$PETS_SOURCE PETS_BIN PETS_WORK=$out/work PETS_NTASKS=4 PETS_CPUS_PER_TASK=1
export PETS_EPOCHS=$TRAIN_EPOCHS PETS_BATCH_SIZE=$TRAIN_BATCH PETS_SYNTH_CLASSES=$SYNTH_CLASSES
export PETS_SYNTH_PER_CLASS=4 PETS_LAUNCHER=srun
export SLURM_NNODES=2 SLURM_NTASKS_PER_NODE=2
unset SLURM_JOB_ID

before=$(squeue -h -t all -o '%i' | sort -n | tail -n1)
rc=0
jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=400 \
  --output-dir "$out" --output executed.ipynb "$JOBS/pets_train.ipynb" >"$out/nbconvert.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/nbconvert.log"; fatal "nbconvert --execute ended with status $rc"; }

python3 "$PETS_SOURCE/tests/lib/check_notebook.py" "$out/executed.ipynb" "$PETS_EPOCHS" \
  --contains '$ srun --mpi=pmix' || fail "the executed notebook is wrong (above)"
# The notebook's steps: each an allocation of its own (srun outside any allocation), named
# pets-notebook.
scontrol -o show job 2>/dev/null | grep 'JobName=pets-notebook' | tr ' ' '\n' |
  awk -F= '$1 == "JobId" { id = $2 } $1 == "NumNodes" { n = $2 }
           $1 == "Command" { print id, n, $2 }' |
  awk -v b="${before:-0}" '$1 > b' >"$out/jobs.txt"
cat "$out/jobs.txt"
[ "$(wc -l <"$out/jobs.txt")" -ge 2 ] || fail "fewer than 2 pets-notebook jobs: $(cat "$out/jobs.txt")"
awk '$2 != 2' "$out/jobs.txt" | grep -q . && fail "a notebook step did not run on 2 nodes"
pass "notebook ran headless, its preprocessing and training on 2 nodes"
finish
