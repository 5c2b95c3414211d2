#!/usr/bin/env bash
# pets_preprocess --layout on trees made here: names, folders and split (each as chosen by auto
# and given), --split-mode stratified, --list CSV files, file names (extensions in any letter case, PNG and GIF, hidden entries, files without
# an image extension, spaces and UTF-8, a nested folder, symbolic-link loops), the trees auto
# refuses, bad input (one class, no image, a class in the evaluation folder only, a class folder
# not named in UTF-8), and 1,200 classes. Stores are read back with store_listing (the project's
# reader): labels, label_names and the split; h5py reads the same labels and splits.
# Usage: test_layouts.sh PETS_SYNTH PETS_PREPROCESS STORE_LISTING WORKDIR MPIEXEC NUMPROC_FLAG "PREFLAGS"
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
[ $# -eq 7 ] || fatal "usage: test_layouts.sh PETS_SYNTH PETS_PREPROCESS STORE_LISTING WORKDIR MPIEXEC NUMPROC_FLAG PREFLAGS"
synth=$1 prep=$2 listing=$3
use_mpiexec "$5" "$6" "$7"
enter_workdir "$4"

# Small images to copy: a 7x5 JPEG, a PNG and a GIF (pets_synth's quirk files, named .jpg).
"$synth" --out src --classes 2 --per-class 1 --quirks --seed 1 >/dev/null || fatal "pets_synth exit $?"
jpg=src/pomeranian_1013.jpg png=src/beagle_1003.jpg gif=src/keeshond_1005.jpg
# put FILE PATH...: copies FILE to each PATH, making the folders.
put() {
  local from=$1 p
  shift
  for p in "$@"; do mkdir -p "$(dirname "$p")" && cp "$from" "$p" || fatal "cannot write $p"; done
}
# prep_ok WHAT LOG ARGS...: a run that must succeed (-np 2); its summary line is in LOG.
prep_ok() {
  local what=$1 log=$2
  shift 2
  capture "$log" run_np 2 "$prep" --max-side 64 "$@"
  [ "$status" -eq 0 ] || { fail "$what: exit $status"; show "$log"; return 1; }
}
# summary LOG: the summary line without "pets_preprocess: OUT: ".
summary() { sed -n 's/^pets_preprocess: [^ ]*: \(layout .*\)/\1/p' "$1"; }
# The store's lines: label names (in id order), then "SPLIT<TAB>LABEL<TAB>PATH" per image, sorted.
labels_of() { "$listing" "$1" | awk -F'\t' '$1 == "label" { print $3 }'; }
images_of() { "$listing" "$1" | awk -F'\t' '$1 == "train" || $1 == "eval"' | LC_ALL=C sort; }
no_store() { [ ! -e "$1" ] || fail "$2: a store was left at $1"; }
# The same lines as images_of, read by h5py (Debian's python3-h5py): a reader that is not ours.
h5py_images_of() {
  /usr/bin/python3 - "$1" <<'PY' | LC_ALL=C sort
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["label_names"]]
    for split in ("train", "eval"):
        labels, paths = f[split]["labels"][:], f[split]["names"][:]
        for label, path in zip(labels, paths):
            path = (path.decode() if isinstance(path, bytes) else path).rstrip("\0")
            print(split, names[label], path, sep="\t")
PY
}
# h5py_agrees STORE: h5py reads the labels and splits store_listing does.
h5py_agrees() {
  local ours theirs
  ours=$(images_of "$1") theirs=$(h5py_images_of "$1")
  [ -n "$theirs" ] && [ "$theirs" = "$ours" ] ||
    { fail "$1: h5py reads other labels or splits"; diff <(echo "$ours") <(echo "$theirs") | head -5; }
}

# ---- folders ------------------------------------------------------------------------------
# Classes in byte order of their UTF-8 names ("Maine Coon" < "cat" < "dog" < "Émile ñ"); images
# at any depth; the extensions in any case; a PNG and a GIF; hidden entries and other files
# counted; a broken image named; links to folders already read (loops) named, not followed again.
put "$jpg" fold/cat/a.jpg fold/cat/b.JPG fold/cat/nested/deep/c.jpeg fold/cat/.hidden.jpg \
  fold/dog/f.jpg "fold/Maine Coon/g h.jpg" "fold/Maine Coon/i.jpg" "fold/Émile ñ/j.jpg" \
  "fold/Émile ñ/k.Jpg" fold/.git/x.jpg
