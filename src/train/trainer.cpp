#include "pets/train/trainer.hpp"

#include <ATen/autocast_mode.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#if defined(PETS_HAVE_NCCL)
#include "pets/comm/nccl_comm.hpp"
#endif
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/adam.hpp"
#include "pets/train/checkpoint.hpp"
#include "pets/train/grad_scaler.hpp"
#include "pets/train/onecycle.hpp"
#include "pets/util/app.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"

namespace pets::train {

// metrics.jsonl lines and the run's history inside checkpoints.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EpochMetrics, epoch, accuracy, correct, evaluated, train_loss, lr,
                                   train_images_per_s, eval_images_per_s, train_seconds,
                                   eval_seconds, loader_wait_share)

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using data::SplitKind;

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) { g_stop_signal = signal; }

/// SIGUSR1 (Slurm's warning before preemption) and SIGTERM only raise a flag; the training loop
/// reads it at step boundaries. A second signal during the checkpoint changes nothing.
void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

/// The fault tests' hook: PETS_INJECT_FAULT="KIND:RANK:STEP" makes rank RANK fail at global
/// step STEP, just before the step's allreduce (so its peers wait inside a collective). KIND is
/// sigkill, abort, exit1, exit0 (exit before MPI_Finalize) or throw (a pets::Error).
/// Returns true for the fault the caller applies: "skew", this rank's reduced gradients altered
/// after the allreduce (a collective that delivered different results), which PETS_VERIFY_RANKS
/// must catch.
bool maybe_inject_fault(int rank, int64_t global_step) {
  static const char* spec = std::getenv("PETS_INJECT_FAULT");
  if (spec == nullptr) return false;
  char kind[16] = {0};
  int fault_rank = -1;
  long long fault_step = -1;
  if (std::sscanf(spec, "%15[a-z0-9]:%d:%lld", kind, &fault_rank, &fault_step) != 3) return false;
  if (fault_rank != rank || fault_step != global_step) return false;
  const std::string k = kind;
  std::fprintf(stderr, "injecting fault '%s' on rank %d at step %lld\n", kind, rank, fault_step);
  std::fflush(stderr);
  if (k == "sigkill") std::raise(SIGKILL);
  if (k == "abort") std::abort();
  if (k == "exit1") std::exit(1);
  if (k == "exit0") std::exit(0);
  if (k == "throw") PETS_ERROR("injected fault at step " + std::to_string(global_step));
  return k == "skew";
}

