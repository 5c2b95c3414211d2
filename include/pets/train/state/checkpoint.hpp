#pragma once
/// \file
/// Training checkpoints: one safetensors file per epoch (tensors plus a JSON `state` and a digest
/// in its metadata) and a `latest` pointer, each replaced atomically, so that a crash at any point
/// leaves the previous checkpoint as the latest, complete and loadable. The digest
/// (`pets_digest`, "xxh3-64:<16 hex digits>") covers the state text and every tensor's name,
/// dtype, shape and bytes (comm::add_tensor_to_digest).

#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pets/model/state_dict.hpp"
#include "pets/train/state/checkpoint_names.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

/// The shards that belong to a checkpoint: those of ranks 1 .. ranks - 1 at (epoch, step).
struct ShardSet {
  int64_t epoch = 0;
  int64_t step = 0;
  int ranks = 0;
};

struct Checkpoint {
  int64_t index = 0;               ///< position in the run (the trainer uses optimiser steps)
  std::optional<ShardSet> shards;  ///< the other ranks' shards that belong to it, if any
  nlohmann::json state;            ///< scheduler position, config hash, labels, ...
  model::NamedTensors tensors;     ///< fc, Adam moments, BatchNorm statistics
  std::string path;                ///< where it was read from
};

/// Writes `<dir>/ckpt-<index>.safetensors`, then points `<dir>/latest` at it. `index` orders
/// checkpoints: a larger one is newer.
/// Returns the checkpoint's path.
std::string save_checkpoint(const std::string& dir, int64_t index, const nlohmann::json& state,
                            const model::NamedTensors& tensors);
/// save_checkpoint's two halves: the file alone (returns its path), recording the shards that
/// belong to it, and `latest` pointed at it (once they are all written).
std::string write_checkpoint_file(const std::string& dir, int64_t index,
                                  const nlohmann::json& state, const model::NamedTensors& tensors,
                                  const std::optional<ShardSet>& shards = std::nullopt);
void point_latest_at(const std::string& dir, int64_t index);

/// Writes a shard into `dir` (replaced atomically; `latest` is left alone); returns its path.
std::string write_shard_file(const std::string& dir, const ShardKey& key,
                             const nlohmann::json& state, const model::NamedTensors& tensors);
/// Removes the shards in `dir` that belong to no checkpoint there (at a stop each other rank
/// writes its last two states, and rank 0's checkpoint takes one of them); keeps those of a
/// checkpoint it cannot read. Returns the names removed.
std::vector<std::string> remove_stray_shards(const std::string& dir);
/// The ranks of `shards` (or of `among` alone, when given) whose shard of checkpoint `index`
/// `dir` does not hold.
std::vector<int> missing_shards(const std::string& dir, int64_t index, const ShardSet& shards,
                                const std::vector<int>* among = nullptr);

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

/// The newest complete checkpoint in `dir`: the one `latest` names, or, when that one is damaged
/// or a shard of it is missing, the newest older one that verifies (each refusal is reported
/// through `notices`). Empty when
/// `dir` holds none. Throws IncompatibleCheckpoint at the first checkpoint an older pets_train
/// wrote: the run must start afresh.
std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* notices);
/// load_latest_checkpoint on rank 0 of `comm` alone, and its result on every rank (collective):
/// the other ranks neither read a checkpoint nor look for shards (their `dir` and `notices` are
/// not used), they receive rank 0's checkpoint over MPI as its file holds it. The UsageError (or
/// IncompatibleCheckpoint) rank 0 meets is thrown on every rank with its message; any other
/// error of rank 0's is thrown there alone (a fault: it ends the job).
std::optional<Checkpoint> share_latest_checkpoint(const std::string& dir,
                                                  std::vector<std::string>* notices, MPI_Comm comm);

}  // namespace pets::train
