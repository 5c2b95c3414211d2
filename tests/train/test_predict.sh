#!/usr/bin/env bash
# pets_predict end to end, and pets_train --keep-best: a short run on a tiny synthetic store whose
# images are scaled down when stored (--max-side 96), then
#   - model.safetensors and best.safetensors carry the label names and the preprocessing in their
#     metadata (best.safetensors also its epoch and accuracy, the best of the [run] line);
#   - pets_predict on the evaluation images prints `FILE  BREED  PROBABILITY` per image in input
#     order, the same under -np 1 and -np 2, and its right predictions are exactly the training
#     run's evaluation count (metrics.jsonl's `correct`) for the final model and, for the best
#     model, its epoch's; --top-k pairs sorted, probabilities in [0, 1];
#   - --keep-best across a resume: the best so far comes from the checkpoint's history (the
#     resumed run's best.safetensors is the uninterrupted run's), a missing one is warned about;
#   - bad input: exit 2 and one error line naming the file; an unreadable image among others is
#     a warning naming it, the others are still classified.
#   - classes named by folders (--layout folders, UTF-8 names with spaces) reach the exported
#     model's label_names and pets_predict's lines, for JPEG, BMP, PGM and PPM images.
# usage: test_predict.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
#        (PETS_PREDICT: the pets_predict program)
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
predict=${PETS_PREDICT:?PETS_PREDICT names the pets_predict program}
"$synth" --out images --classes 3 --per-class 8 --seed 5 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 --max-side 96 > /dev/null 2>&1 ||
  fatal "pets_preprocess exit $?"
common=(--data pets.h5 --epochs 2 --batch-size 4 --eval-batch-size 8 --seed 42 --keep-best)
run_np 2 "$train" "${common[@]}" --out run > train.out 2> train.err ||
  { show train.err; fatal "pets_train --keep-best exit $?"; }

# metadata FILE KEY: the safetensors __metadata__ value of KEY (empty when absent).
metadata() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    print(json.loads(f.read(n)).get("__metadata__", {}).get(sys.argv[2], ""))
PY
}
# The store's labels: sorted byte order of the file names' labels.
labels=$(ls images | sed -E 's/_[0-9]+\.jpg$//' | LC_ALL=C sort -u | tr '\n' ' ')
for model in run/model.safetensors run/best.safetensors; do
  [ -s "$model" ] || { fail "no $model"; continue; }
  check_eq "$model label_names" "$(metadata "$model" label_names | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)), end=" ")')" "$labels"
  check_eq "$model input_size" "$(metadata "$model" input_size)" "[3, 224, 224]"
  check_eq "$model mean" "$(metadata "$model" mean)" "[0.485, 0.456, 0.406]"
  check_eq "$model std" "$(metadata "$model" std)" "[0.229, 0.224, 0.225]"
  check_eq "$model resize" "$(metadata "$model" interpolation) $(metadata "$model" crop_mode) $(metadata "$model" crop_pct)" "bilinear squash 1.0"
  check_eq "$model max_side" "$(metadata "$model" max_side)" "96"
done
# best.safetensors is the epoch the [run] line names as the best.
best_epoch=$(sed -n 's/^\[run\] .*best [0-9.]* % at epoch \([0-9]*\);.*/\1/p' train.err)
[ -n "$best_epoch" ] || { fail "no [run] line"; show train.err; }
check_eq "best.safetensors epoch" "$(metadata run/best.safetensors epoch)" "$best_epoch"
check_eq "model.safetensors has no epoch" "$(metadata run/model.safetensors epoch)" ""
pass "metadata of model.safetensors and best.safetensors (best epoch $best_epoch)"

# The evaluation images, as the store lists them, in a folder of their own.
h5dump -d /eval/names -w 0 -y pets.h5 | sed -n '/DATA {/,/}/p' | grep -o '"[^"]*"' |
  sed 's/\\000//g; s/"//g' > eval.txt
[ -s eval.txt ] || fatal "no evaluation images listed by h5dump"
mkdir evalimages && while read -r f; do cp "images/$f" evalimages/; done < eval.txt
evaluated=$(wc -l < eval.txt)

# correct FILE: predictions of FILE whose breed is the image's label.
correct() { awk '{ label = $1; sub(/^.*\//, "", label); sub(/_[0-9]+\.jpg$/, "", label); n += ($2 == label) } END { print n + 0 }' "$1"; }
jsonl_field() { sed -n "$(($2 + 1))p" run/metrics.jsonl | sed "s/.*\"$1\":\([^,}]*\).*/\1/"; }
last=$(($(wc -l < run/metrics.jsonl) - 1))

run_np 1 "$predict" --model run/model.safetensors --batch-size 2 evalimages > np1.out 2> np1.err ||
  { fail "pets_predict -np 1 exit $?"; show np1.err; }
run_np 2 "$predict" --model run/model.safetensors --batch-size 2 evalimages > np2.out 2> np2.err ||
  { fail "pets_predict -np 2 exit $?"; show np2.err; }
