#!/usr/bin/env bash
# check_cli.sh CASE OPTIONS_CHECK WORKDIR LAUNCHER...
# Runs options_check under LAUNCHER (mpiexec -n 2 ...) with the command line of CASE and checks
# the exit status, the number of "error:" lines, the text, the time taken, and that Open MPI
# printed no abnormal-termination report where the program should end cleanly.
# shellcheck source=../../lib/testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/testlib.sh"
[ $# -ge 4 ] || fatal "usage: check_cli.sh CASE OPTIONS_CHECK WORKDIR LAUNCHER..."
case_name=$1 bin=$2
launcher=("${@:4}")
mkdir -p "$3" || fatal "cannot make $3"
# Cases run in parallel: each in a folder of its own under WORKDIR.
work=$(mktemp -d "$3/${case_name}.XXXX") || fatal "cannot make a folder under $3"
at_exit 'rm -rf "$work"'
cd "$work" || fatal "cannot enter $work"

# options_check under the launcher; a rank that hangs is stopped after 60 s (status 124).
launch() { timeout 60 "${launcher[@]}" "$bin" "$@"; }
# run ARGS...: sets status and seconds; the output (both streams) in out, shown at the end when
# a check failed.
run() {
  capture out launch "$@"
  [ "$status" -ne 124 ] || fail "timed out after 60 s (a rank hangs)"
}
expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
expect_text() { grep -q -- "$1" out || fail "output lacks '$1'"; }
error_lines() { grep -c '^error:' out; }
no_abort_noise() { ! abort_report out || fail "Open MPI abort report in the output"; }

case "$case_name" in
  help)
    run --help
    expect_status 0
    for opt in --data --epochs --batch-size --eval-batch-size --max-lr --mixed-precision --seed \
               --pretrained --bn-mode --unfreeze --backbone-lr-ratio --unfreeze-epoch --device --threads --out --resume --config --write-config; do
      expect_text "$opt"
    done
    expect_text '(=3e-2)'
    check_eq "ranks that printed the help" "$(grep -c -- '--max-lr arg' out)" 1
    no_abort_noise ;;
  unknown_option) expect_usage "$case_name" "--bogus" launch --data d.h5 --bogus ;;
  bad_value) expect_usage "$case_name" "--max-lr" launch --data d.h5 --max-lr abc ;;
  zero_epochs) expect_usage "$case_name" "--epochs must be positive" launch --data d.h5 --epochs 0 ;;
  negative_epochs) expect_usage "$case_name" "--epochs must be positive" launch --data d.h5 --epochs -3 ;;
  zero_batch) expect_usage "$case_name" "--batch-size" launch --data d.h5 --batch-size 0 ;;
  negative_batch) expect_usage "$case_name" "--batch-size" launch --data d.h5 --batch-size=-4 ;;
  zero_eval_batch) expect_usage "$case_name" "--eval-batch-size" launch --data d.h5 --eval-batch-size 0 ;;
  repeated_option) expect_usage "$case_name" "--epochs" launch --data d.h5 --epochs 2 --epochs 3 ;;
  missing_data) expect_usage "$case_name" "--data" launch --epochs 2 ;;
  bad_enum) expect_usage "$case_name" "--mixed-precision" launch --data d.h5 --mixed-precision fp8 ;;
  unfreeze_refused)
    # An unknown stage, a ratio that is not positive, an unfreeze epoch the run never reaches, a
    # sweep whose heads share the backbone.
    expect_usage "$case_name" "--unfreeze must be one of none, layer4, layer3, layer2, layer1, all" \
      launch --data d.h5 --unfreeze layer5
    expect_usage "$case_name" "--backbone-lr-ratio must be a positive number, got 0" \
      launch --data d.h5 --unfreeze all --backbone-lr-ratio 0
    expect_usage "$case_name" "--unfreeze-epoch must be at least 0 and below --epochs (2), got 2" \
      launch --data d.h5 --epochs 2 --unfreeze layer4 --unfreeze-epoch 2
    expect_usage "$case_name" "a sweep's heads (--max-lr 1e-3,3e-2) share" \
      launch --data d.h5 --unfreeze layer4 --max-lr 1e-3,3e-2 ;;
  config_unknown_key)
    printf 'epochs = 2\nlearning-rate = 0.1\n' >bad.cfg
    expect_usage "$case_name" "learning-rate" launch --data d.h5 --config bad.cfg ;;
  write_config_no_folder)
    expect_usage "$case_name" "--write-config nodir/c.cfg: no folder 'nodir'" \
      launch --data d.h5 --write-config nodir/c.cfg
    [ ! -e nodir ] || fail "a folder was made" ;;
  write_config_existing)
    # An existing file is replaced only when asked (--overwrite), and that request is not
    # written into the file (it would make every run of the config start over).
    echo "my notes" >c.cfg
    expect_usage "$case_name" "--write-config c.cfg: the file exists; replace it with --overwrite" \
      launch --data d.h5 --write-config c.cfg
    check_eq "the existing file after a refusal" "$(cat c.cfg)" "my notes"
    run --data d.h5 --epochs 3 --write-config c.cfg --overwrite
    expect_status 0
    grep -q '^epochs = 3$' c.cfg || fail "--overwrite did not replace the file"
    grep -q '^overwrite = false$' c.cfg || fail "--overwrite was written into the config file" ;;
  write_config_not_a_file)
    # A symbolic link (the rename would replace the link, not its target), a FIFO, a device.
    echo "target" >target.txt && ln -s target.txt link.cfg && mkfifo fifo.cfg
    expect_usage "$case_name" "--write-config link.cfg: 'link.cfg' is a symbolic link" \
      launch --data d.h5 --write-config link.cfg --overwrite
    check_eq "the link's target" "$(cat target.txt)" "target"
    [ -L link.cfg ] || fail "the link was replaced"
    expect_usage "$case_name" "'fifo.cfg' exists and is not a regular file" \
      launch --data d.h5 --write-config fifo.cfg --overwrite
    [ -p fifo.cfg ] || fail "the FIFO was replaced"
    expect_usage "$case_name" "'/dev/full' exists and is not a regular file" \
      launch --data d.h5 --write-config /dev/full --overwrite
    [ -c /dev/full ] || fail "/dev/full is no longer a device" ;;
  write_config_own_input)
    # The run's own data and weights, also under another name (a hard link).
    printf 'store bytes' >d.h5 && printf 'weights' >w.safetensors && ln d.h5 same.h5
    expect_usage "$case_name" "--write-config d.h5: it is the --data file of this run" \
      launch --data d.h5 --write-config d.h5 --overwrite
    expect_usage "$case_name" "--write-config same.h5: it is the --data file of this run" \
      launch --data d.h5 --write-config same.h5 --overwrite
    expect_usage "$case_name" "it is the --pretrained file of this run" \
      launch --data d.h5 --pretrained w.safetensors --write-config w.safetensors --overwrite
    check_eq "the data file" "$(cat d.h5)" "store bytes"
    check_eq "the weights" "$(cat w.safetensors)" "weights" ;;
  write_config_unwritable)
    # A folder that takes no new file (/proc, even for root): one line, exit 2, no MPI_ABORT.
    expect_usage "$case_name" "--write-config /proc/pets.cfg: " launch --data d.h5 --write-config /proc/pets.cfg
    if grep -q '\.cpp:[0-9]' usage.log; then fail "the message names a source line"; show usage.log; fi ;;
  abbreviation)
    # Boost would take a prefix of an option name as the option: not here.
    expect_usage "$case_name" "unrecognised option '--epoch'" launch --data d.h5 --epoch 3
    expect_usage "$case_name" "unrecognised option '--over'" launch --data d.h5 --over ;;
  help_resume)
    run --help
    expect_status 0
    expect_text '--resume \[=yes|auto\] '
    if grep -q -- '(=yes)\]\|auto(=' out; then fail "--help shows Boost's implicit value"; show out; fi ;;
  config_folder)
    mkdir -p cfgdir
    expect_usage "$case_name" "--config: 'cfgdir' is a folder, not a file" \
      launch --data d.h5 --config cfgdir ;;
  config_bom)
    # A config file as Windows editors write it: byte-order mark, CRLF line ends.
    printf '\xef\xbb\xbfepochs = 3\r\nseed = 7\r\n' >bom.cfg
    run --data d.h5 --config bom.cfg
    expect_status 0
    expect_text '^epochs = 3$'
    expect_text '^seed = 7$'
    no_abort_noise ;;
  config_roundtrip)
    run --data d.h5 --epochs 3 --seed 7 --write-config run.cfg
    expect_status 0
    if [ -f run.cfg ]; then
      grep -q '^epochs = 3$' run.cfg || fail "config file lacks 'epochs = 3'"
    else
      fail "--write-config wrote no file"
    fi
    run --config run.cfg --batch-size 8
    expect_status 0
    expect_text '^epochs = 3$'
    expect_text '^seed = 7$'
    expect_text '^batch-size = 8$'
    expect_text '^data = d.h5$'
    check_eq "ranks that printed the options" "$(grep -c '^epochs = ' out)" 1
    no_abort_noise ;;
  fp16_without_gpu)
    if "$bin" --data d.h5 --mixed-precision fp16 --device cuda >/dev/null 2>&1; then
      skip "$case_name: this build sees a CUDA device"
    fi
    expect_usage "$case_name" "fp16" launch --data d.h5 --mixed-precision fp16 ;;
  usage_error_one_rank)
    # Input that only rank 1 rejects (e.g. a file readable on one node only), checked inside
    # agree_on_usage: still one message and a clean exit 2.
    expect_usage "$case_name" "rank 1" launch --data d.h5 --usage-error-on-rank 1 ;;
  usage_error_outside_agreement)
    # A usage error on rank 1 while rank 0 sits in a collective: no clean exit is possible; the
    # agreement timeout (3 s in options_check) must end the job, naming rank 1.
    run --data d.h5 --usage-error-outside-agreement 1
    [ "$status" -ne 0 ] || fail "exit status 0"
    [ "$seconds" -le 20 ] || fail "took $seconds s"
    expect_text '^error: .*rank 1' ;;
  fault_on_rank_1)
    run --data d.h5 --fail-on-rank 1
    [ "$status" -ne 0 ] || fail "exit status 0"
    [ "$seconds" -le 10 ] || fail "took $seconds s to end the job"
    expect_text '^error: injected fault .*rank 1)'
    check_eq "error lines" "$(error_lines)" 1 ;;
  *) fatal "unknown case $case_name" ;;
esac
echo "$case_name: exit $status after ${seconds:-0} s"
[ "$failures" -eq 0 ] || [ ! -f out ] || show out
finish