put "$png" fold/dog/d.Png
put "$gif" fold/dog/e.gif
echo notes >fold/cat/notes.txt
head -c 100 "$jpg" >fold/cat/broken.jpg
ln -s .. fold/cat/loop
ln -s . fold/dog/self
prep_ok "folders" fold.log --images fold --out fold.h5 --train-fraction 0.5
line=$(summary fold.log)
echo "folders: $line"
check_eq "folders: summary line" "$line" \
  "layout folders (auto); 10 stored, 3 skipped: cat/broken.jpg (corrupt JPEG: no frame size in the header), cat/loop (folder already read (a symbolic link to it)), dog/self (folder already read (a symbolic link to it)); 3 not read (2 hidden, 1 without an image extension); 5 train, 5 eval, 4 labels"
check_eq "folders: label_names" "$(labels_of fold.h5 | tr '\n' '|')" "Maine Coon|cat|dog|Émile ñ|"
check_eq "folders: each image's label is its class folder" \
  "$(images_of fold.h5 | awk -F'\t' '{ split($3, p, "/"); if (p[1] != $2) print }')" ""
check_eq "folders: the stored paths" "$(images_of fold.h5 | cut -f3 | LC_ALL=C sort | tr '\n' '|')" \
  "Maine Coon/g h.jpg|Maine Coon/i.jpg|cat/a.jpg|cat/b.JPG|cat/nested/deep/c.jpeg|dog/d.Png|dog/e.gif|dog/f.jpg|Émile ñ/j.jpg|Émile ñ/k.Jpg|"
# Given, the same store contents.
prep_ok "--layout folders" fold2.log --images fold --out fold2.h5 --train-fraction 0.5 --layout folders
check_eq "--layout folders: the layout named" "$(summary fold2.log | cut -d';' -f1)" "layout folders"
diff <("$listing" fold.h5) <("$listing" fold2.h5) >/dev/null || fail "--layout folders and auto give different stores"

# The same seeded permutation as the names layout: class folders A, B, C of files named as a flat
# folder of the same files would be list the candidates in the same order, so the two splits
# hold the same file names.
for c in A B C; do for i in 1 2 3 4 5 6; do put "$jpg" "perm_folders/$c/${c}_$i.jpg" "perm_names/${c}_$i.jpg"; done; done
prep_ok "perm folders" permf.log --images perm_folders --out permf.h5 --seed 7
prep_ok "perm names" permn.log --images perm_names --out permn.h5 --seed 7
check_eq "names layout chosen for a flat folder" "$(summary permn.log | cut -d';' -f1)" "layout names (auto)"
split_names() { images_of "$1" | awk -F'\t' '{ n = split($3, p, "/"); print $1 "\t" $2 "\t" p[n] }' | LC_ALL=C sort; }
check_eq "folders and names: the same split of the same files" "$(split_names permf.h5)" "$(split_names permn.h5)"
[ "$(images_of permf.h5 | grep -c '^eval')" -eq 4 ] || fail "perm: not 4 eval images of 18 (0.8)"
prep_ok "perm folders, seed 8" permf8.log --images perm_folders --out permf8.h5 --seed 8
[ "$(split_names permf.h5)" != "$(split_names permf8.h5)" ] || fail "folders: --seed does not change the split"

# ---- names --------------------------------------------------------------------------------
# The label from the name with any image extension in any case; a PNG named .png; a name whose
# label is not UTF-8 skipped and named.
put "$jpg" names/Persian_1.JPG names/Persian_2.jpeg "names/Maine Coon_3.jpg" names/.DS_Store
put "$png" names/Bengal_4.png names/Bengal_5.PNG
echo x >names/Bengal_6.mat
put "$jpg" names/samoyed.jpg "names/$(printf 'x\377')_1.jpg"
prep_ok "names" names.log --images names --out names.h5
line=$(summary names.log)
echo "names: $line"
check_eq "names: summary up to the split" "$(cut -d';' -f1-3 <<<"$line")" \
  "layout names (auto); 5 stored, 2 skipped: samoyed.jpg (name does not match ^(.*)_\\d+\\.(jpg|jpeg|png|gif|webp|bmp|ppm|pgm|tif|tiff)$ (any letter case)), $(printf 'x\377')_1.jpg (name is not UTF-8 (its label would be a class name)); 2 not read (1 hidden, 1 without an image extension)"
