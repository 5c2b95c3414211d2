#pragma once
/// \file
/// The names of the checkpoint files pets_train writes into --out, made and taken apart here and
/// nowhere else. LibTorch-free (pets::train_state_core): the run folder recognises them without
/// reading them.

#include <cstdint>
#include <optional>
#include <string>

namespace pets::train {

/// `ckpt-<index>.safetensors`: the checkpoint at position `index` of the run (a larger one is
/// newer).
std::string checkpoint_file_name(int64_t index);
/// The index checkpoint_file_name made `name` from, or nothing for any other name.
std::optional<int64_t> parse_checkpoint_file_name(const std::string& name);

/// Where a rank other than 0 keeps its part of a checkpoint that every rank's part belongs to (a
/// mid-epoch checkpoint under --bn-mode train, where each rank's BatchNorm statistics differ):
/// `ckpt-<index>.epoch-<epoch>.step-<step>.rank-<rank>.safetensors` beside the checkpoint
/// (`index` alone does not name one state: an fp16 step whose update was skipped keeps it).
/// Written by that rank, in the same format (its JSON state in the metadata, a digest).
struct ShardKey {
  int64_t index = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int rank = 0;

  bool operator==(const ShardKey& o) const {
    return index == o.index && epoch == o.epoch && step == o.step && rank == o.rank;
  }
};
std::string shard_file_name(const ShardKey& key);
/// The key shard_file_name made `name` from, or nothing for any other name: each number as
/// shard_file_name writes it (decimal digits, no sign, no leading zero, in range), so that
/// shard_file_name(*parse_shard_file_name(name)) == name.
std::optional<ShardKey> parse_shard_file_name(const std::string& name);

}  // namespace pets::train
