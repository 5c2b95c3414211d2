#!/usr/bin/env bash
# The device check: the CUDA tests and the benchmark harness on a GPU node that has no build tools,
# none of Debian's packages and no network: a python3 with torch 2.11.0+cu130 (the pinned wheel's
# version, with its nvidia/ packages), an NVIDIA driver and a shell suffice. The programs are built
# on a build machine and travel, with every library they need outside glibc and torch, as one
# bundle inside a copy of the checkout.
#
#   bench/device_check.sh prepare   # build machine: build build-torch2/ against the pinned torch
#                                   # 2.11.0 wheel (CUDA on), install its `device` component
#                                   # (cmake/PetsDeviceBundle.cmake) and pack it into
#                                   # .device/pets_device.tar.xz
#   bench/device_check.sh run       # GPU node, in the copy: bench/device_check.py unpacks it,
#                                   # checks that everything resolves, runs the CUDA tests and the
#                                   # harness, writes $OUT/device_check.json
#   bench/device_check.sh local     # build machine: `run` in a mount namespace where Debian's
#                                   # Open MPI, PMIx, HDF5 and CUDA folders and the bundled
#                                   # libraries' system copies are hidden (the bundle alone must
#                                   # suffice); without a GPU the CUDA parts report "skipped: no GPU"
#
# Copy the checkout's files and the bundle to the node (.device/ is ignored by git; `prepare`
# fails when the bundle is over 12 MiB or the two together over 62 MiB), then run it there:
#
#   git ls-files -z | tar --null -T - -cf pets_check.tar .device      # build machine
#   mkdir check && tar -xf pets_check.tar -C check && cd check        # GPU node
#   OUT=$PWD/out bash bench/device_check.sh run                       # about 8 minutes at most
#
# `run` keeps to 460 s of steps (PETS_DEVICE_BUDGET_S), each under its own time limit, so a hang
# costs that step only; the JSON report is written whatever fails. It leaves
# $OUT/device_check.json (each part's status, figures and log tail) and $OUT/device_logs.tar.gz.
# The CUDA tests it runs are those labelled `cuda` in ctest, as the bundle's device_manifest.json
# lists them (pets_device_step in tests/CMakeLists.txt); bench/device_check.py says what else.
#
# Environment: PETS_BUILD_TORCH2 (default build-torch2/: the build `prepare` makes and packs),
# PETS_DEVICE_SKIP_BUILD=1 (`prepare` packs what the build folder holds), PETS_DEVICE_DIR
# (default .device/), PETS_DEVICE_PYTHON (the python3 whose torch the programs load; default
# python3 on the node, the pinned wheel's venv for `local`), PETS_DEVICE_WORK (unpack and
# work folder, default /tmp/pets_device), PETS_DEVICE_BUDGET_S (460), PETS_DEVICE_PER_CLASS (the
# harness's synthetic set: images per class, 37 classes; default 200, i.e. 7,400 images; 4 with
# no GPU), PETS_DEVICE_BATCH (model step and training batch on the GPU, default 128),
# PETS_DEVICE_XZ_LEVEL (`prepare`'s compression, default 9), PETS_DEVICE_STEPS (a comma-separated
# list of step names: only those run, the others are reported "skipped: not selected"; a step
# whose input another step makes needs that one too), PETS_DEVICE_E2E_RUNS (pets_bench's
# --e2e-runs on the GPU), PETS_DEVICE_SWEEP (the sweep_heads part's --max-lr list, default the 8
# values 1e-3,2e-3,5e-3,1e-2,2e-2,3e-2,5e-2,1e-1, timed against --max-lr 3e-2; it needs the
# harness's data set, so harness_synth and harness_data too), PETS_DEVICE_SWEEP_PAIRS (its
# pairs of runs, default 3 on a GPU, 1 on the CPU; the part keeps to 60 s).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dev_dir="${PETS_DEVICE_DIR:-$root/.device}"
bundle="$dev_dir/pets_device.tar.xz"
# The bundle's limit: the checkout's files (about 56 MiB, mostly tests/fixtures) plus the bundle
# (about 6.2 MiB) stay under 64 MiB, what a copy to the GPU node carries in all; 1 MiB is left as
# margin.
max_bundle_bytes=$((12 * 1024 * 1024))
max_tree_bytes=$((63 * 1024 * 1024))
# Libraries every GPU node has (glibc's own): never hidden by `local`.
glibc_re='^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|libutil\.so\.1|libresolv\.so\.2|libanl\.so\.1)$'

