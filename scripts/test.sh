#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the whole ctest suite. Then the second
# LibTorch, so that neither rots: the pinned torch wheel's CUDA LibTorch (scripts/install_torch.sh;
# CUDA and NCCL code compiled, CUDA cases skip without a GPU) in build-torch2/, where the
# programs and the tests $PETS_TORCH2_TESTS names are built and run; PETS_TEST_TORCH2=0 leaves
# the second build out. Arguments go to the first ctest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
pets_build -DPETS_BUILD_TESTS=ON
status=0
(cd "$PETS_BUILD" && ctest --output-on-failure --parallel "$PETS_JOBS" --timeout 900 "$@") || status=$?
if [ "${PETS_TEST_TORCH2:-1}" != 0 ]; then
  # Model, parity (CPU and CUDA), OneCycle, communicator, training step (frozen and trained
  # backbone), trajectory and loop, layers, the builds themselves, and bench/device_check.sh's CPU
  # half (its bundle installed, packed and run with Debian's copies of the libraries hidden) and
  # manifest.
  tests="${PETS_TORCH2_TESTS:-^(model_|train_onecycle|test_comm_mpi|train_step|train_backbone_step|train_unfrozen_step|train_trajectory|train_evaluation|train_batchnorm_sync|train_batchnorm_cuda|train_folded_conv_cuda|layout_|build_|device_check_)}"
  targets=(pets_train pets_preprocess pets_predict pets_synth pets_bench model_safetensors
           model_resnet50d model_parity model_parity_cuda train_onecycle test_comm_mpi train_step
           train_backbone_step train_unfrozen_step train_trajectory train_evaluation
           train_batchnorm_sync train_batchnorm_cuda train_folded_conv_cuda train_step_cuda
           train_device_input device_input_bench pets_device_bundle)
  start=$SECONDS
  torch_prefix=$("$PETS_ROOT/scripts/install_torch.sh")
  build2="$PETS_ROOT/build-torch2"
  generator=()
  if [ ! -f "$build2/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$PETS_ROOT" -B "$build2" "${generator[@]}" -DPETS_BUILD_TESTS=ON -DPETS_TORCH_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$torch_prefix"
  cmake --build "$build2" --parallel "$PETS_JOBS" --target "${targets[@]}"
  (cd "$build2" && ctest --output-on-failure --parallel "$PETS_JOBS" --timeout 900 -R "$tests") ||
    status=$?
  echo "test.sh: the second LibTorch ($torch_prefix) built and tested in $((SECONDS - start)) s"
fi
exit "$status"
