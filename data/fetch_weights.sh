#!/usr/bin/env bash
# Downloads the pretrained timm/resnet50d.ra2_in1k weights (model.safetensors, ~100 MB) from
# the Hugging Face Hub into DIR/resnet50d.ra2_in1k.safetensors.
# Usage: data/fetch_weights.sh [DIR]   (default: the folder of this script; HF_ENDPOINT honoured);
# -h, --help: usage
set -euo pipefail
# shellcheck source=download.sh
source "$(dirname "${BASH_SOURCE[0]}")/download.sh"
endpoint="${HF_ENDPOINT:-https://huggingface.co}"
url="$endpoint/timm/resnet50d.ra2_in1k/resolve/main/model.safetensors"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir_argument fetch_weights.sh "Usage: data/fetch_weights.sh [DIR]
Downloads the pretrained timm/resnet50d.ra2_in1k weights (model.safetensors, ~100 MB) from
$url
into DIR/resnet50d.ra2_in1k.safetensors (DIR default: $here); train with
--pretrained DIR/resnet50d.ra2_in1k.safetensors. HF_ENDPOINT replaces https://huggingface.co
(a mirror). Nothing to do when the file exists." "$here" "$@"
out="$dest/resnet50d.ra2_in1k.safetensors"
mkdir -p "$dest"
if [ -s "$out" ]; then echo "fetch_weights: $out already exists; train with: --pretrained $out"; exit 0; fi
download_to fetch_weights "$url" "$out" \
  "download $url elsewhere and copy it to $out (or train without --pretrained: a random backbone)."
# A safetensors file starts with an 8-byte little-endian header length, then a JSON header.
if [ "$(head -c 9 "$out.part" | tail -c 1)" != "{" ]; then
  rm -f "$out.part"; echo "fetch_weights: the download is not a safetensors file" >&2; exit 1
fi
mv "$out.part" "$out"
echo "fetch_weights: wrote $out ($(stat -c %s "$out") bytes); train with: --pretrained $out"