die() { echo "device_check: error: $*" >&2; exit 1; }
usage() { sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; }

# ---- prepare (build machine) -----------------------------------------------------------------

prepare() {
  # shellcheck source=../scripts/env.sh
  source "$root/scripts/env.sh"
  local build="${PETS_BUILD_TORCH2:-$root/build-torch2}" prefix
  prefix="$("$root/scripts/install_torch.sh")" || die "scripts/install_torch.sh failed"
  local wheel_python version
  wheel_python="$(cd "$prefix/../../../.." && pwd)/bin/python"
  version="$("$wheel_python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  # The GPU node's torch is 2.11.0+cu130: the same wheel, so the same torch/lib the programs load.
  [[ "$version" == "2.11.0+cu130" ]] ||
    die "the pinned wheel is torch $version, the GPU node needs 2.11.0+cu130 (PETS_TORCH_VERSION?)"
  mkdir -p "$dev_dir"
  if [[ "${PETS_DEVICE_SKIP_BUILD:-0}" != 1 ]]; then
    local generator=()
    if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
    cmake -S "$root" -B "$build" "${generator[@]}" -DPETS_BUILD_TESTS=ON -DPETS_TORCH_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$prefix" >"$dev_dir/configure.log" 2>&1 ||
      die "configure failed; see $dev_dir/configure.log"
    cmake --build "$build" --parallel "${PETS_JOBS:-2}" --target pets_device_bundle ||
      die "build failed in $build"
  fi
  [[ -f "$build/device_manifest.json" ]] ||
    die "$build has no device_manifest.json (configure it with -DPETS_BUILD_TESTS=ON -DPETS_TORCH_CUDA=ON)"

  # The install component `device` (cmake/PetsDeviceBundle.cmake): programs, the `cuda` tests,
  # Open MPI's and PMIx's components, every library outside glibc and torch, stripped.
  local stage="$dev_dir/stage"
  rm -rf "$stage"
  cmake --install "$build" --component device --prefix "$stage" --strip >"$dev_dir/install.log" 2>&1 ||
    { tail -20 "$dev_dir/install.log" >&2; die "cmake --install --component device failed; see $dev_dir/install.log"; }
  rm -f "$bundle"
  # The x86 filter before LZMA2 packs the programs and libraries about 6% smaller.
  tar -C "$stage" -cf - . | xz --x86 --lzma2=preset="${PETS_DEVICE_XZ_LEVEL:-9}" -T2 >"$bundle.tmp"
  mv "$bundle.tmp" "$bundle"
  rm -rf "$stage"
  local size tree
  git -C "$root" rev-parse --git-dir >/dev/null 2>&1 ||
    die "$root is not a git checkout (what is copied is a checkout's tracked and unignored files)"
  size=$(stat -c %s "$bundle")
  tree=$(tree_bytes)
  echo "device_check: bundle $bundle: $((size / 1024)) KiB; working tree $((tree / 1024 / 1024)) MiB"
  ((size <= max_bundle_bytes)) ||
    die "the bundle is $((size / 1024)) KiB, over its $((max_bundle_bytes / 1024)) KiB limit"
  ((tree + size <= max_tree_bytes)) ||
    die "working tree $((tree / 1024)) KiB + bundle $((size / 1024)) KiB is over $((max_tree_bytes / 1024)) KiB"
  grep -qx '/.device/' "$root/.gitignore" || die "/.device/ is not in .gitignore"
}