/// Where the run stands inside an epoch: what a mid-epoch checkpoint must carry.
struct EpochPosition {
  int64_t step = 0;
  double loss_sum = 0.0;
  int64_t images = 0;
  double seconds = 0.0;
  double wait_seconds = 0.0;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EpochPosition, step, loss_sum, images, seconds, wait_seconds)

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Autocast for the frozen backbone (bf16 on the CPU; bf16 or fp16 on CUDA); the head and the
/// loss stay in fp32.
class AutocastScope {
 public:
  AutocastScope(MixedPrecision mode, const torch::Device& device)
      : on_(mode != MixedPrecision::kNo), cuda_(device.is_cuda()) {
    if (!on_) return;
    const auto dtype = mode == MixedPrecision::kFp16 ? at::kHalf : at::kBFloat16;
    if (cuda_) {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(dtype);
    }
  }
  ~AutocastScope() {
    if (!on_) return;
    if (cuda_)
      at::autocast::set_enabled(false);
    else
      at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
  bool cuda_;
};

/// The settings a checkpoint must share with the run that resumes it.
nlohmann::json training_config(const TrainOptions& o, const std::vector<std::string>& labels) {
  return {{"epochs", o.epochs},
          {"batch_size", o.batch_size},
          {"max_lr", o.max_lr},
          {"seed", o.seed},
          {"bn_mode", to_string(o.bn_mode)},
          {"mixed_precision", to_string(o.mixed_precision)},
          {"labels", labels}};
}

torch::Tensor batch_images(data::Batch& batch, const torch::Device& device) {
  // channels-last runs oneDNN's (and cuDNN's) fastest convolutions.
  return torch::from_blob(batch.pixels.data(), {batch.n, 3, batch.h, batch.w}, torch::kFloat32)
      .to(device)
      .contiguous(torch::MemoryFormat::ChannelsLast);
}

torch::Tensor batch_labels(data::Batch& batch, const torch::Device& device) {
  return torch::from_blob(batch.labels.data(), {batch.n}, torch::kInt64).to(device);
}

/// --device: CUDA device local_rank % count when asked for or (auto) present, else the CPU.
torch::Device pick_device(DeviceChoice choice, int local_rank) {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (choice == DeviceChoice::kCpu || count == 0) return torch::kCPU;
  return {torch::kCUDA, static_cast<torch::DeviceIndex>(local_rank % count)};
}

/// Rank 0's progress: a redrawn line on a terminal, nothing in between epochs otherwise.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), tty_(enabled && ::isatty(STDERR_FILENO)) {}
  void update(int64_t epoch, int64_t step, int64_t steps, double images_per_s, double loss,
              double eta_s) {
    if (!tty_) return;
    std::fprintf(stderr, "\r[epoch %lld] step %lld/%lld  %.1f img/s  loss %.4f  ETA %.0fs   ",
                 static_cast<long long>(epoch), static_cast<long long>(step),
                 static_cast<long long>(steps), images_per_s, loss, eta_s);
    std::fflush(stderr);
  }
  void line(const std::string& text) {
    if (!enabled_) return;
    clear();
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
  }
  /// Wipes the progress line, so that the next output (stderr or stdout) starts clean.
  void clear() {
    if (!tty_) return;
    std::fprintf(stderr, "\r%-79s\r", "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool tty_;
};


/// Threads per rank: the cores of the rank's affinity mask. Ranks that were not bound (mpirun
/// --oversubscribe, or --bind-to none) all see every core; they share them instead, since
/// oversubscribed OpenMP threads run several times slower.
int default_threads(const comm::MpiComm& mpi) {
  const int cores = affinity_cpu_count();
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (mpi.local_size() > 1 && online > 0 && cores >= online)
    return std::max(1, cores / mpi.local_size());
  return cores;
}

class Trainer {
 public:
  Trainer(const TrainOptions& options, const comm::MpiComm& mpi)
      : options_(options), mpi_(mpi), comm_(mpi), progress_(mpi.rank() == 0) {}

  TrainResult run();

 private:
  void setup();
  void resume();
  /// Trains from `position` to the end of the epoch, or until a stop signal (returns false).
  bool train_epoch(int64_t epoch, EpochPosition& position);
  EpochMetrics epoch_metrics(int64_t epoch, const EpochPosition& position) const;
  void evaluate(int64_t epoch, EpochMetrics& metrics);
  void sync_batchnorm();
  /// With PETS_VERIFY_RANKS set: throws unless every rank holds the same model (collective).
  void verify_ranks_identical(int64_t epoch);
  /// Throws unless `digest` is the same on every rank (collective); `what` names it.
  void check_same_digest(uint64_t digest, const std::string& what) const;
  /// Every rank's buffers, as rows of a [world, n] float64 tensor on rank 0 (collective).
  torch::Tensor gather_rank_buffers() const;
  /// This rank's row of gather_rank_buffers() back into the model.
  void scatter_rank_buffers(const torch::Tensor& all);
  /// Rank 0 checkpoints the run at (epoch, position).
  void save(int64_t epoch, const EpochPosition& position);
  void write_metrics() const;
  /// Records the epoch; rank 0 prints the tutorial's line on stdout and a summary on stderr.
  void report_epoch(const EpochMetrics& metrics);
  std::string export_model() const;
  /// The backbone's pooled features, through `folded` (BatchNorm folded in) when it is given.
  torch::Tensor features(data::Batch& batch, const model::FoldedBackbone* folded);
  std::vector<torch::Tensor> head_params() const { return {model_->fc->weight, model_->fc->bias}; }
  std::vector<torch::Tensor> head_grads() const {
    return {model_->fc->weight.grad(), model_->fc->bias.grad()};
  }
  /// What training changes in the model: the head and every buffer (BatchNorm statistics). The
  /// frozen weights come from --pretrained (or the seeded init) again on resume.
  model::NamedTensors resumable_state() const;

  const TrainOptions& options_;
  const comm::MpiComm& mpi_;
  /// MPI: host tensors and counters (start-up broadcast, evaluation counts).
  comm::MpiCommunicator comm_;
  /// The collectives on device_ tensors (the step's allreduce, the BatchNorm sync): NCCL when
  /// the device is a GPU (with a CUDA build of LibTorch), else comm_.
  std::unique_ptr<comm::Communicator> nccl_;
  comm::Communicator* device_comm_ = &comm_;
  Progress progress_;
  std::unique_ptr<data::Loader> loader_;
  model::ResNet50d model_{nullptr};
  std::unique_ptr<Adam> adam_;
  std::unique_ptr<OneCycleSchedule> schedule_;
  torch::Device device_{torch::kCPU};
  /// fp16 only: dynamic loss scaling (bf16 has fp32's range and needs none).
  std::optional<GradScaler> scaler_;
  /// --bn-mode eval: the backbone never changes, so it runs folded, and the evaluation images
  /// (transformed deterministically) give the same features every epoch: computed once, cached.
  std::unique_ptr<model::FoldedBackbone> folded_;
  struct CachedBatch {
    torch::Tensor features, labels;
  };
  std::optional<std::vector<CachedBatch>> eval_cache_;
  /// BatchNorm folded into the convolutions wherever it runs on running statistics (evaluation,
  /// and all of --bn-mode eval); PETS_UNFOLDED keeps the plain path (no fold, no cache), to
  /// compare against.
  const bool fold_ = std::getenv("PETS_UNFOLDED") == nullptr;
  std::vector<std::string> labels_;
  int64_t first_epoch_ = 0;
  EpochPosition first_position_;
  double last_lr_ = 0.0;
  bool stop_agreed_ = false;  ///< every rank learnt of a stop signal through the step allreduce
  /// PETS_VERIFY_RANKS: the averaged head gradients are compared across ranks at every step.
  const bool verify_ranks_ = std::getenv("PETS_VERIFY_RANKS") != nullptr;
  int64_t gradient_steps_verified_ = 0;
  std::vector<EpochMetrics> history_;
};

model::NamedTensors Trainer::resumable_state() const {
  model::NamedTensors out;
  for (const auto& p : model_->fc->named_parameters()) out.emplace_back("fc." + p.key(), p.value());
  for (const auto& b : model_->named_buffers(true)) out.emplace_back(b.key(), b.value());
  return out;
}

void Trainer::setup() {
  if (const char* ntasks = std::getenv("SLURM_NTASKS"); ntasks != nullptr && mpi_.size() == 1 &&
                                                         std::atoi(ntasks) > 1 &&
                                                         std::getenv("SLURM_STEP_ID") != nullptr)
    throw UsageError("Slurm started " + std::string(ntasks) +
                     " tasks but this MPI world has 1 rank: every task is running alone. Launch "
                     "with `srun --mpi=pmix` (or mpirun inside the allocation)");
  check_devices(options_, static_cast<int>(torch::cuda::device_count()));
  // Before the first tensor: every step's activations then reuse mapped pages (pets/util/memory.hpp).
  // PETS_DEFAULT_MALLOC keeps glibc's behaviour, for comparisons.
  if (std::getenv("PETS_DEFAULT_MALLOC") == nullptr && !retain_freed_memory())
    progress_.line("notice: the allocator refused to keep freed memory; steps may run slower");
  torch::set_num_threads(options_.threads > 0 ? options_.threads : default_threads(mpi_));
  device_ = pick_device(options_.device, mpi_.local_rank());
#if defined(PETS_HAVE_NCCL) && defined(PETS_TORCH_CUDA)
  if (device_.is_cuda()) {
    nccl_ = comm::make_nccl_communicator(mpi_, device_.index());
    device_comm_ = nccl_.get();
  }
#endif
  if (options_.mixed_precision == MixedPrecision::kFp16) scaler_.emplace();
  torch::manual_seed(options_.seed);

  data::LoaderOptions lo;
  lo.path = options_.data;
  lo.rank = mpi_.rank();
  lo.world = mpi_.size();
  lo.train_batch = options_.batch_size;
  lo.eval_batch = options_.eval_batch_size;
  lo.seed = options_.seed;
  lo.workers = 1;  // one rank per core: a second decode thread would take the model's core
  lo.prefetch = 3;
  loader_ = agree_on_usage([&] { return std::make_unique<data::Loader>(lo); });
  labels_ = loader_->store().label_names();
  agree_on_usage([&] {
    if (loader_->steps_per_epoch(SplitKind::kTrain) == 0)
      throw UsageError(options_.data + ": no training images");
    if (loader_->steps_per_epoch(SplitKind::kEval) == 0)
      throw UsageError(options_.data + ": no evaluation images");
  });

  model_ = model::ResNet50d(loader_->num_classes());
  if (!options_.pretrained.empty()) {
    const auto report =
        agree_on_usage([&] { return model::load_state_dict(*model_, options_.pretrained); });
    if (!report.skipped.empty())
      progress_.line("notice: " + options_.pretrained + ": head of another class count skipped (" +
                     std::to_string(report.skipped.size()) + " tensors); fc starts fresh for " +
                     std::to_string(loader_->num_classes()) + " classes");
  } else {
    progress_.line("warning: no --pretrained weights: the frozen backbone is randomly initialised");
  }
  model_->freeze_backbone();
  model_->to_channels_last();
  comm::broadcast_module(comm_, *model_, 0);
  model_->to(device_);
  if (device_.is_cuda())
    progress_.line("device: " + device_.str() + " on rank 0 (collectives: " + device_comm_->backend() +
                   "); every rank takes its local rank modulo the device count");

  adam_ = std::make_unique<Adam>(head_params());
  OneCycleOptions so;
  so.max_lr = options_.max_lr;
  so.total_steps = options_.epochs * loader_->steps_per_epoch(SplitKind::kTrain);
  schedule_ = std::make_unique<OneCycleSchedule>(so);
  if (options_.resume) resume();
  if (options_.bn_mode == BnMode::kEval && fold_) {
    model_->eval();
    folded_ = std::make_unique<model::FoldedBackbone>(*model_);
  }
}

torch::Tensor Trainer::features(data::Batch& batch, const model::FoldedBackbone* folded) {
  torch::NoGradGuard no_grad;
  AutocastScope autocast(options_.mixed_precision, device_);
  const torch::Tensor images = batch_images(batch, device_);
  return (folded ? folded->forward_features(images) : model_->forward_features(images))
      .to(torch::kFloat32);
}

void Trainer::resume() {
  std::vector<std::string> notices;
  const auto ckpt = agree_on_usage([&] { return load_latest_checkpoint(options_.out, &notices); });
  for (const auto& n : notices) progress_.line("warning: " + n);
  if (!ckpt) {
    progress_.line("notice: --resume: no checkpoint in " + options_.out + "; starting from epoch 0");
    return;
  }
  agree_on_usage([&] {
    const auto& saved = ckpt->state.at("config");
    const auto current = training_config(options_, labels_);
    if (saved.at("labels") != current.at("labels"))
      throw UsageError(ckpt->path + ": its " + std::to_string(saved.at("labels").size()) +
                       " class labels differ from the " + std::to_string(labels_.size()) +
                       " labels of " + options_.data);
    for (auto it = current.begin(); it != current.end(); ++it)
      if (saved.at(it.key()) != it.value())
        throw UsageError(ckpt->path + ": was written with " + it.key() + " = " +
                         saved.at(it.key()).dump() + ", this run has " + it.value().dump());
    const int64_t steps = loader_->steps_per_epoch(SplitKind::kTrain);
    const int64_t saved_world = ckpt->state.at("world_size").get<int64_t>();
    const bool mid_epoch = ckpt->state.at("position").at("step").get<int64_t>() > 0;
    if (saved_world != mpi_.size() && mid_epoch)
      throw UsageError(ckpt->path + ": a mid-epoch checkpoint of " + std::to_string(saved_world) +
                       " ranks; resume it with as many (an end-of-epoch one resumes with any)");
    if (saved_world == mpi_.size() && ckpt->state.at("steps_per_epoch").get<int64_t>() != steps)
      throw UsageError(ckpt->path + ": written with " +
                       ckpt->state.at("steps_per_epoch").dump() +
                       " steps per epoch, this run has " + std::to_string(steps) +
                       " (another data set)");
  });
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, t] : ckpt->tensors) saved[name] = t;
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : resumable_state()) {
    const auto it = saved.find("model." + name);
    if (it == saved.end()) throw UsageError(ckpt->path + ": no tensor 'model." + name + "'");
    t.copy_(it->second);
  }
  if (const auto it = saved.find("rank_buffers"); it != saved.end()) {
    if (it->second.size(0) != mpi_.size())
      throw UsageError(ckpt->path + ": a mid-epoch checkpoint of " +
                       std::to_string(it->second.size(0)) + " ranks; resume it with as many");
    scatter_rank_buffers(it->second);
  }
  std::vector<torch::Tensor> m, v;
  for (std::size_t i = 0; i < head_params().size(); ++i) {
    m.push_back(saved.at("adam.exp_avg." + std::to_string(i)).to(device_));
    v.push_back(saved.at("adam.exp_avg_sq." + std::to_string(i)).to(device_));
  }
  adam_->restore(m, v, ckpt->state.at("adam_steps").get<int64_t>());
  if (const auto it = ckpt->state.find("grad_scaler"); scaler_ && it != ckpt->state.end())
    agree_on_usage([&] {
      scaler_->restore(it->at("scale").get<double>(), it->at("growth_tracker").get<int64_t>());
    });
  last_lr_ = ckpt->state.at("last_lr").get<double>();
  history_ = ckpt->state.at("history").get<std::vector<EpochMetrics>>();
  first_epoch_ = ckpt->state.at("epoch").get<int64_t>();
  // Another rank count splits an epoch into another number of steps: the schedule continues
  // from the same epoch boundary of its new length. (Adam keeps its count of updates made.)
  schedule_->set_step_count(ckpt->state.at("world_size").get<int64_t>() == mpi_.size()
                                ? ckpt->state.at("schedule_steps").get<int64_t>()
                                : first_epoch_ * loader_->steps_per_epoch(SplitKind::kTrain));
  first_position_ = ckpt->state.at("position").get<EpochPosition>();
  progress_.line("resumed from " + ckpt->path + " at epoch " + std::to_string(first_epoch_) +
                 ", step " + std::to_string(first_position_.step));
  if (const int64_t saved_world = ckpt->state.at("world_size").get<int64_t>();
      saved_world != mpi_.size())
    progress_.line("notice: the checkpoint was written by " + std::to_string(saved_world) +
                   " ranks, this run has " + std::to_string(mpi_.size()) +
                   ": the global batch and the steps per epoch change from here on");
}

