#!/usr/bin/env bash
# Installs every Debian package pets_train needs. Idempotent: does nothing when all are present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-openmp  # OpenBLAS: Debian's LibTorch falls back to the reference BLAS, ~13x slower
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  python3-h5py  # the tests read stores with h5py too (Debian's python3, /usr/bin/python3)
  libturbojpeg0-dev libpng-dev libgif-dev libwebp-dev
  libboost-program-options-dev
  libxxhash-dev  # header only (pets/util/digest): XXH_INLINE_ALL, nothing to link
  libgtest-dev
  clang-14 libclang-rt-14-dev llvm-14  # the sanitizer build and libFuzzer targets (fuzz/); llvm-14: llvm-symbolizer
  nlohmann-json3-dev
  clang-format-14  # scripts/check_format.sh, the format_check test
  slurm-wlm munge
  iproute2 util-linux  # ip netns/link/bridge, nsenter, unshare: the multi-host test cluster (scripts/test_cluster.sh)
  jupyter-nbconvert python3-ipykernel python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