check_eq "lines of pets_predict" "$(wc -l < np1.out)" "$evaluated"
check_eq "files in input order" "$(cut -d' ' -f1 np1.out | tr '\n' ' ')" "$(LC_ALL=C sort eval.txt | sed 's|^|evalimages/|' | tr '\n' ' ')"
grep -vqE '^evalimages/[^ ]+  [^ ]+  (0\.[0-9]{4}|1\.0000)$' np1.out && { fail "lines not 'FILE  BREED  PROBABILITY'"; show np1.out; }
for breed in $(awk '{ print $2 }' np1.out | sort -u); do
  [[ " $labels" == *" $breed "* ]] || fail "predicted breed '$breed' is not a label"
done
[ -s np1.err ] && { fail "pets_predict wrote on stderr"; show np1.err; }
# Batches of 2: under -np 2 rank 0 takes batches 0 and 2, rank 1 batch 1; rank 0 prints all.
cmp -s np1.out np2.out || { fail "-np 2 output differs from -np 1"; diff np1.out np2.out; }
check_eq "right predictions of model.safetensors (metrics.jsonl correct, epoch $last)" \
  "$(correct np1.out)" "$(jsonl_field correct "$last")"
check_eq "evaluated" "$evaluated" "$(jsonl_field evaluated "$last")"
run_np 2 "$predict" --model run/best.safetensors evalimages > best.out 2> best.err ||
  { fail "pets_predict best exit $?"; show best.err; }
check_eq "right predictions of best.safetensors (epoch $best_epoch)" "$(correct best.out)" "$(jsonl_field correct "$best_epoch")"
check_eq "best.safetensors correct metadata" "$(metadata run/best.safetensors correct)" "$(jsonl_field correct "$best_epoch")"

# --top-k 3: three pairs, most probable first, each in [0, 1], summing to at most 1; the first
# pair is the top-1 line's. Files and folders mixed, in the order given.
first=$(head -1 eval.txt)
run_np 2 "$predict" --model run/model.safetensors --top-k 3 "evalimages/$first" evalimages > top.out 2> top.err ||
  { fail "--top-k 3 exit $?"; show top.err; }
check_eq "--top-k lines" "$(wc -l < top.out)" "$((evaluated + 1))"
awk 'NF != 7 || !($3 >= $5 && $5 >= $7 && $7 >= 0 && $3 <= 1 && $3 + $5 + $7 <= 1.0002) { bad = 1; print "bad: " $0 } END { exit bad }' top.out ||
  fail "--top-k 3 lines are not three sorted probabilities"
check_eq "--top-k 3 first class" "$(tail -n +2 top.out | cut -d' ' -f1,3)" "$(cut -d' ' -f1,3 np1.out)"
check_eq "a file given first comes first" "$(head -1 top.out | cut -d' ' -f1)" "evalimages/$first"
pass "pets_predict: format, input order, -np 1 = -np 2, predictions equal evaluation's"

# --keep-best across a resume: a folder holding what a run stopped after epoch 0 leaves. When
# epoch 1 is the best, the folder gets a stand-in best.safetensors, which the resumed run must
# replace with the uninterrupted run's; when epoch 0 stays the best, whose model the folder lacks,
# the resumed run must say so and write none.
ckpt1=$(ls run/ckpt-*.safetensors | sort -t- -k2 -n | head -1)
mkdir resumed && cp "$ckpt1" resumed/ && basename "$ckpt1" > resumed/latest
[ "$best_epoch" -eq 0 ] || echo stand-in > resumed/best.safetensors
run_np 2 "$train" "${common[@]}" --out resumed --resume > resumed.out 2> resumed.err ||
  { fail "resume with --keep-best exit $?"; show resumed.err; }
grep -q "resumed from .* at epoch 1, step 0" resumed.err || fail "not resumed after epoch 0"
if [ "$best_epoch" -eq 0 ]; then
  grep -q "warning: --keep-best: resumed/best.safetensors is missing, so the best epoch so far (0)" resumed.err ||
    { fail "no warning of the missing best model"; show resumed.err; }
  [ -e resumed/best.safetensors ] && fail "a best.safetensors of an epoch that is not the best"
else
  cmp -s run/best.safetensors resumed/best.safetensors ||
    fail "resumed with --keep-best: best.safetensors is not the uninterrupted run's (best epoch $best_epoch)"
  grep -q "^\[epoch 1\] best so far" resumed.err || fail "no best-so-far note after the resume"
fi
pass "--keep-best across a resume"