bool Trainer::train_epoch(int64_t epoch, EpochPosition& position) {
  model_->train(options_.bn_mode == BnMode::kTrain);
  const int64_t steps = loader_->steps_per_epoch(SplitKind::kTrain);
  loader_->start_epoch(SplitKind::kTrain, epoch, position.step);
  const int64_t weight_numel = model_->fc->weight.numel();
  const int64_t head_numel = weight_numel + model_->fc->bias.numel();
  const int64_t first_step = position.step;
  const double seconds_before = position.seconds;
  const auto start = Clock::now();
  for (int64_t step = first_step; step < steps; ++step) {
    const auto wait_start = Clock::now();
    std::optional<data::Batch> batch = loader_->next();
    position.wait_seconds += seconds_since(wait_start);
    PETS_CHECK(batch.has_value(), "loader ended the epoch after " + std::to_string(step) + " of " +
                                      std::to_string(steps) + " steps");
    // [fc.weight grad, fc.bias grad, loss sum, images, stop requests]: one allreduce per step.
    torch::Tensor reduced =
        torch::zeros({head_numel + 3}, torch::TensorOptions(torch::kFloat64).device(device_));
    if (batch->n > 0) {
      const auto loss = torch::nn::functional::cross_entropy(
          model_->forward_head(features(*batch, folded_.get())), batch_labels(*batch, device_),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      (scaler_ ? scaler_->scale_loss(loss) : loss).backward();
      reduced.narrow(0, 0, weight_numel).copy_(model_->fc->weight.grad().flatten());
      reduced.narrow(0, weight_numel, head_numel - weight_numel).copy_(model_->fc->bias.grad());
      reduced[head_numel] = loss.item<double>();
      reduced[head_numel + 1] = static_cast<double>(batch->n);
    }
    reduced[head_numel + 2] = g_stop_signal != 0 ? 1.0 : 0.0;
    const bool skew = maybe_inject_fault(mpi_.rank(), schedule_->step_count());
    device_comm_->allreduce_sum(reduced);
    if (skew) reduced[0] += 1.0;
    // The gradient of the mean loss over the global batch: what one process holding all of it
    // computes, also when the last batch is split unevenly (or empty on some ranks).
    const double global_n = reduced[head_numel + 1].item<double>();
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor grads = (reduced.narrow(0, 0, head_numel) / global_n).to(torch::kFloat32);
      model_->fc->weight.mutable_grad() =
          grads.narrow(0, 0, weight_numel).view_as(model_->fc->weight).to(device_, false, true);
      model_->fc->bias.mutable_grad() =
          grads.narrow(0, weight_numel, head_numel - weight_numel).to(device_, false, true);
    }
    if (verify_ranks_) {
      check_same_digest(comm::tensors_digest(head_grads()),
                        "the averaged gradients at step " + std::to_string(schedule_->step_count()));
      ++gradient_steps_verified_;
    }
    position.loss_sum += reduced[head_numel].item<double>();
    position.images += static_cast<int64_t>(global_n);
    last_lr_ = schedule_->lr();
    // fp16: the summed gradients are the same on every rank, so all skip (or step) together. As
    // Accelerate, a skipped optimiser step also leaves the schedule where it is.
    const bool skip = scaler_ && !scaler_->unscale({model_->fc->weight.grad(), model_->fc->bias.grad()});
    if (!skip) {
      adam_->step(schedule_->lr(), schedule_->beta1());
      schedule_->step();
    }
    if (scaler_) scaler_->update(skip);
    adam_->zero_grad();
    position.step = step + 1;
    position.seconds = seconds_before + seconds_since(start);
    const double per_step = seconds_since(start) / static_cast<double>(step + 1 - first_step);
    progress_.update(epoch, step + 1, steps, position.images / position.seconds,
                     position.loss_sum / position.images, per_step * (steps - step - 1));
    if (reduced[head_numel + 2].item<double>() > 0.0) {
      stop_agreed_ = true;
      if (step + 1 < steps) return false;  // at the last step, finish the epoch first
    }
  }
  return true;
}

