# Sourced by the fetch scripts: download_to TOOL URL FILE HINT downloads URL into FILE.part with
# curl or wget (retries, timeouts). On failure it removes the partial file, prints why with HINT
# (what to do without internet) and exits 1; the caller checks and renames FILE.part.
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