check_eq "names: label_names" "$(labels_of names.h5 | tr '\n' '|')" "Bengal|Maine Coon|Persian|"
check_eq "names: labels" "$(images_of names.h5 | cut -f2,3 | LC_ALL=C sort | tr '\t\n' ':|')" \
  "Bengal:Bengal_4.png|Bengal:Bengal_5.PNG|Maine Coon:Maine Coon_3.jpg|Persian:Persian_1.JPG|Persian:Persian_2.jpeg|"

# ---- split --------------------------------------------------------------------------------
put "$jpg" sp/train/cat/1.jpg sp/train/cat/2.jpg sp/train/cat/3.jpg sp/train/dog/1.jpg \
  sp/train/dog/2.jpg sp/train/bird/1.jpg sp/val/cat/4.jpg sp/val/dog/3.jpg
echo readme >sp/README.txt
prep_ok "split" sp.log --images sp --out sp.h5
line=$(summary sp.log)
echo "split: $line"
check_eq "split: summary line" "$line" \
  "layout split (auto); 8 stored, 0 skipped; 1 not read (1 without an image extension); 6 train, 2 eval, 3 labels"
check_eq "split: label_names" "$(labels_of sp.h5 | tr '\n' '|')" "bird|cat|dog|"
check_eq "split: the folders' split kept" "$(images_of sp.h5 | tr '\t\n' ':|')" \
  "eval:cat:val/cat/4.jpg|eval:dog:val/dog/3.jpg|train:bird:train/bird/1.jpg|train:cat:train/cat/1.jpg|train:cat:train/cat/2.jpg|train:cat:train/cat/3.jpg|train:dog:train/dog/1.jpg|train:dog:train/dog/2.jpg|"
grep -q "^warning: sp.h5: 1 class has no evaluation image: bird (the split is kept as given)$" sp.log ||
  { fail "split: no warning for the class without an evaluation image"; show sp.log; }
# --seed does not move the given split; the other names of the evaluation folder.
prep_ok "split --seed 9" sp9.log --images sp --out sp9.h5 --seed 9 --layout split
check_eq "split: --seed 9 keeps the split" "$(images_of sp9.h5)" "$(images_of sp.h5)"
for name in valid validation test; do
  rm -rf "sp_$name" && cp -r sp "sp_$name" && mv "sp_$name/val" "sp_$name/$name"
  prep_ok "split with $name/" "sp_$name.log" --images "sp_$name" --out "sp_$name.h5"
  check_eq "split with $name/: eval images" "$(images_of "sp_$name.h5" | grep -c "^eval"$'\t'"[a-z]*"$'\t'"$name/")" 2
done

# ---- formats --------------------------------------------------------------------------------
# A PPM, a plain PGM, a 24-bit BMP and a lossless WebP written here, in any letter case of their
# extensions, are decoded; a TIFF is skipped with its stated reason.
{ printf 'P6\n2 1\n255\n'; printf '\377\000\000\000\377\000'; } >bytes.ppm
# BMP: 2x1, 24 bits, bottom-up, rows padded to 4 bytes: blue then white.
{ printf 'BM\076\000\000\000\000\000\000\000\066\000\000\000\050\000\000\000\002\000\000\000\001\000\000\000\001\000\030\000'
  printf '\000%.0s' $(seq 24); printf '\377\000\000\377\377\377\000\000'; } >bytes.bmp
