#!/usr/bin/env bash
# pets_train end to end under MPI on a tiny synthetic store: the tutorial's output on rank 0 only,
# learning above chance, metrics and checkpoints, bitwise run-to-run determinism, a SIGUSR1 stop
# and --resume equal to an uninterrupted run, the exported model loading back, and bad input
# refused with exit status 2.
# usage: test_train_cli.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
"$synth" --out images --classes 3 --per-class 24 --seed 7 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --epochs 3 --batch-size 4 --eval-batch-size 8 --max-lr 3e-2 --seed 42)

# 1. A full run: exactly the tutorial's lines on stdout, from rank 0 only; PETS_VERIFY_RANKS
#    makes the ranks compare digests of their whole model (head after the averaged gradient
#    steps, synchronised BatchNorm statistics) at every evaluation.
PETS_VERIFY_RANKS=1 run_np 2 -x PETS_VERIFY_RANKS "$train" "${common[@]}" --out run_a > a.out 2> a.err ||
  { fail "run_a exit $?"; show a.err; }
[ "$(grep -c 'verify: epoch [0-2]: all 2 ranks hold model' a.err)" -eq 3 ] ||
  { fail "ranks were not verified identical at every evaluation"; show a.err; }
# ... and the averaged head gradients after the allreduce at every step (the last checkpoint is
# named after the run's last global step).
all_steps=$(sed 's/^ckpt-0*\([0-9]*\)\.safetensors$/\1/' run_a/latest)
grep -q "verify: epoch 2: .*averaged gradients identical at $all_steps steps so far" a.err ||
  { fail "averaged gradients were not verified identical at all $all_steps steps"; show a.err; }
# The check can fail: rank 1's reduced gradients altered after the allreduce at step 1.
PETS_VERIFY_RANKS=1 PETS_INJECT_FAULT=skew:1:1 np_timeout=120 run_np 2 \
  -x PETS_VERIFY_RANKS -x PETS_INJECT_FAULT "$train" "${common[@]}" --out run_skew > skew.out 2> skew.err
skew_rc=$?
[ "$skew_rc" -ne 0 ] && [ "$skew_rc" -ne 124 ] || fail "gradients skewed on rank 1 went unnoticed (exit $skew_rc)"
grep -q "averaged gradients at step 1 on rank 1 differ from rank 0's" skew.err ||
  { fail "no message naming the differing gradients"; show skew.err; }
if ! grep -qxE 'epoch [0-2]: [0-9]+\.[0-9]{2}' a.out || [ "$(wc -l < a.out)" -ne 3 ] ||
   [ "$(grep -vcxE 'epoch [0-2]: [0-9]+\.[0-9]{2}' a.out)" -ne 0 ]; then
  fail "stdout is not three 'epoch N: XX.XX' lines"; show a.out
fi
check_eq "epoch numbers" "$(cut -d' ' -f2 a.out | tr -d ':' | tr '\n' ' ')" "0 1 2 "
check_eq "lines in metrics.jsonl" "$(wc -l < run_a/metrics.jsonl)" 3
[ -s run_a/model.safetensors ] || fail "no exported model"
[ -s run_a/latest ] && [ -s "run_a/$(cat run_a/latest)" ] || fail "latest checkpoint missing"
grep -q "randomly initialised; data/fetch_weights.sh DIR fetches timm's, then --pretrained" a.err ||
  { fail "no warning about the random backbone naming data/fetch_weights.sh and --pretrained"; show a.err; }
# Chance is 33.33 % on 3 balanced classes; the synthetic classes differ in colour and shape. 15
# evaluation images: on 9, one seed in a few stayed at chance.
final=$(tail -1 a.out | cut -d' ' -f3)
awk -v a="$final" 'BEGIN { exit !(a >= 60.0) }' || fail "final accuracy $final is not clearly above chance (33.33)"

# 2. Same seed, same ranks: bitwise the same accuracies and weights.
run_np 2 "$train" "${common[@]}" --out run_b > b.out 2> b.err || fail "run_b exit $?"
cmp -s a.out b.out || { fail "run-to-run accuracies differ"; diff a.out b.out; }
cmp -s run_a/model.safetensors run_b/model.safetensors || fail "run-to-run final weights differ"

