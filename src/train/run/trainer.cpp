#include "pets/train/run/trainer.hpp"

#include <chrono>
#include <limits>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/options/debug_switches.hpp"
#include "pets/train/report/run_report.hpp"
#include "pets/train/report/tensorboard.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/run/run_data.hpp"
#include "pets/train/run/run_session.hpp"
#include "pets/train/run/run_start.hpp"
#include "pets/train/run/startup.hpp"
#include "pets/train/run/step_dump.hpp"
#include "pets/train/run/stop_checkpoint.hpp"
#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/exported_model.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/step/evaluation.hpp"
#include "pets/train/step/step_hooks.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/train/step/verify_ranks.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/memory.hpp"
#include "pets/util/threads.hpp"

namespace pets::train {
namespace {

using Clock = std::chrono::steady_clock;
using data::SplitKind;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// This rank's batch sizes of `kind` from `loader`: every step's but the last, and the last's.
std::vector<int64_t> step_batch_sizes(const data::Loader& loader, SplitKind kind) {
  std::vector<int64_t> sizes;
  for (const int64_t step : {int64_t{0}, loader.steps_per_epoch(kind) - 1})
    if (step >= 0) sizes.push_back(static_cast<int64_t>(loader.step_indices(kind, 0, step).size()));
  return sizes;
}

/// The run on one rank: the parts wired together (backend, session, loader, model, step,
/// evaluator, BatchNorm sync, stop agreement), then epochs of training steps and evaluations with
/// checkpoints.
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
  void setup();
  /// On a GPU, the training steps' forward and the evaluation's, once for each batch size, before
  /// the first epoch (Backend::warm_up).
  void warm_up();
  /// Trains from `position` to the end of the epoch, or until the ranks agree to stop (false).
  bool train_epoch(int64_t epoch, EpochPosition& position);
  /// False when the ranks agreed to stop before a batch (metrics unset). Counts every head per
  /// class (confusions_); a sweep's `metrics` (its heads' training figures set) then reports
  /// its best head.
  bool evaluate(int64_t epoch, EpochMetrics& metrics);
  /// A sweep's heads' training figures of the epoch at `position` (none for one head).
  std::vector<HeadMetrics> training_heads(const EpochPosition& position) const;
  /// Runs `f` with the model's fc holding head `head`'s values (the head a sweep exports), and
  /// head 0's again after it.
  template <typename F>
  auto with_head(int head, F&& f);
  /// The data's class names, in label order.
  const std::vector<std::string>& labels() const { return data_->loader->store().label_names(); }
  /// Whether this rank keeps the state after each step for a stop: rank 0, and the others where
  /// their BatchNorm statistics differ (their shards).
  bool commits_every_step() const;
  /// Checkpoints the run at the start of `epoch`, after the previous one's evaluation.
  void save(int64_t epoch);
  /// The state just after a training step, for a stop (StopCheckpoint::commit; no collective):
  /// what rank 0 writes, and the BatchNorm statistics another rank writes as its shard.
  TrainingState state_after_step(int64_t epoch, const EpochPosition& position) const;

