#include "pets/train/trainer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#if defined(PETS_HAVE_NCCL)
#include "pets/comm/nccl_comm.hpp"
#endif
#include "pets/data/labels.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/adam.hpp"
#include "pets/train/batch_tensors.hpp"
#include "pets/train/batchnorm_sync.hpp"
#include "pets/train/checkpoint.hpp"
#include "pets/train/debug_switches.hpp"
#include "pets/train/device_choice.hpp"
#include "pets/train/evaluation.hpp"
#include "pets/train/exported_model.hpp"
#include "pets/train/input_pipeline.hpp"
#include "pets/train/run_folder.hpp"
#include "pets/train/stop_signal.hpp"
#include "pets/train/tensorboard.hpp"
#include "pets/train/train_step.hpp"
#include "pets/train/training_state.hpp"
#include "pets/train/verify_ranks.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/memory.hpp"
#include "pets/util/number_text.hpp"
#include "pets/util/threads.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using data::SplitKind;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Runs `task` on rank 0 alone (collective): what it returns, or the UsageError it throws, on
/// every rank. For input only rank 0 judges (--out), so the error is not "on 1 of N ranks".
template <typename Task>
std::string on_rank_0(const comm::MpiComm& mpi, Task&& task) {
  std::string result, error;
  if (mpi.rank() == 0) {
    try {
      result = task();
    } catch (const UsageError& e) {
      error = e.what();
    }
  }
  error = comm::broadcast_string(error, mpi.get());
  if (!error.empty()) throw UsageError(error);
  return comm::broadcast_string(result, mpi.get());
}

/// The run on one rank: start-up and resume, then epochs of training steps and evaluations
/// with checkpoints; the parts (step, evaluation, state, BatchNorm sync) live in their own files.
class Trainer {
 public:
  Trainer(const TrainOptions& options, const comm::MpiComm& mpi)
      : options_(options),
        mpi_(mpi),
        comm_(mpi),
        switches_(DebugSwitches::from_environment()),
        log_(mpi.rank() == 0, options.progress,
             std::chrono::duration<double>(options.progress_interval)),
        board_(options.tensorboard, mpi.rank() == 0,
               std::chrono::duration<double>(options.progress_interval), log_) {}

  TrainResult run();

 private:
  /// Rank 0 locks --out and decides, from what it holds, whether the run resumes (collective).
  void open_run_folder();
  void setup();
  void resume();
  /// Restores what `state` (read from `path`) holds into the model, the step and the loop.
  void restore(const TrainingState& state, const std::string& path);
  /// Trains from `position` to the end of the epoch, or until a stop signal (returns false).
  bool train_epoch(int64_t epoch, EpochPosition& position);
  /// False when a stop signal, agreed by the ranks before a batch, ended it (metrics unset).
  bool evaluate(int64_t epoch, EpochMetrics& metrics);
  /// With PETS_VERIFY_RANKS set: throws unless every rank holds the same model (collective).
  void verify_ranks_identical(int64_t epoch);
  /// Rank 0 checkpoints the run at (epoch, position) (collective: mid-epoch it gathers every
  /// rank's BatchNorm statistics).
  void save(int64_t epoch, const EpochPosition& position);
  void write_metrics() const;
  /// Records the epoch; rank 0 prints the tutorial's line on stdout and a summary on stderr.
  void report_epoch(const EpochMetrics& metrics);
  /// Rank 0 writes the model as `name` in --out (best.safetensors: from `epoch`); its path.
  std::string export_model(const char* name = kModelFileName,
                           const EpochMetrics* epoch = nullptr) const;
  /// What training changes in the model: the head and every buffer (BatchNorm statistics).
  model::NamedTensors resumable_state() const;
  /// This run as resume compares it with a checkpoint's.
  RunShape shape() const;
  /// The run resumed at its end: says so and prints its final line (rank 0).
  TrainResult report_finished();