# Bad input: exit 2, one error line naming what is wrong.
expect_usage "no --model" "'--model' is required" run_np 2 "$predict" evalimages
expect_usage "abbreviated option" "--mod" run_np 2 "$predict" --mod run/model.safetensors evalimages
expect_usage "missing model" "missing.safetensors" run_np 2 "$predict" --model missing.safetensors evalimages
expect_usage "an image as the model" "not a safetensors model" run_np 2 "$predict" --model "images/$first" evalimages
expect_usage "a checkpoint as the model" "is a pets_train checkpoint" run_np 2 "$predict" --model "$ckpt1" evalimages
expect_usage "--top-k above the classes" "the model has 3 classes" run_np 2 "$predict" --model run/model.safetensors --top-k 4 evalimages
expect_usage "missing image" "no file or folder 'nope.jpg'" run_np 2 "$predict" --model run/model.safetensors nope.jpg
# A model exported before the metadata existed: its tensors with the old metadata only.
python3 - run/model.safetensors old.safetensors <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
header["__metadata__"] = {"format": "pt", "arch": "resnet50d", "num_classes": "3"}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
PY
expect_usage "an older export" "old.safetensors has no label_names in its metadata: it was exported by an older pets_train" \
  run_np 2 "$predict" --model old.safetensors evalimages
printf 'not an image' > broken.jpg
expect_usage "one unreadable image" "cannot read image broken.jpg" run_np 2 "$predict" --model run/model.safetensors broken.jpg
# Among others: a warning naming it, the other images classified, exit 2 at the end.
mkdir mixed && cp evalimages/* mixed/ && cp broken.jpg mixed/
run_np 2 "$predict" --model run/model.safetensors mixed > mixed.out 2> mixed.err
check_eq "exit with an unreadable image among others" "$?" 2
grep -q '^warning: cannot read image mixed/broken.jpg: .*; skipped$' mixed.err || { fail "no warning naming the bad image"; show mixed.err; }
grep -qx "error: 1 of $((evaluated + 1)) images could not be read (named above); the others are classified" mixed.err ||
  { fail "no final error line"; show mixed.err; }
check_eq "the others classified" "$(sed 's|^mixed/|evalimages/|' mixed.out)" "$(cat np1.out)"
abort_report mixed.err && fail "an unreadable image tore the job down"
pass "bad input"

# Classes named by folders: a model trained on a store of the folders layout (class names with a
# space and non-ASCII UTF-8, one of them with images in BMP and PGM/PPM besides JPEG) carries the
# folder names, and pets_predict prints them, for a folder of images of every format.
mkdir -p "named/Maine Coon" "named/Émile ñ" named/zebra mixedformats
i=0
for f in images/*.jpg; do
  case $((i % 3)) in 0) d="named/Maine Coon" ;; 1) d="named/Émile ñ" ;; *) d=named/zebra ;; esac
  cp "$f" "$d/$i.jpg"
  i=$((i + 1))
done
{ printf 'P6\n2 1\n255\n'; printf '\377\000\000\000\377\000'; } >"named/zebra/red green.ppm"
printf 'P2 1 1 255 128\n' >named/zebra/grey.PGM
{ printf 'BM\076\000\000\000\000\000\000\000\066\000\000\000\050\000\000\000\002\000\000\000\001\000\000\000\001\000\030\000'
  printf '\000%.0s' $(seq 24); printf '\377\000\000\377\377\377\000\000'; } >"named/Émile ñ/blue.bmp"
cp "named/zebra/red green.ppm" named/zebra/grey.PGM "named/Émile ñ/blue.bmp" mixedformats/
cp "named/Maine Coon/0.jpg" mixedformats/
run_np 2 "$preprocess" --images named --out named.h5 --max-side 96 > named_pre.out 2>&1 ||
  { show named_pre.out; fatal "pets_preprocess (folders) exit $?"; }
grep -q "layout folders (auto); 27 stored, 0 skipped" named_pre.out || { fail "folders store: not 27 images stored"; show named_pre.out; }
run_np 2 "$train" --data named.h5 --epochs 1 --batch-size 4 --eval-batch-size 8 --seed 42 \
  --out named_run > named_train.out 2> named_train.err || { show named_train.err; fatal "pets_train (folders) exit $?"; }
check_eq "folders model label_names" \
  "$(metadata named_run/model.safetensors label_names | python3 -c 'import json, sys; print("|".join(json.load(sys.stdin)))')" \
  "Maine Coon|zebra|Émile ñ"  # byte order of the UTF-8 names
run_np 2 "$predict" --model named_run/model.safetensors --top-k 3 mixedformats > named.out 2> named.err ||
  { fail "pets_predict (folders) exit $?"; show named.err; }
check_eq "pets_predict on a folder of four formats: lines" "$(wc -l < named.out)" 4
check_eq "pets_predict: the files, in name order" "$(awk -F'  ' '{ print $1 }' named.out | tr '\n' '|')" \
  "mixedformats/0.jpg|mixedformats/blue.bmp|mixedformats/grey.PGM|mixedformats/red green.ppm|"
check_eq "pets_predict: every line names the three folder classes" \
  "$(awk -F'  ' '{ n = 0; for (i = 2; i <= NF; i += 2) n += ($i == "Maine Coon" || $i == "Émile ñ" || $i == "zebra"); print n }' named.out | sort -u)" 3
pass "classes named by folders reach the exported model and pets_predict, for JPEG, BMP, PGM and PPM"

finish
