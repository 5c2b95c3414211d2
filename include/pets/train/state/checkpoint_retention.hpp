#pragma once
/// \file
/// Which checkpoints a run keeps in --out (--keep-checkpoints): the newest few, the checkpoint
/// that `latest` names, and the one that ends the best epoch; the older ones are removed once a
/// newer one is complete, with their shards.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"

namespace pets::train {

/// The newest checkpoints `options` keeps (--keep-checkpoints; its 0 resolved: every one, as 0
/// says, while the backbone is frozen, 3 when --unfreeze trains it).
int checkpoints_kept(const TrainOptions& options);

/// The epoch (0-based) whose end a checkpoint's JSON state marks (its `epoch` less one, at step 0
/// of the next), or nothing for a checkpoint inside an epoch or a state without those keys.
std::optional<int64_t> epoch_ended_by(const std::string& state_text);

/// Removes from `dir` every checkpoint but the `keep` newest (by index; 0: removes none), the one
/// `latest` names, and those that end epoch `best_epoch` (when given), with the shards that
/// belong to them (checkpoint.hpp). A checkpoint whose state cannot be read is kept. Returns the
/// names of the files removed, in order.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep,
                                           std::optional<int64_t> best_epoch);

}  // namespace pets::train
