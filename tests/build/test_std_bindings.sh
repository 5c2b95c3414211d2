#!/usr/bin/env bash
# One C++ standard library in the process: every symbol the system's libstdc++ defines that a
# program calls is bound to libstdc++ itself, not to a copy of it inside LibTorch. The pip
# wheel's libraries carry, statically linked and exported, the parts of libstdc++ newer than
# their build system's (std::filesystem, std::string, exception_ptr, ...); when they come before
# libstdc++ in the program's load order, the program's std::filesystem calls land in
# libtorch.so's copy and crash (the disk cases of model_safetensors did). Each PROGRAM is started
# with every symbol bound at once (LD_BIND_NOW) and the loader's bindings listed (LD_DEBUG).
#
#   test_std_bindings.sh WORK_DIR PROGRAM [ARG...] [-- PROGRAM [ARG...]]...
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
enter_workdir "$1"
shift

# check_program PROGRAM ARG...: the bindings made for PROGRAM's own references.
check_program() {
  local program=$1 name libstdcxx
  shift
  name=$(basename "$program")
  [ -x "$program" ] || { fail "$name: no program $program"; return; }
  libstdcxx=$(ldd "$program" | awk '$1 == "libstdc++.so.6" { print $3 }')
  [ -f "$libstdcxx" ] || { fail "$name: ldd finds no libstdc++.so.6"; return; }
  nm -D --defined-only "$libstdcxx" | awk '{ sub(/@.*/, "", $3); print $3 }' >"$name.defined"
  [ -s "$name.defined" ] || { fail "$name: no symbols read from $libstdcxx"; return; }
  LD_BIND_NOW=1 LD_DEBUG=bindings "$program" "$@" </dev/null >/dev/null 2>"$name.bindings"
  # "binding file FROM [0] to TO [0]: normal symbol `SYMBOL' [VERSION]"; the program's own
  # copy relocations (std::cerr) bind to the program and are fine.
  awk -v program="$program" -v std="$libstdcxx" '
    NR == FNR { defined[$0] = 1; next }
    $2 == "binding" && $4 == program {
      symbol = $0; sub(/^.*symbol `/, "", symbol); sub(/'"'"'.*$/, "", symbol)
      if (!(symbol in defined)) next
      total++
      if ($7 != std && $7 != program) { wrong++; if (wrong <= 5) print symbol " -> " $7 > "/dev/stderr" }
    }
    END { printf "%d %d\n", total, wrong }' "$name.defined" "$name.bindings" >"$name.counts" \
    2>"$name.wrong"
  local total wrong
  read -r total wrong <"$name.counts"
  if [ "${total:-0}" -eq 0 ]; then
    fail "$name: no binding of a libstdc++ symbol seen (LD_DEBUG output: $(wc -l <"$name.bindings") lines)"
  elif [ "${wrong:-0}" -ne 0 ]; then
    fail "$name: $wrong of $total libstdc++ symbols bound elsewhere than $libstdcxx, e.g.:"
    cat "$name.wrong"
  else
    pass "$name: all $total libstdc++ symbols it uses bound to $libstdcxx"
  fi
}

while [ $# -gt 0 ]; do
  args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  [ "${#args[@]}" -gt 0 ] && check_program "${args[@]}"
done
finish
