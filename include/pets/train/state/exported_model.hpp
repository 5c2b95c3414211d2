#pragma once
/// \file
/// The model a run exports (`model.safetensors`, with --keep-best also `best.safetensors`):
/// timm's resnet50d state dict, key for key, carrying in its safetensors `__metadata__` what a
/// user needs to run it alone. Metadata values are strings; lists are JSON:
///
///   format "pt", arch "resnet50d", num_classes "37"
///   label_names    JSON list of the class names in class-index order (the store's label_names)
///   input_size     "[3, 224, 224]": the model's input, channels first
///   interpolation  "bilinear", antialiased (PIL's Image.resize, as torchvision on PIL images)
///   crop_pct "1.0", crop_mode "squash": the whole image resized to input_size, aspect not kept
///                  (timm's pretrained_cfg words; data::transform_eval)
///   mean, std      JSON lists, per RGB channel, applied to pixel / 255
///   max_side       the longer side images are first scaled down to, aspect kept (the store's
///                  pets_preprocess --max-side, which the evaluation images went through; "0":
///                  not scaled)
///   best.safetensors also: epoch, accuracy (percent, as the `[run]` line), correct, evaluated
///   a sweep's model also: max_lr (the head's --max-lr value), head (its index in the sweep),
///                  sweep_max_lr (JSON list of the sweep's --max-lr values)
///
/// timm ignores the metadata (safetensors' load_file returns the tensors only).

#include <torch/nn/module.h>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pets/data/augment.hpp"
#include "pets/train/report/metrics.hpp"

namespace pets::data {
class Loader;
}
namespace pets::model {
class SafetensorsFile;
}

namespace pets::train {

/// The exported model of a run, in --out.
inline constexpr const char* kModelFileName = "model.safetensors";
/// --keep-best: the model of the run's best epoch (best_epoch), in --out.
inline constexpr const char* kBestModelFileName = "best.safetensors";

/// How an image becomes the model's input, exactly as evaluation makes it: decoded to RGB,
/// scaled down to `max_side` (when above it; data::DecodeOptions), then data::transform_eval.
struct Preprocessing {
  int image_size = 224;
  std::array<float, 3> mean{data::kMean[0], data::kMean[1], data::kMean[2]};
  std::array<float, 3> std{data::kStd[0], data::kStd[1], data::kStd[2]};
  int max_side = 0;  ///< 0: the decoded image as it is
};

/// What an exported model says about itself.
struct ModelCard {
  std::vector<std::string> labels;  ///< class names, in class-index order
  Preprocessing preprocessing;
  /// best.safetensors: the epoch it comes from (epoch, accuracy, correct and evaluated set).
  std::optional<EpochMetrics> epoch;
  /// A sweep: every head's --max-lr value (more than one), and the head this model is.
  std::vector<double> sweep;
  int head = 0;
};

/// The card of a model trained and evaluated on `loader`'s store (its labels, and the
/// preprocessing of its evaluation images); `epoch`: the epoch the model is from
/// (best.safetensors).
ModelCard model_card(const data::Loader& loader, const EpochMetrics* epoch = nullptr);

/// The card as safetensors metadata (the keys in this file's comment).
std::map<std::string, std::string> model_metadata(const ModelCard& card);

/// Reads the card back from an exported model. Throws pets::UsageError naming the file: a
/// pets_train checkpoint; no label_names (a model exported by an older pets_train: export it
/// again); a key missing or malformed.
ModelCard read_model_card(const model::SafetensorsFile& file);

/// The classifier a model is exported with, as fc.weight and fc.bias: the model's own fc, or the
/// head a sweep chose.
struct ExportedHead {
  at::Tensor weight, bias;
};

/// Writes `model`'s state dict (on the CPU, contiguous) with `head` as its fc.weight and fc.bias
/// and the card's metadata to `path`, atomically (model::write_tensors). The model is not
/// changed. Throws pets::Error when `model` has no fc.weight and fc.bias of `head`'s shapes.
void write_exported_model(const std::string& path, const torch::nn::Module& model,
                          const ExportedHead& head, const ModelCard& card);

}  // namespace pets::train
