#include "pets/train/run/run_session.hpp"

#include <mpi.h>

#include <filesystem>
#include <thread>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/options/resume_check.hpp"
#include "pets/train/run/run_folder.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/train/state/checkpoint_retention.hpp"
#include "pets/train/state/exported_model.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {

namespace fs = std::filesystem;

RunSession::RunSession(const TrainOptions& options, const comm::MpiComm& mpi, RankLog& log)
    : options_(options), mpi_(mpi), log_(log) {
  // Slurm's one-rank guard ran before this (run_mpi_program): N one-rank worlds never get here.
  // Every rank takes stop signals before --out appears (what launchers' scripts wait for).
  PETS_MPI_CHECK(MPI_Barrier(mpi_.get()));
  resuming_ = decide_on_rank_0([&] {
                folder_ =
                    std::make_unique<RunFolder>(options_.out, options_.resume, options_.overwrite);
                for (const auto& n : folder_->notices()) log_.note(n);
                return std::string(folder_->resume() ? "resume" : "new");
              }) == "resume";
  if (mpi_.rank() != 0) return;
  // What a writer killed mid-write (SIGKILL, a lost node) left beside its target; the lock on
  // --out keeps a live run's files out of reach.
  const StaleTempReport stale = remove_stale_temp_files(options_.out);
  for (const auto& path : stale.removed) log_.note("removed " + path + " (its writer is gone)");
  for (const auto& what : stale.kept) log_.note("notice: kept " + what);
}

RunSession::~RunSession() = default;

void RunSession::remove_earlier_run() {
  const std::string removed =
      decide_on_rank_0([&] { return std::to_string(folder_->remove_earlier_run()); });
  if (removed != "0")
    log_.note("--overwrite: removed the earlier run's " + removed + " files from " + options_.out);
}

TrainingState RunSession::read_latest(const RunShape& current, std::string& path) const {
  std::vector<std::string> notices;
  // Rank 0 reads the checkpoint and looks for its shards; the other ranks receive it.
  const auto ckpt = agree_on_usage([&] {
    auto found = share_latest_checkpoint(options_.out, &notices, mpi_.get());
    for (const auto& n : notices) log_.note("warning: " + n);
    if (!found)
      throw UsageError("--resume: no checkpoint in " + options_.out + " can be read (" +
                       std::to_string(notices.size()) +
                       " refused, above), so there is nothing to continue; start over with "
                       "--overwrite");
    return found;
  });
  path = ckpt->path;
  return agree_on_usage([&] {
    TrainingState s = TrainingState::from_checkpoint(*ckpt);
    check_resume_compatible(ckpt->path, s.shape(), s.mid_epoch(), current, options_.data);
    return s;
  });
}

