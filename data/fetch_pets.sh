#!/usr/bin/env bash
# Downloads and unpacks the Oxford-IIIT Pet images (images.tar.gz, ~790 MB) into DIR/images.
# Usage: data/fetch_pets.sh [DIR]   (default: the folder of this script); -h, --help: usage
# Machines without internet: use `pets_synth --out DIR --per-class N` instead.
set -euo pipefail
# shellcheck source=download.sh
source "$(dirname "${BASH_SOURCE[0]}")/download.sh"
url="https://www.robots.ox.ac.uk/~vgg/data/pets/data/images.tar.gz"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir_argument fetch_pets.sh "Usage: data/fetch_pets.sh [DIR]
Downloads the Oxford-IIIT Pet images (images.tar.gz, ~790 MB) from
$url
and unpacks them into DIR/images (DIR default: $here); nothing to do when DIR/images holds files.
Without internet, make a synthetic set instead: pets_synth --out DIR/images --per-class 200" \
  "$here" "$@"
mkdir -p "$dest"
archive="$dest/images.tar.gz"
if [ -d "$dest/images" ] && [ -n "$(ls -A "$dest/images" 2>/dev/null)" ]; then
  echo "fetch_pets: $dest/images already exists; nothing to do"; exit 0
fi
download_to fetch_pets "$url" "$archive" "make the synthetic set: pets_synth --out $dest/images --per-class 200"
mv "$archive.part" "$archive"
tar -xzf "$archive" -C "$dest"
rm -f "$archive"
echo "fetch_pets: $(find "$dest/images" -maxdepth 1 -name '*.jpg' | wc -l) .jpg files in $dest/images"
echo "next: mpirun -np P pets_preprocess --images $dest/images --out $dest/pets.h5"