# The lib folders of the wheel's nvidia/ packages, colon-separated.
wheel_nvidia_libs() {
  local site
  site="$(dirname "$1")"
  local dirs=("$site"/nvidia/*/lib)
  local IFS=:
  echo "${dirs[*]}"
}

# What is copied to the node with the bundle: tracked files and untracked files git does not ignore.
tree_bytes() {
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
     awk '{ s += $1 } END { print s + 0 }')
}

# ---- run (GPU node) --------------------------------------------------------------------------

run() {
  local py="${PETS_DEVICE_PYTHON:-python3}"
  command -v "$py" >/dev/null || die "no $py (the python3 with torch; PETS_DEVICE_PYTHON names another)"
  PETS_DEVICE_DIR="$dev_dir" exec "$py" "$here/device_check.py"
}

# ---- local (build machine) -------------------------------------------------------------------

# `run` in a private mount namespace where what the GPU node lacks is hidden: Debian's Open MPI,
# PMIx, HDF5 folders, orterun/orted, the CUDA toolkit, and the system copy of every library the
# bundle carries (except those the script's own tools load: bash, python3 and `import torch`,
# tar, xz, coreutils; the ldd check covers those).
local_run() {
  [[ -f "$bundle" ]] || die "no bundle at $bundle: run 'bench/device_check.sh prepare' first"
  local prefix
  prefix="$("$root/scripts/install_torch.sh")"
  local py
  py="$(cd "$prefix/../../../.." && pwd)/bin/python"
  export OUT="${OUT:-/tmp/devout}" PETS_DEVICE_PYTHON="${PETS_DEVICE_PYTHON:-$py}"
  local hide_libs keep
  keep="$(for t in bash python3 "$py" tar xz timeout env awk sed grep sort stat find nproc \
                   nvidia-smi ldd gzip; do
            p="$(command -v "$t" 2>/dev/null)" || continue
            ldd "$(readlink -f "$p")" 2>/dev/null | awk '$2 == "=>" { print $1 }'
          done
          # python's own extension modules (ssl, zlib, ...) and torch's, as `import torch` loads
          for m in /usr/lib/python3*/lib-dynload/*.so "$prefix"/_C*.so "$prefix"/lib/*.so*; do
            ldd "$m" 2>/dev/null | awk '$2 == "=>" { print $1 }'
          done | sort -u)"
  # What to hide: every library the bundle carries, and every one its programs and components
  # find on this system outside torch's folders (so that one missing from the bundle fails here
  # too, not only in run's ldd check).
  local unpacked
  unpacked="$(mktemp -d)"
  xz -dc "$bundle" | tar -C "$unpacked" -xf -
  hide_libs="$( (find "$unpacked/lib" -maxdepth 1 -name '*.so*' -printf '%f\n'
                 for f in "$unpacked"/bin/* "$unpacked"/lib/openmpi/*.so "$unpacked"/lib/pmix/*.so; do
                   [[ -L "$f" ]] && continue
                   LD_LIBRARY_PATH="$prefix/lib:$(wheel_nvidia_libs "$prefix")" ldd "$f" 2>/dev/null |
                     awk '$2 == "=>" && $3 ~ "^/(usr/)?lib/" { print $1 }'
                 done) | sort -u | grep -vE "$glibc_re" | grep -vxF -f <(echo "$keep") || true)"
  rm -rf "$unpacked"
  # shellcheck disable=SC2016  # expanded by the inner bash
  unshare -m bash -c '
    set -e
    empty=$(mktemp)
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
             /usr/lib/x86_64-linux-gnu/hdf5 /usr/share/openmpi /etc/openmpi /usr/local/cuda; do
      [ -d "$d" ] && mount -t tmpfs none "$d"
    done
    for f in /usr/bin/orterun /usr/bin/orted; do mount --bind "$empty" "$f"; done
    for n in $1; do
      p=/usr/lib/x86_64-linux-gnu/$n
      [ -e "$p" ] && mount --bind "$empty" "$(readlink -f "$p")"
    done
    exec bash "$2" run
  ' hide "$hide_libs" "$0"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  local) local_run ;;
  -h | --help) usage ;;
  *) echo "device_check: error: unknown command '${1:-}' (prepare, run or local; see --help)" >&2; exit 2 ;;
esac