put bytes.ppm fmt/red/a.ppm fmt/red/b.PPM
put bytes.bmp fmt/blue/c.bmp fmt/blue/d.Bmp
printf 'P2 1 1 255 128\n' >fmt/blue/e.pgm
printf 'II*\000\010\000\000\000' >fmt/red/f.tif
"${PETS_ENCODE_WEBP:?PETS_ENCODE_WEBP names the encode_webp program}" fmt/red/g.WebP ||
  fatal "encode_webp exit $?"
prep_ok "formats" fmt.log --images fmt --out fmt.h5 --train-fraction 0.5
check_eq "formats: summary line" "$(summary fmt.log)" \
  "layout folders (auto); 6 stored, 1 skipped: red/f.tif (TIFF: not decoded (convert it to PNG, which keeps every pixel)); 2 train, 4 eval, 2 labels"
check_eq "formats: the stored images" "$(images_of fmt.h5 | cut -f2,3 | LC_ALL=C sort | tr '\t\n' ':|')" \
  "blue:blue/c.bmp|blue:blue/d.Bmp|blue:blue/e.pgm|red:red/a.ppm|red:red/b.PPM|red:red/g.WebP|"

# ---- --split-mode stratified -----------------------------------------------------------------
# Classes of 1, 2, 3 and 10 images: floor(n * 0.8) of each to training, held to [1, n - 1], the
# single image to training (and warned about); the store records how it was split.
put "$jpg" strat/a_one/1.jpg strat/b_two/1.jpg strat/b_two/2.jpg
for i in 1 2 3; do put "$jpg" "strat/c_three/$i.jpg"; done
for i in 0 1 2 3 4 5 6 7 8 9; do put "$jpg" "strat/d_ten/$i.jpg"; done
prep_ok "stratified" strat.log --images strat --out strat.h5 --split-mode stratified
check_eq "stratified: summary line" "$(summary strat.log)" \
  "layout folders (auto); 16 stored, 0 skipped; 12 train, 4 eval (stratified), 4 labels"
per_class() { images_of "$1" | awk -F'\t' '{ n[$1 ":" $2]++ } END { for (k in n) print k "=" n[k] }' | LC_ALL=C sort | tr '\n' ' '; }
check_eq "stratified: images per class and split" "$(per_class strat.h5)" \
  "eval:b_two=1 eval:c_three=1 eval:d_ten=2 train:a_one=1 train:b_two=1 train:c_three=2 train:d_ten=8 "
grep -q "^warning: strat.h5: 1 class has no evaluation image: a_one (the split is stratified by class over the files before decoding: a class of one file goes to training" strat.log ||
  { fail "stratified: no warning naming the class of one image"; show strat.log; }
attribute() { "$listing" "$1" | awk -F'\t' -v k="$2" '$1 == "attribute" && $2 == k { print $3 }'; }
check_eq "stratified: the split attribute" "$(attribute strat.h5 split)" stratified
check_eq "stratified: the layout attribute" "$(attribute strat.h5 layout)" folders
check_eq "random: the split attribute" "$(attribute fold.h5 split)" random
check_eq "split layout: the split attribute" "$(attribute sp.h5 split)" given
prep_ok "stratified, seed 8" strat8.log --images strat --out strat8.h5 --split-mode stratified --seed 8
check_eq "stratified, seed 8: the same counts" "$(per_class strat8.h5)" "$(per_class strat.h5)"
[ "$(images_of strat.h5)" != "$(images_of strat8.h5)" ] || fail "stratified: --seed does not change the split"
# The names layout is stratified by the labels of its names.
prep_ok "stratified names" permns.log --images perm_names --out permns.h5 --split-mode stratified --train-fraction 0.5
check_eq "stratified names: 3 of each class to evaluation" "$(per_class permns.h5)" \
  "eval:A=3 eval:B=3 eval:C=3 train:A=3 train:B=3 train:C=3 "
expect_usage "--split-mode with the split layout" "--split-mode stratified: layout split (chosen by --layout auto) of sp keeps the split of its folders; leave --split-mode out" \
  run_np 2 "$prep" --images sp --out spstrat.h5 --split-mode stratified
no_store spstrat.h5 "--split-mode with the split layout"
expect_usage "--split-mode junk" "--split-mode must be random or stratified, got 'Random'" \
  run_np 2 "$prep" --images strat --out bad.h5 --split-mode Random