  const TrainOptions& options_;
  const comm::MpiComm& mpi_;
  /// MPI: host tensors and counters (start-up broadcast, evaluation counts, rank checks).
  comm::MpiCommunicator comm_;
  /// The collectives on device_ tensors (the step's allreduce, the BatchNorm sync): NCCL when
  /// the device is a GPU (with a CUDA build of LibTorch), else comm_.
  std::unique_ptr<comm::Communicator> nccl_;
  comm::Communicator* device_comm_ = &comm_;
  const DebugSwitches switches_;
  RankLog log_;
  TensorBoardLog board_;  ///< --tensorboard, at the schedule's step count (the global step)
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<InputPipeline> input_;  ///< --input: where the loader's images are made
  model::ResNet50d model_{nullptr};
  torch::Device device_{torch::kCPU};
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<Evaluator> evaluator_;
  /// --bn-mode eval: the backbone never changes, so it runs folded (BatchNorm folded into the
  /// convolutions), and the evaluator keeps the evaluation features. PETS_UNFOLDED keeps the
  /// plain path (no fold, no cache), to compare against.
  std::unique_ptr<model::FoldedBackbone> folded_;
  std::vector<std::string> labels_;
  std::optional<RunFolder> folder_;  ///< rank 0: --out, locked for the whole run
  bool resuming_ = false;
  int64_t first_epoch_ = 0;
  EpochPosition first_position_;
  double last_lr_ = 0.0;
  bool stop_agreed_ = false;  ///< every rank learnt of a stop signal through the step allreduce
  std::vector<EpochMetrics> history_;
};

model::NamedTensors Trainer::resumable_state() const {
  model::NamedTensors out;
  for (const auto& p : model_->fc->named_parameters()) out.emplace_back("fc." + p.key(), p.value());
  for (const auto& b : model_->named_buffers(true)) out.emplace_back(b.key(), b.value());
  return out;
}

RunShape Trainer::shape() const {
  return {RunConfig::of(options_, labels_),
          mpi_.size(),
          loader_->steps_per_epoch(SplitKind::kTrain),
          {loader_->store().store_id(), fs::absolute(options_.data).lexically_normal().string()}};
}

void Trainer::open_run_folder() {
  // Slurm's one-rank guard ran before this (run_mpi_program): N one-rank worlds never get here.
  // Every rank takes stop signals before --out appears (what launchers' scripts wait for).
  PETS_MPI_CHECK(MPI_Barrier(mpi_.get()));
  resuming_ = on_rank_0(mpi_, [&] {
                folder_.emplace(options_.out, options_.resume, options_.overwrite);
                for (const auto& n : folder_->notices()) log_.note(n);
                return std::string(folder_->resume() ? "resume" : "new");
              }) == "resume";
}