EpochMetrics Trainer::epoch_metrics(int64_t epoch, const EpochPosition& position) const {
  EpochMetrics m;
  m.epoch = epoch;
  m.lr = last_lr_;
  m.train_seconds = position.seconds;
  m.train_loss = position.images > 0 ? position.loss_sum / position.images : 0.0;
  m.train_images_per_s = position.seconds > 0 ? position.images / position.seconds : 0.0;
  m.loader_wait_share = position.seconds > 0 ? position.wait_seconds / position.seconds : 0.0;
  return m;
}

void Trainer::check_same_digest(uint64_t digest, const std::string& what) const {
  std::vector<uint64_t> all(static_cast<std::size_t>(mpi_.size()));
  PETS_MPI_CHECK(MPI_Allgather(&digest, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, mpi_.get()));
  for (std::size_t r = 1; r < all.size(); ++r)
    PETS_CHECK(all[r] == all[0], what + " on rank " + std::to_string(r) + " differ from rank 0's");
}

void Trainer::verify_ranks_identical(int64_t epoch) {
  // A digest of every parameter and buffer: the same on all ranks iff they hold the same model.
  const uint64_t digest = comm::module_digest(*model_);
  check_same_digest(digest, "epoch " + std::to_string(epoch) + ": the parameters and buffers");
  char text[64];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  progress_.line("verify: epoch " + std::to_string(epoch) + ": all " + std::to_string(mpi_.size()) +
                 " ranks hold model " + text + "; averaged gradients identical at " +
                 std::to_string(gradient_steps_verified_) + " steps so far");
}

