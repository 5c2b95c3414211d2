#!/usr/bin/env bash
# bench/device_check.sh without a GPU: `prepare` packs this CUDA build's install component
# `device` (programs, the `cuda` tests, the libraries they need; no rebuild), `local` runs the
# device part with Debian's Open MPI, PMIx, HDF5 and CUDA folders and the bundled libraries' system
# copies hidden. Checked: exit 0, the bundle's contents against its device_manifest.json, the
# report's parts (every manifest step's CPU cases passed and its GPU cases "skipped: no GPU",
# never "passed"; the CPU harness and unfreeze_* parts passed), the targets not claimed; then a
# bundle without libhdf5 must fail (exit 1, `libraries` failed, the programs that read a store
# failed).
# Arguments: SOURCE_DIR BUILD_DIR (build-torch2/) WORK_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
src="$1" build="$2"
enter_workdir "$3"

unshare -m true 2>/dev/null || skip "no mount namespace here (unshare -m needs root)"
for p in pets_train pets_preprocess pets_synth pets_bench device_input_bench \
         tests/model/model_parity_cuda tests/comm/test_comm_mpi tests/train/input/train_device_input \
         tests/train/device/train_batchnorm_cuda \
         device_stubs/libcurl.so.4 device_stubs/libcrypto.so.3; do
  [[ -e "$build/$p" ]] || skip "$build/$p is not built (cmake --build $build --target pets_device_bundle)"
done

export PETS_BUILD_TORCH2="$build" PETS_DEVICE_SKIP_BUILD=1
export PETS_DEVICE_DIR="$work/dev" PETS_DEVICE_WORK="$work/w"
capture prepare.log bash "$src/bench/device_check.sh" prepare
[[ $status -eq 0 ]] || { show prepare.log; fatal "prepare: exit $status"; }
bundle="$work/dev/pets_device.tar.xz"
[[ -s "$bundle" ]] || fatal "prepare made no $bundle"
(($(stat -c %s "$bundle") <= 12 * 1024 * 1024)) || fail "the bundle is over 12 MiB"
# The bundle holds what its manifest names, and the manifest is the build's.
mkdir -p unpacked
xz -dc "$bundle" | tar -C unpacked -xf - || fatal "could not unpack $bundle"
cmp -s unpacked/device_manifest.json "$build/device_manifest.json" ||
  fail "the bundle's device_manifest.json is not $build's"
mapfile -t steps < <(python3 -c 'import json, sys; [print(t["step"]) for t in json.load(open(sys.argv[1]))["tests"]]' \
                       unpacked/device_manifest.json)
((${#steps[@]} >= 4)) || fail "the manifest lists ${#steps[@]} CUDA test steps: ${steps[*]}"
for exe in $(python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); [print(e) for e in ["bin/" + p for p in m["programs"]] + [t["executable"] for t in m["tests"]]]' \
               unpacked/device_manifest.json) bin/mpirun bin/orted lib/libcurl.so.4 lib/libcrypto.so.3 \
             lib/libhdf5_openmpi.so.103 MANIFEST; do
  [[ -e "unpacked/$exe" ]] || fail "the bundle has no $exe"
done
if readelf -d unpacked/bin/pets_train | grep -qE 'RPATH|RUNPATH'; then
  fail "bin/pets_train keeps the build machine's RUNPATH"
fi
rm -rf unpacked

# status_of REPORT PART: the part's status in the report.
status_of() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["summary"].get(sys.argv[2], "absent"))' \
    "$1" "$2"
}

OUT="$work/out" capture local.log bash "$src/bench/device_check.sh" local
[[ $status -eq 0 ]] || { show local.log; fail "local: exit $status"; }
report="$work/out/device_check.json"
[[ -f "$report" ]] || fatal "local wrote no $report"
[[ -s "$work/out/device_logs.tar.gz" ]] || fail "local wrote no device_logs.tar.gz"
for part in libraries small_set device_input_bench train_fp32_cpu harness_data harness_measure; do
  check_eq "$part" "$(status_of "$report" "$part")" passed
done
for part in "${steps[@]}"; do
  check_eq "$part" "$(status_of "$report" "$part")" "skipped: no GPU (CPU cases passed)"
done
for part in gpu train_fp32 train_fp16 train_bf16 train_determinism train_determinism_bitwise; do
  check_eq "$part" "$(status_of "$report" "$part")" "skipped: no GPU"
done
# The Python side's scripts run too (tiny sizes on the CPU); the tutorial's needs torchvision.
check_eq torch_ceilings "$(status_of "$report" torch_ceilings)" passed
check_eq step_profile "$(status_of "$report" step_profile)" passed
case "$(status_of "$report" tutorial_5_epochs)" in
  passed | "skipped: "*" has no torchvision or PIL") ;;
  *) fail "tutorial_5_epochs: $(status_of "$report" tutorial_5_epochs)" ;;
esac
check_eq sweep_heads "$(status_of "$report" sweep_heads)" "passed on the CPU (no GPU: the GPU runs skipped)"
# A trained backbone: both steps and the training run, at tiny sizes on the CPU.
for part in unfreeze_step_layer4 unfreeze_step_layer4_pytorch unfreeze_step_all unfreeze_step_all_pytorch \
            unfreeze_train_layer4; do
  check_eq "$part" "$(status_of "$report" "$part")" "passed on the CPU (no GPU: tiny sizes)"
done
check_eq harness_end_to_end "$(status_of "$report" harness_end_to_end)" \
  "passed on the CPU (no GPU: the GPU runs skipped)"
python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["targets"]; sys.exit(0 if list(t) == ["not_measured"] else 1)' \
  "$report" || fail "targets claimed without a GPU: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["targets"])' "$report")"
pass "local: the CPU half passed, the CUDA parts reported as skipped"

# A bundle without parallel HDF5: Debian's copy is hidden, so it must fail as on the device.
mkdir -p broken/s
xz -dc "$bundle" | tar -C broken/s -xf - && rm broken/s/lib/libhdf5_openmpi.so.103 &&
  tar -C broken/s -cf - . | xz -0 >broken/pets_device.tar.xz || fatal "could not repack"
PETS_DEVICE_DIR="$work/broken" OUT="$work/out_broken" capture broken.log \
  bash "$src/bench/device_check.sh" local
check_eq "exit status without libhdf5" "$status" 1
report="$work/out_broken/device_check.json"
check_eq libraries "$(status_of "$report" libraries)" \
  "failed: unresolved or outside the bundle and torch"
check_eq small_set "$(status_of "$report" small_set)" "failed: status 127"
pass "a bundle without libhdf5 fails"
finish