void Trainer::setup() {
  check_devices(options_, static_cast<int>(torch::cuda::device_count()));
  // Before the first tensor: every step's activations then reuse mapped pages
  // (pets/util/memory.hpp).
  if (!switches_.default_malloc && !retain_freed_memory())
    log_.note("notice: the allocator refused to keep freed memory; steps may run slower");
  const ThreadChoice threads = choose_threads(options_.threads, mpi_.local_size());
  if (!threads.warning.empty()) log_.note("warning: " + threads.warning);
  torch::set_num_threads(threads.threads);
  device_ = pick_device(options_.device, mpi_.local_rank());
#if defined(PETS_HAVE_NCCL) && defined(PETS_TORCH_CUDA)
  if (device_.is_cuda()) {
    nccl_ = comm::make_nccl_communicator(mpi_, device_.index());
    device_comm_ = nccl_.get();
  }
#endif
  torch::manual_seed(options_.seed);

  data::LoaderOptions lo;
  lo.path = options_.data;
  lo.rank = mpi_.rank();
  lo.world = mpi_.size();
  lo.train_batch = options_.batch_size;
  lo.eval_batch = options_.eval_batch_size;
  lo.seed = options_.seed;
  lo.workers = loader_workers(device_.is_cuda(), threads.threads);
  lo.prefetch = 3;
  const bool device_input = use_device_input(options_.input, device_);
  configure_loader(lo, device_input, device_);
  loader_ = agree_on_usage([&] { return std::make_unique<data::Loader>(lo); });
  input_ = std::make_unique<InputPipeline>(*loader_, device_, device_input);
  if (device_input) log_.note("input: crops resized and normalised on " + device_.str());
  labels_ = loader_->store().label_names();
  agree_on_usage([&] {
    if (loader_->steps_per_epoch(SplitKind::kTrain) == 0)
      throw UsageError(options_.data + ": no training images");
    if (loader_->steps_per_epoch(SplitKind::kEval) == 0)
      throw UsageError(options_.data + ": no evaluation images");
  });
  for (const std::string& w :
       data::class_coverage_warnings(labels_, loader_->store().split(SplitKind::kTrain).labels,
                                     loader_->store().split(SplitKind::kEval).labels))
    log_.note("warning: " + options_.data + ": " + w);

  model_ = model::ResNet50d(loader_->num_classes());
  if (!options_.pretrained.empty()) {
    log_.note("notice: " + model::load_report_text(agree_on_usage([&] {
                return model::load_state_dict(*model_, options_.pretrained);
              })));
  } else {
    log_.note(
        "warning: no --pretrained weights: the frozen backbone is randomly initialised; "
        "data/fetch_weights.sh DIR fetches timm's, then --pretrained "
        "DIR/resnet50d.ra2_in1k.safetensors");
  }
  model_->freeze_backbone();
  model_->to_channels_last();
  comm::broadcast_module(comm_, *model_, 0);
  model_->to(device_);
  if (device_.is_cuda())
    log_.note("device: " + device_.str() + " on rank 0 (collectives: " + device_comm_->backend() +
              "); every rank takes its local rank modulo the device count");

  StepSettings settings;
  settings.precision = options_.mixed_precision;
  // fp16 only: dynamic loss scaling (bf16 has fp32's range and needs none).
  if (options_.mixed_precision == MixedPrecision::kFp16) settings.loss_scaling.emplace();
  settings.fault = switches_.inject_fault;
  if (switches_.verify_ranks) settings.verify = &comm_;
  OneCycleOptions so;
  so.max_lr = options_.max_lr;
  so.total_steps = options_.epochs * loader_->steps_per_epoch(SplitKind::kTrain);
  step_ = std::make_unique<TrainStep>(*model_, *device_comm_, so, settings);
  const bool fold = !switches_.unfolded;
  evaluator_ = std::make_unique<Evaluator>(comm_, options_.bn_mode == BnMode::kEval && fold);
  if (resuming_) resume();
  if (options_.bn_mode == BnMode::kEval && fold) {
    model_->eval();
    folded_ = std::make_unique<model::FoldedBackbone>(*model_);
  }
}

void Trainer::resume() {
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
  const TrainingState state = agree_on_usage([&] {
    TrainingState s = TrainingState::from_checkpoint(*ckpt);
    check_resume_compatible(ckpt->path, s.shape(), s.mid_epoch(), shape(), options_.data);
    return s;
  });
  restore(state, ckpt->path);
}

