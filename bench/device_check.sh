#!/usr/bin/env bash
# The device check: the CUDA tests and the benchmark harness on a GPU node that has
# no build tools, none of Debian's packages and no network: a python3 with torch 2.11.0+cu130
# (the pinned wheel's version, with its nvidia/ packages), an NVIDIA driver and a shell suffice.
# The programs are built on a build machine and travel, with every library they need outside
# glibc and torch, as one bundle inside a copy of the checkout.
#
#   bench/device_check.sh prepare   # build machine: build against the pinned torch 2.11.0 wheel
#                                   # (CUDA on), pack programs + the non-torch libraries into
#                                   # .device/pets_device.tar.xz
#   bench/device_check.sh run       # GPU node, in the copy: unpack, check that everything
#                                   # resolves, run the CUDA tests and the harness, write
#                                   # $OUT/device_check.json
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
#   OUT=$PWD/out bench/device_check.sh run                            # about 8 minutes at most
#
# `run` keeps to 460 s of steps (PETS_DEVICE_BUDGET_S), each step under its own `timeout`, so a
# hang costs that step only; the JSON report is written whatever fails. It leaves
# $OUT/device_check.json (each part's status, figures and log tail) and $OUT/device_logs.tar.gz.
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
# --e2e-runs on the GPU).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dev_dir="${PETS_DEVICE_DIR:-$root/.device}"
bundle="$dev_dir/pets_device.tar.xz"
# The bundle's limit: the checkout's files (about 50 MiB, mostly tests/fixtures) plus the bundle
# stay under 64 MiB, so that the copy to the GPU node stays small.
max_bundle_bytes=$((12 * 1024 * 1024))
max_tree_bytes=$((62 * 1024 * 1024))

die() { echo "device_check: error: $*" >&2; exit 1; }
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }

# Programs and test executables the device part runs (build targets of build-torch2/).
programs=(pets_train pets_preprocess pets_synth pets_bench)
test_programs=(tests/cuda/model_parity_cuda tests/comm/test_comm_mpi
               tests/deviceinput/train_device_input tests/deviceinput/device_input_bench
               tests/cuda/train_batchnorm_cuda)
# Libraries every GPU node has (glibc's own): never bundled, allowed from the system.
glibc_re='^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|libutil\.so\.1|libresolv\.so\.2|libanl\.so\.1)$'
# Open MPI components left out: other fabrics (UCX, libfabric, PSM, verbs), OpenSHMEM, Flux, and
# those Debian's openmpi-mca-params.conf turns off anyway.
mca_skip_re='(ucx|ofi|psm|openib|uct|verbs|flux|spml|sshmem|scoll|memheap|atomic|osc_pt2pt|monitoring|jsm|gridengine|simulator)'

# ---- prepare (build machine) -----------------------------------------------------------------

