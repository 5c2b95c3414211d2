#!/usr/bin/env bash
# End-to-end test of pets_synth and pets_preprocess.
# Usage: test_cli.sh PETS_SYNTH PETS_PREPROCESS WORKDIR MPIEXEC NUMPROC_FLAG "PREFLAGS" PETS_TRAIN
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
[ $# -eq 7 ] || fatal "usage: test_cli.sh PETS_SYNTH PETS_PREPROCESS WORKDIR MPIEXEC NUMPROC_FLAG PREFLAGS PETS_TRAIN"
synth=$1 prep=$2 train=$7
use_mpiexec "$4" "$5" "$6"
enter_workdir "$3"

# pets_synth: usage error (one `error:` line, as every program's), then a folder with the quirk
# files.
capture synth_usage.log "$synth" --out imgs
check_eq "pets_synth without --per-class: exit status" "$status" 2
grep -q -- "^error: .*--per-class" synth_usage.log || { fail "pets_synth without --per-class: no error line naming it"; show synth_usage.log; }
"$synth" --out imgs --per-class 3 --quirks --seed 1 >/dev/null || fatal "pets_synth exit $?"
n=$(find imgs -maxdepth 1 -name '*.jpg' | wc -l)
check_eq "pets_synth's .jpg files" "$n" $((37 * 3 + 12))
[ -f imgs/British_Shorthair_3.jpg ] && [ -f imgs/american_pit_bull_terrier_1.jpg ] || fail "breed names"
[ -f imgs/extra/Sphynx_1014.jpg ] && [ -f imgs/Persian_1011.JPG ] && [ -f imgs/Abyssinian_1010.mat ] || fail "quirks"
# Into a folder that holds files: refused, nothing added (old and new files would mix).
capture synth_again.log "$synth" --out imgs --per-class 1 --seed 2
check_eq "pets_synth into a non-empty folder: exit status" "$status" 2
grep -q "imgs is not empty" synth_again.log || { fail "pets_synth into a non-empty folder: no message saying so"; show synth_again.log; }
check_eq "pets_synth's .jpg files after the refusal" "$(find imgs -maxdepth 1 -name '*.jpg' | wc -l)" $((37 * 3 + 12))
# No abbreviations of option names (Boost's guessing): --per is not --per-class.
capture synth_abbrev.log "$synth" --out abbrev --per 3
check_eq "pets_synth --per 3: exit status" "$status" 2
grep -q "unrecognised option '--per'" synth_abbrev.log || { fail "pets_synth --per: not refused as unknown"; show synth_abbrev.log; }

# -np 1 and -np 2 give the same contents (h5dump minus the line naming the file and the file's own
# random store_id; small images keep the text dump short).
dump_store() { h5dump "$1" | tail -n +2 | sed '/^   ATTRIBUTE "store_id" {$/,/^   }$/d'; }
out1=$(run_np 1 "$prep" --images imgs --out np1.h5 --max-side 64 2>&1) || fatal "-np 1 run exit $?: $out1"
out2=$(run_np 2 "$prep" --images imgs --out np2.h5 --max-side 64 2>&1) || fatal "-np 2 run exit $?: $out2"
echo "$out1"
# Persian_1011.JPG stored (any letter case); Abyssinian_1010.mat counted, not named.
[[ "$out1" == *"np1.h5: layout names (auto); 120 stored, 5 skipped: "*"; 1 not read (1 without an image extension); "* ]] ||
  fail "summary line: $out1"
# (sorted: the warning goes to stderr and the summary to stdout, whose order mpirun does not keep)
check_eq "-np 2's summary with -np 1's file name" "$(sort <<<"${out2//np2.h5/np1.h5}")" "$(sort <<<"$out1")"
diff <(dump_store np1.h5) <(dump_store np2.h5) >/dev/null ||
  fail "-np 1 and -np 2 stores differ"
h5dump -a /schema_version np1.h5 | grep -c "(0): 2" >/dev/null || fail "schema_version attribute"
# The decoder's warnings are counted as such, and only when there are some (a "0 with warnings"
# read as if the class warning printed next were not counted).
[[ "$out1" == *"; 1 decoded with warnings: leonberger_1009.jpg ("* ]] || fail "summary line's decoder warnings: $out1"

# An existing store is replaced only with --overwrite (a new store_id: runs trained on it could no
# longer resume).
store_id() { h5dump -a /store_id "$1" | grep -o '"[0-9a-f]\{32\}"'; }
id_before=$(store_id np1.h5)
expect_usage "an existing --out" "--out np1.h5 exists; replace it with --overwrite" \
  run_np 2 "$prep" --images imgs --out np1.h5 --max-side 64
check_eq "store_id after the refusal" "$(store_id np1.h5)" "$id_before"
expect_usage "an abbreviated --overwrite" "unrecognised option '--over'" \
  run_np 2 "$prep" --images imgs --out np1.h5 --max-side 64 --over
run_np 2 "$prep" --images imgs --out np1.h5 --max-side 64 --overwrite >overwrite.log 2>&1 ||
  { fail "--overwrite exit $?"; show overwrite.log; }
[ "$(store_id np1.h5)" != "$id_before" ] || fail "--overwrite did not write a new store"
ln -s np2.h5 link.h5
expect_usage "a symbolic link as --out" "--out link.h5 is a symbolic link" \
  run_np 2 "$prep" --images imgs --out link.h5 --max-side 64 --overwrite
[ -L link.h5 ] || fail "the link --out was replaced"
# Written by 2 ranks in the checksummed format: superblock 3, every dataset with Fletcher32.
# (grep reads h5dump's whole output: with -q it would stop early, and h5dump's SIGPIPE fail the
# pipe under pipefail)
h5dump -B -H np2.h5 | grep -c "SUPERBLOCK_VERSION 3" >/dev/null || fail "-np 2 store: not superblock version 3"
checksummed=$(h5dump -p -H np2.h5 | grep -c "CHECKSUM FLETCHER32")
check_eq "datasets with Fletcher32 in the -np 2 store" "$checksummed" 12
h5dump -d /eval/labels np1.h5 >/dev/null || fail "no /eval/labels"
# A different seed changes the split, not the set of stored images.
run_np 2 "$prep" --images imgs --out seed7.h5 --seed 7 --max-side 64 >seed7.log 2>&1 ||
  { fail "--seed 7 run exit $?"; show seed7.log; }
if diff <(h5dump -d /eval/names np1.h5 | tail -n +2) <(h5dump -d /eval/names seed7.h5 | tail -n +2) >/dev/null; then
  fail "--seed did not change the split"
fi
# Rounds: one image per rank and round writes the same file as one round.
PETS_REPORT_MEMORY=1 run_np 2 "$prep" --images imgs --out rounds.h5 --max-side 64 --max-memory 1 \
  >rounds.log 2>&1 || { fail "--max-memory 1 run exit $?"; show rounds.log; }
rounds=$(sed -n 's/^pets_preprocess: \([0-9]*\) rounds;.*/\1/p' rounds.log)
[ "${rounds:-0}" -ge 50 ] || { fail "--max-memory 1 under -np 2: ${rounds:-no} rounds, want >= 50"; show rounds.log; }
diff <(dump_store np1.h5) <(dump_store rounds.h5) >/dev/null ||
  fail "a store written in $rounds rounds differs from one written in one round"

# Labels come from stored images only: broken files never make a class.
"$synth" --out two --classes 2 --per-class 4 --quirks --seed 1 >/dev/null || fatal "pets_synth (two) exit $?"
ln -s loopB_1.jpg two/loopA_1.jpg && ln -s loopA_1.jpg two/loopB_1.jpg
capture two.log run_np 2 "$prep" --images two --out two.h5 --max-side 64
check_eq "--classes 2 --quirks with a symlink loop: exit status" "$status" 0
# Abyssinian and Bengal, and the 8 other breeds whose quirk file is stored.
grep -q "two.h5: layout names (auto); 17 stored, .* 10 labels;" two.log || { fail "--classes 2 --quirks: not 17 stored in 10 labels"; show two.log; }
grep -q "loopA_1.jpg (unreadable file)" two.log || { fail "the symlink loop is not skipped"; show two.log; }
h5dump -a /label_names two.h5 | grep -Ec '"(loop|chihuahua|havanese|pug)' >/dev/null && fail "skipped files made classes in two.h5"
# Classes on one side of the split only are named, and the split's nature said.
grep -q '^warning: two.h5: [0-9]* classes\? ha[sv]e\? no evaluation image: .*not stratified' two.log ||
  { fail "no warning for classes without evaluation images"; show two.log; }
# pets_train warns at start too (stopped before training by a --pretrained file that is no
# safetensors file: refused when the weights are loaded, after the data is opened).
capture train_warn.log run_np 1 "$train" --data two.h5 --pretrained two.log --out train_warn
check_eq "pets_train with a --pretrained that is no safetensors file: exit status" "$status" 2
grep -q "^error: two.log: not a safetensors file" train_warn.log ||
  { fail "pets_train: a --pretrained text file is not called 'not a safetensors file'"; show train_warn.log; }
grep -q '^warning: two.h5: [0-9]* classes\? ha[sv]e\? no evaluation image: .*not stratified' train_warn.log ||
  { fail "pets_train: no warning for classes without evaluation images"; show train_warn.log; }
# The issue's folder: 4 good classes, a text file and a truncated JPEG with pet-like names.
mkdir -p ghost && cp imgs/Abyssinian_*.jpg imgs/Birman_*.jpg imgs/Bombay_[0-9].jpg imgs/beagle_[0-9].jpg ghost/
echo "not an image" >ghost/Ghost_1.jpg && head -c 2000 imgs/boxer_1.jpg >ghost/Trunc_1.jpg
capture ghost.log run_np 2 "$prep" --images ghost --out ghost.h5 --max-side 64
check_eq "ghost folder: exit status" "$status" 0
labels=$(h5dump -a /label_names ghost.h5 | sed -n '/DATA {/,$p' | grep -Eo '"[A-Za-z_]+' | tr -d '"' | tr '\n' ' ')
check_eq "ghost folder: labels" "$labels" "Abyssinian Birman Bombay beagle "
# Label ids do not depend on which broken files exist.
rm ghost/Ghost_1.jpg ghost/Trunc_1.jpg
run_np 2 "$prep" --images ghost --out clean.h5 --max-side 64 >clean.log 2>&1 || fail "clean ghost folder exit $?"
grep -q "clean.h5: layout names (auto); [0-9]* stored, 0 skipped; .* 4 labels$" clean.log || { fail "a summary without decoder warnings does not end at the labels"; show clean.log; }
diff <(h5dump -a /label_names ghost.h5 | tail -n +2) <(h5dump -a /label_names clean.h5 | tail -n +2) >/dev/null ||
  fail "label names change with broken files"

# Extensions in any letter case: a .JPG and a JPEG named .png are both read (by content).
mkdir -p upper && cp imgs/Persian_1011.JPG upper/ && cp imgs/Abyssinian_1.jpg upper/Abyssinian_1.png
run_np 2 "$prep" --images upper --out upper.h5 --max-side 64 >upper.log 2>&1 || { fail "upper: exit $?"; show upper.log; }
grep -q "upper.h5: layout names (auto); 2 stored, 0 skipped; 1 train, 1 eval, 2 labels$" upper.log ||
  { fail ".JPG and .png: not both stored"; show upper.log; }

leftovers=$(find . -maxdepth 1 -name '*tmp*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"

# Bad input: exit 2, one message, no file at --out.
mkdir -p empty && echo hello >empty/notes.txt && echo junk >empty/cat_1.jpg
expect_usage "missing --out" "--out" run_np 2 "$prep" --images imgs
expect_usage "bad fraction" "--train-fraction" run_np 2 "$prep" --images imgs --out bad.h5 --train-fraction 1.5
expect_usage "no folder" "nowhere" run_np 2 "$prep" --images nowhere --out bad.h5
expect_usage "unwritable out" "no/such/dir" run_np 2 "$prep" --images imgs --out no/such/dir/bad.h5
expect_usage "nothing usable" "empty" run_np 2 "$prep" --images empty --out bad.h5
# Nothing usable says why, counted by reason.
grep -q "1 entry skipped (1 unknown image format); 1 not read (1 without an image extension)" usage.log ||
  { fail "nothing usable: reasons not counted"; show usage.log; }
expect_usage "--max-pixels 0" "over the pixel limit" run_np 2 "$prep" --images ghost --out bad.h5 --max-pixels 0
grep -q "entries skipped (12 over the pixel limit)" usage.log || { fail "--max-pixels 0: reasons not counted"; show usage.log; }
expect_usage "--seed -1" "--seed" run_np 2 "$prep" --images imgs --out bad.h5 --seed -1
expect_usage "--seed junk" "--seed" run_np 2 "$prep" --images imgs --out bad.h5 --seed 1x
expect_usage "--max-pixels -1" "--max-pixels" run_np 2 "$prep" --images imgs --out bad.h5 --max-pixels -1
expect_usage "--train-fraction 0" "--train-fraction" run_np 2 "$prep" --images imgs --out bad.h5 --train-fraction 0
expect_usage "--train-fraction 1" "--train-fraction" run_np 2 "$prep" --images imgs --out bad.h5 --train-fraction 1
expect_usage "--max-side 1" "--max-side" run_np 2 "$prep" --images imgs --out bad.h5 --max-side 1
expect_usage "--max-memory 0" "--max-memory" run_np 2 "$prep" --images imgs --out bad.h5 --max-memory 0
expect_usage "--max-memory 1T" "--max-memory" run_np 2 "$prep" --images imgs --out bad.h5 --max-memory 1T
# A fraction that leaves one split empty for this folder.
expect_usage "--train-fraction 0.01 on 12 files" "no training image" run_np 2 "$prep" --images ghost --out bad.h5 --train-fraction 0.01
[ ! -e bad.h5 ] && [ ! -e no/such/dir/bad.h5 ] || fail "a failed run left a file at --out"

# A run killed mid-way leaves nothing at --out (the store is renamed only when complete).
"$synth" --out many --per-class 12 --seed 3 >/dev/null || fatal "pets_synth (many) exit $?"

# Peak resident memory (VmHWM) bounded by --max-memory: 444 images of 200-500 px
# (about 80 MiB decoded per rank under -np 2). The base is a run on 2 images; one round holds
# everything and must exceed the bound (so the bound is what keeps the other run low).
# --max-pixels 300000 (all these images are below it) makes a round 4M / 900 KB = 4 images.
mib() { sed -n 's/^pets_preprocess: .* per rank (MiB): //p' "$1"; }
mkdir -p few && cp many/Abyssinian_1.jpg many/Bengal_1.jpg few/
PETS_REPORT_MEMORY=1 run_np 2 "$prep" --images few --out few.h5 --max-side 0 --max-pixels 300000 --train-fraction 0.5 >few.log 2>&1 ||
  { fail "few: exit $?"; show few.log; }
PETS_REPORT_MEMORY=1 run_np 2 "$prep" --images many --out bounded.h5 --max-side 0 --max-pixels 300000 --max-memory 4M >bounded.log 2>&1 ||
  { fail "--max-memory 4M: exit $?"; show bounded.log; }
PETS_REPORT_MEMORY=1 run_np 2 "$prep" --images many --out oneround.h5 --max-side 0 --max-pixels 300000 >oneround.log 2>&1 ||
  { fail "one round: exit $?"; show oneround.log; }
read -r b0 b1 <<<"$(mib few.log)"
read -r m0 m1 <<<"$(mib bounded.log)"
read -r o0 o1 <<<"$(mib oneround.log)"
echo "peak MiB per rank: base $b0 $b1, --max-memory 4M $m0 $m1, one round $o0 $o1"
if [ -z "${b1:-}" ] || [ -z "${m1:-}" ] || [ -z "${o1:-}" ]; then
  fail "no peak memory reported"; show few.log bounded.log oneround.log
else
  # Bound: base + 4 MiB of pixels + one image being decoded (<= 1.5 MiB) + slack for HDF5/MPI-IO.
  for r in 0 1; do
    b=$((r == 0 ? b0 : b1)) m=$((r == 0 ? m0 : m1)) o=$((r == 0 ? o0 : o1))
    [ "$m" -le $((b + 4 + 12)) ] || fail "rank $r: peak $m MiB with --max-memory 4M, base $b MiB"
    [ "$o" -gt $((b + 4 + 12)) ] || fail "rank $r: one round peaks at $o MiB, not above the bound (set too small to test)"
  done
fi
diff <(dump_store bounded.h5) <(dump_store oneround.h5) >h5diff.log 2>&1 ||
  { fail "--max-memory 4M and one round give different stores"; tail -20 h5diff.log; }
np_timeout=0.4 np_signal=KILL run_np 2 "$prep" --images many --out killed.h5 --max-side 0 >/dev/null 2>&1
rc=$?
if [ $rc -eq 137 ]; then
  [ ! -e killed.h5 ] || fail "killed run left killed.h5"
  echo "killed run: no file at --out"
else
  echo "note: the run finished before the kill (rc $rc); kill check not exercised"
fi
finish