void Trainer::restore(const TrainingState& state, const std::string& path) {
  std::map<std::string, torch::Tensor> saved(state.model.begin(), state.model.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : resumable_state()) {
    const auto it = saved.find(name);
    if (it == saved.end()) throw UsageError(path + ": no tensor 'model." + name + "'");
    t.copy_(it->second);
  }
  if (state.rank_buffers.defined()) {
    if (state.rank_buffers.size(0) != mpi_.size())
      throw UsageError(path + ": a mid-epoch checkpoint of " +
                       std::to_string(state.rank_buffers.size(0)) +
                       " ranks; resume it with as many");
    scatter_rank_buffers(*model_, state.rank_buffers, mpi_.rank());
  }
  Adam& adam = step_->adam();
  if (state.adam_exp_avg.size() != adam.exp_avg().size())
    throw UsageError(path + ": Adam moments of " + std::to_string(state.adam_exp_avg.size()) +
                     " tensors, the head has " + std::to_string(adam.exp_avg().size()));
  std::vector<torch::Tensor> m, v;
  for (std::size_t i = 0; i < state.adam_exp_avg.size(); ++i) {
    m.push_back(state.adam_exp_avg[i].to(device_));
    v.push_back(state.adam_exp_avg_sq[i].to(device_));
  }
  adam.restore(m, v, state.adam_steps);
  if (GradScaler* scaler = step_->scaler(); scaler && state.grad_scaler)
    agree_on_usage(
        [&] { scaler->restore(state.grad_scaler->scale, state.grad_scaler->growth_tracker); });
  last_lr_ = state.last_lr;
  // Another rank count restarts the steps on another scale: nothing to mark as redone.
  board_.resumed(state.world_size == mpi_.size() ? std::optional(state.schedule_steps)
                                                 : std::nullopt);
  history_ = state.history;
  first_epoch_ = state.epoch;
  // Another rank count splits an epoch into another number of steps: the schedule continues
  // from the same epoch boundary of its new length. (Adam keeps its count of updates made.)
  step_->schedule().set_step_count(
      state.world_size == mpi_.size() ? state.schedule_steps
                                      : first_epoch_ * loader_->steps_per_epoch(SplitKind::kTrain));
  first_position_ = state.position;
  log_.note("resumed from " + path + " at epoch " + std::to_string(first_epoch_) + ", step " +
            std::to_string(first_position_.step));
  if (state.world_size != mpi_.size())
    log_.note("notice: the checkpoint was written by " + std::to_string(state.world_size) +
              " ranks, this run has " + std::to_string(mpi_.size()) +
              ": the global batch and the steps per epoch change from here on");
}

bool Trainer::train_epoch(int64_t epoch, EpochPosition& position) {
  model_->train(options_.bn_mode == BnMode::kTrain);
  const int64_t steps = loader_->steps_per_epoch(SplitKind::kTrain);
  input_->start_epoch(SplitKind::kTrain, epoch, position.step);
  const int64_t first_step = position.step;
  const double seconds_before = position.seconds;
  const auto start = Clock::now();
  const auto stop_requested = [] { return stop_signal() != 0; };
  for (int64_t step = first_step; step < steps; ++step) {
    const auto wait_start = Clock::now();
    std::optional<data::Batch> batch = input_->next();
    position.wait_seconds += seconds_since(wait_start);
    PETS_CHECK(batch.has_value(), "loader ended the epoch after " + std::to_string(step) + " of " +
                                      std::to_string(steps) + " steps");
    const StepResult result =
        step_->run(*batch, stop_requested, folded_.get(), input_->images(*batch));
    position.loss_sum += result.loss_sum;
    position.images += result.images;
    last_lr_ = result.lr;
    position.step = step + 1;
    position.seconds = seconds_before + seconds_since(start);
    const double per_step = seconds_since(start) / static_cast<double>(step + 1 - first_step);
    log_.progress(progress_text(epoch, step + 1, steps, position.images / position.seconds,
                                position.loss_sum / position.images,
                                per_step * (steps - step - 1)));
    board_.progress(step_->schedule().step_count(), position.loss_sum / position.images,
                    position.images / position.seconds, result.lr);
    if (result.stop) {
      stop_agreed_ = true;
      if (step + 1 < steps) return false;  // at the last step, the evaluation stops at once
    }
  }
  return true;
}

void Trainer::verify_ranks_identical(int64_t epoch) {
  // A digest of every parameter and buffer: the same on all ranks iff they hold the same model.
  const uint64_t digest = comm::module_digest(*model_);
  check_same_on_all_ranks(comm_, digest,
                          "epoch " + std::to_string(epoch) + ": the parameters and buffers");
  char text[64];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  log_.note("verify: epoch " + std::to_string(epoch) + ": all " + std::to_string(mpi_.size()) +
            " ranks hold model " + text + "; averaged gradients identical at " +
            std::to_string(step_->gradient_steps_verified()) + " steps so far");
}

