#include "pets/train/run_session.hpp"

#include <mpi.h>

#include <filesystem>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/checkpoint.hpp"
#include "pets/train/resume_check.hpp"
#include "pets/train/run_folder.hpp"
#include "pets/train/training_state.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"

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
  const auto ckpt = agree_on_usage([&] {
    auto found = load_latest_checkpoint(options_.out, &notices);
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

void RunSession::save(const TrainingState& state) const {
  if (mpi_.rank() == 0) state.save(options_.out);
}

void RunSession::write_metrics(const std::vector<EpochMetrics>& history) const {
  if (mpi_.rank() != 0) return;
  write_file_atomically((fs::path(options_.out) / "metrics.jsonl").string(),
                        metrics_jsonl(history));
}

std::string RunSession::export_model(model::ResNet50dImpl& model, std::size_t num_classes) const {
  if (mpi_.rank() != 0) return "";
  const std::string path = (fs::path(options_.out) / "model.safetensors").string();
  model::NamedTensors tensors;
  for (const auto& [name, t] : model::state_dict(model))
    tensors.emplace_back(name, t.cpu().contiguous());
  model::write_tensors(
      path, tensors,
      {{"format", "pt"}, {"arch", "resnet50d"}, {"num_classes", std::to_string(num_classes)}});
  return path;
}

std::string RunSession::finish(const std::vector<EpochMetrics>& history,
                               model::ResNet50dImpl& model, std::size_t num_classes) const {
  log_.note("--resume: the run in " + options_.out + " has finished all " +
            std::to_string(options_.epochs) + " epochs; nothing to train");
  if (!history.empty()) log_.result(result_line(history.back()));
  if (mpi_.rank() != 0) return "";
  if (!fs::exists(fs::path(options_.out) / "metrics.jsonl")) write_metrics(history);
  const fs::path model_path = fs::path(options_.out) / "model.safetensors";
  const std::string path =
      fs::exists(model_path) ? model_path.string() : export_model(model, num_classes);
  log_.note("final model: " + path);
  return path;
}

}  // namespace pets::train
