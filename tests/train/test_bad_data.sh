#!/usr/bin/env bash
# Damaged image stores given to pets_train under mpiexec -n 2: a file that is not HDF5, a
# truncated one, another schema version (a newer one, and the previous one as pets_preprocess
# wrote it), a dataset of the wrong dtype or shape, labels out of range, counts that disagree,
# offsets past the pixels, one bit flipped in the superblock, in an object header or in the
# pixels (refused by HDF5's checksums; the pixels when the first training step reads them).
# Each: exit status 2, exactly one line from the ranks, "error: ..." from rank 0, naming the
# file and the fault; no HDF5 diagnostic dump, no Open MPI abort report, no --out folder. The damaged copies come from make_bad_store
# ($PETS_MAKE_BAD_STORE), which prints each file with the text its error must contain.
# usage: test_bad_data.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
make_bad=${PETS_MAKE_BAD_STORE:-}
[ -n "$make_bad" ] || fatal "set PETS_MAKE_BAD_STORE to the make_bad_store tool"

"$synth" --out images --classes 3 --per-class 5 --seed 5 > /dev/null || fatal "pets_synth exit $?"
run_np 1 "$preprocess" --images images --out good.h5 --max-side 64 > /dev/null || fatal "pets_preprocess exit $?"
"$make_bad" good.h5 bad > cases.tsv || fatal "make_bad_store exit $?"
[ "$(wc -l < cases.tsv)" -ge 16 ] || fatal "make_bad_store wrote $(wc -l < cases.tsv) cases, expected at least 16"

while IFS=$'\t' read -r file expect; do
  name=$(basename "$file" .h5)
  before=$failures
  out="run_$name"
  # --tag-output (Open MPI) prefixes each line with [job,rank]<stream>: which rank said what.
  run_np 2 --tag-output "$train" --data "$file" --epochs 1 --batch-size 2 --out "$out" > "$name.log" 2>&1
  rc=$?
  what="$name ($expect)"
  [ "$rc" -eq 2 ] || { fail "$what: exit $rc, not 2"; show "$name.log"; continue; }
  # The ranks' lines are tagged; mpiexec's own note that a rank exited non-zero is not. A
  # store damaged only in its pixels passes the start-up, whose warnings and start-up line come
  # first.
  ranks_said=$(grep '^\[[0-9]*,[0-9]*\]<' "$name.log" |
    grep -v -e '^\[[0-9]*,0\]<stderr>:warning: ' -e '^\[[0-9]*,0\]<stderr>:pets_train: [0-9]* ranks\? on ')
  tagged=$(printf '%s' "$ranks_said" | grep -c '')
  [ "$tagged" -eq 1 ] || { fail "$what: $tagged lines from the ranks, not 1"; show "$name.log"; continue; }
  line=$ranks_said
  case "$line" in
    "[1,0]<stderr>:error: "*) ;;
    *) fail "$what: the line is not an error from rank 0 on stderr: $line"; continue ;;
  esac
  [[ "$line" == *"$file"* ]] || fail "$what: the error does not name $file: $line"
  [[ "$line" == *"$expect"* ]] || fail "$what: the error lacks '$expect': $line"
  # HDF5's own frames (H5Dread(), H5F_open: ...) are a dump, not a message.
  if grep -Eq 'HDF5-DIAG|#[0-9]{3}:|H5[A-Z]?[a-z_]*[A-Za-z_]*\(\)|H5[A-Z]_?[a-z_]+: ' "$name.log"; then
    fail "$what: HDF5 diagnostics in the output: $line"
  fi
  abort_report "$name.log" && fail "$what: Open MPI abort report"
  if [[ "$name" == pixel_* ]]; then
    # Found in training, after --out was made: nothing may have been written into it.
    [ -z "$(ls -A "$out" 2>/dev/null)" ] || fail "$what: left files in --out: $(ls "$out")"
  else
    [ ! -e "$out" ] || fail "$what: left an --out folder"
  fi
  [ "$failures" -eq "$before" ] && echo "ok: $name: ${line#*error: }"
done < cases.tsv

finish