bool Trainer::evaluate(int64_t epoch, EpochMetrics& metrics) {
  // In train mode each rank's running statistics saw its own batches; evaluation and
  // checkpoints use their average, so every rank holds the same model.
  if (options_.bn_mode == BnMode::kTrain && mpi_.size() > 1) sync_batchnorm(*model_, *device_comm_);
  if (switches_.verify_ranks) verify_ranks_identical(epoch);
  model_->eval();
  const auto start = Clock::now();
  // Evaluation uses the running statistics, so its backbone can always be folded: under
  // --bn-mode train afresh from this epoch's (synchronised) statistics, a fraction of a second.
  std::unique_ptr<model::FoldedBackbone> epoch_fold;
  const model::FoldedBackbone* backbone = folded_.get();
  if (backbone == nullptr && !switches_.unfolded) {
    epoch_fold = std::make_unique<model::FoldedBackbone>(*model_);
    backbone = epoch_fold.get();
  }
  const BatchSource source{[&] { input_->start_epoch(SplitKind::kEval, epoch); },
                           [&] { return input_->next(); }};
  // A long evaluation would outlast a launcher's kill timeout: the ranks agree on a stop signal
  // before every batch (one counter through MPI; every rank reads the same number of batches).
  int64_t reads = 0;
  const auto interrupt = [&] {
    if (reads++ == 1 && switches_.pause_eval_seconds > 0 && mpi_.rank() == 0)
      pause_for_test("in the evaluation", switches_.pause_eval_seconds);
    if (!stop_agreed_) stop_agreed_ = comm_.sum_counter(stop_signal() != 0 ? 1 : 0) > 0;
    return stop_agreed_;
  };
  const std::optional<EvalCounts> counts = evaluator_->run(
      source,
      [&](data::Batch& batch) {
        return backbone_features(*model_, backbone, input_->images(batch),
                                 options_.mixed_precision);
      },
      [&](const torch::Tensor& features) { return model_->forward_head(features); }, interrupt);
  if (!counts) return false;
  set_evaluation(metrics, counts->correct, counts->evaluated, seconds_since(start));
  return true;
}

void Trainer::save(int64_t epoch, const EpochPosition& position) {
  // Mid-epoch, train-mode BatchNorm statistics differ per rank (they are averaged only before
  // evaluation): keep every rank's, so that a resumed run continues each rank exactly.
  const bool per_rank = position.step > 0 && mpi_.size() > 1;
  torch::Tensor rank_buffers;
  if (per_rank) rank_buffers = gather_rank_buffers(*model_, mpi_);
  if (mpi_.rank() != 0) return;
  TrainingState state;
  state.config = RunConfig::of(options_, labels_);
  state.world_size = mpi_.size();
  state.steps_per_epoch = loader_->steps_per_epoch(SplitKind::kTrain);
  state.epoch = epoch;
  state.position = position;
  state.adam_steps = step_->adam().steps();
  state.schedule_steps = step_->schedule().step_count();
  state.last_lr = last_lr_;
  state.history = history_;
  if (const GradScaler* scaler = step_->scaler())
    state.grad_scaler = GradScalerState{scaler->scale(), scaler->growth_tracker()};
  state.model = resumable_state();
  state.rank_buffers = rank_buffers;
  state.adam_exp_avg = step_->adam().exp_avg();
  state.adam_exp_avg_sq = step_->adam().exp_avg_sq();
  state.store = shape().store;
  state.save(options_.out);
}

void Trainer::write_metrics() const {
  if (mpi_.rank() != 0) return;
  write_file_atomically((fs::path(options_.out) / "metrics.jsonl").string(),
                        metrics_jsonl(history_));
}

std::string Trainer::export_model(const char* name, const EpochMetrics* epoch) const {
  if (mpi_.rank() != 0) return "";
  const std::string path = (fs::path(options_.out) / name).string();
  write_exported_model(path, *model_, model_card(*loader_, epoch));
  return path;
}

