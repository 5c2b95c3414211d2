#pragma once
/// \file
/// LibTorch side of safetensors: tensors in and out, and a strict state-dict load into a module.

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pets/model/safetensors.hpp"

namespace pets::model {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// A CPU tensor holding a copy of the entry's data in its stored dtype.
torch::Tensor to_tensor(const SafetensorsFile& file, const TensorInfo& info);

/// Every tensor of `path`, in header order.
NamedTensors read_tensors(const std::string& path);

/// Writes `tensors` (any device, contiguous or not) to `path` atomically.
void write_tensors(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata = {});
/// The bytes write_tensors writes (safetensors_bytes); `label` names them in errors.
std::string tensors_bytes(const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& label);

/// Every parameter and buffer of `module`, under its state-dict name.
NamedTensors state_dict(const torch::nn::Module& module);

struct LoadOptions {
  /// Tensors under this prefix whose shape differs from the module's are skipped, leaving the
  /// module's own (fresh) values: a 1000-class checkpoint loaded into a 37-class model.
  std::string resizable_head = "fc.";
};

struct LoadReport {
  std::string path;  ///< the file loaded
  std::vector<std::string> loaded;
  std::vector<std::string> skipped;  ///< head tensors left at their initial values
  /// Why the head was skipped: "fc.weight is [1000, 2048] there, [37, 2048] here"; empty when it
  /// was loaded.
  std::string skip_reason;
  std::string head;  ///< the resizable head's prefix without its dot ("fc"), for messages
};

/// One line for the user saying what `report`'s load did: "loaded 320 tensors from X: the
/// backbone and fc (same shapes as this model's head)", or "loaded 318 tensors from X: the
/// backbone; fc skipped (fc.weight is [1000, 2048] there, [37, 2048] here: another class count),
/// so the head starts fresh".
std::string load_report_text(const LoadReport& report);

/// The safetensors metadata key that marks pets_train's checkpoints (train/checkpoint.cpp): they
/// hold a training state, not a model's weights.
inline constexpr const char* kTrainingStateMetadataKey = "pets_state";

/// Loads `path` into `module`, converting dtypes (floating to floating, integer to integer).
/// Strict: a missing key, an unexpected key, a shape mismatch (outside the resizable head) or an
/// unconvertible dtype throws pets::UsageError naming the key, before any value is changed. A
/// pets_train checkpoint is refused as such, naming --resume.
LoadReport load_state_dict(torch::nn::Module& module, const std::string& path,
                           const LoadOptions& options = {});
/// The same from a file already read (its path() names it in messages).
LoadReport load_state_dict(torch::nn::Module& module, const SafetensorsFile& file,
                           const LoadOptions& options = {});

}  // namespace pets::model