# ---- --list: a CSV of paths and labels ----------------------------------------------------
# Paths relative to the list's folder (a quoted one with a comma, a space and a quote) or
# absolute, a UTF-8 label, CRLF line ends, a missing file skipped and named; with a split column
# the split is kept.
put "$jpg" lst/imgs/a1.jpg lst/imgs/a2.jpg lst/imgs/a3.jpg "lst/imgs/b 1, \"x\".jpg" lst/imgs/b2.jpg \
  lst/imgs/b3.jpg abs/c1.jpg abs/c2.jpg
put "$png" lst/imgs/c3.png
printf '%s\r\n' 'path,label' imgs/a1.jpg,apple imgs/a2.jpg,apple imgs/a3.jpg,apple \
  '"imgs/b 1, ""x"".jpg",Birne ñ' imgs/b2.jpg,'Birne ñ' imgs/b3.jpg,'Birne ñ' \
  "$work/abs/c1.jpg,cherry" "$work/abs/c2.jpg,cherry" imgs/c3.png,cherry imgs/gone.jpg,cherry >lst/list.csv
prep_ok "--list" lst.log --list lst/list.csv --out lst.h5 --train-fraction 0.5 --split-mode stratified
check_eq "--list: summary line" "$(summary lst.log)" \
  "layout list; 9 stored, 1 skipped: imgs/gone.jpg (unreadable file); 3 train, 6 eval (stratified), 3 labels"
check_eq "--list: label_names" "$(labels_of lst.h5 | tr '\n' '|')" "Birne ñ|apple|cherry|"
check_eq "--list: the stored paths and labels" "$(images_of lst.h5 | cut -f2,3 | LC_ALL=C sort | tr '\t\n' ':|')" \
  "$(printf '%s|' "Birne ñ:imgs/b 1, \"x\".jpg" "Birne ñ:imgs/b2.jpg" "Birne ñ:imgs/b3.jpg" "apple:imgs/a1.jpg" "apple:imgs/a2.jpg" "apple:imgs/a3.jpg" "cherry:$work/abs/c1.jpg" "cherry:$work/abs/c2.jpg" "cherry:imgs/c3.png")"
check_eq "--list: the layout attribute" "$(attribute lst.h5 layout)" list
# Run from another folder: the paths are the list's folder's, not the current one's.
mkdir -p elsewhere && (cd elsewhere && capture ../lst2.log run_np 2 "$prep" --max-side 64 --list ../lst/list.csv --out ../lst2.h5 --train-fraction 0.5 --split-mode stratified)
check_eq "--list from another folder: the same store" "$(images_of lst2.h5)" "$(images_of lst.h5)"
printf '%s\n' path,label,split imgs/a1.jpg,apple,train imgs/a2.jpg,apple,eval imgs/b2.jpg,'Birne ñ',train \
  imgs/b3.jpg,'Birne ñ',train >lst/split.csv
prep_ok "--list with a split" lsts.log --list lst/split.csv --out lsts.h5
check_eq "--list with a split: kept" "$(images_of lsts.h5 | tr '\t\n' ':|')" \
  "eval:apple:imgs/a2.jpg|train:Birne ñ:imgs/b2.jpg|train:Birne ñ:imgs/b3.jpg|train:apple:imgs/a1.jpg|"
check_eq "--list with a split: the split attribute" "$(attribute lsts.h5 split)" given
grep -q "^warning: lsts.h5: 1 class has no evaluation image: Birne ñ (the split is kept as given)$" lsts.log ||
  { fail "--list with a split: no warning for the class without an evaluation image"; show lsts.log; }
expect_usage "--list with a split and --split-mode" "--split-mode random: --list lst/split.csv gives the split (its split column); leave --split-mode out" \
  run_np 2 "$prep" --list lst/split.csv --out bad.h5 --split-mode random
printf 'path,label\nimgs/a1.jpg,apple\n"imgs/a2.jpg,apple\n' >lst/open.csv
expect_usage "--list with an unclosed quote" "--list lst/open.csv, line 3: a quoted field is not closed" \
  run_np 2 "$prep" --list lst/open.csv --out bad.h5
