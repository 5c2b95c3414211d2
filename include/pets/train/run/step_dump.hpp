#pragma once
/// \file
/// PETS_DUMP_STEPS="DIR:N": what the run's first N training steps took and made, written by every
/// rank for bench/step_compare.py, which replays the steps with PyTorch and timm and names the
/// first quantity that differs. Nothing a run computes changes.
///
/// DIR gets, from rank 0, `run.json` (the run's shape: ranks, batch sizes, epochs, images, the
/// schedule's length) and `initial.safetensors` (the whole model before the first step); from
/// every rank r and step k, `step-k-rank-r.safetensors`: `images` [n, 3, H, W] float32 as the
/// backbone took them, `labels`, the head before and after (`fc.*.before`, `fc.*.after`), the
/// averaged gradient (`fc.*.grad`), `loss_sum` and `images_total` of the global batch, `lr` and
/// `beta1`, and every BatchNorm buffer after the step; with --unfreeze, also each parameter NAME
/// trained in that step: `NAME.before`, `NAME.grad` (averaged) and `NAME.after`, and at every
/// step (before the unfreeze epoch too) the backbone group's `lr_backbone`; and
/// `step-k-rank-r.json`, the batch's image names and crop boxes. run.json records --unfreeze as
/// `unfrozen_stages` (0 none, 1 layer4, ... 5 all), `backbone_lr_ratio` and `unfreeze_epoch`.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pets/train/options/debug_switches.hpp"

namespace pets::data {
struct Batch;
}
namespace pets::model {
struct ResNet50dImpl;
}

namespace pets::train {

struct StepResult;

class StepDump {
 public:
  /// Creates `spec.dir` (rank 0) and writes `run` there as run.json.
  StepDump(StepDumpSpec spec, int rank, const std::map<std::string, double>& run);

  /// True while `step` (the run's global step count) is one to write.
  bool wants(std::int64_t step) const { return step < spec_.steps; }
  /// Before the step: the model (rank 0, first step only), the batch (`names`: its split's
  /// image names) and the head.
  void before(std::int64_t step, const model::ResNet50dImpl& model, data::Batch& batch,
              const at::Tensor& images, const std::vector<std::string>& names);
  /// After the step: writes the step's file.
  void after(const model::ResNet50dImpl& model, const StepResult& result, double beta1);

 private:
  StepDumpSpec spec_;
  int rank_;
  std::int64_t step_ = -1;
  std::map<std::string, at::Tensor> kept_;
  nlohmann::json crops_;  ///< the batch's image names and crop boxes
};

}  // namespace pets::train