prepare() {
  # shellcheck source=../scripts/env.sh
  source "$root/scripts/env.sh"
  local build="${PETS_BUILD_TORCH2:-$root/build-torch2}" prefix
  prefix="$("$root/scripts/install_torch.sh")" || die "scripts/install_torch.sh failed"
  local wheel_python
  wheel_python="$(cd "$prefix/../../../.." && pwd)/bin/python"
  local version
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
    local targets=("${programs[@]}")
    for t in "${test_programs[@]}"; do targets+=("$(basename "$t")"); done
    cmake --build "$build" --parallel "${PETS_JOBS:-2}" --target "${targets[@]}" ||
      die "build failed in $build"
  fi

  local stage="$dev_dir/stage"
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib/openmpi" "$stage/lib/pmix" "$stage/share/openmpi" \
    "$stage/share/pmix" "$stage/etc"
  for p in "${programs[@]}" "${test_programs[@]}"; do
    [[ -x "$build/$p" ]] || die "$build/$p is not built"
    strip --strip-unneeded -o "$stage/bin/$(basename "$p")" "$build/$p"
  done
  # Open MPI's launcher and daemon (a singleton MPI_Init forks orted too), its components, help
  # texts and settings; PMIx's components and help texts. Relocated by OPAL_*/PMIX_* (run).
  cp /usr/bin/orterun /usr/bin/orted "$stage/bin/"
  ln -s orterun "$stage/bin/mpirun"
  ln -s orterun "$stage/bin/mpiexec"
  local mca=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 f
  for f in "$mca"/*.so; do
    [[ "$(basename "$f")" =~ $mca_skip_re ]] && continue
    cp "$f" "$stage/lib/openmpi/"
  done
  cp /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so "$stage/lib/pmix/"
  cp -r /usr/share/openmpi/. "$stage/share/openmpi/"
  cp -r /usr/lib/x86_64-linux-gnu/pmix2/share/pmix/. "$stage/share/pmix/"
  cp /etc/openmpi/openmpi-mca-params.conf "$stage/etc/"

  # HDF5's read-only S3 driver (ROS3) links libcurl and libcrypto, which bring about 25 more
  # libraries (4.9 MB of the bundle compressed: TLS, Kerberos, LDAP, ...). pets reads local files
  # only: stand-ins that export the eleven functions HDF5 imports, each returning failure (no
  # handle, no digest), take their place; the driver's open fails if anything ever asks for it.
  stub_libraries "$stage/lib" || die "could not compile the libcurl/libcrypto stand-ins"

  # Every shared library these need, from ldd, except glibc's, the wheel's torch/lib and its
  # nvidia/ libraries (the node's torch brings them) and the CUDA toolkit's libcudart, which
  # the wheel carries too (nvidia/cu13/lib).
  local torch_lib="$prefix/lib" nvidia_libs
  nvidia_libs="$(wheel_nvidia_libs "$prefix")"
  local search="$torch_lib:$nvidia_libs"
  local missing=() line name path
  while read -r name path; do
    [[ "$name" =~ $glibc_re ]] && continue
    case "$path" in
      "$prefix"/* | "$(dirname "$prefix")"/nvidia/*) continue ;;
      "not found") missing+=("$name"); continue ;;
    esac
    if [[ "$path" == /usr/local/cuda/* ]]; then
      ls "$(dirname "$prefix")"/nvidia/*/lib/"$name" >/dev/null 2>&1 ||
        die "$name comes from the CUDA toolkit here and is not in the wheel's nvidia/ folders"
      continue
    fi
    [[ "$path" == "$stage/lib/"* || -e "$stage/lib/$name" ]] || cp -L "$path" "$stage/lib/$name"
  done < <(for f in "$stage"/bin/* "$stage"/lib/openmpi/*.so "$stage"/lib/pmix/*.so; do
             [[ -L "$f" ]] && continue
             LD_LIBRARY_PATH="$stage/lib:$search" ldd "$f" 2>/dev/null |
               awk '$2 == "=>" { print $1, ($3 == "not" ? "not found" : $3) }'
           done | sort -u)
  ((${#missing[@]} == 0)) || die "libraries not found here: ${missing[*]}"
  chmod u+w "$stage"/lib/*.so* 2>/dev/null || true
  strip --strip-unneeded "$stage"/lib/*.so* "$stage"/lib/openmpi/*.so "$stage"/lib/pmix/*.so \
    2>/dev/null || true
  {
    echo "built $(date -u +%FT%TZ) on $(hostname) from $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+changes')"
    echo "torch $version ($prefix)"
    echo "programs: ${programs[*]} ${test_programs[*]}"
    (cd "$stage" && find lib -maxdepth 1 -name '*.so*' | sort)
  } >"$stage/MANIFEST"
  rm -f "$bundle"
  tar -C "$stage" -cf - . | xz -"${PETS_DEVICE_XZ_LEVEL:-9}" -T2 >"$bundle.tmp"
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

# stub_libraries DIR: libcurl.so.4 and libcrypto.so.3 stand-ins (see prepare), with the symbol
# versions HDF5's imports name.
stub_libraries() {
  local dir="$1" tmp
  tmp="$(mktemp -d)"
  cat >"$tmp/curl.c" <<'EOF'
/* Stand-in for libcurl.so.4 in the device bundle: HDF5's S3 driver, unused by pets. */
#include <stddef.h>
int curl_global_init(long flags) { (void)flags; return 2; /* CURLE_FAILED_INIT */ }
void curl_global_cleanup(void) {}
void* curl_easy_init(void) { return NULL; }
int curl_easy_setopt(void* h, int option, ...) { (void)h; (void)option; return 2; }
int curl_easy_perform(void* h) { (void)h; return 2; }
void curl_easy_cleanup(void* h) { (void)h; }
void* curl_slist_append(void* list, const char* s) { (void)list; (void)s; return NULL; }
void curl_slist_free_all(void* list) { (void)list; }
EOF
  cat >"$tmp/crypto.c" <<'EOF'
/* Stand-in for libcrypto.so.3 in the device bundle: HDF5's S3 request signing, unused by pets. */
#include <stddef.h>
const void* EVP_sha256(void) { return NULL; }
unsigned char* HMAC(const void* md, const void* key, int key_len, const unsigned char* d,
                    size_t n, unsigned char* out, unsigned int* out_len) {
  (void)md; (void)key; (void)key_len; (void)d; (void)n; (void)out; (void)out_len;
  return NULL;
}
unsigned char* SHA256(const unsigned char* d, size_t n, unsigned char* out) {
  (void)d; (void)n; (void)out;
  return NULL;
}
EOF
  echo 'CURL_OPENSSL_4 { global: curl_*; local: *; };' >"$tmp/curl.map"
  echo 'OPENSSL_3.0.0 { global: EVP_sha256; HMAC; SHA256; local: *; };' >"$tmp/crypto.map"
  cc -shared -fPIC -O2 -s -Wl,-soname,libcurl.so.4 -Wl,--version-script,"$tmp/curl.map" \
    -o "$dir/libcurl.so.4" "$tmp/curl.c" &&
    cc -shared -fPIC -O2 -s -Wl,-soname,libcrypto.so.3 -Wl,--version-script,"$tmp/crypto.map" \
      -o "$dir/libcrypto.so.3" "$tmp/crypto.c"
  local rc=$?
  rm -rf "$tmp"
  return $rc
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

T0=$SECONDS
budget="${PETS_DEVICE_BUDGET_S:-460}"

# part NAME STATUS SECONDS FIGURES_JSON LOG: one part of the report, as a JSON file.
part() {
  local name="$1" status="$2" secs="$3" figures="$4" log="${5:-}"
  "$PY" - "$W/parts/$(printf '%02d' "$PART_N")_$name.json" "$name" "$status" "$secs" \
    "$figures" "$log" <<'EOF'
import json, sys
path, name, status, secs, figures, log = sys.argv[1:7]
tail = ""
if log:
    try:
        with open(log, errors="replace") as f:
            tail = f.read()[-3000:]
    except OSError as e:
        tail = f"(no log: {e})"
try:
    fig = json.loads(figures) if figures else {}
except ValueError:
    fig = {"unparsed": figures}
json.dump({"name": name, "status": status, "seconds": round(float(secs), 1), "figures": fig,
           "log_tail": tail}, open(path, "w"), indent=1)
EOF
  PART_N=$((PART_N + 1))
  echo "device_check: [$status] $name (${secs} s)" >&2
}

left() { echo $((budget - (SECONDS - T0))); }

# step NAME MAX_S LOG CMD...: runs CMD under timeout (its maximum or what is left of the
# budget); sets STEP_RC (124: timed out) and STEP_S. Never fails the script.
step() {
  local name="$1" max="$2" log="$3"
  shift 3
  local t
  t=$(left)
  ((t > max)) && t=$max
  if [[ -n "${PETS_DEVICE_STEPS:-}" && ",$PETS_DEVICE_STEPS," != *",$name,"* ]]; then
    STEP_RC=126 STEP_S=0
    echo "not among PETS_DEVICE_STEPS ($PETS_DEVICE_STEPS)" >"$log"
    return 0
  fi
  if ((t < 10)); then
    STEP_RC=125 STEP_S=0
    echo "out of time before $name" >"$log"
    return 0
  fi
  local s=$SECONDS
  echo "device_check: $name (at most $t s)" >&2
  set +e
  timeout -k 10 "$t" "$@" >"$log" 2>&1
  STEP_RC=$?
  set -e
  STEP_S=$((SECONDS - s))
  ((STEP_RC == 124 || STEP_RC == 137)) && echo "device_check: TIMED OUT after $t s" >>"$log"
  return 0
}

status_of() {
  case "$1" in
    0) echo passed ;;
    124 | 137) echo "failed: timed out" ;;
    125) echo "skipped: out of time" ;;
    126) echo "skipped: not selected" ;;
    *) echo "failed: status $1" ;;
  esac
}

