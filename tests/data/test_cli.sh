#!/usr/bin/env bash
# End-to-end test of pets_synth and pets_preprocess.
# Usage: test_cli.sh PETS_SYNTH PETS_PREPROCESS WORKDIR MPIEXEC NUMPROC_FLAG "PREFLAGS"
# shellcheck source=../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
[ $# -eq 6 ] || fatal "usage: test_cli.sh PETS_SYNTH PETS_PREPROCESS WORKDIR MPIEXEC NUMPROC_FLAG PREFLAGS"
synth=$1 prep=$2
use_mpiexec "$4" "$5" "$6"
enter_workdir "$3"

# pets_synth: usage error, then a folder with the quirk files.
# (pets_synth is no MPI program: its message need not be an `error:` line.)
capture synth_usage.log "$synth" --out imgs
check_eq "pets_synth without --per-class: exit status" "$status" 2
grep -q -- "--per-class" synth_usage.log || { fail "pets_synth without --per-class: no message naming it"; show synth_usage.log; }
"$synth" --out imgs --per-class 3 --quirks --seed 1 >/dev/null || fatal "pets_synth exit $?"
n=$(find imgs -maxdepth 1 -name '*.jpg' | wc -l)
check_eq "pets_synth's .jpg files" "$n" $((37 * 3 + 12))
[ -f imgs/British_Shorthair_3.jpg ] && [ -f imgs/american_pit_bull_terrier_1.jpg ] || fail "breed names"
[ -f imgs/extra/Sphynx_1014.jpg ] && [ -f imgs/Persian_1011.JPG ] && [ -f imgs/Abyssinian_1010.mat ] || fail "quirks"

# -np 1 and -np 2 give the same contents (h5dump minus the line naming the file; small
# images keep the text dump short).
out1=$(run_np 1 "$prep" --images imgs --out np1.h5 --max-side 64 2>&1) || fatal "-np 1 run exit $?: $out1"
out2=$(run_np 2 "$prep" --images imgs --out np2.h5 --max-side 64 2>&1) || fatal "-np 2 run exit $?: $out2"
echo "$out1"
[[ "$out1" == *"np1.h5: 119 stored, 7 skipped: "* ]] || fail "summary line: $out1"
check_eq "-np 2's summary with -np 1's file name" "${out2/np2.h5/np1.h5}" "$out1"
diff <(h5dump np1.h5 | tail -n +2) <(h5dump np2.h5 | tail -n +2) >/dev/null ||
  fail "-np 1 and -np 2 stores differ"
h5dump -a /schema_version np1.h5 | grep -c "(0): 2" >/dev/null || fail "schema_version attribute"
# Written by 2 ranks in the checksummed format: superblock 3, every dataset with Fletcher32.
h5dump -B -H np2.h5 | grep -q "SUPERBLOCK_VERSION 3" || fail "-np 2 store: not superblock version 3"
checksummed=$(h5dump -p -H np2.h5 | grep -c "CHECKSUM FLETCHER32")
check_eq "datasets with Fletcher32 in the -np 2 store" "$checksummed" 12
h5dump -d /eval/labels np1.h5 >/dev/null || fail "no /eval/labels"
# A different seed changes the split, not the set of stored images.
run_np 2 "$prep" --images imgs --out seed7.h5 --seed 7 --max-side 64 >seed7.log 2>&1 ||
  { fail "--seed 7 run exit $?"; show seed7.log; }
if diff <(h5dump -d /eval/names np1.h5 | tail -n +2) <(h5dump -d /eval/names seed7.h5 | tail -n +2) >/dev/null; then
  fail "--seed did not change the split"
fi
leftovers=$(find . -maxdepth 1 -name '*tmp*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"

# Bad input: exit 2, one message, no file at --out.
mkdir -p empty && echo hello >empty/notes.txt && echo junk >empty/cat_1.jpg
expect_usage "missing --out" "--out" run_np 2 "$prep" --images imgs
expect_usage "bad fraction" "--train-fraction" run_np 2 "$prep" --images imgs --out bad.h5 --train-fraction 1.5
expect_usage "no folder" "nowhere" run_np 2 "$prep" --images nowhere --out bad.h5
expect_usage "unwritable out" "no/such/dir" run_np 2 "$prep" --images imgs --out no/such/dir/bad.h5
expect_usage "nothing usable" "empty" run_np 2 "$prep" --images empty --out bad.h5
[ ! -e bad.h5 ] && [ ! -e no/such/dir/bad.h5 ] || fail "a failed run left a file at --out"

# A run killed mid-way leaves nothing at --out (the store is renamed only when complete).
"$synth" --out many --per-class 12 --seed 3 >/dev/null || fatal "pets_synth (many) exit $?"
np_timeout=0.4 np_signal=KILL run_np 2 "$prep" --images many --out killed.h5 --max-side 0 >/dev/null 2>&1
rc=$?
if [ $rc -eq 137 ]; then
  [ ! -e killed.h5 ] || fail "killed run left killed.h5"
  echo "killed run: no file at --out"
else
  echo "note: the run finished before the kill (rc $rc); kill check not exercised"
fi
finish
