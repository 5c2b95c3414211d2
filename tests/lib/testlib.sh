# shellcheck shell=bash disable=SC2034  # work, np_pid, status, seconds: for the scripts
# The library every script test sources (source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh").
#
# Failure has one meaning. A failed check prints one line `FAIL: what is wrong` and is counted; the
# script goes on with the next check, so one run reports every check that fails. `fatal` is the
# same failure for a step the rest depends on (the data could not be made, a job did not run): it
# ends the script at once. `finish`, the script's last line, prints the summary and exits 1 when
# any check failed, 0 when none did. However the script ends (finish, fatal, exit, an unset
# variable), it never exits 0 with a failure recorded or without reaching `finish`.
# Skipping: `skip REASON` prints `SKIPPED: REASON` and exits 77, ctest's "Not Run (Skipped)" where
# the test sets SKIP_RETURN_CODE 77; a skip is never reported as a pass (after a failed check it
# exits 1).
# Shell options: set -u and pipefail, not -e: each check tests a status itself.
# Evidence goes to stdout with the FAIL lines (`show FILE` prints a file's end).
# As root, Open MPI is told that running as root is intended (as scripts/env.sh does).
#
#   fail MESSAGE               count a failed check (in $failures) and go on
#   fatal MESSAGE              count it and end the script (exit 1)
#   pass MESSAGE               `ok: MESSAGE`, unless a check failed since the previous pass
#   finish                     summary; exit 1 if any check failed, else 0
#   skip REASON                SKIPPED line, exit 77
#   check_eq WHAT ACTUAL WANT  fail unless ACTUAL = WANT (strings)
#   show FILE...               the last $show_lines (80) lines of each file, under its name
#   enter_workdir DIR          empty DIR (made afresh) becomes the current folder; sets work.
#                              A script that passes removes it at the end (after its at_exit
#                              commands), so the suite does not keep every test's runs on disk;
#                              a failed or skipped one keeps it, and PETS_KEEP_WORK=1 keeps all
#   at_exit COMMAND            run COMMAND when the script ends (last registered first)
#   at_finish COMMAND          run COMMAND first thing in finish: a last check, which may fail
#   drop_at_exit COMMAND       forget a COMMAND given to at_exit (its job is done)
#   use_mpiexec MPIEXEC NPFLAG PREFLAGS   the launcher as ctest passes it (PREFLAGS one word)
#   run_np NP ARG...           mpiexec NPFLAG NP PREFLAGS ARG... (stdin /dev/null); after
#                              $np_timeout seconds (600) it gets $np_signal (TERM): status 124
#                              (137 for KILL)
#   start_np NP ARG...         the same in the background, without a time limit, so that signals
#                              sent to $np_pid reach mpiexec itself
#   capture LOG CMD...         CMD with both streams into LOG; sets status and seconds
#   expect_usage WHAT TEXT CMD...  CMD must refuse bad input: exit 2, exactly one `error:` line,
#                              containing TEXT, and no report of a torn-down MPI job (output
#                              in ./usage.log)
#   abort_report LOG           true when LOG holds Open MPI's report of a torn-down job
#   no_cluster_conf FILE       writes FILE, a slurm.conf whose controller is not there (an srun
#                              asking for an allocation fails; sinfo gets no answer)
#   jupyter_home DIR           Jupyter, IPython and matplotlib keep their files under DIR (made),
#                              not in $HOME; matplotlib draws without a display
#   own_shm_segments [HOSTS]   Open MPI's shared-memory segments (btl vader) of every process
#                              this script starts, and of the jobs it submits, go to a folder of
#                              its own in /dev/shm, removed when the script ends; with HOSTS (a
#                              glob of host names), finish fails if /dev/shm holds segments of
#                              such a host that were not there before

set -uo pipefail
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

_tl_name=$(basename "$0" .sh)
failures=0
_tl_failed=()
_tl_finished=0
_tl_skipped=0
_tl_cleanups=()
show_lines=80
np_timeout=600
np_signal=TERM

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
  _tl_failed+=("$*")
  return 0
}

fatal() {
  fail "$@"
  echo "$_tl_name: stopped at this failure; the checks after it did not run"
  exit 1
}

_tl_pass_mark=0
pass() {
  [ "$failures" -eq "$_tl_pass_mark" ] && echo "ok: $*"
  _tl_pass_mark=$failures
}

_tl_summary() {
  local f
  if [ "$failures" -eq 0 ]; then
    echo "$_tl_name: all checks passed"
  else
    echo "$_tl_name: $failures check(s) failed:"
    for f in "${_tl_failed[@]}"; do echo "  - $f"; done
  fi
}

_tl_finish_checks=()
at_finish() { _tl_finish_checks+=("$1"); }

finish() {
  local check
  for check in "${_tl_finish_checks[@]}"; do eval "$check"; done
  _tl_finished=1
  _tl_summary
  [ "$failures" -eq 0 ] && exit 0
  exit 1
}

skip() {
  echo "SKIPPED: $*"
  _tl_skipped=1
  exit 77
}

check_eq() {
  [ "$2" = "$3" ] || fail "$1: '$2', want '$3'"
}

show() {
  local f
  for f in "$@"; do
    if [ -f "$f" ]; then
      echo "----- $f (last $show_lines lines)"
      tail -n "$show_lines" "$f"
    else
      echo "----- $f: missing"
    fi
  done
}