expect_usage "--list with --layout" "--layout folders is for --images: a --list names each image's class itself" \
  run_np 2 "$prep" --list lst/list.csv --layout folders --out bad.h5
expect_usage "--list and --images" "give --images or --list, not both" \
  run_np 2 "$prep" --list lst/list.csv --images lst --out bad.h5
expect_usage "neither --list nor --images" "give --images DIR (a folder of images) or --list FILE.csv" \
  run_np 2 "$prep" --out bad.h5
expect_usage "--list naming a folder" "--list lst is a folder" run_np 2 "$prep" --list lst --out bad.h5
no_store bad.h5 "--list refused"

# ---- trees auto refuses, and the --layout that reads them --------------------------------------
put "$jpg" amb1/cat/a.jpg amb1/cat/b.jpg amb1/dog/c.jpg amb1/dog/d.jpg amb1/cover.jpg
expect_usage "image files beside class folders" "amb1 holds 1 image file (cover.jpg) beside folders of images (cat/, dog/): give --layout folders" \
  run_np 2 "$prep" --images amb1 --out amb1.h5
no_store amb1.h5 "image files beside class folders"
prep_ok "--layout folders beside a file" amb1f.log --images amb1 --out amb1.h5 --layout folders --train-fraction 0.5
grep -q "amb1.h5: layout folders; 4 stored, 1 skipped: cover.jpg (image file outside the class folders);" amb1f.log ||
  { fail "--layout folders: the file beside the classes is not skipped and named"; show amb1f.log; }
put "$jpg" amb2/cat/a.jpg amb2/cat/b.jpg amb2/dog/c.jpg amb2/dog/d.jpg
mkdir -p amb2/empty && echo x >amb2/empty/notes.txt
expect_usage "an empty class folder" "1 class folder holds no image file: empty/; remove it, or give --layout folders" \
  run_np 2 "$prep" --images amb2 --out amb2.h5
prep_ok "--layout folders with an empty class" amb2f.log --images amb2 --out amb2.h5 --layout folders --train-fraction 0.5
grep -q "amb2.h5: layout folders; 4 stored, 1 skipped: empty (folder holds no image file (not a class)); 1 not read" amb2f.log ||
  { fail "--layout folders: the empty class folder is not skipped and named"; show amb2f.log; }
rm -rf amb3 && cp -r sp amb3 && cp -r amb3/val amb3/test
expect_usage "both val/ and test/" "amb3 holds train/ and 2 evaluation folders (val/, test/): give --layout split to evaluate on val/" \
  run_np 2 "$prep" --images amb3 --out amb3.h5
prep_ok "--layout split with val/ and test/" amb3s.log --images amb3 --out amb3.h5 --layout split
grep -q "amb3.h5: layout split; 8 stored, 1 skipped: test (folder not read (the split layout reads train/ and val/))" amb3s.log ||
  { fail "--layout split: test/ not named as not read"; show amb3s.log; }
rm -rf amb4 && cp -r sp amb4 && put "$jpg" amb4/stray.jpg
expect_usage "image files beside train/ and val/" "amb4 holds image files beside train/ and val/ (stray.jpg)" \
  run_np 2 "$prep" --images amb4 --out amb4.h5

# ---- bad input: exit 2, one error line, no store ---------------------------------------------
put "$jpg" one/cat/a.jpg one/cat/b.jpg
expect_usage "one class" "only one class (cat) among the 2 stored images of one (layout folders, chosen by --layout auto): a classifier needs at least two" \
  run_np 2 "$prep" --images one --out one.h5
no_store one.h5 "one class"
mkdir -p none/cat none/dog && echo x >none/cat/notes.txt && echo y >none/dog/.hidden
expect_usage "no image (auto)" "2 class folders hold no image file: cat/, dog/" run_np 2 "$prep" --images none --out none.h5
expect_usage "no image (--layout folders)" "no usable image in none (layout folders): 2 entries skipped (2 folder holds no image file); 2 not read (1 hidden, 1 without an image extension)" \
  run_np 2 "$prep" --images none --out none.h5 --layout folders
