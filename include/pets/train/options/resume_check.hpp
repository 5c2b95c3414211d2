#pragma once
/// \file
/// What a checkpoint must share with the run that resumes it, and the check itself: a pure
/// function of the saving run and the resuming one, so it is tested without MPI or files.

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"

namespace pets::train {

/// What a run records of how it was started (a checkpoint's "config"): every option but --out,
/// --resume and --overwrite (recorded_option_values), paths made absolute, and its data's labels.
struct RunConfig {
  /// By option key ("batch-size" -> "64"). A checkpoint of an older pets_train recorded six
  /// settings only (epochs, batch-size, max-lr, seed, bn-mode, mixed-precision).
  std::map<std::string, std::string> options;
  std::vector<std::string> labels;  ///< the data's class names, in label order

  static RunConfig of(const TrainOptions& options, std::vector<std::string> labels);
};

void to_json(nlohmann::json& j, const RunConfig& c);
/// Reads both forms: {"options": {...}, "labels": [...]}, and an older checkpoint's
/// {"epochs": 5, "batch_size": 64, ..., "labels": [...]}.
void from_json(const nlohmann::json& j, RunConfig& c);

/// The options a resumed run continues with: those `given` (on the command line or in its
/// --config file; ParseResult::given) from `options`, every other one the run recorded from
/// `saved`, and --out, --resume, --overwrite and --config from `options`. Throws
/// pets::UsageError naming every given run setting (run_setting_keys) that differs from the run's,
/// all at once and spelled as options, with `checkpoint_path`; when the run has `finished` and
/// --epochs is among them, the message says that a finished run cannot be extended and how to
/// train on from its model. --data given may name the store elsewhere: its identity is checked
/// when it is opened (check_resume_compatible).
TrainOptions resume_options(const TrainOptions& options, const std::vector<std::string>& given,
                            const RunConfig& saved, const std::string& checkpoint_path,
                            bool finished);

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
/// other run settings (run_setting_keys, all named at once); another image store
/// (store ids differ, or only one of the two has one; the message names both files); a mid-epoch
/// checkpoint at another rank count; at the same rank count, another number of steps per epoch
/// (another data set). An end-of-epoch checkpoint resumes at any rank count.
void check_resume_compatible(const std::string& checkpoint_path, const RunShape& saved,
                             bool mid_epoch, const RunShape& current, const std::string& data_path);

/// Throws pets::UsageError, naming `checkpoint_path`, when a checkpoint of `world_size` ranks
/// stepped OneCycle `steps_per_update` times per optimiser step, not once per rank as this
/// pets_train does: an earlier pets_train's at several ranks, whose learning rates so far do not
/// continue on this schedule. One of a `finished` run (nothing left to train) is accepted.
void check_schedule_resumable(const std::string& checkpoint_path, int64_t world_size,
                              int64_t steps_per_update, bool finished);

/// How a checkpoint's run made its training batches, for check_batching_resumable.
struct SavedBatching {
  int64_t world_size = 1;  ///< ranks of the run that wrote it
  /// The batching it records (TrainingState::batching); empty in checkpoints written before
  /// they recorded one.
  std::string batching;
  std::string version;  ///< the pets_train that wrote it; empty before checkpoints recorded it
  /// Its recorded options: before Accelerate's batching, checkpoints had no "image-size" (the
  /// setting came with that change), which marks them.
  const std::map<std::string, std::string>* options = nullptr;
};

/// Throws pets::UsageError, naming `checkpoint_path`, when the run of a checkpoint written at
/// several ranks would continue at `world_size` > 1 ranks with other batches than it trained
/// with: one that records a batching other than `current`, or one recording none that has no
/// image-size setting (an earlier pets_train's, whose ranks split each step's images between
/// them). At one rank every batching pets_train has had is the same: accepted, as is a
/// `finished` run (nothing left to train).
void check_batching_resumable(const std::string& checkpoint_path, const SavedBatching& saved,
                              int64_t world_size, const std::string& current, bool finished);

}  // namespace pets::train
