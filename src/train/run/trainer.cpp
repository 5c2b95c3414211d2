#include "pets/train/run/trainer.hpp"

#include <chrono>
#include <limits>
#include <optional>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/options/debug_switches.hpp"
#include "pets/train/report/run_report.hpp"
#include "pets/train/report/tensorboard.hpp"
#include "pets/train/run/epoch_evaluation.hpp"
#include "pets/train/run/run_parts.hpp"
#include "pets/train/run/run_session.hpp"
#include "pets/train/run/stop_checkpoint.hpp"
#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/train/step/verify_ranks.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"

namespace pets::train {
namespace {

using Clock = std::chrono::steady_clock;
using data::SplitKind;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The run on one rank: its parts (RunParts), then epochs of training steps and evaluations with
/// checkpoints, and the final model.
class Trainer {
 public:
  Trainer(const TrainOptions& options, const comm::MpiComm& mpi)
      : options_(options),
        mpi_(mpi),
        switches_(DebugSwitches::from_environment()),
        log_(mpi.rank() == 0, options.progress,
             std::chrono::duration<double>(options.progress_interval)),
        board_(options.tensorboard, mpi.rank() == 0,
               std::chrono::duration<double>(options.progress_interval), log_) {}

  TrainResult run();

 private:
  /// Trains from `position` to the end of the epoch, or until the ranks agree to stop (false).
  bool train_epoch(int64_t epoch, EpochPosition& position);
  /// False when the ranks agreed to stop before a batch (metrics unset). Counts every head per
  /// class (confusions_); `metrics` (the training figures of `position`) then reports the best
  /// head with every head's figures (set_heads).
  bool evaluate(int64_t epoch, const EpochPosition& position, EpochMetrics& metrics);
  /// Reports a finished epoch, keeps its best model and its files, and checkpoints the run.
  void finish_epoch(int64_t epoch, const EpochMetrics& metrics);
  /// Whether this rank keeps the state after each step for a stop: rank 0, and the others where
  /// their BatchNorm statistics differ (their shards).
  bool commits_every_step() const;
  /// Checkpoints the run at the start of `epoch`, after the previous one's evaluation.
  void save(int64_t epoch);
  /// The state just after a training step that this rank keeps for a stop (StopCheckpoint::commit;
  /// no collective): rank 0 what it writes as the checkpoint, another rank its shard's part.
  TrainingState state_after_step(int64_t epoch, const EpochPosition& position) const;
  /// The head the epoch `metrics` reports (a sweep's best; head 0 before any epoch), as exported.
  ExportedHead head_of(const EpochMetrics* metrics) const {
    return parts_->exported_head(metrics != nullptr ? metrics->head : 0);
  }