no_store none.h5 "no image"
rm -rf evalonly && cp -r sp evalonly && put "$jpg" evalonly/val/fish/1.jpg
expect_usage "a class in val/ only" "1 class is in the evaluation folder only, with no training image: val/fish/" \
  run_np 2 "$prep" --images evalonly --out evalonly.h5
no_store evalonly.h5 "a class in val/ only"
expect_usage "--layout split without val/" "--layout split: fold needs a train/ folder and a val/" \
  run_np 2 "$prep" --images fold --out bad.h5 --layout split
expect_usage "--layout junk" "--layout must be auto, names, folders or split, got 'junk'" \
  run_np 2 "$prep" --images fold --out bad.h5 --layout junk
put "$jpg" badname/cat/a.jpg "badname/$(printf 'x\377y')/b.jpg"
# (LC_ALL=C: grep reads the message's invalid UTF-8 as text)
LC_ALL=C expect_usage "a class folder not named in UTF-8" "is not named in UTF-8" run_np 2 "$prep" --images badname --out bad.h5
# An unreadable folder. Root reads every folder, so as root the check runs as the user nobody
# (one rank, started without mpiexec) in a folder of its own under /tmp, with a copy of
# pets_preprocess (the build tree's folders may be closed to other users).
put "$jpg" locked/cat/a.jpg locked/cat/b.jpg locked/dog/c.jpg locked/dog/sub/d.jpg
if [ "$(id -u)" -ne 0 ]; then
  chmod 000 locked/dog/sub
  expect_usage "an unreadable folder" "cannot read the folder locked/dog/sub" run_np 2 "$prep" --images locked --out bad.h5
  chmod 755 locked/dog/sub
elif command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  nobody_dir=$(mktemp -d /tmp/pets_layouts.XXXXXX) || fatal "cannot make a folder under /tmp"
  cp -r locked "$prep" "$nobody_dir/" && chmod -R a+rX "$nobody_dir" && chmod 777 "$nobody_dir" &&
    chmod 000 "$nobody_dir/locked/dog/sub" || fatal "cannot fill $nobody_dir"
  cd "$nobody_dir" || fatal "cannot enter $nobody_dir"
  expect_usage "an unreadable folder (as nobody)" "cannot read the folder locked/dog/sub" \
    setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups -- env HOME="$nobody_dir" \
    "./$(basename "$prep")" --images locked --out bad.h5
  no_store bad.h5 "an unreadable folder"
  cd "$work" && rm -rf "$nobody_dir"
else
  fail "running as root without setpriv or the user nobody: the unreadable-folder check cannot run"
fi
no_store bad.h5 "bad input"

# ---- many classes -------------------------------------------------------------------------
# 1,200 classes of 2 tiny images each (hard links of one file), names of 79 bytes: label_names
# is 95 KB, past HDF5's 64 KB for an attribute in an object header.
for ((c = 0; c < 1200; c++)); do
  d=$(printf 'many/class_%04d_%068d' "$c" 0)
  mkdir -p "$d" && ln "$jpg" "$d/1.jpg" && ln "$jpg" "$d/2.jpg" || fatal "cannot make $d"
done
start=$SECONDS
prep_ok "1,200 classes" many.log --images many --out many.h5 --train-fraction 0.5
echo "1,200 classes: $((SECONDS - start)) s: $(summary many.log | cut -c1-120)"
grep -q "many.h5: layout folders (auto); 2400 stored, 0 skipped; 1200 train, 1200 eval, 1200 labels$" many.log ||
  { fail "1,200 classes: not 2400 images in 1200 labels"; show many.log; }
check_eq "1,200 classes: label_names in byte order" "$(labels_of many.h5)" "$(ls many | LC_ALL=C sort)"
check_eq "1,200 classes: each image's label is its folder" \
  "$(images_of many.h5 | awk -F'\t' '{ split($3, p, "/"); if (p[1] != $2) print }' | head -3)" ""

for store in fold.h5 permn.h5 names.h5 sp.h5 strat.h5 lst.h5 lsts.h5 fmt.h5 many.h5; do
  h5py_agrees "$store"
done

leftovers=$(find . -maxdepth 1 -name '*tmp*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"
finish
