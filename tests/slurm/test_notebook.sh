#!/usr/bin/env bash
# slurm_notebook: executes jobs/pets_train.ipynb headless (jupyter nbconvert --execute) against
# the test cluster, on its own tiny synthetic set; checks the cells ran without error, the
# training cell streamed the `epoch N:` lines, the plot cell drew an image and saved a PNG.
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
require_cluster
command -v jupyter-nbconvert >/dev/null || jupyter nbconvert --version >/dev/null 2>&1 ||
  fatal "jupyter nbconvert is missing (scripts/install_deps.sh installs jupyter-nbconvert)"

out=$WORK/notebook
rm -rf "$out"
jupyter_home "$out/jupyter"
export PETS_REPO=$PETS_SOURCE PETS_BIN PETS_WORK=$out/work PETS_NTASKS=2 PETS_CPUS_PER_TASK=1
export PETS_EPOCHS=2 PETS_BATCH_SIZE=2 PETS_SYNTH_CLASSES=2 PETS_SYNTH_PER_CLASS=4
unset SLURM_JOB_ID

rc=0
jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=240 \
  --output-dir "$out" --output executed.ipynb "$JOBS/pets_train.ipynb" >"$out/nbconvert.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { show_logs "$out/nbconvert.log"; fatal "nbconvert --execute ended with status $rc"; }

python3 "$PETS_SOURCE/tests/lib/check_notebook.py" "$out/executed.ipynb" "$PETS_EPOCHS" \
  --contains "Slurm: slurm" --contains '$ srun --mpi=pmix' --images 1 ||
  fail "the executed notebook is wrong (above)"
png=$out/work/metrics.png
[ -s "$png" ] || fail "$png not written"
[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
[ "$(stat -c %s "$png")" -gt 5000 ] || fail "$png is too small to hold the two plots"
[ "$(wc -l <"$out/work/run-${PETS_EPOCHS}ep-bs${PETS_BATCH_SIZE}/metrics.jsonl")" -eq "$PETS_EPOCHS" ] || fail "metrics.jsonl does not hold $PETS_EPOCHS epochs"
grep -q "^epochs *= *$PETS_EPOCHS" "$out/work/train.cfg" || fail "the config cell did not write epochs = $PETS_EPOCHS: $(cat "$out/work/train.cfg")"
pass "notebook ran headless: $png ($(stat -c %s "$png") bytes)"
finish