# gtest NAME LOG JSON: a part from a GoogleTest run: passed/failed/skipped cases.
gtest_part() {
  local name="$1" log="$2" json="$3" figures
  figures="$("$PY" - "$json" "$log" <<'EOF'
import json, re, sys
out = {"passed": [], "failed": [], "skipped": []}
try:
    r = json.load(open(sys.argv[1]))
    for suite in r.get("testsuites", []):
        for t in suite.get("testsuite", []):
            n = suite["name"] + "." + t["name"]
            if t.get("failures"):
                out["failed"].append(n)
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                out["skipped"].append(n)
            else:
                out["passed"].append(n)
except (OSError, ValueError):
    out["report"] = "no GoogleTest JSON"
# The parity test's measured errors.
out["parity"] = [l.split("]", 1)[1].strip() for l in open(sys.argv[2], errors="replace")
                 if l.startswith("[ parity  ]")]
print(json.dumps(out))
EOF
)"
  local st
  st="$(status_of "$STEP_RC")"
  if [[ "$st" == passed ]]; then
    # Cases that need a GPU and skipped: the part did not pass on the GPU.
    if "$PY" -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["skipped"] else 1)' \
      "$figures"; then
      if ((HAVE_GPU)); then st="passed, with skipped cases"; else st="skipped: no GPU (CPU cases passed)"; fi
    fi
  fi
  part "$name" "$st" "$STEP_S" "$figures" "$log"
}

