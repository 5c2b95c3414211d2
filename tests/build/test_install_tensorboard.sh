#!/usr/bin/env bash
# scripts/install_tensorboard.sh: the pinned environment, once installed (from PyPI on the first
# run), is reused without pip (its python, which reads event files, the only line on stdout); an
# incomplete one is installed again, and without PyPI that fails with one `error:` line and
# nothing on stdout; arguments are refused (2).
#
#   test_install_tensorboard.sh SOURCE_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
script="$1/scripts/install_tensorboard.sh"
enter_workdir "$2"
version=2.21.0
# No package index and no local wheels: any pip install fails at once.
offline=(env PIP_NO_INDEX=1 PIP_FIND_LINKS= PIP_RETRIES=0 PIP_TIMEOUT=2)

# The default environment: installed if missing, then reused offline in seconds.
"$script" </dev/null >first.txt 2>first.err || { show first.err; fatal "first run exit $?"; }
start=$SECONDS
"${offline[@]}" "$script" </dev/null >out.txt 2>err.txt
check_eq "reuse: exit status" "$?" 0
check_eq "reuse: lines on stdout" "$(wc -l <out.txt)" 1
check_eq "reuse: the same python" "$(cat out.txt)" "$(cat first.txt)"
grep -qi pip err.txt && fail "reuse: pip ran: $(head -3 err.txt)"
[ $((SECONDS - start)) -le 20 ] || fail "reuse took $((SECONDS - start)) s"
"$(cat out.txt)" -c "from tensorboard.backend.event_processing import event_accumulator" ||
  fail "its python cannot import tensorboard's event reader"
pass "the pinned environment reused offline: $(cat out.txt)"

# An environment without tensorboard (an interrupted first install): installs again, and
# offline that fails with one error line.
python3 -m venv venv-empty || fatal "python3 -m venv failed"
"${offline[@]}" PETS_TENSORBOARD_VENV="$work/venv-empty" "$script" </dev/null >out.txt 2>err.txt
check_eq "venv without tensorboard, offline: exit status" "$?" 1
[ -s out.txt ] && fail "venv without tensorboard, offline: printed $(head -c 200 out.txt)"
check_eq "venv without tensorboard, offline: error lines" "$(grep -c '^error:' err.txt)" 1
grep '^error:' err.txt | grep -qF "tensorboard==$version" ||
  { fail "the error line does not name tensorboard==$version"; show err.txt; }
pass "an incomplete environment installed again: $(grep '^error:' err.txt)"

"$script" extra >out.txt 2>err.txt
check_eq "an argument: exit status" "$?" 2
grep -q '^error: install_tensorboard.sh takes no arguments' err.txt || fail "no error line for an argument"
finish