void Trainer::sync_batchnorm() {
  // In train mode each rank's running statistics saw its own batches; evaluation and
  // checkpoints use their average, so every rank holds the same model.
  std::vector<torch::Tensor> floats, ints;
  for (const auto& b : model_->named_buffers(true))
    (b.value().is_floating_point() ? floats : ints).push_back(b.value());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& t : floats) flat.push_back(t.flatten());
  torch::Tensor packed = torch::cat(flat);
  device_comm_->allreduce_average(packed);
  int64_t offset = 0;
  for (auto& t : floats) {
    t.copy_(packed.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  std::vector<torch::Tensor> int_flat;
  for (const auto& t : ints) int_flat.push_back(t.flatten());
  torch::Tensor counts = torch::cat(int_flat);
  device_comm_->broadcast(counts, 0);
  offset = 0;
  for (auto& t : ints) {
    t.copy_(counts.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

void Trainer::evaluate(int64_t epoch, EpochMetrics& metrics) {
  if (options_.bn_mode == BnMode::kTrain && mpi_.size() > 1) sync_batchnorm();
  if (verify_ranks_) verify_ranks_identical(epoch);
  model_->eval();
  const auto start = Clock::now();
  // Evaluation uses the running statistics, so its backbone can always be folded: under
  // --bn-mode train afresh from this epoch's (synchronised) statistics, a fraction of a second.
  std::unique_ptr<model::FoldedBackbone> epoch_fold;
  const model::FoldedBackbone* backbone = folded_.get();
  if (backbone == nullptr && fold_) {
    epoch_fold = std::make_unique<model::FoldedBackbone>(*model_);
    backbone = epoch_fold.get();
  }
  int64_t counts[2] = {0, 0};  // correct, evaluated
  torch::NoGradGuard no_grad;
  const auto count = [&](const torch::Tensor& features, const torch::Tensor& labels) {
    counts[0] += model_->forward_head(features).argmax(1).eq(labels).sum().item<int64_t>();
    counts[1] += labels.size(0);
  };
  if (eval_cache_) {
    for (const CachedBatch& b : *eval_cache_) count(b.features, b.labels);
  } else {
    std::vector<CachedBatch> fresh;
    loader_->start_epoch(SplitKind::kEval, epoch);
    while (std::optional<data::Batch> batch = loader_->next()) {
      if (batch->n == 0) continue;
      // clone: on the CPU the labels would otherwise alias the batch's memory.
      CachedBatch b{features(*batch, backbone), batch_labels(*batch, device_).clone()};
      count(b.features, b.labels);
      if (folded_) fresh.push_back(std::move(b));
    }
    if (folded_) eval_cache_ = std::move(fresh);
  }
  comm_.allreduce_counters(counts, 2);
  metrics.eval_seconds = seconds_since(start);
  metrics.correct = counts[0];
  metrics.evaluated = counts[1];
  metrics.accuracy = counts[1] > 0 ? 100.0 * static_cast<double>(counts[0]) / counts[1] : 0.0;
  metrics.eval_images_per_s = counts[1] / metrics.eval_seconds;
}

torch::Tensor Trainer::gather_rank_buffers() const {
  // Every buffer as float64 (exact for float32 statistics and the int64 counters).
  std::vector<torch::Tensor> flat;
  for (const auto& b : model_->named_buffers(true)) flat.push_back(b.value().flatten().to(torch::kCPU, torch::kFloat64));
  const torch::Tensor mine = torch::cat(flat).contiguous();
  const int count = static_cast<int>(mine.numel());
  torch::Tensor all = torch::empty({mpi_.size(), count}, torch::kFloat64);
  PETS_MPI_CHECK(MPI_Gather(mine.data_ptr(), count, MPI_DOUBLE, all.data_ptr(), count, MPI_DOUBLE,
                            0, mpi_.get()));
  return all;
}

void Trainer::scatter_rank_buffers(const torch::Tensor& all) {
  PETS_CHECK(all.dim() == 2 && all.size(0) == mpi_.size(), "rank_buffers has the wrong shape");
  const torch::Tensor mine = all[mpi_.rank()];
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  for (auto& b : model_->named_buffers(true)) {
    torch::Tensor t = b.value();
    t.copy_(mine.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  PETS_CHECK(offset == mine.numel(), "rank_buffers does not match the model's buffers");
}

void Trainer::save(int64_t epoch, const EpochPosition& position) {
  // Mid-epoch, train-mode BatchNorm statistics differ per rank (they are averaged only before
  // evaluation): keep every rank's, so that a resumed run continues each rank exactly.
  const bool per_rank = position.step > 0 && mpi_.size() > 1;
  torch::Tensor rank_buffers;
  if (per_rank) rank_buffers = gather_rank_buffers();
  if (mpi_.rank() != 0) return;
  model::NamedTensors tensors;
  for (const auto& [name, t] : resumable_state()) tensors.emplace_back("model." + name, t.cpu());
  if (per_rank) tensors.emplace_back("rank_buffers", rank_buffers);
  for (std::size_t i = 0; i < adam_->exp_avg().size(); ++i) {
    tensors.emplace_back("adam.exp_avg." + std::to_string(i), adam_->exp_avg()[i].cpu());
    tensors.emplace_back("adam.exp_avg_sq." + std::to_string(i), adam_->exp_avg_sq()[i].cpu());
  }
  nlohmann::json state = {{"config", training_config(options_, labels_)},
                                {"adam_steps", adam_->steps()},
                                {"schedule_steps", schedule_->step_count()},
                                {"steps_per_epoch", loader_->steps_per_epoch(SplitKind::kTrain)},
                                {"epoch", epoch},
                                {"position", position},
                                {"last_lr", last_lr_},
                                {"world_size", mpi_.size()},
                                {"history", history_}};
  if (scaler_)
    state["grad_scaler"] = {{"scale", scaler_->scale()}, {"growth_tracker", scaler_->growth_tracker()}};
  save_checkpoint(options_.out, schedule_->step_count(), state, tensors);
}

void Trainer::write_metrics() const {
  if (mpi_.rank() != 0) return;
  std::string text;
  for (const auto& m : history_) text += nlohmann::json(m).dump() + "\n";
  write_file_atomically((fs::path(options_.out) / "metrics.jsonl").string(), text);
}

std::string Trainer::export_model() const {
  if (mpi_.rank() != 0) return "";
  const std::string path = (fs::path(options_.out) / "model.safetensors").string();
  model::NamedTensors tensors;
  for (const auto& [name, t] : model::state_dict(*model_))
    tensors.emplace_back(name, t.cpu().contiguous());
  model::write_tensors(path, tensors, {{"format", "pt"}, {"arch", "resnet50d"},
                                       {"num_classes", std::to_string(labels_.size())}});
  return path;
}

TrainResult Trainer::run() {
  // Before the (slow) setup, so that an early preemption signal still ends in a checkpoint.
  install_stop_handlers();
  setup();
  if (mpi_.rank() == 0) {
    std::error_code ec;
    fs::create_directories(options_.out, ec);
    if (ec) throw UsageError("--out " + options_.out + ": cannot create: " + ec.message());
  }
  TrainResult result;
  EpochPosition position = first_position_;
  for (int64_t epoch = first_epoch_; epoch < options_.epochs; ++epoch, position = EpochPosition{}) {
    const bool finished = train_epoch(epoch, position);
    if (finished) {
      EpochMetrics metrics = epoch_metrics(epoch, position);
      evaluate(epoch, metrics);
      report_epoch(metrics);
      save(epoch + 1, EpochPosition{});
      write_metrics();
    } else {
      save(epoch, position);
    }
    if (stop_agreed_ && (!finished || epoch + 1 < options_.epochs)) {
      const std::string by = g_stop_signal != 0 ? "signal " + std::to_string(g_stop_signal)
                                                : std::string("a signal to another rank");
      progress_.line("stopped by " + by + " at epoch " + std::to_string(finished ? epoch + 1 : epoch) +
                     ", step " + std::to_string(finished ? 0 : position.step) +
                     "; checkpoint written, continue with --resume");
      result.preempted = true;
      result.epochs = history_;
      return result;
    }
  }
  result.epochs = history_;
  result.final_model = export_model();
  if (!result.final_model.empty()) progress_.line("final model: " + result.final_model);
  return result;
}

void Trainer::report_epoch(const EpochMetrics& metrics) {
  history_.push_back(metrics);
  if (mpi_.rank() == 0) {
    progress_.clear();
    std::printf("epoch %lld: %.2f\n", static_cast<long long>(metrics.epoch), metrics.accuracy);
    std::fflush(stdout);
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "epoch %lld: loss %.4f, train %.1f img/s (%.1fs, loader wait %.0f%%), eval %.1f img/s",
                static_cast<long long>(metrics.epoch), metrics.train_loss,
                metrics.train_images_per_s, metrics.train_seconds,
                100.0 * metrics.loader_wait_share, metrics.eval_images_per_s);
  progress_.line(line);
}

}  // namespace

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

TrainResult run_training(const TrainOptions& options, const comm::MpiComm& mpi) {
  Trainer trainer(options, mpi);
  return trainer.run();
}

}  // namespace pets::train
