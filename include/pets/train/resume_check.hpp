#pragma once
/// \file
/// What a checkpoint must share with the run that resumes it, and the check itself: a pure
/// function of the saving run and the resuming one, so it is tested without MPI or files.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "pets/train/options.hpp"

namespace pets::train {

/// The settings a resumed run must have been started with (a checkpoint's "config").
struct RunConfig {
  int64_t epochs = 0;
  int64_t batch_size = 0;
  double max_lr = 0.0;
  std::uint64_t seed = 0;
  std::string bn_mode;              ///< to_string(BnMode)
  std::string mixed_precision;      ///< to_string(MixedPrecision)
  std::vector<std::string> labels;  ///< the data's class names, in label order

  static RunConfig of(const TrainOptions& options, std::vector<std::string> labels);
};

void to_json(nlohmann::json& j, const RunConfig& c);
void from_json(const nlohmann::json& j, RunConfig& c);

/// The image store a run reads (pets_preprocess's store_id attribute, data/store_schema.hpp).
struct StoreIdentity {
  std::string id;    ///< empty: none (a store, or a checkpoint, from before store ids)
  std::string path;  ///< where it was read, for messages
};

/// A run as resume compares it: its settings, its data and how it cuts epochs into steps.
struct RunShape {
  RunConfig config;
  int64_t world_size = 1;       ///< ranks
  int64_t steps_per_epoch = 0;  ///< at world_size ranks
  StoreIdentity store;
};

/// Throws pets::UsageError, naming `checkpoint_path`, when a checkpoint written by `saved` (inside
/// an epoch when `mid_epoch`) cannot continue as `current`, reading `data_path`: other labels;
/// another epoch count, per-rank batch, max lr, seed, BN mode or precision; another image store
/// (store ids differ, or only one of the two has one; the message names both files); a mid-epoch
/// checkpoint at another rank count; at the same rank count, another number of steps per epoch
/// (another data set). An end-of-epoch checkpoint resumes at any rank count.
void check_resume_compatible(const std::string& checkpoint_path, const RunShape& saved,
                             bool mid_epoch, const RunShape& current, const std::string& data_path);

}  // namespace pets::train
