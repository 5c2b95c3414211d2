#!/usr/bin/env bash
# Checks that every C++ source of the checkout is formatted as .clang-format says (clang-format 14,
# the version the rules were written for: another version may lay out some lines differently).
#   scripts/check_format.sh          list the files that are not formatted; exit 1 if any
#   scripts/check_format.sh --fix    format them in place
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: scripts/check_format.sh [--fix]" >&2; exit 2 ;;
esac

format=${CLANG_FORMAT:-clang-format-14}
command -v "$format" >/dev/null || { echo "error: $format not found (scripts/install_deps.sh installs it)" >&2; exit 2; }

# The files: what git tracks in a checkout, else every C++ source below the project's folders.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find bench fuzz include src tests -type f \
                         \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "error: no C++ source found below $root" >&2; exit 2; }

if [ $fix -eq 1 ]; then
  "$format" -i "${files[@]}"
  echo "formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  "$format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted: %s\n' "${bad[@]}" >&2
  echo "error: ${#bad[@]} of ${#files[@]} C++ files are not formatted; run scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "all ${#files[@]} C++ files formatted"