TrainResult Trainer::report_finished() {
  TrainResult result;
  result.epochs = history_;
  log_.note("--resume: the run in " + options_.out + " has finished its " +
            count_text(options_.epochs, "epoch") + "; nothing to train");
  if (!history_.empty()) log_.result(result_line(history_.back()));
  if (mpi_.rank() != 0) return result;
  // A run that stopped between its last checkpoint and its last files gets them now.
  if (!fs::exists(fs::path(options_.out) / "metrics.jsonl")) write_metrics();
  const fs::path model = fs::path(options_.out) / "model.safetensors";
  result.final_model = fs::exists(model) ? model.string() : export_model();
  log_.note("final model: " + result.final_model);
  return result;
}

void Trainer::report_epoch(const EpochMetrics& metrics) {
  history_.push_back(metrics);
  log_.result(result_line(metrics));
  log_.note(summary_line(metrics));
  board_.epoch(step_->schedule().step_count(), metrics);
  if (!options_.keep_best || mpi_.rank() != 0) return;
  // The best so far is known from the history, a resumed run's earlier epochs included.
  const EpochMetrics& best = *best_epoch(history_);
  const std::string kept = (fs::path(options_.out) / kBestModelFileName).string();
  if (&best == &history_.back())
    log_.note("[epoch " + std::to_string(metrics.epoch) + "] best so far: model kept as " +
              export_model(kBestModelFileName, &metrics));
  else if (!fs::exists(kept))
    log_.note("warning: --keep-best: " + kept + " is missing, so the best epoch so far (" +
              std::to_string(best.epoch) + ") is not kept; it will hold the next better one");
}

TrainResult Trainer::run() {
  // Before the (slow) setup, so that an early preemption signal still ends in a checkpoint.
  install_stop_handlers(mpi_.rank() == 0);
  apply_process_switches(switches_);
  const auto start = Clock::now();
  open_run_folder();
  if (mpi_.rank() == 0) {
    // What a writer killed mid-write (SIGKILL, a lost node) left beside its target; the lock on
    // --out (open_run_folder) keeps a live run's files out of reach.
    const StaleTempReport stale = remove_stale_temp_files(options_.out);
    for (const auto& path : stale.removed) log_.note("removed " + path + " (its writer is gone)");
    for (const auto& what : stale.kept) log_.note("notice: kept " + what);
  }
  setup();
  if (resuming_ && first_epoch_ == options_.epochs) return report_finished();
  if (options_.overwrite) {
    const std::string removed =
        on_rank_0(mpi_, [&] { return std::to_string(folder_->remove_earlier_run()); });
    if (removed != "0")
      log_.note("--overwrite: removed the earlier run's " + removed + " files from " +
                options_.out);
  }
  TrainResult result;
  EpochPosition position = first_position_;
  for (int64_t epoch = first_epoch_; epoch < options_.epochs; ++epoch, position = EpochPosition{}) {
    // Trained and evaluated. A stop during the evaluation checkpoints the epoch's last step: the
    // resumed run trains no step of it and evaluates it.
    bool complete = train_epoch(epoch, position);
    EpochMetrics metrics;
    if (complete) {
      metrics = training_metrics(epoch, position, last_lr_);
      complete = evaluate(epoch, metrics);
    }
    if (complete) {
      report_epoch(metrics);
      save(epoch + 1, EpochPosition{});
      write_metrics();
    } else {
      save(epoch, position);
    }
    // A signal during the checkpoint: agreed here, not one step later.
    if (complete && !stop_agreed_ && epoch + 1 < options_.epochs)
      stop_agreed_ = comm_.sum_counter(stop_signal() != 0 ? 1 : 0) > 0;
    if (stop_agreed_ && (!complete || epoch + 1 < options_.epochs)) {
      log_.note(stop_line(stop_signal(), complete ? epoch + 1 : epoch, complete ? 0 : position.step,
                          options_.out));
      result.preempted = true;
      result.epochs = history_;
      return result;
    }
  }
  result.epochs = history_;
  result.final_model = export_model();
  log_.note(run_summary_line(history_, seconds_since(start), result.final_model));
  return result;
}

}  // namespace

TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi) {
  Trainer trainer(options, mpi);
  return trainer.run();
}

}  // namespace pets::train