# 3. Stopped by SIGUSR1 (as Slurm's warning signal) mid-run, then resumed: same as uninterrupted.
# start_stoppable NAME: starts run_NAME with mpiexec itself in the background (start_np, so that
# a signal reaches it and it forwards SIGUSR1 to the ranks), sets np_pid, and returns half a
# second after the first checkpoint: into epoch 1, mid-epoch.
start_stoppable() {
  start_np 2 "$train" "${common[@]}" --out "run_$1" > "${1}1.out" 2> "${1}1.err"
  for _ in $(seq 1 1200); do [ -s "run_$1/latest" ] && break; sleep 0.1; done
  sleep 0.5
}
# resume_matches_uninterrupted NAME WHAT: resumes the stopped run_NAME; its accuracies (with the
# stopped part's) and final weights must be run_a's, bitwise.
# With resume_alone=1: --out and --resume alone, not the run's options.
resume_alone=0
resume_matches_uninterrupted() {
  local name=$1 what=$2 rc
  local args=("${common[@]}")
  [ "$resume_alone" -eq 1 ] && args=()
  run_np 2 "$train" "${args[@]}" --out "run_$name" --resume > "${name}2.out" 2> "${name}2.err" ||
    { rc=$?; fail "resume $what exit $rc"; show "${name}2.err"; }
  grep -q "resumed from" "${name}2.err" || fail "resume $what did not report its checkpoint"
  cat "${name}1.out" "${name}2.out" > "$name.out"
  cmp -s a.out "$name.out" ||
    { fail "accuracies $what differ from the uninterrupted run"; diff a.out "$name.out"; }
  cmp -s run_a/model.safetensors "run_$name/model.safetensors" || fail "final weights $what differ"
}
start_stoppable c
kill -USR1 "$np_pid"
wait "$np_pid"; status=$?
[ "$status" -eq 75 ] || { fail "stop by SIGUSR1 exited $status, not 75"; show c1.err; }
grep -q "continue with --resume" c1.err || fail "no stop notice"
resume_matches_uninterrupted c "after a stop by SIGUSR1"

# 3c. Signals keep coming while the ranks agree, checkpoint and exit: SIGUSR1 to
#     mpiexec once (forwarded to every rank), then SIGUSR1 and SIGTERM straight to the ranks every
#     20 ms until the job ends, so that some arrive while rank 0 writes the checkpoint. Same outcome
#     as one signal: exit 75, and the checkpoint resumes to the uninterrupted run's accuracies and
#     weights. (mpiexec itself gets one signal only: Open MPI's launcher restores the default
#     action while it shuts down, so a later USR1 would kill it with 138 whatever the ranks did.)
start_stoppable s
sent=0
kill -USR1 "$np_pid" 2> /dev/null
for _ in $(seq 1 1500); do
  kill -0 "$np_pid" 2> /dev/null || break
  for rank_pid in $(pgrep -f -- "--out run_s\$"); do
    [ "$rank_pid" = "$np_pid" ] && continue  # mpiexec ends the job on TERM
    kill -USR1 "$rank_pid" 2> /dev/null
    kill -TERM "$rank_pid" 2> /dev/null
  done
  sent=$((sent + 1))
  sleep 0.02
done
wait "$np_pid"; status=$?
echo "signal storm: $sent rounds of SIGUSR1 + SIGTERM, exit $status"
[ "$status" -eq 75 ] || { fail "stop under repeated signals exited $status, not 75"; show s1.err; }
[ "$sent" -ge 2 ] || fail "the job ended before a second signal was sent"
# Resumed with --out and --resume alone: the checkpoint gives --data and every setting.
resume_alone=1
resume_matches_uninterrupted s "after the signal storm, resumed with --out alone"
resume_alone=0

# 3b. One rank instead of two: also clearly above chance (same data, different augmentation
#     streams and global batch, so not bitwise equal).
run_np 1 "$train" "${common[@]}" --out run_one > one.out 2> one.err || fail "-np 1 exit $?"
final_one=$(tail -1 one.out | cut -d' ' -f3)
awk -v a="$final_one" -v b="$final" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a >= 60.0 && d <= 34.0) }' ||
  fail "-np 1 accuracy $final_one is not consistent with -np 2's $final"

# 3c. PETS_DUMP_STEPS: every rank writes its first steps for bench/step_compare.py; each step's
#     file holds the batch the step took and the head it left, which the next step starts from.
#     --image-size 96: the crops the step takes are of that size.
PETS_DUMP_STEPS=dump:2 run_np 2 -x PETS_DUMP_STEPS "$train" --data pets.h5 --epochs 1 --batch-size 4 \
  --eval-batch-size 8 --image-size 96 --max-lr 3e-2 --seed 42 --out run_dump \
  > dump.out 2> dump.err || { fail "PETS_DUMP_STEPS run exit $?"; show dump.err; }