run() {
  [[ -f "$bundle" ]] || die "no bundle at $bundle: run 'bench/device_check.sh prepare' on the build machine first (and copy .device/ with the checkout)"
  OUTDIR="${OUT:-}"
  [[ -n "$OUTDIR" ]] || die "OUT is not set: the folder for the report, e.g. OUT=\$PWD/out"
  mkdir -p "$OUTDIR"
  W="${PETS_DEVICE_WORK:-/tmp/pets_device}"
  rm -rf "$W"
  mkdir -p "$W/parts" "$W/logs"
  PART_N=0
  PY="${PETS_DEVICE_PYTHON:-python3}"
  command -v "$PY" >/dev/null || die "no $PY (the python3 with torch)"
  trap 'write_report' EXIT

  # 1. unpack, libraries
  local s=$SECONDS B="$W/bundle"
  mkdir -p "$B"
  if command -v xz >/dev/null; then
    xz -dc "$bundle" | tar -C "$B" -xf -
  else  # no xz there: python's lzma
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
      "$bundle" "$B"
  fi
  local torch_dir site
  torch_dir="$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  site="$(dirname "$torch_dir")"
  local nvidia
  nvidia="$(wheel_nvidia_libs "$torch_dir")"
  # The programs' RUNPATH names this build machine's folders; LD_LIBRARY_PATH comes first.
  LIBS="$B/lib:$torch_dir/lib:$nvidia"
  export OPAL_PREFIX="$B" OPAL_EXEC_PREFIX="$B" OPAL_BINDIR="$B/bin" OPAL_LIBDIR="$B/lib" \
    OPAL_PKGLIBDIR="$B/lib/openmpi" OPAL_DATAROOTDIR="$B/share" OPAL_DATADIR="$B/share" \
    OPAL_PKGDATADIR="$B/share/openmpi" OPAL_SYSCONFDIR="$B/etc"
  export PMIX_PREFIX="$B" PMIX_EXEC_PREFIX="$B" PMIX_BINDIR="$B/bin" PMIX_LIBDIR="$B/lib" \
    PMIX_PKGLIBDIR="$B/lib/pmix" PMIX_DATAROOTDIR="$B/share" PMIX_DATADIR="$B/share" \
    PMIX_PKGDATADIR="$B/share/pmix" PMIX_SYSCONFDIR="$B/etc"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Containers and microVMs refuse the cross-memory attach that vader's single copy uses.
  export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  export PATH="$B/bin:$PATH" PETS_RESNET_FIXTURE="$root/tests/fixtures/resnet50d"
  local bad
  bad="$(for f in "$B"/bin/* "$B"/lib/openmpi/*.so "$B"/lib/pmix/*.so; do
           [[ -L "$f" ]] && continue
           # ldd itself fails (and lists nothing) when a library it finds cannot be loaded.
           LD_LIBRARY_PATH="$LIBS" ldd "$f" >"$W/ldd.out" 2>&1 ||
             echo "${f#"$B"/}: ldd failed: $(grep -v '=>' "$W/ldd.out" | head -2 | tr '\n' ' ')"
           awk -v f="${f#"$B"/}" -v B="$B" -v T="$site" -v re="$glibc_re" \
             '$2 == "=>" && ($3 == "not" || (index($3, B "/") != 1 && index($3, T "/") != 1 &&
               $1 !~ re)) { print f ": " $1 " => " $3 }' "$W/ldd.out"
         done)"
  echo "$bad" >"$W/logs/libraries.log"
  {
    cat "$B/MANIFEST"
    echo "torch: $torch_dir"
    echo "LD_LIBRARY_PATH=$LIBS"
  } >>"$W/logs/libraries.log"
  if [[ -n "$bad" ]]; then
    part libraries "failed: unresolved or outside the bundle and torch" $((SECONDS - s)) \
      "{\"problems\": $(printf '%s' "$bad" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read().splitlines()))')}" \
      "$W/logs/libraries.log"
  else
    part libraries passed $((SECONDS - s)) \
      "{\"bundle_bytes\": $(stat -c %s "$bundle"), \"torch_dir\": \"$torch_dir\"}" \
      "$W/logs/libraries.log"
  fi

  # 2. the GPU
  HAVE_GPU=0
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null &&
    HAVE_GPU=1
  local gpu="none"
  ((HAVE_GPU)) && gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>/dev/null | head -1)"
  nvidia-smi >"$W/logs/gpu.log" 2>&1 || echo "no nvidia-smi" >>"$W/logs/gpu.log"
  part gpu "$( ((HAVE_GPU)) && echo passed || echo 'skipped: no GPU')" 0 \
    "{\"gpu\": \"$gpu\", \"torch\": \"$("$PY" -c 'import torch; print(torch.__version__)')\", \"cores\": $(nproc)}" \
    "$W/logs/gpu.log"
  local dev=cpu
  ((HAVE_GPU)) && dev=cuda
  # Only our programs get LD_LIBRARY_PATH (python3 and the tools keep the system's libraries).
  local run_with=(env "LD_LIBRARY_PATH=$LIBS")
  local mpi=("${run_with[@]}" mpirun --bind-to none -np)

  # 3. the CUDA tests
  step parity_cuda 120 "$W/logs/parity_cuda.log" "${run_with[@]}" "$B/bin/model_parity_cuda" \
    --gtest_output="json:$W/parity_cuda.json"
  gtest_part parity_cuda "$W/logs/parity_cuda.log" "$W/parity_cuda.json"
  step nccl_one_rank 90 "$W/logs/nccl_one_rank.log" "${mpi[@]}" 1 "$B/bin/test_comm_mpi" \
    --gtest_filter='NcclComm.*:NcclBootstrap.*' --gtest_output="json:$W/nccl.json"
  gtest_part nccl_one_rank "$W/logs/nccl_one_rank.log" "$W/nccl.json"
  step device_input 90 "$W/logs/device_input.log" "${run_with[@]}" "$B/bin/train_device_input" \
    --gtest_filter='DeviceInput*' --gtest_output="json:$W/device_input.json"
  gtest_part device_input "$W/logs/device_input.log" "$W/device_input.json"
  # The fused train-mode BatchNorm against LibTorch's (the kernel, and the whole backbone's
  # accuracy under each precision).
  step fused_batchnorm 120 "$W/logs/fused_batchnorm.log" "${run_with[@]}" \
    "$B/bin/train_batchnorm_cuda" --gtest_output="json:$W/fused_batchnorm.json"
  gtest_part fused_batchnorm "$W/logs/fused_batchnorm.log" "$W/fused_batchnorm.json"
  # The device input's costs: the batched resize against one interpolate per crop on the device,
  # the GPU half's images/s and submit() time, the loader-side costs per core.
  step device_input_bench 90 "$W/logs/device_input_bench.log" bash -c \
    "$(printf '%q ' "${run_with[@]}" "$B/bin/device_input_bench" --quick --resize-batches 64,128 \
         --resize-rounds 3 --resize-device "$dev") >$(printf '%q' "$W/device_input_bench.json")"
  part device_input_bench "$(status_of $STEP_RC)" "$STEP_S" \
    "$(cat "$W/device_input_bench.json" 2>/dev/null)" "$W/logs/device_input_bench.log"

  # Short training runs on a small set: fp32, fp16 (loss scaling), bf16 twice (same seed: the
  # same accuracies? the same model bytes?). Without a GPU: fp32 on the CPU (the bundle's
  # mpirun, HDF5 and pets_train at work), the CUDA runs skipped.
  # The small set: 4 images per class (148); 2 without a GPU, where one epoch on a loaded CPU
  # must fit too.
  local small="$W/small" small_per_class=4 small_epochs=2
  ((HAVE_GPU)) || small_per_class=2 small_epochs=1
  step small_set 120 "$W/logs/small_set.log" bash -c \
    "$(printf '%q ' "${run_with[@]}" "$B/bin/pets_synth" --out "$small/images" --per-class "$small_per_class" --seed 3) &&
     $(printf '%q ' "${mpi[@]}" 2 "$B/bin/pets_preprocess" --images "$small/images" --out "$small/pets.h5")"
  local small_rc=$STEP_RC
  part small_set "$(status_of $STEP_RC)" "$STEP_S" "{\"images\": $((small_per_class * 37))}" "$W/logs/small_set.log"
  train_run() {  # NAME ARGS...: one short pets_train run at batch 16
    local name="$1"
    shift
    if ((small_rc != 0)); then
      part "train_$name" "skipped: no small set" 0 "{}" ""
      return
    fi
    step "train_$name" 120 "$W/logs/train_$name.log" "${mpi[@]}" 1 "$B/bin/pets_train" \
      --data "$small/pets.h5" --epochs "$small_epochs" --batch-size 16 --eval-batch-size 32 --seed 7 \
      --out "$small/run_$name" "$@"
    part "train_$name" "$(status_of $STEP_RC)" "$STEP_S" "$(run_figures "$small/run_$name")" \
      "$W/logs/train_$name.log"
  }
  if ((HAVE_GPU)); then
    train_run fp32 --device cuda
    train_run fp16 --device cuda --mixed-precision fp16
    train_run bf16 --device cuda --mixed-precision bf16
    train_run bf16_again --device cuda --mixed-precision bf16
    part determinism "$(same_runs "$small/run_bf16" "$small/run_bf16_again" status)" 0 \
      "$(same_runs "$small/run_bf16" "$small/run_bf16_again" figures)" ""
    # --deterministic: the same model bit for bit.
    train_run bf16_deterministic --device cuda --mixed-precision bf16 --deterministic
    train_run bf16_deterministic_again --device cuda --mixed-precision bf16 --deterministic
    part determinism_bitwise \
      "$(same_runs "$small/run_bf16_deterministic" "$small/run_bf16_deterministic_again" bitwise)" 0 \
      "$(same_runs "$small/run_bf16_deterministic" "$small/run_bf16_deterministic_again" figures)" ""
  else
    train_run fp32_cpu --device cpu
    for n in fp32 fp16 bf16 determinism determinism_bitwise; do
      part "train_$n" "skipped: no GPU" 0 "{}" ""
    done
  fi

  # 4. the harness: roofline, model step (fp32/bf16/fp16), loader, end to end on ~7,400 images.
  local per_class="${PETS_DEVICE_PER_CLASS:-$( ((HAVE_GPU)) && echo 200 || echo 4)}"
  local batch="${PETS_DEVICE_BATCH:-128}" np_pre=$(($(nproc) / 2))
  ((np_pre < 1)) && np_pre=1
  ((np_pre > 8)) && np_pre=8
  local big="$W/big" bench_common=(--train "$B/bin/pets_train" --preprocess "$B/bin/pets_preprocess"
                                   --synth "$B/bin/pets_synth" --mpi-preflags "--bind-to none"
                                   --np1-preflags "")
  step harness_synth 100 "$W/logs/harness_synth.log" "${run_with[@]}" "$B/bin/pets_synth" \
    --out "$big/images" --per-class "$per_class" --seed 1
  local big_rc=$STEP_RC synth_s=$STEP_S
  # pets_preprocess timed alone: the first half of the job a user waits for.
  if ((big_rc == 0)); then
    step harness_data 120 "$W/logs/harness_data.log" "${mpi[@]}" "$np_pre" "$B/bin/pets_preprocess" \
      --images "$big/images" --out "$big/pets.h5"
    big_rc=$STEP_RC
  else
    STEP_S=0
    cp "$W/logs/harness_synth.log" "$W/logs/harness_data.log"
  fi
  part harness_data "$(status_of $big_rc)" "$((synth_s + STEP_S))" \
    "{\"images\": $((per_class * 37)), \"preprocess_np\": $np_pre, \"synth_seconds\": $synth_s, \"preprocess_seconds\": $STEP_S}" \
    "$W/logs/harness_data.log"
  if ((big_rc == 0)); then
    # The loader's scaling to every core a GPU's rank may own (CPU path and staging).
    local sizes=(--batch "$batch" --roof-batch 64 --min-seconds 2 --loader-epochs 1
                 --loader-sweep "1,2,4,8,$(nproc)")
    ((HAVE_GPU)) || sizes=(--batch 8 --image-size 112 --roof-batch 2 --roof-channels 64
                           --min-seconds 0.5 --min-iters 2 --loader-epochs 1)
    step harness_measure 150 "$W/logs/harness_measure.log" "${run_with[@]}" "$B/bin/pets_bench" \
      --device "$dev" --no-e2e --data "$big/pets.h5" --work "$W/bench" \
      --report "$W/measure.json" "${sizes[@]}" "${bench_common[@]}"
    part harness_measure "$(status_of $STEP_RC)" "$STEP_S" "$(cat "$W/measure.json" 2>/dev/null)" \
      "$W/logs/harness_measure.log"
    # Five epochs each (the whole job's training half is np1_bf16's wall time); the folded path
    # trains in np1_bf16_bn_eval.
    local e2e=(--e2e-runs "${PETS_DEVICE_E2E_RUNS:-np1_bf16,np1_bf16_bn_eval,np1_fp16,np1,np1_bf16_loader8,np1_bf16_loader15,np1_bf16_deterministic,np1_bf16_native_bn,np1_fp16_native_bn}"
               --e2e-args "--device cuda --seed 7"
               --epochs 5 --train-batch "$batch" --eval-batch 256)
    ((HAVE_GPU)) || e2e=(--e2e-runs np1 --e2e-args "--device cpu" --epochs 1 --train-batch 8
                         --eval-batch 16)
    step harness_end_to_end 220 "$W/logs/harness_end_to_end.log" "${run_with[@]}" "$B/bin/pets_bench" \
      --e2e-only --data "$big/pets.h5" --work "$W/bench_e2e" --report "$W/e2e.json" \
      "${e2e[@]}" "${bench_common[@]}"
    local st
    st="$(status_of $STEP_RC)"
    ((HAVE_GPU)) || [[ "$st" != passed ]] || st="passed on the CPU (no GPU: the GPU runs skipped)"
    part harness_end_to_end "$st" "$STEP_S" "$(cat "$W/e2e.json" 2>/dev/null)" \
      "$W/logs/harness_end_to_end.log"
  else
    part harness_measure "skipped: no data set" 0 "{}" ""
    part harness_end_to_end "skipped: no data set" 0 "{}" ""
  fi

  # 5. the same job in Python with the node's own torch, timm and Accelerate: the tutorial's
  # 5 epochs on the same images, and the ceilings (its step and inference forward, eager and
  # under torch.compile). Without a GPU only the scripts themselves are checked, at tiny sizes.
  if ((big_rc != 0)); then
    part tutorial_5_epochs "skipped: no data set" 0 "{}" ""
  elif ! "$PY" -c 'import torchvision, PIL' 2>/dev/null; then
    part tutorial_5_epochs "skipped: $PY has no torchvision or PIL" 0 "{}" ""
  else
    local tut=(--images "$big/images" --report "$W/tutorial.json")
    ((HAVE_GPU)) || tut+=(--epochs 1 --batch-size 4 --workers 1 --image-size 64 --mixed-precision bf16)
    step tutorial_5_epochs 150 "$W/logs/tutorial_5_epochs.log" "$PY" "$here/tutorial_run.py" "${tut[@]}"
    part tutorial_5_epochs "$(status_of $STEP_RC)" "$STEP_S" "$(cat "$W/tutorial.json" 2>/dev/null)" \
      "$W/logs/tutorial_5_epochs.log"
  fi
  # Where the eager step's GPU time goes (the kernels pets_train runs too).
  local prof=(--report "$W/step_profile.json")
  ((HAVE_GPU)) && prof+=(--device cuda --batch "$batch" --eval-batch 256) || prof+=(--device cpu --smoke)
  step step_profile 90 "$W/logs/step_profile.log" "$PY" "$here/step_profile.py" "${prof[@]}"
  part step_profile "$(status_of $STEP_RC)" "$STEP_S" "$(cat "$W/step_profile.json" 2>/dev/null)" \
    "$W/logs/step_profile.log"
  local ceil=(--report "$W/ceilings.json" --budget-s $(($(left) - 20)))
  ((HAVE_GPU)) && ceil+=(--device cuda --batch "$batch" --eval-batch 256) || ceil+=(--device cpu --smoke)
  step torch_ceilings 240 "$W/logs/torch_ceilings.log" "$PY" "$here/torch_ceilings.py" "${ceil[@]}"
  part torch_ceilings "$(status_of $STEP_RC)" "$STEP_S" "$(cat "$W/ceilings.json" 2>/dev/null)" \
    "$W/logs/torch_ceilings.log"
  trap - EXIT
  write_report
  # Exit status 1 when a part failed (the report says which).
  if grep -l '"status": "failed' "$W"/parts/*.json >/dev/null 2>&1; then
    echo "device_check: some parts failed (see $OUTDIR/device_check.json)" >&2
    exit 1
  fi
}

# The figures of one pets_train run folder (metrics.jsonl), as JSON.
run_figures() {
  "$PY" - "$1" <<'EOF'
import json, sys
try:
    epochs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
except OSError:
    epochs = []
print(json.dumps({"epochs": len(epochs),
                  "accuracy": [e.get("accuracy") for e in epochs],
                  "train_images_per_s": [e.get("train_images_per_s") for e in epochs],
                  "loader_wait_share": [e.get("loader_wait_share") for e in epochs],
                  "upload_share": [e.get("upload_share") for e in epochs]}))
EOF
}

# same_runs A B status|bitwise|figures: the two runs' accuracies equal? the tensors of their model
# and checkpoint files bitwise equal (metadata aside)?
same_runs() {
  "$PY" - "$1" "$2" "$3" <<'EOF'
import glob, json, os, sys
a, b, what = sys.argv[1:4]
def acc(d):
    try:
        return [json.loads(l).get("accuracy") for l in open(d + "/metrics.jsonl") if l.strip()]
    except OSError:
        return None
def models(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(d + "/**/*.safetensors", recursive=True))
def tensors(path):
    """A safetensors file's tensors: name -> (dtype, shape, bytes); the metadata left out (a
    checkpoint's records its timings)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}
def differing(f):
    ta, tb = tensors(os.path.join(a, f)), tensors(os.path.join(b, f))
    return sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
aa, ab = acc(a), acc(b)
same_acc = aa is not None and aa == ab
files = models(a)
diffs = {f: differing(f) for f in files if os.path.exists(os.path.join(b, f))}
bitwise = bool(files) and files == models(b) and not any(diffs.values())
if what == "status":
    print("passed" if same_acc else "failed: accuracies differ run to run")
elif what == "bitwise":
    print("passed" if bitwise else "failed: the models differ run to run")
else:
    print(json.dumps({"accuracy_a": aa, "accuracy_b": ab, "same_accuracies": same_acc,
                      "models_compared": files, "bitwise_same_models": bitwise,
                      "differing_tensors": {f: d[:12] + (["..."] if len(d) > 12 else [])
                                            for f, d in diffs.items() if d}}))
EOF
}

# The one JSON report (bench/device_report.py): every part, and the GPU targets where their
# figures exist.
write_report() {
  local rc=$?
  set +e
  "$PY" "$here/device_report.py" "$W/parts" "$OUTDIR/device_check.json" "$((SECONDS - T0))" "$rc"
  tar -C "$W" -czf "$OUTDIR/device_logs.tar.gz" logs 2>/dev/null
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
  hide_libs="$( (ls "$unpacked/lib" | grep '\.so'
                 for f in "$unpacked"/bin/* "$unpacked"/lib/openmpi/*.so "$unpacked"/lib/pmix/*.so; do
                   [[ -L "$f" ]] && continue
                   LD_LIBRARY_PATH="$prefix/lib:$(wheel_nvidia_libs "$prefix")" ldd "$f" 2>/dev/null |
                     awk '$2 == "=>" && $3 ~ "^/(usr/)?lib/" { print $1 }'
                 done) | sort -u | grep -vE "$glibc_re" | grep -vxF -f <(echo "$keep") || true)"
  rm -rf "$unpacked"
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
