#!/usr/bin/env bash
# userpaths_scripts: the helper scripts a user meets first.
#   pets_demo.sh: extra arguments override the script's own (--epochs, --out); PETS_PER_CLASS
#                 remakes an image folder written with another size; run again it starts its
#                 folder over on the same store, and --resume continues.
#   fetch_weights.sh: writes the file it tells the user to pass to --pretrained, the one README
#                 names; offline it names the URL and the file to copy by hand.
#   interactive.sh --help: usage, status 0, nothing asked of Slurm.
# Arguments: SOURCE_DIR BIN_DIR WORKDIR MPIEXEC NPFLAG PREFLAGS
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
src=$1 bin=$2
enter_workdir "$3"
use_mpiexec "$4" "$5" "${6:-}"

# ---- interactive.sh --help -----------------------------------------------------------------
# A Slurm client configured for a controller that is not there: were srun asked for an
# allocation, it would fail, and the help would not be printed.
no_cluster_conf nocluster.conf
for flag in --help -h; do
  SLURM_CONF=$work/nocluster.conf PETS_BIN=$bin capture help.log bash "$src/jobs/interactive.sh" "$flag"
  check_eq "interactive.sh $flag: status" "$status" 0
  grep -q '^Usage: jobs/interactive.sh' help.log || { fail "interactive.sh $flag: no usage text"; show help.log; }
  grep -qi 'srun\b.*error\|unable to contact\|requesting' help.log &&
    { fail "interactive.sh $flag: it went to Slurm"; show help.log; }
done
pass "interactive.sh --help and -h print the usage and ask Slurm for nothing"

# ---- fetch_weights.sh ------------------------------------------------------------------------
# A local stand-in for the Hub's file route, on loopback: a small but valid safetensors file.
mkdir -p hub/timm/resnet50d.ra2_in1k/resolve/main
python3 - hub/timm/resnet50d.ra2_in1k/resolve/main/model.safetensors <<'PY'
import json, struct, sys
header = json.dumps({"fc.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + b"\0" * 8)
PY
python3 -m http.server 0 --bind 127.0.0.1 --directory hub >http.log 2>&1 &
http_pid=$!
at_exit "kill $http_pid 2>/dev/null"
port=""
for _ in $(seq 50); do
  port=$(grep -o 'port [0-9]*' http.log | grep -o '[0-9]*' | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fatal "the local HTTP server did not start: $(cat http.log)"
HF_ENDPOINT=http://127.0.0.1:$port capture fetch.log bash "$src/data/fetch_weights.sh" "$work/weights"
check_eq "fetch_weights.sh: status" "$status" 0
written=$(ls weights)
check_eq "fetch_weights.sh: the file written" "$written" "resnet50d.ra2_in1k.safetensors"
grep -qF -- "--pretrained $work/weights/$written" fetch.log ||
  { fail "fetch_weights.sh does not say to pass --pretrained $work/weights/$written"; show fetch.log; }
grep -qF -- "--pretrained DIR/$written" "$src/README.md" ||
  fail "README.md does not name --pretrained DIR/$written, the file fetch_weights.sh writes"
pass "fetch_weights.sh writes $written, says to pass it to --pretrained, as README does"

# Offline: a closed port on loopback.
HF_ENDPOINT=http://127.0.0.1:9 capture offline.log bash "$src/data/fetch_weights.sh" "$work/offline"
check_eq "fetch_weights.sh offline: status" "$status" 1
grep -qF "$work/offline/resnet50d.ra2_in1k.safetensors" offline.log ||
  { fail "fetch_weights.sh offline does not name the file to copy by hand"; show offline.log; }
grep -qF "http://127.0.0.1:9/timm/resnet50d.ra2_in1k/resolve/main/model.safetensors" offline.log ||
  { fail "fetch_weights.sh offline does not name the URL"; show offline.log; }
[ -z "$(ls -A offline 2>/dev/null)" ] || fail "fetch_weights.sh offline left files: $(ls -A offline)"
pass "fetch_weights.sh offline names the URL and the file, leaves nothing"

# ---- pets_demo.sh ----------------------------------------------------------------------------
demo() { PETS_BIN=$bin PETS_WORK=$work/demo PETS_RANKS=2 capture "$1" bash "$src/scripts/pets_demo.sh" "${@:2}"; }
PETS_PER_CLASS=2 demo demo1.log --epochs 1 --batch-size 16 --threads 1
check_eq "pets_demo.sh --epochs 1: status" "$status" 0
check_eq "pets_demo.sh --epochs 1: epoch lines" "$(grep -c '^epoch [0-9]*: [0-9.]*$' demo1.log)" 1
[ "$status" -eq 0 ] || show demo1.log
images2=$(find demo/images -name '*.jpg' | wc -l)
PETS_PER_CLASS=3 demo demo2.log --batch-size 16 --threads 1 --out "$work/demo/other" --epochs 1
check_eq "pets_demo.sh --out: status" "$status" 0
[ "$status" -eq 0 ] || show demo2.log
images3=$(find demo/images -name '*.jpg' | wc -l)
[ "$images2" -gt 0 ] && [ $((images3 * 2)) -eq $((images2 * 3)) ] ||
  fail "PETS_PER_CLASS 2 then 3 gave $images2 then $images3 images, not in the ratio 2:3"
[ -s demo/other/metrics.jsonl ] || fail "pets_demo.sh --out: nothing in demo/other"
check_eq "pets_demo.sh --out DIR --epochs 1: lines in DIR/metrics.jsonl" "$(wc -l <demo/other/metrics.jsonl 2>/dev/null)" 1
pass "pets_demo.sh takes --epochs and --out over its own, and PETS_PER_CLASS remakes the images"
# Run again into its own folder: it starts it over (--overwrite) and keeps
# the store while the images are the same; told --resume, it continues that run on that store
# (finished: its final line again).
store_time=$(stat -c %Y demo/pets.h5)
PETS_PER_CLASS=3 demo demo3.log --epochs 1 --batch-size 16 --threads 1
check_eq "pets_demo.sh run again: status" "$status" 0
[ "$status" -eq 0 ] || show demo3.log
check_eq "pets_demo.sh run again: lines in metrics.jsonl" "$(wc -l <demo/runs/demo/metrics.jsonl 2>/dev/null)" 1
check_eq "pets_demo.sh run again: the store's time" "$(stat -c %Y demo/pets.h5)" "$store_time"
PETS_PER_CLASS=3 demo demo4.log --epochs 1 --batch-size 16 --threads 1 --resume
check_eq "pets_demo.sh --resume of the finished run: status" "$status" 0
check_eq "pets_demo.sh --resume of the finished run: its final line" \
  "$(grep '^epoch [0-9]*: ' demo4.log)" "$(grep '^epoch [0-9]*: ' demo3.log)"
[ "$status" -eq 0 ] && grep -q "has finished its 1 epoch;" demo4.log || show demo4.log
pass "pets_demo.sh run again starts its folder over on the same store, and --resume continues it"
finish
