#!/usr/bin/env bash
# Sourced by the fetch scripts (data/fetch_pets.sh, data/fetch_weights.sh), not run on its own:
#   dir_argument TOOL USAGE DEFAULT ARG...  the fetch script's one optional DIR argument, in $dest
#                (DEFAULT when none): -h/--help prints USAGE and exits 0; an unknown option, an
#                empty DIR or a second argument is refused with one `error:` line, exit 2.
#   download_to TOOL URL FILE HINT  downloads URL into FILE.part with curl or wget (retries,
#                timeouts). On failure it removes the partial file, prints why with HINT (what to
#                do without internet) and exits 1; the caller checks and renames FILE.part.
download_usage="Usage: source data/download.sh   (from data/fetch_pets.sh and data/fetch_weights.sh)
The download helpers of the fetch scripts; run those instead:
  data/fetch_pets.sh [DIR]      the Oxford-IIIT Pet images into DIR/images
  data/fetch_weights.sh [DIR]   the timm/resnet50d.ra2_in1k weights into DIR"

dir_argument() {
  local tool=$1 usage=$2 default=$3 dirs=()
  shift 3
  while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) printf '%s\n' "$usage"; exit 0 ;;
    --) shift; dirs+=("$@"); break ;;
    -?*) echo "error: $tool: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) dirs+=("$1") ;;
    esac
    shift
  done
  if [ "${#dirs[@]}" -gt 1 ]; then
    echo "error: $tool: takes one DIR, got ${#dirs[@]} arguments: ${dirs[*]} (see --help)" >&2
    exit 2
  fi
  dest=${dirs[0]-$default}
  if [ -z "$dest" ]; then echo "error: $tool: the DIR argument is empty (see --help)" >&2; exit 2; fi
}

download_to() {
  local tool=$1 url=$2 file=$3 hint=$4 get
  if command -v curl >/dev/null; then
    get=(curl -fL --retry 3 --connect-timeout 20 -o "$file.part" "$url")
  elif command -v wget >/dev/null; then
    get=(wget -t 3 -T 20 -O "$file.part" "$url")
  else
    echo "$tool: neither curl nor wget is installed" >&2; exit 1
  fi
  if ! "${get[@]}"; then
    rm -f "$file.part"
    echo "$tool: cannot download $url (offline or blocked?)." >&2
    echo "$tool: without internet, $hint" >&2
    exit 1
  fi
}

# Run on its own (not sourced): only --help.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
  -h | --help) printf '%s\n' "$download_usage"; exit 0 ;;
  -?*) echo "error: download.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  *)
    echo "error: download.sh is sourced by the fetch scripts, not run on its own (see --help)" >&2
    exit 2
    ;;
  esac
fi
