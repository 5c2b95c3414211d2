#!/usr/bin/env bash
# The memory check before the first step (README, "Fine-tune the backbone"):
#  - under a Slurm limit far too small (SLURM_MEM_PER_NODE=200, MB for the node's 2 ranks),
#    --unfreeze all at 64 images of 224 pixels a rank is refused before training: exit 2, one
#    `error:` line naming the rank and host, the estimate, the limit and where it comes from,
#    what to change and PETS_MEMORY_CHECK; no start-up line, no step, no checkpoint;
#  - the same under a generous limit at a tiny size trains, and prints no memory warning;
#  - a limit just above the estimate (from the refusal's figure) trains with one warning;
#  - PETS_MEMORY_CHECK=0 skips the refusal: the tiny run trains under the small limit.
# usage: test_memory_fit.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 14 --seed 7 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --unfreeze all --epochs 1 --seed 42 --progress-interval 0)
tiny=(--batch-size 2 --eval-batch-size 4 --image-size 32)

# 1. Far too small: refused before training, on every rank, with the message.
SLURM_MEM_PER_NODE=200 expect_usage "--unfreeze all at 64 x 224 px under 200 MB" \
  "would need about" run_np 2 -x SLURM_MEM_PER_NODE "$train" "${common[@]}" --batch-size 64 \
  --image-size 224 --out run_big
line=$(grep '^error:' usage.log)
for part in "rank [01] on $(hostname)" "GiB \(activations [0-9.]+ [GM]iB" \
  "more than the 100.00 MiB it can have \(Slurm's SLURM_MEM_PER_NODE=200 MB shared by 2 ranks on this host\)" \
  "a smaller --batch-size" "fewer ranks per host" "--unfreeze layer1" "PETS_MEMORY_CHECK=0 skips this check"; do
  grep -qE -- "$part" <<< "$line" || fail "the refusal lacks /$part/: $line"
done
! grep -qE '^pets_train: |^\[epoch ' usage.log || { fail "the refused run started training"; show usage.log; }
! ls run_big/ckpt-* > /dev/null 2>&1 || fail "the refused run wrote a checkpoint"
pass "refused before training under SLURM_MEM_PER_NODE=200"

# 2. A generous limit at a tiny size: trains, with no warning about memory.
SLURM_MEM_PER_NODE=100000000 run_np 2 -x SLURM_MEM_PER_NODE "$train" "${common[@]}" "${tiny[@]}" \
  --out run_tiny > tiny.out 2> tiny.err || { fail "tiny run exit $?"; show tiny.err; }
grep -qE '^epoch 0: [0-9]+\.[0-9]{2}$' tiny.out || { fail "tiny run: no epoch line"; show tiny.out; }
! grep -q 'may need' tiny.err || { fail "tiny run: a memory warning"; show tiny.err; }
pass "a tiny run under a generous limit trains without a warning"

# 3. Just above the estimate: the tiny run's refusal under 200 MB names rank 0's estimate; a
#    limit of 1.1 times it (for each of the 2 ranks) trains with a warning from rank 0.
SLURM_MEM_PER_NODE=200 expect_usage "the tiny run under 200 MB" "would need about" \
  run_np 2 -x SLURM_MEM_PER_NODE "$train" "${common[@]}" "${tiny[@]}" --out run_small
need=$(grep '^error:' usage.log | sed -n 's/.*rank 0 on .* would need about \([0-9.]*\) \([GM]\)iB.*/\1 \2/p')
[ -n "$need" ] || fatal "no estimate of rank 0 in: $(grep '^error:' usage.log)"
mb=$(awk -v n="${need% *}" -v u="${need#* }" 'BEGIN { m = (u == "G" ? n * 1024 : n); printf "%d", m * 2 * 1.1 + 1 }')
SLURM_MEM_PER_NODE=$mb run_np 2 -x SLURM_MEM_PER_NODE "$train" "${common[@]}" "${tiny[@]}" \
  --out run_close > close.out 2> close.err || { fail "run close to its limit: exit $?"; show close.err; }
check_eq "memory warnings at 91 % of the limit" "$(grep -c '^warning: rank 0 on .* may need 9[01] % of the' close.err)" 1
grep -qE '^epoch 0: ' close.out || { fail "the run close to its limit did not train"; show close.err; }
pass "a warning above 80 % of the limit (SLURM_MEM_PER_NODE=$mb)"

# 4. PETS_MEMORY_CHECK=0: no check, the tiny run trains under 200 MB.
PETS_MEMORY_CHECK=0 SLURM_MEM_PER_NODE=200 run_np 2 -x PETS_MEMORY_CHECK -x SLURM_MEM_PER_NODE \
  "$train" "${common[@]}" "${tiny[@]}" --out run_unchecked > unchecked.out 2> unchecked.err ||
  { fail "PETS_MEMORY_CHECK=0: exit $?"; show unchecked.err; }
grep -qE '^epoch 0: ' unchecked.out || { fail "PETS_MEMORY_CHECK=0: no epoch line"; show unchecked.err; }
! grep -q 'would need\|may need' unchecked.err || { fail "PETS_MEMORY_CHECK=0 still checked"; show unchecked.err; }
pass "PETS_MEMORY_CHECK=0 skips the check"

finish
