#!/usr/bin/env bash
# The layout check refuses what cmake/PetsLayers.cmake forbids: a throwaway tree holding the
# project's layer rules and one header at a time, checked by cmake/PetsCheckLayers.cmake as the
# layout_includes test checks the real tree. An include a sub-area of train may use passes; one
# that points back up (train/step -> train/run, train/device -> train/input), a flat pets/train/
# path and a LibTorch header in a LibTorch-free sub-area each fail, naming the file and the rule.
# Usage: test_layout_check.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
failures=0

# check NAME AREA_DIR FILE INCLUDE EXPECT [MESSAGE]: a tree whose AREA_DIR/FILE includes INCLUDE;
# EXPECT pass or fail; on fail the check's output must contain MESSAGE.
check() {
  local name=$1 dir=$2 file=$3 include=$4 expect=$5 message=${6:-}
  local root="$work/$name"
  mkdir -p "$root/cmake" "$root/$dir"
  cp "$source_dir/cmake/PetsLayers.cmake" "$source_dir/cmake/PetsCheckLayers.cmake" "$root/cmake/"
  printf '#pragma once\n#include %s\n' "$include" >"$root/$dir/$file"
  echo 'set(PETS_CHECK_LIBRARIES "")' >"$root/layers.cmake"
  local status=0
  cmake -DCHECK=includes -DLAYERS="$root/layers.cmake" -DPETS_ROOT="$root" \
    -P "$root/cmake/PetsCheckLayers.cmake" >"$root/out.txt" 2>&1 || status=$?
  if [ "$expect" = pass ] && [ "$status" -ne 0 ]; then
    echo "FAIL $name: refused, expected to pass:"; cat "$root/out.txt"; failures=$((failures + 1))
  elif [ "$expect" = fail ] && [ "$status" -eq 0 ]; then
    echo "FAIL $name: passed, expected a refusal"; failures=$((failures + 1))
  elif [ "$expect" = fail ] && ! grep -qF -- "$message" "$root/out.txt"; then
    echo "FAIL $name: refused without '$message':"; cat "$root/out.txt"; failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

check step_uses_input include/pets/train/step x.hpp '"pets/train/input/batch_tensors.hpp"' pass
check run_uses_step src/train/run x.cpp '"pets/train/step/train_step.hpp"' pass
check step_uses_run include/pets/train/step x.hpp '"pets/train/run/trainer.hpp"' fail \
  'include/pets/train/step/x.hpp (train/step) includes pets/train/run/trainer.hpp'
check device_uses_input src/train/device/cuda x.cpp '"pets/train/input/device_input.hpp"' fail \
  'src/train/device/cuda/x.cpp (train/device) includes pets/train/input/device_input.hpp'
check options_uses_report src/train/options x.cpp '"pets/train/report/metrics.hpp"' fail \
  'src/train/options/x.cpp (train/options) includes pets/train/report/metrics.hpp'
check flat_train_path src/train/run x.cpp '"pets/train/loop.hpp"' fail \
  'src/train/run/x.cpp (train/run) includes pets/train/loop.hpp'
check torch_in_report include/pets/train/report x.hpp '<torch/torch.h>' fail \
  'include/pets/train/report/x.hpp must be LibTorch-free, but include/pets/train/report/x.hpp includes torch/torch.h'

[ "$failures" -eq 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "layout check: every case as expected"
