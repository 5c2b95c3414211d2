#!/usr/bin/env bash
# Installs the Python reference the comparisons run against, and prints its interpreter: Debian's
# python3-torch (LibTorch 1.13, the version pets_train's Debian build links), torchvision, h5py and
# Pillow; timm 0.9.16 and accelerate 0.20.3 (which steps OneCycle as today's Accelerate does) from
# PyPI, in a virtual environment that sees Debian's packages ($PETS_REFERENCE_VENV, default
# build/reference-python). Idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
venv="${PETS_REFERENCE_VENV:-$PETS_ROOT/build/reference-python}"
packages=(python3-torch python3-torchvision python3-h5py python3-pil python3-venv python3-yaml
          python3-requests python3-tqdm python3-filelock python3-fsspec python3-packaging python3-psutil)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
fi
if ! "$venv/bin/python" -c "import timm, accelerate, safetensors" 2>/dev/null; then
  # --no-deps: Debian's torch (1.13.0a0) is a pre-release to pip, which would fetch another torch.
  "$venv/bin/pip" install -q --no-deps timm==0.9.16 accelerate==0.20.3 huggingface_hub==0.20.3 \
    safetensors==0.4.2 >&2
fi
echo "$venv/bin/python"