  const TrainOptions& options_;
  const comm::MpiComm& mpi_;
  const DebugSwitches switches_;
  RankLog log_;
  TensorBoardLog board_;  ///< --tensorboard, at the schedule's step count (the global step)
  std::unique_ptr<RunSession> session_;
  std::unique_ptr<StopCheckpoint> stop_checkpoint_;  ///< each rank's part of a stop's checkpoint
  std::unique_ptr<RunParts> parts_;
  std::vector<EpochMetrics> history_;
  /// Each head's confusion matrix of the last evaluation (EvalCounts::confusion).
  std::vector<std::vector<int64_t>> confusions_;
};

bool Trainer::train_epoch(int64_t epoch, EpochPosition& position) {
  RunParts& p = *parts_;
  InputPipeline& input = *p.data->input;
  p.model->train(options_.bn_mode == BnMode::kTrain);
  if (options_.unfreeze != Unfreeze::kNone)
    p.step->set_backbone_training(epoch >= options_.unfreeze_epoch);
  const int64_t steps = p.data->loader->steps_per_epoch(SplitKind::kTrain);
  input.start_epoch(SplitKind::kTrain, epoch, position.step);
  const int64_t first_step = position.step;
  const double seconds_before = position.seconds;
  const auto start = Clock::now();
  for (int64_t step = first_step; step < steps; ++step) {
    const auto wait_start = Clock::now();
    std::optional<data::Batch> batch = input.next();
    position.wait_seconds += seconds_since(wait_start);
    PETS_CHECK(batch.has_value(), "loader ended the epoch after " + std::to_string(step) + " of " +
                                      std::to_string(steps) + " steps");
    const int64_t global_step = epoch * steps + step;
    const bool dumped = p.dump && p.dump->wants(global_step);
    const double beta1 = p.step->schedule().beta1();
    if (dumped)
      p.dump->before(global_step, *p.model, *batch, input.images(*batch),
                     p.data->loader->store().split(SplitKind::kTrain).names);
    const comm::Traffic before = p.backend->device_comm().traffic();
    const StepResult result = p.backend->fitting(kBatchSizeKey, options_.batch_size, [&] {
      return p.step->run(*batch, p.stop->request(), p.folded.get(), input.images(*batch));
    });
    const comm::Traffic traffic = p.backend->device_comm().traffic().since(before);
    position.comm_bytes += traffic.bytes;
    position.comm_seconds += traffic.seconds;
    if (dumped) p.dump->after(*p.model, result, beta1);
    position.loss_sum += result.loss_sum;
    position.more_loss_sums.resize(result.heads.size() - 1, 0.0);
    for (std::size_t k = 1; k < result.heads.size(); ++k)
      position.more_loss_sums[k - 1] += result.heads[k].loss_sum;
    position.images += result.images;
    position.step = step + 1;
    position.seconds = seconds_before + seconds_since(start);
    if (commits_every_step())
      stop_checkpoint_->commit(epoch, position.step,
                               [&] { return state_after_step(epoch, position); });
    log_.progress(p.progress->trained(epoch, step + 1, position.images / position.seconds,
                                      position.loss_sum / position.images));
    board_.progress(p.step->schedule().step_count(), position.loss_sum / position.images,
                    position.images / position.seconds, result.lr);
    // At the epoch's last step the evaluation stops at once.
    if (p.stop->record(result.stop) && step + 1 < steps) return false;
  }
  return true;
}

bool Trainer::evaluate(int64_t epoch, const EpochPosition& position, EpochMetrics& metrics) {
  // Evaluation and checkpoints use the ranks' average statistics: every rank holds one model.
  parts_->batchnorm->synchronise();
  if (switches_.verify_ranks)
    log_.note(check_model_on_all_ranks(parts_->backend->host_comm(), *parts_->model, epoch,
                                       parts_->step.get()) +
              "; averaged gradients identical at " +
              std::to_string(parts_->hooks->steps_verified()) + " steps so far");
  const auto start = Clock::now();
  const std::optional<std::vector<EvalCounts>> counts =
      evaluate_heads(*parts_, switches_, mpi_.rank(), epoch, log_);
  if (!counts) return false;
  set_evaluation(metrics, counts->front().correct, counts->front().evaluated, seconds_since(start));
  std::vector<HeadMetrics> heads;
  confusions_.clear();
  for (int k = 0; k < parts_->step->heads(); ++k) {
    heads.push_back(head_figures(*parts_->step, k, options_.max_lr.at(k), position, counts->at(k)));
    confusions_.push_back(counts->at(k).confusion);
  }
  set_heads(metrics, std::move(heads));
  return true;
}

void Trainer::finish_epoch(int64_t epoch, const EpochMetrics& metrics) {
  history_.push_back(metrics);
  log_.result(result_line(metrics));
  log_.note(summary_line(metrics));
  for (std::size_t k = 0; k < metrics.heads.size(); ++k)
    log_.note(head_line(metrics, static_cast<int>(k)));
  board_.epoch(parts_->step->schedule().step_count(), metrics);
  if (options_.keep_best)
    session_->keep_best(history_, *parts_->model, head_of(&metrics), *parts_->data->loader);
  // Before the checkpoint of the epoch: a run resumed from it has the file of its last epoch.
  if (epoch + 1 == options_.epochs)
    session_->write_confusion(metrics, confusions_, parts_->labels());
  save(epoch + 1);
  session_->write_metrics(history_, parts_->labels());
}

void Trainer::save(int64_t epoch) {
  TrainingState state = TrainingState::at(parts_->data->shape(options_, mpi_.size()), epoch,
                                          EpochPosition{}, history_);
  parts_->step->save(state);
  parts_->batchnorm->save(state);
  stop_checkpoint_->save(epoch, state);
}

TrainingState Trainer::state_after_step(int64_t epoch, const EpochPosition& position) const {
  TrainingState state =
      TrainingState::at(parts_->data->shape(options_, mpi_.size()), epoch, position, history_);
  parts_->step->save(state);
  parts_->batchnorm->save(state);
  // Training goes on changing the tensors in place: the state is copied, but for a trained
  // backbone's parameters and moments, which the stop copies under the step's lock
  // (TrainStep::stable_copy). Another rank writes only its BatchNorm statistics (its shard), so it
  // copies only those.
  return mpi_.rank() == 0 ? parts_->step->copy_for_stop(state) : state.shard_part();
}

bool Trainer::commits_every_step() const {
  return mpi_.rank() == 0 || parts_->batchnorm->varies_per_rank();
}

TrainResult Trainer::run() {
  // Before the (slow) setup, so that an early preemption signal still ends in a checkpoint.
  install_stop_handlers(mpi_.rank() == 0);
  apply_process_switches(switches_);
  const auto start = Clock::now();
  session_ = std::make_unique<RunSession>(options_, mpi_, log_);
  // Every rank writes its part of a stop's checkpoint: rank 0 the checkpoint, another rank its
  // BatchNorm statistics where they differ per rank (commits_every_step).
  // A commit refers to a trained backbone's live tensors: they are copied here, unless the next
  // step has already changed them (that step's commit is then written).
  stop_checkpoint_ = std::make_unique<StopCheckpoint>(
      [this](const TrainingState& s) {
        std::optional<TrainingState> stable = parts_ ? parts_->step->stable_copy(s) : s;
        if (!stable) throw StaleState("the trained backbone changed after the step chosen");
        return session_->save(*stable);
      },
      options_.out, mpi_.rank() == 0);
  parts_ = std::make_unique<RunParts>(options_, mpi_, switches_, *session_, board_, log_);
  const ResumePoint& from = parts_->start;
  history_ = from.history;
  TrainResult result;
  if (session_->resuming() && from.epoch == options_.epochs) {
    result.epochs = history_;
    result.final_model = session_->finish(history_, *parts_->model,
                                          head_of(history_.empty() ? nullptr : &history_.back()),
                                          *parts_->data->loader);
    return result;
  }
  if (options_.overwrite) session_->remove_earlier_run();
  // Every rank has read its shard of the checkpoint (resume_run, collective).
  if (session_->resuming()) session_->remove_stray_shards();
  // What a stop before the first step writes (after --overwrite's removal, which would take it).
  if (session_->resuming())
    stop_checkpoint_->commit_on_disk(from.epoch, from.position.step);
  else
    stop_checkpoint_->commit(from.epoch, 0,
                             [&] { return state_after_step(from.epoch, EpochPosition{}); });
  EpochPosition position = from.position;
  const bool comm_timed = parts_->backend->device_comm().times_completion();
  for (int64_t epoch = from.epoch; epoch < options_.epochs; ++epoch, position = EpochPosition{}) {
    // Trained and evaluated. A stop during the evaluation checkpoints the epoch's last step: the
    // resumed run trains no step of it and evaluates it.
    bool complete = train_epoch(epoch, position);
    EpochMetrics metrics;
    if (complete) {
      metrics = training_metrics(epoch, position, parts_->step->last_lr());
      if (!comm_timed) metrics.comm_share = std::numeric_limits<double>::quiet_NaN();
      // The split of a resumed epoch covers its steps since the start.
      if (position.seconds > 0)
        metrics.upload_share = parts_->data->input->upload_seconds() / position.seconds;
      complete = evaluate(epoch, position, metrics);
    }
    if (complete) finish_epoch(epoch, metrics);
    const bool last = complete && epoch + 1 == options_.epochs;
    // A signal during the checkpoint: agreed here, not one step later. Rank 0's stop thread has
    // written the checkpoint of the last step completed (or writes it now, when the signal came
    // to another rank) and printed the line.
    if (!last && (complete ? parts_->stop->agree() : parts_->stop->agreed())) {
      stop_checkpoint_->stop();
      result.preempted = true;
      break;
    }
    // A signal from here on writes nothing: the run ends once the final model is written. One
    // that came before (its line printed by rank 0) ends the run as stopped.
    if (last && stop_checkpoint_->close()) result.preempted = true;
  }
  result.epochs = history_;
  if (result.preempted) return result;
  // A sweep's model is the head the final epoch reports: the best on held-out accuracy.
  const EpochMetrics* final_epoch = history_.empty() ? nullptr : &history_.back();
  result.final_model =
      session_->export_model(*parts_->model, head_of(final_epoch),
                             session_->card(*parts_->data->loader, final_epoch, false));
  log_.note(run_summary_line(history_, seconds_since(start), result.final_model, parts_->labels()));
  return result;
}

}  // namespace

TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi) {
  Trainer trainer(options, mpi);
  return trainer.run();
}

}  // namespace pets::train
