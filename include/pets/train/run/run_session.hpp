#pragma once
/// \file
/// A run's life in its --out folder, on every rank: rank 0 holds the folder's lock (RunFolder)
/// for the whole run, removes what killed writers left there, the earlier run's files under
/// --overwrite, and writes the checkpoints, metrics.jsonl and the exported model.

#include <torch/nn/module.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"
#include "pets/train/report/metrics.hpp"
#include "pets/train/state/exported_model.hpp"

namespace pets {
class RankLog;
}
namespace pets::comm {
class MpiComm;
}
namespace pets::data {
class Loader;
}

namespace pets::train {

class RunFolder;
struct RunShape;
struct TrainingState;

class RunSession {
 public:
  /// Collective: once every rank takes stop signals, rank 0 opens --out (RunFolder: its lock,
  /// and whether the run resumes; a refusal is a UsageError on every rank), then removes the
  /// temporary files of writers that are gone. Notices go to `log`, which must outlive this.
  RunSession(const TrainOptions& options, const comm::MpiComm& mpi, RankLog& log);
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  /// Whether the run continues from a checkpoint in --out.
  bool resuming() const { return resuming_; }
  /// --overwrite: rank 0 removes the earlier run's files, nothing else (collective; a file it
  /// cannot remove is a UsageError on every rank).
  void remove_earlier_run();
  /// The state of the latest readable checkpoint in --out, which `current` (reading --data) can
  /// continue, and its path in `path`; notices of checkpoints refused go to the log. Rank 0 reads
  /// it and looks for its shards, the other ranks receive it (share_latest_checkpoint). Throws
  /// pets::UsageError on every rank when there is none or it cannot continue (collective).
  TrainingState read_latest(const RunShape& current, std::string& path) const;
  /// This rank's part of a checkpoint of `state`, on every rank (StopCheckpoint's writer; no
  /// collective). Rank 0 writes the checkpoint file and, when the other ranks keep parts of it
  /// (state.rank_shards), waits for their shards (up to `shard_wait`) before pointing `latest` at
  /// it; returns its path. Another rank writes its shard when the state has one and returns its
  /// path (else writes nothing: empty). Throws pets::Error naming the ranks whose shards did not
  /// come (`latest` then still names the previous checkpoint). Rank 0 then removes the older
  /// checkpoints that --keep-checkpoints does not keep.
  std::string save(const TrainingState& state,
                   std::chrono::duration<double> shard_wait = std::chrono::seconds(60)) const;
  /// Rank 0, once every rank has read its shard of the checkpoint resumed from: removes the
  /// shards that belong to no checkpoint in --out (remove_stray_shards), with a notice.
  void remove_stray_shards() const;
  /// On a rank other than 0, its shard of `state` when the state has rank shards (read by
  /// read_latest); else nothing. Throws pets::UsageError naming the shard when it cannot be read.
  std::optional<TrainingState> read_own_shard(const TrainingState& state) const;
  /// Rank 0 (re)writes metrics.jsonl with every epoch of `history` (per-class accuracies named by
  /// `labels`).
  void write_metrics(const std::vector<EpochMetrics>& history,
                     const std::vector<std::string>& labels) const;
  /// Rank 0 writes confusion.json: `confusions` (each head's, as confusion_json) of `epoch`.
  void write_confusion(const EpochMetrics& epoch,
                       const std::vector<std::vector<int64_t>>& confusions,
                       const std::vector<std::string>& labels) const;
  /// Rank 0 exports `model` with `head` as its fc (timm's names, `card` as its metadata:
  /// exported_model.hpp) as `name` in --out; its path there, empty on the other ranks.
  std::string export_model(const torch::nn::Module& model, const ExportedHead& head,
                           const ModelCard& card, const char* name = kModelFileName) const;
  /// The card of the run's model from the head `epoch` reports (a sweep's: its max-lr and the
  /// sweep's); `with_epoch`: the epoch's figures too (best.safetensors).
  ModelCard card(const data::Loader& loader, const EpochMetrics* epoch, bool with_epoch) const;
  /// --keep-best, after each epoch added to `history`: rank 0 exports `model` with `head` (the
  /// head that epoch reports) as best.safetensors when that epoch is the best so far
  /// (best_epoch), and warns when the best epoch's file is missing.
  void keep_best(const std::vector<EpochMetrics>& history, const torch::nn::Module& model,
                 const ExportedHead& head, const data::Loader& loader) const;
  /// A run resumed at its end: says so (with its last result line), rank 0 writes what a stop
  /// between its last checkpoint and its last files left out (metrics.jsonl, the model with
  /// `head`, the final epoch's), and returns the model's path (rank 0).
  std::string finish(const std::vector<EpochMetrics>& history, const torch::nn::Module& model,
                     const ExportedHead& head, const data::Loader& loader) const;

 private:
  /// Rank 0, once `state`'s checkpoint is the latest: removes the checkpoints --keep-checkpoints
  /// does not keep (prune_checkpoints; the best epoch from `state`'s history), with a notice.
  void prune(const TrainingState& state) const;

  const TrainOptions& options_;
  const comm::MpiComm& mpi_;
  RankLog& log_;
  std::unique_ptr<RunFolder> folder_;  ///< rank 0: --out, locked for the whole run
  bool resuming_ = false;
};

}  // namespace pets::train