python3 - dump <<'PY' || fail "PETS_DUMP_STEPS wrote an inconsistent dump"
import json, os, struct, sys
d = sys.argv[1]
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}
run = json.load(open(os.path.join(d, "run.json")))
assert run["ranks"] == 2 and run["batch_size"] == 4 and run["image_size"] == 96, run
initial = read(os.path.join(d, "initial.safetensors"))
assert not os.path.exists(os.path.join(d, "step-2-rank-0.safetensors")), "more steps than asked"
total, after = 0, {}
for step in (0, 1):
    for rank in (0, 1):
        t = read(os.path.join(d, f"step-{step}-rank-{rank}.safetensors"))
        names = json.load(open(os.path.join(d, f"step-{step}-rank-{rank}.json")))
        n = t["labels"][1][0]
        assert t["images"][0] == "F32" and t["images"][1] == [n, 3, 96, 96], t["images"][:2]
        assert len(names["names"]) == n == len(names["boxes"]), names
        if step == 0:
            assert t["fc.weight.before"][2] == initial["fc.weight"][2], "step 0 not from the initial head"
            total += n
        else:
            assert t["fc.weight.before"][2] == after[rank], "step 1 not from step 0's head"
        after[rank] = t["fc.weight.after"][2]
        lr = struct.unpack("<d", t["lr"][2])[0]
        assert step > 0 or abs(lr - 3e-2 / 25) < 1e-15, lr
assert total == struct.unpack("<d", t["images_total"][2])[0] == 8, total
PY

# 4. The exported model loads back strictly (same class count: no head skipped).
run_np 1 "$train" --data pets.h5 --epochs 1 --batch-size 4 --pretrained run_a/model.safetensors --out run_d \
  > d.out 2> d.err || { fail "reloading the exported model failed (exit $?)"; show d.err; }
grep -q "randomly initialised\|skipped" d.err && fail "exported model did not load as a full state dict"
grep -q "^notice: loaded [0-9]* tensors from run_a/model.safetensors: the backbone and fc" d.err ||
  { fail "the load of --pretrained is not reported"; show d.err; }

# 4a. Evaluations run with BatchNorm folded into the convolutions (under --bn-mode train, folded
#     from each epoch's synchronised statistics). Against the plain path (PETS_UNFOLDED): the
#     same accuracies every epoch and, training being untouched, the same final weights.
PETS_UNFOLDED=1 run_np 2 -x PETS_UNFOLDED "$train" "${common[@]}" --out run_p > p.out 2> p.err ||
  { fail "unfolded run exit $?"; show p.err; }
cmp -s a.out p.out || { fail "folded and unfolded evaluation accuracies differ"; diff a.out p.out; }
cmp -s run_a/model.safetensors run_p/model.safetensors || fail "folding the evaluation changed the final weights"

# 4b. --bn-mode eval runs the backbone with BatchNorm folded into the convolutions and computes
#     the evaluation features once. Against the plain path (PETS_UNFOLDED): the same
#     accuracies every epoch (the folded features differ by float rounding only, far from any
#     decision on this set), and evaluations after the first much faster than the first.
run_np 2 "$train" "${common[@]}" --bn-mode eval --out run_f > f.out 2> f.err ||
  { fail "bn-mode eval exit $?"; show f.err; }
PETS_UNFOLDED=1 run_np 2 -x PETS_UNFOLDED "$train" "${common[@]}" --bn-mode eval --out run_u \
  > u.out 2> u.err || { fail "bn-mode eval, unfolded, exit $?"; show u.err; }
cmp -s f.out u.out || { fail "folded and unfolded --bn-mode eval accuracies differ"; diff f.out u.out; }
eval_rate() { sed -n "$2p" "$1" | sed 's/.*"eval_images_per_s":\([^,}]*\).*/\1/'; }
awk -v first="$(eval_rate run_f/metrics.jsonl 1)" -v later="$(eval_rate run_f/metrics.jsonl 3)" \
    -v plain="$(eval_rate run_u/metrics.jsonl 3)" \
    'BEGIN { exit !(later > 10 * first && later > 10 * plain) }' ||
  fail "cached evaluation is not faster: $(eval_rate run_f/metrics.jsonl 3) vs first $(eval_rate run_f/metrics.jsonl 1) img/s"

# 5. Bad input: exit 2, one clear message.
expect_usage "missing data file" "missing.h5" run_np 2 "$train" --data missing.h5 --out run_e
printf 'not hdf5' > fake.h5
expect_usage "non-HDF5 data" "fake.h5" run_np 2 "$train" --data fake.h5 --out run_e
"$synth" --out images4 --classes 4 --per-class 6 --seed 3 > /dev/null || fail "pets_synth (4 classes) exit $?"
run_np 1 "$preprocess" --images images4 --out other.h5 > /dev/null || fail "pets_preprocess (4 classes) exit $?"
expect_usage "checkpoint of other labels" "labels differ" run_np 2 "$train" --data other.h5 --epochs 3 \
  --batch-size 4 --eval-batch-size 8 --seed 42 --out run_a --resume
expect_usage "bad pretrained file" "fake.h5" run_np 2 "$train" "${common[@]}" --pretrained fake.h5 --out run_e

finish
