#!/usr/bin/env bash
# --input device against --input cpu on the CPU device: the same short training run
# (2 ranks, 2 epochs, random backbone) on each path. The device path resizes and normalises the
# staged crops with LibTorch's antialiased kernel; its images differ from the CPU loader's only by
# rounding (pets/train/input/device_input.hpp: at most 1.5e-4, about 1 % of a grey level), so the runs
# must agree: train loss within a relative 1e-5 per epoch (measured: 5e-8, LibTorch 1.13, CPU) and
# accuracy within one evaluation image.
# The comparison is shown able to fail by a third run with another seed, which it must tell apart.
# An unknown --input value is a usage error (exit 2).
# --resident on (every image held in the device's memory, the loader drawing only the boxes)
# against the staged device path (--resident auto, off on the CPU): the same images bit for bit,
# so the same epoch losses and accuracies and bitwise the same final weights; the start-up line
# says which path ran. --resident on without the device input path, or an unknown value, is a
# usage error (exit 2), made before any data are read (a --data file that is no store is never
# opened).
# usage: test_input_paths.sh PETS_SYNTH PETS_PREPROCESS PETS_TRAIN WORKDIR MPIEXEC NPFLAG PREFLAGS
# shellcheck source=../script_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../script_common.sh"
"$synth" --out images --classes 3 --per-class 10 --seed 3 > /dev/null || fatal "pets_synth exit $?"
run_np 2 "$preprocess" --images images --out pets.h5 > /dev/null || fatal "pets_preprocess exit $?"
common=(--data pets.h5 --epochs 2 --batch-size 4 --eval-batch-size 8)

train_run() {  # NAME ARGS...: one run into folder NAME
  local name=$1
  shift
  run_np 2 "$train" "${common[@]}" --out "$name" "$@" > "$name.out" 2> "$name.err" ||
    { rc=$?; show "$name.err"; fatal "pets_train $* exit $rc"; }
}
train_run cpu --input cpu --seed 42
train_run device --input device --seed 42
train_run other --input device --seed 43
train_run resident --input device --resident on --seed 42
grep -q "input: crops resized and normalised on cpu" device.err || fail "--input device: no notice"
grep -q "input: crops" cpu.err && fail "--input cpu took the device path"

# agree A B: every epoch's train loss within a relative 1e-5 and accuracy within one image.
agree() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
ok = len(a) == len(b) == 2
for x, y in zip(a, b):
    loss = abs(x["train_loss"] - y["train_loss"]) / abs(x["train_loss"])
    acc = abs(x["correct"] - y["correct"])
    print(f"epoch {x['epoch']}: loss {x['train_loss']:.6f} vs {y['train_loss']:.6f} (rel {loss:.2e}), "
          f"correct {x['correct']} vs {y['correct']}")
    ok = ok and loss <= 1e-5 and acc <= 1 and x["evaluated"] == y["evaluated"]
sys.exit(0 if ok else 1)
PY
}
agree cpu device || fail "--input device does not agree with --input cpu"
agree cpu other > other.cmp && fail "the comparison cannot tell another seed apart"

grep -q "input device (resident, [0-9.]* MiB)" resident.err ||
  { fail "--resident on: the start-up line does not say so"; show resident.err; }
grep -q "resident" device.err && fail "--input device on the CPU held the images (auto is CUDA only)"
python3 - device/metrics.jsonl resident/metrics.jsonl <<'PY' || fail "--resident on: other epochs"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = ("epoch", "train_loss", "correct", "evaluated", "accuracy")
ok = len(a) == len(b) == 2 and all(x[k] == y[k] for x, y in zip(a, b) for k in keys)
for x, y in zip(a, b):
    print("epoch", x["epoch"], [(x[k], y[k]) for k in keys])
sys.exit(0 if ok else 1)
PY
cmp device/model.safetensors resident/model.safetensors ||
  fail "--resident on: the final weights differ from the staged path's"

base=("${common[@]}")
usage_exit() {  # NAME MESSAGE ARGS...: a usage error (exit 2) whose message mentions MESSAGE
  local name=$1 message=$2
  shift 2
  run_np 2 "$train" "${base[@]}" --out "$name" "$@" > "$name.out" 2> "$name.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit status $rc, not 2"
  grep -q -- "error: .*$message" "$name.err" || { fail "$*: no error naming $message"; show "$name.err"; }
}
usage_exit resident_cpu "--resident on holds the images .*--input cpu" --input cpu --resident on
usage_exit resident_auto "--resident on .*--input auto" --resident on
usage_exit resident_bad "--resident must be one of auto, on, off" --resident yes
# The refusal comes before any data are read: with a --data file that is no store it is the same,
# while the same run with --resident off stops at the store.
printf 'not an HDF5 store\n' > junk.h5
base=(--data junk.h5 --epochs 2 --batch-size 4 --eval-batch-size 8)
usage_exit junk_resident_cpu "--resident on holds the images .*--input cpu" --input cpu --resident on
usage_exit junk_resident_auto "--resident on .*--input auto" --resident on
usage_exit junk_store "junk.h5" --input cpu --resident off
grep -q -- "--resident" junk_store.err && { fail "junk.h5 with --resident off: a --resident error"; show junk_store.err; }

run_np 2 "$train" "${common[@]}" --input gpu --out bad > bad.out 2> bad.err
[ $? -eq 2 ] || fail "--input gpu: exit status not 2"
grep -q "error: .*--input" bad.err || { fail "--input gpu: no error naming --input"; show bad.err; }
finish