std::string RunSession::save(const TrainingState& state,
                             std::chrono::duration<double> shard_wait) const {
  const int rank = mpi_.rank();
  if (rank != 0) return state.rank_shards ? state.save_shard(options_.out, rank) : std::string();
  const std::string path = state.write(options_.out);
  if (const auto shards = state.shards()) {
    // Each rank writes its shard when the stop reaches it (the same signal, or the ranks'
    // agreement): milliseconds apart on a shared file system. Each look asks only for the
    // shards still missing.
    const auto deadline = std::chrono::steady_clock::now() + shard_wait;
    std::vector<int> missing = missing_shards(options_.out, state.schedule_steps, *shards);
    while (!missing.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      missing = missing_shards(options_.out, state.schedule_steps, *shards, &missing);
    }
    if (!missing.empty()) {
      std::string ranks;
      for (const int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      PETS_ERROR(path + " is incomplete: no shard from rank" + (missing.size() == 1 ? " " : "s ") +
                 ranks + " within " + std::to_string(static_cast<int>(shard_wait.count())) +
                 " s; the previous checkpoint stays the latest");
    }
  }
  state.commit(options_.out);
  prune(state);
  return path;
}

void RunSession::prune(const TrainingState& state) const {
  const int keep = checkpoints_kept(options_);
  if (keep == 0) return;
  std::optional<int64_t> best;
  if (!state.history.empty()) best = best_epoch(state.history)->epoch;
  const std::vector<std::string> removed = prune_checkpoints(options_.out, keep, best);
  if (removed.empty()) return;
  std::string names;
  for (const auto& name : removed) names += (names.empty() ? "" : ", ") + name;
  log_.note("removed " + names + " (--keep-checkpoints " + std::to_string(keep) +
            ": the newest and the best epoch's are kept)");
}

void RunSession::remove_stray_shards() const {
  if (mpi_.rank() != 0) return;
  const std::vector<std::string> removed = train::remove_stray_shards(options_.out);
  if (!removed.empty())
    log_.note("notice: removed " + std::to_string(removed.size()) + " shard" +
              (removed.size() == 1 ? "" : "s") + " of no checkpoint from " + options_.out +
              " (the other steps a stop wrote)");
}

std::optional<TrainingState> RunSession::read_own_shard(const TrainingState& state) const {
  if (!state.rank_shards || mpi_.rank() == 0) return std::nullopt;
  return state.read_shard(options_.out, mpi_.rank());
}

void RunSession::write_metrics(const std::vector<EpochMetrics>& history,
                               const std::vector<std::string>& labels) const {
  if (mpi_.rank() != 0) return;
  write_file_atomically((fs::path(options_.out) / "metrics.jsonl").string(),
                        metrics_jsonl(history, labels));
}

void RunSession::write_confusion(const EpochMetrics& epoch,
                                 const std::vector<std::vector<int64_t>>& confusions,
                                 const std::vector<std::string>& labels) const {
  if (mpi_.rank() != 0) return;
  write_file_atomically((fs::path(options_.out) / kConfusionFileName).string(),
                        confusion_json(epoch, confusions, labels).dump() + "\n");
}

ModelCard RunSession::card(const data::Loader& loader, const EpochMetrics* epoch,
                           bool with_epoch) const {
  ModelCard c = model_card(loader, with_epoch ? epoch : nullptr);
  if (options_.max_lr.size() > 1) {
    c.sweep = options_.max_lr;
    c.head = epoch != nullptr ? epoch->head : 0;
  }
  return c;
}

std::string RunSession::export_model(const torch::nn::Module& model, const ExportedHead& head,
                                     const ModelCard& card, const char* name) const {
  if (mpi_.rank() != 0) return "";
  const std::string path = (fs::path(options_.out) / name).string();
  write_exported_model(path, model, head, card);
  return path;
}

void RunSession::keep_best(const std::vector<EpochMetrics>& history, const torch::nn::Module& model,
                           const ExportedHead& head, const data::Loader& loader) const {
  if (mpi_.rank() != 0 || history.empty()) return;
  // The best so far is known from the history, a resumed run's earlier epochs included.
  const EpochMetrics& best = *best_epoch(history);
  const std::string kept = (fs::path(options_.out) / kBestModelFileName).string();
  if (&best == &history.back())
    log_.note("[epoch " + std::to_string(best.epoch) + "] best so far: model kept as " +
              export_model(model, head, card(loader, &best, true), kBestModelFileName));
  else if (!fs::exists(kept))
    log_.note("warning: --keep-best: " + kept + " is missing, so the best epoch so far (" +
              std::to_string(best.epoch) + ") is not kept; it will hold the next better one");
}

std::string RunSession::finish(const std::vector<EpochMetrics>& history,
                               const torch::nn::Module& model, const ExportedHead& head,
                               const data::Loader& loader) const {
  log_.note("--resume: the run in " + options_.out + " has finished its " +
            count_text(options_.epochs, "epoch") + "; nothing to train");
  if (!history.empty()) log_.result(result_line(history.back()));
  if (mpi_.rank() != 0) return "";
  if (!fs::exists(fs::path(options_.out) / "metrics.jsonl"))
    write_metrics(history, loader.store().label_names());
  const fs::path model_path = fs::path(options_.out) / kModelFileName;
  const std::string path =
      fs::exists(model_path)
          ? model_path.string()
          : export_model(model, head,
                         card(loader, history.empty() ? nullptr : &history.back(), false));
  log_.note("final model: " + path);
  return path;
}

}  // namespace pets::train
