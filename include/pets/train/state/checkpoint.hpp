#pragma once
/// \file
/// Training checkpoints: one safetensors file per epoch (tensors plus a JSON `state` and a digest
/// in its metadata) and a `latest` pointer, each replaced atomically, so that a crash at any point
/// leaves the previous checkpoint as the latest, complete and loadable. The digest
/// (`pets_digest`, "xxh3-64:<16 hex digits>") covers the state text and every tensor's name,
/// dtype, shape and bytes (comm::add_tensor_to_digest).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pets/model/state_dict.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

struct Checkpoint {
  int64_t index = 0;            ///< position in the run (the trainer uses optimiser steps)
  nlohmann::json state;         ///< scheduler position, config hash, labels, ...
  model::NamedTensors tensors;  ///< fc, Adam moments, BatchNorm statistics
  std::string path;             ///< where it was read from
};

/// Writes `<dir>/ckpt-<index>.safetensors`, then points `<dir>/latest` at it. `index` orders
/// checkpoints: a larger one is newer.
/// Returns the checkpoint's path.
std::string save_checkpoint(const std::string& dir, int64_t index, const nlohmann::json& state,
                            const model::NamedTensors& tensors);

/// A checkpoint written by an older pets_train in a format this one does not read (its digest):
/// not damage, so no older checkpoint is tried in its place.
class IncompatibleCheckpoint : public UsageError {
 public:
  using UsageError::UsageError;
};

/// Reads and verifies one checkpoint file; throws pets::UsageError naming the file when it is
/// truncated, malformed or its digest does not match, IncompatibleCheckpoint when an older
/// pets_train wrote it.
Checkpoint read_checkpoint(const std::string& path);

/// The newest complete checkpoint in `dir`: the one `latest` names, or, when that one is damaged,
/// the newest older one that verifies (each refusal is reported through `notices`). Empty when
/// `dir` holds none. Throws IncompatibleCheckpoint at the first checkpoint an older pets_train
/// wrote: the run must start afresh.
std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* notices);

}  // namespace pets::train
