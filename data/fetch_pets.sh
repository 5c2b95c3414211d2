#!/usr/bin/env bash
# Downloads and unpacks the Oxford-IIIT Pet images (images.tar.gz, ~790 MB) into DIR/images.
# Usage: data/fetch_pets.sh [DIR]   (default: the folder of this script)
# Machines without internet: use `pets_synth --out DIR --per-class N` instead.
set -euo pipefail
url="https://www.robots.ox.ac.uk/~vgg/data/pets/data/images.tar.gz"
dest="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
mkdir -p "$dest"
archive="$dest/images.tar.gz"
if [ -d "$dest/images" ] && [ -n "$(ls -A "$dest/images" 2>/dev/null)" ]; then
  echo "fetch_pets: $dest/images already exists; nothing to do"; exit 0
fi
if command -v curl >/dev/null; then
  get=(curl -fL --retry 3 --connect-timeout 20 -o "$archive.part" "$url")
elif command -v wget >/dev/null; then
  get=(wget -t 3 -T 20 -O "$archive.part" "$url")
else
  echo "fetch_pets: neither curl nor wget is installed" >&2; exit 1
fi
if ! "${get[@]}"; then
  rm -f "$archive.part"
  echo "fetch_pets: cannot download $url (offline or blocked?)." >&2
  echo "fetch_pets: without internet, make the synthetic set: pets_synth --out $dest/images --per-class 200" >&2
  exit 1
fi
mv "$archive.part" "$archive"
tar -xzf "$archive" -C "$dest"
rm -f "$archive"
echo "fetch_pets: $(find "$dest/images" -maxdepth 1 -name '*.jpg' | wc -l) .jpg files in $dest/images"
echo "next: mpirun -np P pets_preprocess --images $dest/images --out $dest/pets.h5"