at_exit() { _tl_cleanups+=("$1"); }

drop_at_exit() {
  local i
  for i in "${!_tl_cleanups[@]}"; do
    [ "${_tl_cleanups[i]}" = "$1" ] && unset '_tl_cleanups[i]'
  done
  return 0
}

_tl_on_exit() {
  local rc=$? i
  local ids=("${!_tl_cleanups[@]}")
  for ((i = ${#ids[@]} - 1; i >= 0; i--)); do
    eval "${_tl_cleanups[ids[i]]}" || echo "note: cleanup '${_tl_cleanups[ids[i]]}' failed"
  done
  if [ "$_tl_finished" -eq 1 ]; then
    [ "$rc" -eq 0 ] && _tl_remove_workdir
    exit "$rc"
  fi
  [ "$_tl_skipped" -eq 1 ] && [ "$failures" -eq 0 ] && exit 77
  if [ "$failures" -eq 0 ]; then
    fail "the script ended with status $rc before finish"
  fi
  _tl_summary
  exit 1
}
_tl_remove_workdir() {
  [ -n "${work:-}" ] && [ "${PETS_KEEP_WORK:-0}" != 1 ] || return 0
  cd / && rm -rf "$work" || echo "note: could not remove the work folder $work"
}
trap _tl_on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

enter_workdir() {
  if ! { rm -rf "$1" && mkdir -p "$1" && cd "$1"; }; then fatal "cannot make the work folder $1"; fi
  work=$(pwd)
}

use_mpiexec() {
  _tl_mpiexec=$1
  _tl_npflag=$2
  read -r -a _tl_preflags <<<"${3:-}"
}

run_np() {
  local np=$1 rc
  shift
  timeout -s "$np_signal" "$np_timeout" "$_tl_mpiexec" "$_tl_npflag" "$np" "${_tl_preflags[@]}" "$@" </dev/null
  rc=$?
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$np_signal" = KILL ]; }; then
    echo "note: stopped by SIG$np_signal after $np_timeout s: mpiexec -n $np $*" >&2
  fi
  return "$rc"
}

start_np() {
  local np=$1
  shift
  "$_tl_mpiexec" "$_tl_npflag" "$np" "${_tl_preflags[@]}" "$@" </dev/null &
  np_pid=$!
}

capture() {
  local log=$1 start=$SECONDS
  shift
  "$@" </dev/null >"$log" 2>&1
  status=$?
  seconds=$((SECONDS - start))
  return "$status"
}

abort_report() {
  grep -Eqi 'abnormal termination|MPI_ABORT|exited on signal|has exited due to|killed' "$1"
}

expect_usage() {
  local what=$1 text=$2 log=usage.log errors
  shift 2
  capture "$log" "$@"
  if [ "$status" -ne 2 ]; then
    fail "$what: exit $status, not 2"
    show "$log"
    return 1
  fi
  errors=$(grep -c '^error:' "$log")
  if [ "$errors" -ne 1 ]; then
    fail "$what: $errors lines start with 'error:', not 1"
    show "$log"
    return 1
  fi
  if ! grep '^error:' "$log" | grep -qF -- "$text"; then
    fail "$what: the error line lacks '$text'"
    show "$log"
    return 1
  fi
  if abort_report "$log"; then
    fail "$what: Open MPI reports a torn-down job, not a clean exit 2"
    show "$log"
    return 1
  fi
  echo "ok: $what: $(grep '^error:' "$log")"
}

no_cluster_conf() {
  cat >"$1" <<'CONF'
ClusterName=nocluster
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=9
MessageTimeout=2
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=p Nodes=localhost Default=YES
CONF
}

jupyter_home() {
  mkdir -p "$1" || fatal "cannot make $1"
  export JUPYTER_CONFIG_DIR=$1/config JUPYTER_DATA_DIR=$1/data JUPYTER_RUNTIME_DIR=$1/runtime
  export IPYTHONDIR=$1/ipython MPLCONFIGDIR=$1/matplotlib MPLBACKEND=Agg
}

# Open MPI names a segment vader_segment.HOST.ID.RANK, in btl_vader_backing_directory (/dev/shm by
# default); a rank that is killed never removes its own, and a job step that srun starts has no
# Open MPI daemon to do it afterwards.
_tl_segments() {
  find /dev/shm -maxdepth 1 -name "vader_segment.$1.*" -printf '%f\n' 2>/dev/null | sort
}
own_shm_segments() {
  local base=/dev/shm
  [ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
  _tl_shm=$(mktemp -d "$base/pets-$_tl_name.XXXXXX") || fatal "cannot make a folder in $base"
  export OMPI_MCA_btl_vader_backing_directory=$_tl_shm
  at_exit "rm -rf '$_tl_shm'"
  if [ -n "${1:-}" ]; then
    _tl_shm_hosts=$1
    _tl_shm_before=$(_tl_segments "$_tl_shm_hosts")
    at_finish _tl_check_segments
  fi
}
_tl_check_segments() {
  local left
  left=$(comm -13 <(echo "$_tl_shm_before") <(_tl_segments "$_tl_shm_hosts") | tr '\n' ' ')
  [ -z "$left" ] || fail "Open MPI shared-memory segments left in /dev/shm: $left"
}