  const TrainOptions& options_;
  const comm::MpiComm& mpi_;
  const DebugSwitches switches_;
  RankLog log_;
  TensorBoardLog board_;  ///< --tensorboard, at the schedule's step count (the global step)
  std::unique_ptr<RunSession> session_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunData> data_;  ///< the loader, its batches on the device, the labels
  model::ResNet50d model_{nullptr};
  std::unique_ptr<SwitchHooks> hooks_;  // before step_, whose hooks refer to it
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<BatchNormSync> batchnorm_;
  std::unique_ptr<StopAgreement> stop_;
  std::unique_ptr<StopCheckpoint> stop_checkpoint_;  ///< each rank's part of a stop's checkpoint
  std::unique_ptr<Evaluator> evaluator_;
  /// --bn-mode eval: the backbone never changes, so it runs folded (BatchNorm folded into the
  /// convolutions), and the evaluator keeps the evaluation features. PETS_UNFOLDED keeps the
  /// plain path (no fold, no cache), to compare against.
  std::unique_ptr<model::FoldedBackbone> folded_;
  std::unique_ptr<RunProgress> progress_;  ///< the progress line and the run's time left
  std::unique_ptr<StepDump> dump_;         ///< PETS_DUMP_STEPS
  ResumePoint start_;  ///< where the run starts: epoch 0, or a checkpoint's point (resume_run)
  std::vector<EpochMetrics> history_;
  /// Each head's confusion matrix of the last evaluation (EvalCounts::confusion).
  std::vector<std::vector<int64_t>> confusions_;
};

void Trainer::setup() {
  backend_ = make_backend(options_, mpi_, switches_);
  // Before the first tensor: every step's activations then reuse mapped pages (util/memory.hpp).
  if (!switches_.default_malloc && !retain_freed_memory())
    log_.note("notice: the allocator refused to keep freed memory; steps may run slower");
  const ThreadChoice threads = choose_threads(options_.threads, mpi_.local_size());
  if (!threads.warning.empty()) log_.note("warning: " + threads.warning);
  torch::set_num_threads(threads.threads);
  for (const auto& n : backend_->notices()) log_.note(n);
  torch::manual_seed(options_.seed);
  data_ = std::make_unique<RunData>(options_, mpi_, *backend_, threads.threads, log_);
  model_ = make_run_model(options_, data_->loader->num_classes(), *backend_, log_);
  data_->start_input(*backend_, options_.resident);
  batchnorm_ = std::make_unique<BatchNormSync>(*model_, mpi_, backend_->device_comm(),
                                               options_.bn_mode == BnMode::kTrain);
  StepSettings settings = backend_->step_settings();
  hooks_ = std::make_unique<SwitchHooks>(switches_, mpi_.rank(), &backend_->host_comm());
  settings.hooks = hooks_->hooks();
  const int64_t steps = data_->loader->steps_per_epoch(SplitKind::kTrain);
  const int64_t train_images = data_->loader->store().split(SplitKind::kTrain).size();
  // One head per --max-lr value, each with its own schedule.
  std::vector<OneCycleOptions> schedules;
  for (const double max_lr : options_.max_lr)
    schedules.push_back(accelerate_onecycle(max_lr, options_.epochs, train_images,
                                            options_.batch_size, mpi_.size()));
  step_ = std::make_unique<TrainStep>(*model_, backend_->device_comm(), schedules, settings);
  stop_ = std::make_unique<StopAgreement>(backend_->host_comm());
  const bool fold = options_.bn_mode == BnMode::kEval && !switches_.unfolded;
  evaluator_ = std::make_unique<Evaluator>(backend_->host_comm(), fold);
  if (session_->resuming()) {
    start_ = resume_run(*session_, data_->shape(options_, mpi_.size()), mpi_.size(), steps,
                        *batchnorm_, *step_, board_, log_);
    history_ = start_.history;
  }
  if (fold) {
    model_->eval();
    folded_ = std::make_unique<model::FoldedBackbone>(*model_);
  }
  if (switches_.dump_steps) {
    dump_ = std::make_unique<StepDump>(
        *switches_.dump_steps, mpi_.rank(),
        std::map<std::string, double>{
            {"ranks", mpi_.size()},
            {"batch_size", static_cast<double>(options_.batch_size)},
            {"epochs", static_cast<double>(options_.epochs)},
            {"max_lr", options_.max_lr.front()},
            {"seed", static_cast<double>(options_.seed)},
            {"train_images", static_cast<double>(train_images)},
            {"steps_per_epoch", static_cast<double>(steps)},
            {"image_size", static_cast<double>(data_->loader->options().image_size)}});
  }
  warm_up();
  log_.note(startup_text(startup_facts(options_, mpi_, *backend_, *data_, threads.threads)));
  progress_ = std::make_unique<RunProgress>(progress_shape(options_, mpi_.size(), *data_, fold));
}

void Trainer::warm_up() {
  if (!backend_->warms_up()) return;
  const int64_t size = data_->loader->options().image_size;
  model_->train(options_.bn_mode == BnMode::kTrain);
  backend_->fitting(kBatchSizeKey, options_.batch_size, [&] {
    backend_->warm_up(*model_, folded_.get(), step_batch_sizes(*data_->loader, SplitKind::kTrain),
                      size);
  });
  // The evaluation's shapes through the backbone it runs (evaluate): the run's fold, else a fold
  // of the current statistics (each evaluation folds its epoch's afresh), unless PETS_UNFOLDED.
  model_->eval();
  std::unique_ptr<model::FoldedBackbone> fold;
  if (!folded_ && !switches_.unfolded) fold = std::make_unique<model::FoldedBackbone>(*model_);
  backend_->fitting(kEvalBatchSizeKey, options_.eval_batch_size, [&] {
    backend_->warm_up(*model_, folded_ ? folded_.get() : fold.get(),
                      step_batch_sizes(*data_->loader, SplitKind::kEval), size);
  });
}

bool Trainer::train_epoch(int64_t epoch, EpochPosition& position) {
  model_->train(options_.bn_mode == BnMode::kTrain);
  const int64_t steps = data_->loader->steps_per_epoch(SplitKind::kTrain);
  data_->input->start_epoch(SplitKind::kTrain, epoch, position.step);
  const int64_t first_step = position.step;
  const double seconds_before = position.seconds;
  const auto start = Clock::now();
  for (int64_t step = first_step; step < steps; ++step) {
    const auto wait_start = Clock::now();
    std::optional<data::Batch> batch = data_->input->next();
    position.wait_seconds += seconds_since(wait_start);
    PETS_CHECK(batch.has_value(), "loader ended the epoch after " + std::to_string(step) + " of " +
                                      std::to_string(steps) + " steps");
    const int64_t global_step = epoch * steps + step;
    const bool dumped = dump_ && dump_->wants(global_step);
    const double beta1 = step_->schedule().beta1();
    if (dumped)
      dump_->before(global_step, *model_, *batch, data_->input->images(*batch),
                    data_->loader->store().split(SplitKind::kTrain).names);
    const comm::Traffic before = backend_->device_comm().traffic();
    const StepResult result = backend_->fitting(kBatchSizeKey, options_.batch_size, [&] {
      return step_->run(*batch, stop_->request(), folded_.get(), data_->input->images(*batch));
    });
    const comm::Traffic traffic = backend_->device_comm().traffic().since(before);
    position.comm_bytes += traffic.bytes;
    position.comm_seconds += traffic.seconds;
    if (dumped) dump_->after(*model_, result, beta1);
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
    log_.progress(progress_->trained(epoch, step + 1, position.images / position.seconds,
                                     position.loss_sum / position.images));
    board_.progress(step_->schedule().step_count(), position.loss_sum / position.images,
                    position.images / position.seconds, result.lr);
    // At the epoch's last step the evaluation stops at once.
    if (stop_->record(result.stop) && step + 1 < steps) return false;
  }
  return true;
}

bool Trainer::evaluate(int64_t epoch, EpochMetrics& metrics) {
  // Evaluation and checkpoints use the ranks' average statistics: every rank holds one model.
  batchnorm_->synchronise();
  if (switches_.verify_ranks)
    log_.note(check_model_on_all_ranks(backend_->host_comm(), *model_, epoch) +
              "; averaged gradients identical at " + std::to_string(hooks_->steps_verified()) +
              " steps so far");
  model_->eval();
  const auto start = Clock::now();
  // Evaluation uses the running statistics, so its backbone can always be folded: under
  // --bn-mode train afresh from this epoch's (synchronised) statistics, a fraction of a second.
  std::unique_ptr<model::FoldedBackbone> epoch_fold;
  if (!folded_ && !switches_.unfolded)
    epoch_fold = std::make_unique<model::FoldedBackbone>(*model_);
  const model::FoldedBackbone* backbone = folded_ ? folded_.get() : epoch_fold.get();
  const BatchSource source{[&] { data_->input->start_epoch(SplitKind::kEval, epoch); },
                           [&] { return data_->input->next(); }};
  // A long evaluation would outlast a launcher's kill timeout: the ranks agree on a stop before
  // every batch (every rank reads the same number of batches).
  int64_t reads = 0;
  const auto interrupt = [&] {
    log_.progress(progress_->evaluating(epoch, reads));
    if (reads++ == 1 && switches_.pause_eval_seconds > 0 && mpi_.rank() == 0)
      pause_for_test("in the evaluation", switches_.pause_eval_seconds);
    return stop_->agree();
  };
  std::vector<Evaluator::Head> heads;
  for (int k = 0; k < step_->heads(); ++k)
    heads.push_back(
        [this, k](const torch::Tensor& features) { return step_->forward_head(k, features); });
  const std::optional<std::vector<EvalCounts>> counts =
      backend_->fitting(kEvalBatchSizeKey, options_.eval_batch_size, [&] {
        return evaluator_->run(
            source,
            [&](data::Batch& batch) {
              return backend_->forward()(*model_, backbone, data_->input->images(batch));
            },
            heads, data_->loader->num_classes(), interrupt);
      });
  if (!counts) return false;
  const EvalCounts& first = counts->front();
  set_evaluation(metrics, first.correct, first.evaluated, seconds_since(start));
  metrics.class_correct = first.class_correct();
  metrics.class_evaluated = first.class_evaluated();
  confusions_.clear();
  for (const EvalCounts& c : *counts) confusions_.push_back(c.confusion);
  // A sweep: each head's training figures (training_heads) gain its evaluation's, and the
  // epoch reports the best head.
  if (!metrics.heads.empty()) {
    std::vector<HeadMetrics> figures = std::move(metrics.heads);
    for (std::size_t k = 0; k < figures.size(); ++k) {
      const EvalCounts& c = (*counts)[k];
      HeadMetrics& h = figures[k];
      h.correct = c.correct;
      h.evaluated = c.evaluated;
      h.accuracy = percent(c.correct, c.evaluated);
      h.class_correct = c.class_correct();
      h.class_evaluated = c.class_evaluated();
    }
    set_heads(metrics, std::move(figures));
  }
  return true;
}

std::vector<HeadMetrics> Trainer::training_heads(const EpochPosition& position) const {
  std::vector<HeadMetrics> heads;
  if (step_->heads() == 1) return heads;
  for (int k = 0; k < step_->heads(); ++k) {
    HeadMetrics h;
    h.max_lr = options_.max_lr.at(k);
    h.lr = step_->last_lr(k);
    const double loss_sum = k == 0 ? position.loss_sum : position.more_loss_sums.at(k - 1);
    h.train_loss = position.images > 0 ? loss_sum / position.images : 0.0;
    heads.push_back(h);
  }
  return heads;
}

void Trainer::save(int64_t epoch) {
  TrainingState state =
      TrainingState::at(data_->shape(options_, mpi_.size()), epoch, EpochPosition{}, history_);
  step_->save(state);
  batchnorm_->save(state);
  stop_checkpoint_->save(epoch, state);
}

TrainingState Trainer::state_after_step(int64_t epoch, const EpochPosition& position) const {
  TrainingState state =
      TrainingState::at(data_->shape(options_, mpi_.size()), epoch, position, history_);
  step_->save(state);
  batchnorm_->save(state);
  return state.cloned();
}

template <typename F>
auto Trainer::with_head(int head, F&& f) {
  if (head == 0) return f();
  torch::NoGradGuard no_grad;
  torch::Tensor& weight = model_->fc->weight;
  torch::Tensor& bias = model_->fc->bias;
  const torch::Tensor kept_weight = weight.clone(), kept_bias = bias.clone();
  weight.copy_(step_->head_weight(head));
  bias.copy_(step_->head_bias(head));
  struct Restore {
    torch::Tensor& weight;
    torch::Tensor& bias;
    const torch::Tensor &kept_weight, &kept_bias;
    ~Restore() {
      weight.copy_(kept_weight);
      bias.copy_(kept_bias);
    }
  } restore{weight, bias, kept_weight, kept_bias};
  return f();
}

bool Trainer::commits_every_step() const {
  return mpi_.rank() == 0 || batchnorm_->varies_per_rank();
}

TrainResult Trainer::run() {
  // Before the (slow) setup, so that an early preemption signal still ends in a checkpoint.
  install_stop_handlers(mpi_.rank() == 0);
  apply_process_switches(switches_);
  const auto start = Clock::now();
  session_ = std::make_unique<RunSession>(options_, mpi_, log_);
  // Every rank writes its part of a stop's checkpoint: rank 0 the checkpoint, another rank its
  // BatchNorm statistics where they differ per rank (commits_every_step).
  stop_checkpoint_ = std::make_unique<StopCheckpoint>(
      [this](const TrainingState& s) { return session_->save(s); }, options_.out, mpi_.rank() == 0);
  setup();
  TrainResult result;
  if (session_->resuming() && start_.epoch == options_.epochs) {
    result.epochs = history_;
    result.final_model = with_head(history_.empty() ? 0 : history_.back().head, [&] {
      return session_->finish(history_, *model_, *data_->loader);
    });
    return result;
  }
  if (options_.overwrite) session_->remove_earlier_run();
  // Every rank has read its shard of the checkpoint (resume_run, collective).
  if (session_->resuming()) session_->remove_stray_shards();
  // What a stop before the first step writes (after --overwrite's removal, which would take it).
  if (session_->resuming())
    stop_checkpoint_->commit_on_disk(start_.epoch, start_.position.step);
  else
    stop_checkpoint_->commit(start_.epoch, 0,
                             [&] { return state_after_step(start_.epoch, EpochPosition{}); });
  EpochPosition position = start_.position;
  for (int64_t epoch = start_.epoch; epoch < options_.epochs; ++epoch, position = EpochPosition{}) {
    // Trained and evaluated. A stop during the evaluation checkpoints the epoch's last step: the
    // resumed run trains no step of it and evaluates it.
    bool complete = train_epoch(epoch, position);
    EpochMetrics metrics;
    if (complete) {
      metrics = training_metrics(epoch, position, step_->last_lr());
      metrics.heads = training_heads(position);
      if (backend_->device_comm().backend() != "mpi")  // NCCL: the host time is the enqueueing
        metrics.comm_share = std::numeric_limits<double>::quiet_NaN();
      // The split of a resumed epoch covers its steps since the start.
      if (position.seconds > 0)
        metrics.upload_share = data_->input->upload_seconds() / position.seconds;
      complete = evaluate(epoch, metrics);
    }
    if (complete) {
      history_.push_back(metrics);
      log_.result(result_line(metrics));
      log_.note(summary_line(metrics));
      for (std::size_t k = 0; k < metrics.heads.size(); ++k)
        log_.note(head_line(metrics, static_cast<int>(k)));
      board_.epoch(step_->schedule().step_count(), metrics);
      if (options_.keep_best)
        with_head(metrics.head, [&] { session_->keep_best(history_, *model_, *data_->loader); });
      // Before the checkpoint of the epoch: a run resumed from it has the file of its last epoch.
      if (epoch + 1 == options_.epochs) session_->write_confusion(metrics, confusions_, labels());
      save(epoch + 1);
      session_->write_metrics(history_, labels());
    }
    const bool last = complete && epoch + 1 == options_.epochs;
    // A signal during the checkpoint: agreed here, not one step later. Rank 0's stop thread has
    // written the checkpoint of the last step completed (or writes it now, when the signal came
    // to another rank) and printed the line.
    if (!last && (complete ? stop_->agree() : stop_->agreed())) {
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
  result.final_model = with_head(final_epoch ? final_epoch->head : 0, [&] {
    return session_->export_model(*model_, session_->card(*data_->loader, final_epoch, false));
  });
  log_.note(run_summary_line(history_, seconds_since(start), result.final_model, labels()));
  return result;
}

}  // namespace

TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi) {
  Trainer trainer(options, mpi);
  return trainer.run();
}

}  // namespace pets::train
