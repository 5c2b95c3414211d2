/// \file
/// pets_bench: the benchmark harness of issue 6. One run measures, on this machine and with the
/// threads it is given:
///   1. roofline: GFLOP/s of a large channels-last 3x3 convolution, fp32 and bf16;
///   2. FLOPs per image of ResNet-50d, counted from the convolutions and linear layers the
///      model's own forward executes (a dispatcher-level hook, see count_flops);
///   3. model-only throughput of pets_train's training step (pets::train::TrainStep on the
///      backend make_backend makes, in an MPI world of this process alone), fp32 and bf16, as
///      images/s and as a fraction of the roofline;
///   4. loader-only throughput (HDF5 read + RandomResizedCrop + resize + normalise), one rank:
///      images/s, per CPU-second (one core), with 1, 2 and 4 threads, the HDF5 lock's share, and
///      the GPU path's host side (crops staged for --input device), and the same with the store
///      held on the device (--resident: the loader draws boxes alone) in the same run;
///   5./6. end to end: pets_train under mpiexec (-np 2; --bn-mode eval; -np 1 --threads 2, or
///      the runs --e2e-runs names), read from the metrics.jsonl it writes.
/// --device cuda runs sections 1 and 3 on the GPU (cuDNN convolution, fp32/bf16/fp16; the fp16
/// step with loss scaling) and passes --e2e-args (e.g. "--device cuda") to every pets_train run;
/// bench/device_check.sh runs it so on a GPU node.
/// It writes one JSON report (--report FILE and stdout) and a short table (stderr).
/// `pets_bench --check FILE` validates a report: every section present, every number positive.
///
/// Benchmarks are not timed tests; CI runs this in --smoke mode only (bench/run_bench.sh).

#include <ATen/record_function.h>
#include <sys/utsname.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "loader_measure.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/input/resident_images.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"
#include "pets/util/number_text.hpp"
#include "pets/util/threads.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  bool smoke = false;
  std::string device = "cpu";  // cpu | cuda: where sections 1 and 3 run
  int threads = 0;             // 0: the cores in this process's affinity mask
  // roofline convolution: [roof_batch, roof_channels, roof_size, roof_size] -> same, 3x3, pad 1
  int roof_batch = 8;
  int roof_channels = 256;
  int roof_size = 56;
  double min_seconds = 3.0;  // per timed measurement
  int min_iters = 3;
  // model-only step
  int batch = 64;
  int image_size = 224;
  int classes = 37;
  std::string bn_mode = "train";
  int warmup = 1;
  // loader
  int loader_workers = 1;  // what pets_train gives each rank
  int loader_world = 2;
  int loader_epochs = 2;
  std::vector<int> loader_sweep = {1, 2, 4};  // worker counts of the scaling figures
  // end to end
  bool e2e = true;
  bool loader_only = false;  // section 4 alone (no --check: the other sections are missing)
  bool e2e_bf16 = false;
  bool e2e_only = false;  // the data and sections 5/6 alone
  std::string e2e_runs;   // comma-separated run names (e2e_run_kinds); empty: the default three
  std::string e2e_args;   // added to every pets_train run, e.g. "--device cuda"
  int preprocess_np = 2;  // ranks of pets_preprocess for a synthesised set
  std::string data;       // an existing store; empty: synthesise one
  int per_class = 20;
  int synth_classes = 37;
  int epochs = 5;
  int train_batch = 64;
  int eval_batch = 128;
  std::string work = "bench-work";
  std::string train_exe, preprocess_exe, synth_exe;
  std::string mpiexec = "mpirun";
  std::string np_flag = "-np";
  std::string mpi_preflags;                     // for every launch
  std::string np1_preflags = "--bind-to none";  // -np 1 --threads 2 must not be bound to one core
  std::string report = "bench-report.json";
};

[[noreturn]] void usage(const std::string& message) {
  throw pets::UsageError("pets_bench: " + message);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// Single-quotes for /bin/sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

std::string first_line_of(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[512];
    if (std::fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

/// Runs fn repeatedly (after `warmup` calls) until both min_iters calls and min_seconds have
/// passed; returns the per-call seconds of the timed calls.
template <typename Fn>
std::vector<double> time_calls(Fn&& fn, int warmup, int min_iters, double min_seconds) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < min_iters || seconds_since(start) < min_seconds) {
    const auto t = Clock::now();
    fn();
    times.push_back(seconds_since(t));
  }
  return times;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// ---- 1. roofline ---------------------------------------------------------------------------

bool on_cuda(const Config& c) { return c.device == "cuda"; }

/// The precisions measured: fp16 only on CUDA (pets_train refuses it elsewhere).
std::vector<std::string> precisions(const Config& c) {
  if (on_cuda(c)) return {"fp32", "bf16", "fp16"};
  return {"fp32", "bf16"};
}

torch::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return torch::kBFloat16;
  if (precision == "fp16") return torch::kHalf;
  return torch::kFloat32;
}

json roofline(const Config& c) {
  torch::NoGradGuard no_grad;
  const int64_t n = c.roof_batch, ch = c.roof_channels, s = c.roof_size;
  // On CUDA one timed call is `reps` launches and a synchronisation: the launches queue up
  // and the GPU runs them back to back, as it runs a model's convolutions.
  const int reps = on_cuda(c) ? 20 : 1;
  const double flop = 2.0 * ch * ch * 9 * s * s * n;  // pad 1, stride 1: Hout = Hin
  json out = {{"op", on_cuda(c) ? "conv2d 3x3 stride 1 pad 1, channels-last, cuDNN"
                                : "conv2d 3x3 stride 1 pad 1, channels-last"},
              {"device", c.device},
              {"input", {n, ch, s, s}},
              {"weight", {ch, ch, 3, 3}},
              {"launches_per_call", reps},
              {"gflop_per_call", flop * reps / 1e9}};
  if (on_cuda(c)) out["fp32_tf32_allowed"] = at::globalContext().allowTF32CuDNN();
  const torch::Device device(on_cuda(c) ? torch::kCUDA : torch::kCPU);
  for (const auto& precision : precisions(c)) {
    const auto dtype = dtype_of(precision);
    // Random data (zeros can run faster than real data on a GPU).
    auto x =
        torch::randn({n, ch, s, s}).contiguous(torch::MemoryFormat::ChannelsLast).to(device, dtype);
    auto w = (torch::randn({ch, ch, 3, 3}) * 0.05)
                 .contiguous(torch::MemoryFormat::ChannelsLast)
                 .to(device, dtype);
    auto call = [&] {
      for (int i = 0; i < reps; ++i) (void)torch::conv2d(x, w, {}, 1, 1);
      if (on_cuda(c)) torch::cuda::synchronize();
    };
    const auto times = time_calls(call, 2, c.min_iters, c.min_seconds);
    const double best = *std::min_element(times.begin(), times.end());
    // The best call is the ceiling (other processes on a shared machine only slow calls down).
    out[precision] = {{"gflops", flop * reps / best / 1e9},
                      {"gflops_mean", flop * reps / mean(times) / 1e9},
                      {"calls", times.size()}};
  }
  return out;
}

// ---- 2. FLOPs per image --------------------------------------------------------------------

/// Counted by a RecordFunction callback, i.e. a hook on every operator the forward dispatches:
/// aten::convolution (weight [Cout, Cin/groups, kh, kw], output [N, Cout, Hout, Wout]) gives
/// 2 * weight.numel() * Hout * Wout per image; aten::linear (weight [out, in]) gives 2*in*out
/// per row. Nested calls (aten::_convolution, mkldnn kernels, addmm) are not counted again.
struct FlopCounter {
  double conv_flop = 0;
  double linear_flop = 0;
  int64_t conv_calls = 0;
  int64_t linear_calls = 0;
  int64_t rows = 0;  // batch of the last counted call
};
thread_local FlopCounter* g_counter = nullptr;

/// Counted ops in progress on this thread: aten::linear may dispatch aten::addmm (and
/// aten::convolution its own kernels); only the outermost counted op is counted.
thread_local int g_depth = 0;

struct OpContext : at::ObserverContext {
  bool linear = false;
  int64_t conv_weight_numel = 0;  // Cout * Cin/groups * kh * kw
  double linear_flop = 0;
  int64_t rows = 0;
};

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (g_counter == nullptr) return nullptr;
  const std::string name = fn.name();
  const bool conv = name == "aten::convolution";
  // Linear's forward is aten::linear, or aten::addmm for 2-D input with bias (torch::nn).
  const bool linear = name == "aten::linear" || name == "aten::addmm" || name == "aten::mm" ||
                      name == "aten::matmul";
  if (!conv && !linear) return nullptr;
  if (g_depth > 0) return nullptr;
  const auto inputs = fn.inputs();
  auto ctx = std::make_unique<OpContext>();
  ctx->linear = linear;
  if (conv || name == "aten::linear") {
    if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return nullptr;
    const auto weight = inputs[1].toTensor();
    if (conv) {
      ctx->conv_weight_numel = weight.numel();
    } else {  // weight [out, in], input [..., in]
      ctx->rows = inputs[0].toTensor().numel() / weight.size(1);
      ctx->linear_flop = 2.0 * weight.numel() * ctx->rows;
    }
  } else {  // addmm(bias, a, b) / mm(a, b) / matmul(a, b): a [rows, in], b [in, out]
    const size_t first = name == "aten::addmm" ? 1 : 0;
    if (inputs.size() < first + 2 || !inputs[first].isTensor() || !inputs[first + 1].isTensor())
      return nullptr;
    const auto a = inputs[first].toTensor(), b = inputs[first + 1].toTensor();
    if (a.dim() != 2 || b.dim() != 2) return nullptr;
    ctx->rows = a.size(0);
    ctx->linear_flop = 2.0 * a.size(0) * a.size(1) * b.size(1);
  }
  ++g_depth;
  return ctx;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* raw) {
  auto* ctx = static_cast<OpContext*>(raw);
  if (ctx == nullptr) return;
  --g_depth;
  if (g_counter == nullptr) return;
  if (ctx->linear) {
    g_counter->linear_flop += ctx->linear_flop;
    g_counter->linear_calls += 1;
    g_counter->rows = ctx->rows;
    return;
  }
  if (fn.outputs().empty() || !fn.outputs()[0].isTensor()) return;
  const auto out = fn.outputs()[0].toTensor().sizes();  // [N, Cout, Hout, Wout]
  g_counter->conv_flop += 2.0 * ctx->conv_weight_numel * out[0] * out[2] * out[3];
  g_counter->conv_calls += 1;
  g_counter->rows = out[0];
}

json count_flops(pets::model::ResNet50d& model, const Config& c) {
  int64_t conv_modules = 0, linear_modules = 0, conv_weight_numel = 0;
  for (const auto& m : model->modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
      ++conv_modules;
      conv_weight_numel += conv->weight.numel();
    }
    if (m->as<torch::nn::LinearImpl>() != nullptr) ++linear_modules;
  }
  FlopCounter counter;
  {
    torch::NoGradGuard no_grad;
    const int64_t n = 2;
    auto x = torch::randn({n, 3, c.image_size, c.image_size})
                 .contiguous(torch::MemoryFormat::ChannelsLast);
    auto handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&on_op_start, &on_op_end).needsInputs(true).needsOutputs(true));
    g_counter = &counter;
    const bool was_training = model->is_training();
    model->eval();  // the count does not depend on the mode; eval leaves BN statistics alone
    (void)model->forward(x);
    model->set_backbone_training(was_training);
    g_counter = nullptr;
    at::removeCallback(handle);
    counter.conv_flop /= static_cast<double>(n);
    counter.linear_flop /= static_cast<double>(n);
  }
  PETS_CHECK(counter.conv_calls == conv_modules,
             "FLOP hook saw " + std::to_string(counter.conv_calls) +
                 " convolutions, the model has " + std::to_string(conv_modules) +
                 " Conv2d modules");
  PETS_CHECK(counter.linear_calls == linear_modules, "FLOP hook missed the linear layer");
  const double forward = counter.conv_flop + counter.linear_flop;
  // A frozen-backbone step adds only fc's weight and bias gradients (the input needs none).
  const double fc_backward = counter.linear_flop;
  return {{"image_size", c.image_size},
          {"method",
           "RecordFunction hook on aten::convolution and aten::linear/addmm during the model's "
           "forward"},
          {"conv_modules", conv_modules},
          {"conv_calls", counter.conv_calls},
          {"linear_calls", counter.linear_calls},
          {"conv_weights", conv_weight_numel},
          {"conv_gflop_per_image", counter.conv_flop / 1e9},
          {"linear_gflop_per_image", counter.linear_flop / 1e9},
          {"forward_gflop_per_image", forward / 1e9},
          {"train_step_gflop_per_image", (forward + fc_backward) / 1e9},
          {"note", "BN, ReLU, pooling and the loss are not counted (memory-bound)"}};
}

// ---- 3. model-only step --------------------------------------------------------------------

pets::train::MixedPrecision mixed_precision_of(const std::string& precision) {
  if (precision == "bf16") return pets::train::MixedPrecision::kBf16;
  if (precision == "fp16") return pets::train::MixedPrecision::kFp16;
  return pets::train::MixedPrecision::kNo;
}

/// pets_train's step itself: pets::train::TrainStep on the backend make_backend makes for
/// `--device` and `--mixed-precision` (its device, its communicator, its autocast and fp16's
/// loss scaling), one rank of `mpi`, on a batch already on the device. Everything of a step but
/// the loader: the backbone's forward, the head and the loss, backward, the allreduce, Adam.
json model_step(pets::model::ResNet50d& model, const Config& c, double step_gflop, const json& roof,
                const pets::comm::MpiComm& mpi) {
  pets::train::TrainOptions options;
  options.device = on_cuda(c) ? pets::train::DeviceChoice::kCuda : pets::train::DeviceChoice::kCpu;
  const c10::Device device = pets::train::pick_device(options.device, mpi.local_rank());
  model->freeze_backbone();
  model->to(device);
  model->to_channels_last();
  model->set_backbone_training(c.bn_mode == "train");
  // --bn-mode eval: the folded backbone, as pets_train runs it.
  std::optional<pets::model::FoldedBackbone> folded;
  if (c.bn_mode == "eval") folded.emplace(*model);
  // NHWC as the loader delivers it, seen as a channels-last NCHW tensor (the trainer's
  // batch_images): the model takes it as it is, no conversion.
  const auto pixels =
      torch::randn({c.batch, c.image_size, c.image_size, 3}).to(device).permute({0, 3, 1, 2});
  PETS_CHECK(pixels.is_contiguous(torch::MemoryFormat::ChannelsLast), "model step: not NHWC");
  pets::data::Batch batch;
  batch.n = c.batch;
  batch.h = batch.w = c.image_size;
  const auto labels = torch::randint(0, c.classes, {c.batch}, torch::kInt64);
  batch.labels.assign(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + c.batch);
  json out = {{"step",
               "pets::train::TrainStep on make_backend's device, communicator and "
               "precision, one rank"},
              {"device", c.device},
              {"batch", c.batch},
              {"image_size", c.image_size},
              {"bn_mode", c.bn_mode},
              {"folded_batchnorm", folded.has_value()},
              {"threads", torch::get_num_threads()}};
  for (const std::string& precision : precisions(c)) {
    options.mixed_precision = mixed_precision_of(precision);
    const std::unique_ptr<pets::train::Backend> backend = pets::train::make_backend(options, mpi);
    PETS_CHECK(backend->device() == device, "model step: the backend chose another device");
    pets::train::OneCycleOptions schedule;
    schedule.total_steps = int64_t{1} << 40;  // never reached: the steps are timed, not counted
    pets::train::TrainStep train_step(*model, backend->device_comm(), schedule,
                                      backend->step_settings());
    int64_t skipped = 0;
    auto step = [&] {
      // The step's read of its totals waits for the device: its time includes all of its work.
      const pets::train::StepResult result = train_step.run(
          batch, [] { return false; }, folded ? &*folded : nullptr, pixels);
      PETS_CHECK(std::isfinite(result.loss_sum), "model step: non-finite loss");
      skipped += result.skipped ? 1 : 0;
    };
    const auto times = time_calls(step, c.warmup, c.min_iters, c.min_seconds);
    const double per_step = mean(times);
    const double ips = c.batch / per_step;
    const double roof_gflops = roof.at(precision).at("gflops").get<double>();
    out[precision] = {
        {"images_per_s", ips},
        {"seconds_per_step", per_step},
        {"best_images_per_s", c.batch / *std::min_element(times.begin(), times.end())},
        {"steps", times.size()},
        {"achieved_gflops", ips * step_gflop},
        {"roofline_images_per_s", roof_gflops / step_gflop},
        {"roofline_fraction", ips * step_gflop / roof_gflops}};
    // How often one step makes the host wait for the GPU (each wait idles it while the host
    // queues the next work): 1 in fp32 and bf16, 2 in fp16, as test_step_waits.cpp holds it.
    if (const pets::train::CudaParts* cuda = pets::train::cuda_parts(); cuda && device.is_cuda())
      out[precision]["device_waits_per_step"] = cuda->device_waits(step);
    if (const pets::train::GradScaler* scaler = train_step.scaler()) {
      out[precision]["loss_scale"] = scaler->scale();
      out[precision]["skipped_steps"] = skipped;
    }
  }
  // What each step adds on several ranks under --bn-mode train: this rank's BatchNorm statistics
  // packed into one float64 row for the step's allreduce (BatchNormSync::rank_row: one copy per
  // kind of buffer), against the packing a checkpoint's gather uses (rank_buffer_row: one cast
  // per buffer). Microseconds per call, the device's work included.
  {
    options.mixed_precision = pets::train::MixedPrecision::kNo;
    const std::unique_ptr<pets::train::Backend> backend = pets::train::make_backend(options, mpi);
    const pets::train::BatchNormSync batchnorm(*model, mpi, backend->device_comm(), true);
    const auto per_call_us = [&](const std::function<at::Tensor()>& pack) {
      const auto call = [&] {
        const at::Tensor row = pack();
        if (device.is_cuda()) torch::cuda::synchronize();
        PETS_CHECK(row.numel() > 0, "model step: no BatchNorm statistics");
      };
      return 1e6 * mean(time_calls(call, c.warmup, c.min_iters, std::min(c.min_seconds, 1.0)));
    };
    out["rank_state_us"] = {
        {"per_kind", per_call_us([&] { return batchnorm.rank_row(); })},
        {"per_buffer", per_call_us([&] { return pets::train::rank_buffer_row(*model); })}};
  }
  return out;
}

// ---- 4. loader -----------------------------------------------------------------------------

json loader_bench(const Config& c, const std::string& store) {
  // What pets_train sets before its loader (a no-op when section 3 set it already).
  PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
  pets::data::LoaderOptions lo;
  lo.path = store;
  lo.rank = 0;
  lo.world = c.loader_world;
  lo.batch_size = c.smoke ? 2 : c.train_batch;
  lo.image_size = c.image_size;
  lo.workers = c.loader_workers;
  lo.prefetch = 3;
  // As pets_train runs it, which makes its loader before the model: the loader's background
  // check of the chunks ends during that start-up, so here before the clocks start (each
  // measurement reports the check's own time: check_seconds, check_cpu_seconds).
  // The worker sweeps digest no bytes (digest_bytes): on a machine of few cores the measuring
  // thread's reading of every byte would take the cores the workers scale onto. Their images,
  // order, boxes and labels are still digested.
  const auto measure = [&c](const pets::data::LoaderOptions& options, bool digest_bytes = true) {
    pets::bench::LoaderRun run;
    run.epochs = c.loader_epochs;
    run.wait_for_check = true;
    run.digest_bytes = digest_bytes;
    return pets::bench::measure_loader(options, run);
  };
  // The CPU path (float pixels), --loader-workers threads.
  json out = measure(lo);
  out["what"] = "HDF5 read + RandomResizedCrop + resize + normalise (train split)";
  out["rank"] = 0;
  out["world"] = c.loader_world;
  out["batch"] = lo.batch_size;
  out["image_size"] = c.image_size;
  out["epochs"] = c.loader_epochs;
  // Scaling with threads (--loader-sweep). Wall-clock figures need as many idle cores; the CPU
  // clock's images_per_cpu_s and the lock's share do not.
  json sweep = json::array();
  for (const int workers : c.loader_sweep) {
    lo.workers = workers;
    sweep.push_back(measure(lo, /*digest_bytes=*/false));
  }
  out["workers_sweep"] = sweep;
  // The GPU path's host side: the loader only reads each crop box into a staging buffer
  // (page-locked when CUDA is available), as pets_train --input device sets it up.
  const c10::Device device =
      torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  lo.workers = c.loader_workers;
  pets::train::configure_loader(lo, true, /*pinned=*/device.is_cuda());
  json staging = measure(lo);
  staging["what"] = "read of each RandomResizedCrop box into a staging buffer (uint8 crops)";
  staging["pinned"] = device.is_cuda();
  // Its scaling with threads, in this run (--loader-sweep: the workers a GPU's rank can be
  // given).
  json staging_sweep = json::array();
  for (const int workers : c.loader_sweep) {
    lo.workers = workers;
    staging_sweep.push_back(measure(lo, /*digest_bytes=*/false));
  }
  staging["workers_sweep"] = staging_sweep;
  // When the sweep has 1 and 2 workers: the wall-clock ratio of 2 workers to 1 over all their
  // epochs (the chunks are checked before the clocks start, so no epoch is the one that checks
  // them), in rounds of one measurement of each, alternating, so that a burst of other work on
  // the machine moves one round's ratio and not the figure: the median of the rounds.
  const auto swept = [&c](int workers) {
    return std::find(c.loader_sweep.begin(), c.loader_sweep.end(), workers) != c.loader_sweep.end();
  };
  if (swept(1) && swept(2)) {
    constexpr int kRounds = 5;
    std::vector<double> ratios;
    for (int round = 0; round < kRounds; ++round) {
      lo.workers = 1;
      const double one = measure(lo, /*digest_bytes=*/false)["images_per_s"].get<double>();
      lo.workers = 2;
      const double two = measure(lo, /*digest_bytes=*/false)["images_per_s"].get<double>();
      ratios.push_back(two / one);
    }
    staging["two_workers_speedups"] = ratios;
    std::sort(ratios.begin(), ratios.end());
    staging["two_workers_speedup"] = ratios[kRounds / 2];
  }
  out["staging"] = staging;
  // The GPU path with the store held on the device (--resident): the images are read once into
  // the device's memory (timed here: `load`), then the loader only draws each image's box. The
  // loader's background check is off: the load has read and checked every chunk already.
  {
    const double cpu0 = pets::bench::process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const pets::data::Store store(lo.path);
    const pets::train::ResidentImages held(store, device, c.loader_workers);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double load_cpu = pets::bench::process_cpu_seconds() - cpu0;
    lo.workers = c.loader_workers;
    lo.output = pets::data::LoaderOutput::kBoxes;
    lo.verify_ahead = false;
    json resident = measure(lo);
    resident["what"] = "each RandomResizedCrop box alone, the images held on the device";
    resident["load"] = {{"device", device.str()},
                        {"bytes", held.size_bytes()},
                        {"seconds", load_s},
                        {"cpu_seconds", load_cpu},
                        {"gb_per_s", static_cast<double>(held.size_bytes()) / 1e9 / load_s}};
    // The host's CPU per image of the two device paths, measured back to back here: over the
    // epochs after the first when there are several (the staging path's first epoch also
    // faults in its first staging buffers), else the one epoch; the loader's threads alone (not
    // the measuring thread).
    const auto loader_us = [](const json& m) {
      return (m["steady"].is_null() ? m["first_epoch"] : m["steady"])["loader_cpu_us_per_image"]
          .get<double>();
    };
    resident["loader_cpu_us_per_image_vs_staging"] = {{"resident", loader_us(resident)},
                                                      {"staging", loader_us(staging)}};
    out["resident"] = resident;
  }
  // CPU cores one GPU needs at a given step rate: rate / images_per_cpu_s, for the published
  // A100/V100 mixed-precision ResNet-50 training rate of about 2,500 images/s.
  const double gpu_rate = 2500.0;
  out["cores_for_2500_img_s"] = {
      {"cpu_path", gpu_rate / out["images_per_cpu_s"].get<double>()},
      {"device_path_staging", gpu_rate / staging["images_per_cpu_s"].get<double>()},
      {"device_path_resident", gpu_rate / out["resident"]["images_per_cpu_s"].get<double>()}};
  return out;
}

// ---- 5./6. end to end ----------------------------------------------------------------------

double run_command(const std::string& command, const std::string& log) {
  std::cerr << "pets_bench: " << command << "\n";
  const auto start = Clock::now();
  const int rc = std::system((command + " > " + quote(log) + " 2>&1").c_str());
  const double secs = seconds_since(start);
  if (rc != 0) {
    std::ifstream in(log);
    std::stringstream tail;
    tail << in.rdbuf();
    std::string text = tail.str();
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    PETS_ERROR("command failed (status " + std::to_string(rc) + "): " + command + "\n" + text);
  }
  return secs;
}

std::string launcher(const Config& c, int np, const std::string& extra) {
  std::string cmd = quote(c.mpiexec) + " " + c.np_flag + " " + std::to_string(np);
  if (!c.mpi_preflags.empty()) cmd += " " + c.mpi_preflags;
  if (!extra.empty()) cmd += " " + extra;
  return cmd;
}

json prepare_data(const Config& c, std::string& store) {
  if (!c.data.empty()) {
    store = c.data;
    return {{"store", store}, {"synthesised", false}};
  }
  const fs::path work = fs::absolute(c.work);
  const fs::path images = work / "images";
  store = (work / "pets.h5").string();
  fs::remove_all(images);
  fs::remove(store);
  const double synth_s =
      run_command(quote(c.synth_exe) + " --out " + quote(images.string()) + " --per-class " +
                      std::to_string(c.per_class) + " --classes " +
                      std::to_string(c.synth_classes) + " --seed 1",
                  (work / "synth.log").string());
  const double prep_s =
      run_command(launcher(c, c.preprocess_np, "") + " " + quote(c.preprocess_exe) + " --images " +
                      quote(images.string()) + " --out " + quote(store),
                  (work / "preprocess.log").string());
  return {{"store", store},
          {"synthesised", true},
          {"images", c.per_class * c.synth_classes},
          {"classes", c.synth_classes},
          {"synth_seconds", synth_s},
          {"preprocess_np", c.preprocess_np},
          {"preprocess_seconds", prep_s}};
}

json e2e_run(const Config& c, const std::string& store, const std::string& name, int np,
             const std::string& extra_launch, const std::string& extra_args,
             const std::string& env) {
  const fs::path work = fs::absolute(c.work);
  const fs::path out = work / ("run_" + name);
  fs::remove_all(out);
  // The switch in the launcher's environment, and exported to the ranks (Open MPI's -x).
  const std::string env_name = env.substr(0, env.find('='));
  const std::string cmd =
      (env.empty() ? "" : "env " + quote(env) + " ") +
      launcher(c, np, extra_launch + (env.empty() ? "" : " -x " + env_name)) + " " +
      quote(c.train_exe) + " --data " + quote(store) + " --epochs " + std::to_string(c.epochs) +
      " --batch-size " + std::to_string(c.train_batch) + " --eval-batch-size " +
      std::to_string(c.eval_batch) + " --out " + quote(out.string()) +
      (extra_args.empty() ? "" : " " + extra_args) + (c.e2e_args.empty() ? "" : " " + c.e2e_args);
  const double wall = run_command(cmd, (work / ("run_" + name + ".log")).string());
  std::ifstream in(out / "metrics.jsonl");
  PETS_CHECK(in.good(), "pets_train wrote no " + (out / "metrics.jsonl").string());
  json epochs = json::array();
  double train_img = 0, train_s = 0, eval_img = 0, eval_s = 0, wait_s = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json e = json::parse(line);
    const double ts = e.at("train_seconds"), es = e.at("eval_seconds");
    train_img += e.at("train_images_per_s").get<double>() * ts;
    eval_img += e.at("eval_images_per_s").get<double>() * es;
    train_s += ts;
    eval_s += es;
    wait_s += e.at("loader_wait_share").get<double>() * ts;
    epochs.push_back(e);
  }
  PETS_CHECK(
      !epochs.empty() && train_s > 0 && eval_s > 0,
      "pets_train's metrics.jsonl has no complete epoch: " + (out / "metrics.jsonl").string());
  return {{"command", cmd},
          {"np", np},
          {"wall_seconds", wall},
          {"epochs", epochs.size()},
          {"train_images_per_s", train_img / train_s},
          {"eval_images_per_s", eval_img / eval_s},
          {"train_seconds", train_s},
          {"eval_seconds", eval_s},
          // Start-up (its warm-up included), checkpoints and the end: the wall time outside the
          // epochs' training and evaluation.
          {"outside_epochs_seconds", wall - train_s - eval_s},
          {"loader_wait_share", wait_s / train_s},
          {"final_accuracy", epochs.back().at("accuracy")},
          {"per_epoch", epochs}};
}

/// The pets_train runs --e2e-runs can name: ranks, launcher flags, pets_train flags, and a
/// switch of the environment (NAME=VALUE, passed to the ranks; docs/testing.md).
struct E2eKind {
  int np;
  bool np1_preflags;
  std::string args;
  std::string env = "";
};
const std::map<std::string, E2eKind>& e2e_run_kinds() {
  static const std::map<std::string, E2eKind> kinds = {
      {"np2", {2, false, ""}},
      {"np2_bn_eval", {2, false, "--bn-mode eval"}},
      {"np1_threads2", {1, true, "--threads 2"}},
      {"np2_bf16", {2, false, "--mixed-precision bf16"}},
      {"np1", {1, true, ""}},
      {"np1_bf16", {1, true, "--mixed-precision bf16"}},
      {"np1_fp16", {1, true, "--mixed-precision fp16"}},
      {"np1_bf16_bn_eval", {1, true, "--mixed-precision bf16 --bn-mode eval"}},
      {"np1_bf16_loader8", {1, true, "--mixed-precision bf16 --loader-threads 8"}},
      {"np1_bf16_loader15", {1, true, "--mixed-precision bf16 --loader-threads 15"}},
      {"np1_bf16_deterministic", {1, true, "--mixed-precision bf16 --deterministic"}},
      // LibTorch's BatchNorm, ReLU and add instead of the fused kernel, to compare with.
      {"np1_bf16_native_bn", {1, true, "--mixed-precision bf16", "PETS_NATIVE_BATCHNORM=1"}},
      {"np1_fp16_native_bn", {1, true, "--mixed-precision fp16", "PETS_NATIVE_BATCHNORM=1"}},
      // No warm-up forward before the first epoch (its set-up then falls in the first epoch).
      {"np1_bf16_no_warm_up", {1, true, "--mixed-precision bf16", "PETS_NO_WARM_UP=1"}},
      // LibTorch's convolution, add and ReLU instead of cuDNN's fused convolution.
      {"np1_bf16_bn_eval_native_conv",
       {1, true, "--mixed-precision bf16 --bn-mode eval", "PETS_NATIVE_CONV=1"}}};
  return kinds;
}

/// The runs of sections 5/6 without --e2e-runs (and np2_bf16 with --e2e-bf16).
const std::vector<std::string> kDefaultE2eRuns = {"np2", "np2_bn_eval", "np1_threads2"};

/// Names joined by `separator`, for --help.
std::string joined(const std::vector<std::string>& names, const std::string& separator) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : separator) + name;
  return out;
}

/// --e2e-runs's help: every name of e2e_run_kinds() and the default runs.
std::string e2e_runs_help() {
  std::vector<std::string> names;
  for (const auto& kind : e2e_run_kinds()) names.push_back(kind.first);
  return "pets_train runs, comma-separated, of " + joined(names, " ") +
         " (empty: " + joined(kDefaultE2eRuns, ", ") + ")";
}

/// The runs of sections 5/6: --e2e-runs, else kDefaultE2eRuns.
std::vector<std::string> e2e_run_names(const Config& c) {
  std::vector<std::string> names;
  if (c.e2e_runs.empty()) {
    names = kDefaultE2eRuns;
    if (c.e2e_bf16) names.push_back("np2_bf16");
    return names;
  }
  std::stringstream list(c.e2e_runs);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  return names;
}

// ---- report --------------------------------------------------------------------------------

template <typename... Args>
void row(const char* fmt, Args... args) {
  char line[256];
  std::snprintf(line, sizeof line, fmt, args...);
  std::cerr << line << "\n";
}

/// Sections 1-4 (absent with --e2e-only).
void print_measurements(const json& r) {
  const auto& roof = r.at("roofline");
  const auto& fl = r.at("flops");
  const auto& ms = r.at("model_step");
  row("%-34s %12s %12s", "", "fp32", "bf16");
  row("%-34s %12.1f %12.1f", "roofline conv GFLOP/s", roof["fp32"]["gflops"].get<double>(),
      roof["bf16"]["gflops"].get<double>());
  if (roof.contains("fp16"))
    row("%-34s %12.1f (fp16), step %.1f images/s, %.1f%% of it", "roofline conv GFLOP/s",
        roof["fp16"]["gflops"].get<double>(), ms["fp16"]["images_per_s"].get<double>(),
        100 * ms["fp16"]["roofline_fraction"].get<double>());
  row("%-34s %12.3f", "GFLOP/image (forward, counted)",
      fl["forward_gflop_per_image"].get<double>());
  row("%-34s %12.2f %12.2f", "model step images/s", ms["fp32"]["images_per_s"].get<double>(),
      ms["bf16"]["images_per_s"].get<double>());
  row("%-34s %11.1f%% %11.1f%%", "model step / roofline",
      100 * ms["fp32"]["roofline_fraction"].get<double>(),
      100 * ms["bf16"]["roofline_fraction"].get<double>());
  if (r.contains("model_step_default_malloc")) {
    const auto& dm = r.at("model_step_default_malloc");
    row("%-34s %12.2f %12.2f", "  same, glibc's default malloc",
        dm["fp32"]["images_per_s"].get<double>(), dm["bf16"]["images_per_s"].get<double>());
  }
  const auto& ld = r["loader"];
  row("%-34s %12.1f", "loader images/s (one rank)", ld["images_per_s"].get<double>());
  row("%-34s %12.1f", "  per CPU-second (one core)", ld["images_per_cpu_s"].get<double>());
  for (const auto& w : ld["workers_sweep"])
    row("%-34s %12.1f   per CPU-s %8.1f, lock %4.1f %%",
        ("  " + std::to_string(w["workers"].get<int>()) + " workers, images/s").c_str(),
        w["images_per_s"].get<double>(), w["images_per_cpu_s"].get<double>(),
        100 * w["lock_held_share"].get<double>());
  const auto& st = ld["staging"];
  row("%-34s %12.1f   per CPU-s %8.1f", "GPU path staging images/s",
      st["images_per_s"].get<double>(), st["images_per_cpu_s"].get<double>());
  const auto& st_later = st["steady"].is_null() ? st["first_epoch"] : st["steady"];
  row("%-34s %12.1f   after it %8.1f", "  loader CPU us/image, first epoch",
      st["first_epoch"]["loader_cpu_us_per_image"].get<double>(),
      st_later["loader_cpu_us_per_image"].get<double>());
  row("%-34s %12.1f   CPU ms %10.1f", "  chunk check before it, ms",
      1e3 * st["check_seconds"].get<double>(), 1e3 * st["check_cpu_seconds"].get<double>());
  for (const auto& w : st["workers_sweep"])
    row("%-34s %12.1f   per CPU-s %8.1f",
        ("  " + std::to_string(w["workers"].get<int>()) + " workers, images/s").c_str(),
        w["images_per_s"].get<double>(), w["images_per_cpu_s"].get<double>());
  if (st.contains("two_workers_speedup"))
    row("%-34s %12.2f", "  2 workers / 1, images/s", st["two_workers_speedup"].get<double>());
  if (ld.contains("resident")) {
    const auto& rs = ld["resident"];
    row("%-34s %12.1f   per CPU-s %8.1f", "GPU path resident images/s",
        rs["images_per_s"].get<double>(), rs["images_per_cpu_s"].get<double>());
    row("%-34s %12.1f   staging %9.1f", "  loader CPU us/image",
        rs["loader_cpu_us_per_image_vs_staging"]["resident"].get<double>(),
        rs["loader_cpu_us_per_image_vs_staging"]["staging"].get<double>());
    row("%-34s %12.2f   GB/s %12.2f", "  load of the store, s", rs["load"]["seconds"].get<double>(),
        rs["load"]["gb_per_s"].get<double>());
  }
  row("%-34s %12.2f %12.2f", "cores for 2500 img/s (cpu, device)",
      ld["cores_for_2500_img_s"]["cpu_path"].get<double>(),
      ld["cores_for_2500_img_s"]["device_path_staging"].get<double>());
}

void print_table(const json& r) {
  if (r.contains("roofline")) print_measurements(r);
  if (r.contains("end_to_end")) {
    row("%-22s %9s %9s %9s %8s %7s", "end to end", "train/s", "eval/s", "wall s", "wait %",
        "acc %");
    for (const auto& [name, run] : r["end_to_end"]["runs"].items())
      row("%-22s %9.2f %9.2f %9.1f %8.2f %7.2f", name.c_str(),
          run["train_images_per_s"].get<double>(), run["eval_images_per_s"].get<double>(),
          run["wall_seconds"].get<double>(), 100 * run["loader_wait_share"].get<double>(),
          run["final_accuracy"].get<double>());
  }
}

/// Every section present, every measured number finite and positive, the FLOP hook complete.
int check_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "check: cannot read " << path << "\n";
    return 1;
  }
  json r;
  try {
    r = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "check: " << path << " is not JSON: " << e.what() << "\n";
    return 1;
  }
  std::vector<std::string> failures;
  auto positive = [&](const json& j, const std::string& where) {
    const json::json_pointer p(where);
    if (!j.contains(p) || !j.at(p).is_number()) {
      failures.push_back(where + ": missing");
      return;
    }
    const double v = j.at(p).get<double>();
    if (!std::isfinite(v) || v <= 0)
      failures.push_back(where + ": not positive (" + std::to_string(v) + ")");
  };
  for (const char* p : {"/threads",
                        "/roofline/fp32/gflops",
                        "/roofline/bf16/gflops",
                        "/flops/conv_gflop_per_image",
                        "/flops/linear_gflop_per_image",
                        "/flops/forward_gflop_per_image",
                        "/flops/train_step_gflop_per_image",
                        "/flops/conv_modules",
                        "/model_step/fp32/images_per_s",
                        "/model_step/bf16/images_per_s",
                        "/model_step/fp32/roofline_fraction",
                        "/model_step/bf16/roofline_fraction",
                        "/loader/images_per_s",
                        "/loader/images",
                        "/loader/images_per_cpu_s",
                        "/loader/workers_sweep/0/images_per_cpu_s",
                        "/loader/workers_sweep/0/images_per_s",
                        "/loader/staging/images_per_cpu_s",
                        "/loader/resident/images_per_cpu_s",
                        "/loader/resident/load/gb_per_s",
                        "/loader/cores_for_2500_img_s/cpu_path",
                        "/loader/cores_for_2500_img_s/device_path_staging"})
    positive(r, p);
  // The allocator lever is the CPU's; fp16 is measured on CUDA only.
  const bool cuda = r.value("device", "cpu") == "cuda";
  for (const char* p : {"/model_step_default_malloc/fp32/images_per_s",
                        "/model_step_default_malloc/bf16/images_per_s"})
    if (!cuda) positive(r, p);
  for (const char* p : {"/roofline/fp16/gflops", "/model_step/fp16/images_per_s",
                        "/model_step/fp16/roofline_fraction"})
    if (cuda) positive(r, p);
  if (r.contains("/flops/conv_calls"_json_pointer) &&
      r["flops"]["conv_calls"] != r["flops"]["conv_modules"])
    failures.push_back("/flops: conv_calls != conv_modules");
  std::vector<std::string> runs = {"np2", "np2_bn_eval", "np1_threads2"};
  if (r.contains("/end_to_end/run_names"_json_pointer))
    runs = r["end_to_end"]["run_names"].get<std::vector<std::string>>();
  for (const auto& name : runs) {
    const std::string base = "/end_to_end/runs/" + name;
    for (const char* f : {"/wall_seconds", "/train_images_per_s", "/eval_images_per_s",
                          "/train_seconds", "/eval_seconds", "/epochs"})
      positive(r, base + f);
    const json::json_pointer w(base + "/loader_wait_share");
    if (!r.contains(w) || !r.at(w).is_number() || r.at(w).get<double>() < 0 ||
        r.at(w).get<double>() > 1)
      failures.push_back(base + "/loader_wait_share: missing or outside [0, 1]");
  }
  for (const auto& f : failures) std::cerr << "check: " << f << "\n";
  if (!failures.empty()) return 1;
  std::cerr << "check: " << path << " complete\n";
  return 0;
}

/// The options, in --help order; their defaults are `c`'s values (--smoke's sizes with --smoke).
po::options_description options_of(Config& c, std::string& loader_sweep, std::string& check) {
  po::options_description desc(
      "pets_bench [options]          run the benchmark, JSON to --report and stdout, table to "
      "stderr\n"
      "pets_bench --check FILE       validate a report (every section, positive numbers)\n"
      "Options");
  const auto count = [](int& target) { return po::value<int>(&target)->default_value(target); };
  // An empty default is not shown ("(=)").
  const auto text = [](std::string& target) {
    po::typed_value<std::string>* value = po::value<std::string>(&target);
    return target.empty() ? value : value->default_value(target);
  };
  desc.add_options()("help,h", "show this help")(
      "check", po::value<std::string>(&check)->value_name("FILE"),
      "validate the report FILE (every section present, every number positive); no other "
      "option")("smoke", po::bool_switch(&c.smoke),
                "tiny sizes for CI (batch 2, image 64, 1 epoch, 12 images); options given "
                "override them")(
      "threads", count(c.threads),
      "torch threads for sections 1-3 (0: the cores in the affinity mask)")(
      "batch", count(c.batch), "model-only step: images per step")(
      "image-size", count(c.image_size), "model-only step: image side")(
      "bn-mode", text(c.bn_mode), "model-only step: train | eval (the folded backbone)")(
      "roof-batch", count(c.roof_batch), "roofline convolution: batch")(
      "roof-channels", count(c.roof_channels), "roofline convolution: channels")(
      "roof-size", count(c.roof_size), "roofline convolution: image side")(
      "min-seconds", po::value<double>(&c.min_seconds)->default_value(c.min_seconds),
      "least seconds of each measurement")("min-iters", count(c.min_iters),
                                           "least calls of each measurement")(
      "loader-workers", count(c.loader_workers), "loader threads (as pets_train gives a rank)")(
      "loader-world", count(c.loader_world), "ranks the loader's split is shared by")(
      "loader-epochs", count(c.loader_epochs), "loader epochs per measurement")(
      "loader-sweep", text(loader_sweep), "worker counts of the loader's scaling figures")(
      "no-e2e", po::bool_switch()->notifier([&c](bool set) { c.e2e = !set; }),
      "skip the pets_train runs")("e2e-bf16", po::bool_switch(&c.e2e_bf16),
                                  "add a bf16 run (np2_bf16) to the default ones")(
      "loader-only", po::bool_switch(&c.loader_only), "section 4 alone (a report --check refuses)")(
      "e2e-only", po::bool_switch(&c.e2e_only), "the data and the pets_train runs alone")(
      "device", text(c.device), "cpu | cuda: where sections 1 and 3 run (cuda adds fp16)")(
      "e2e-runs", text(c.e2e_runs), e2e_runs_help().c_str())(
      "e2e-args", text(c.e2e_args), "added to every pets_train run, e.g. '--device cuda'")(
      "preprocess-np", count(c.preprocess_np), "ranks of pets_preprocess for the synthesised set")(
      "data", text(c.data), "use this store instead of synthesising one")(
      "per-class", count(c.per_class), "synthesised images per class")(
      "classes", count(c.synth_classes), "synthesised classes")("epochs", count(c.epochs),
                                                                "epochs of every pets_train run")(
      "train-batch", count(c.train_batch), "pets_train --batch-size")(
      "eval-batch", count(c.eval_batch), "pets_train --eval-batch-size")(
      "train", text(c.train_exe), "pets_train")("preprocess", text(c.preprocess_exe),
                                                "pets_preprocess")(
      "synth", text(c.synth_exe), "pets_synth")("mpiexec", text(c.mpiexec), "MPI launcher")(
      "np-flag", text(c.np_flag), "the launcher's rank-count flag")(
      "mpi-preflags", text(c.mpi_preflags), "launcher flags for every launch")(
      "np1-preflags", text(c.np1_preflags), "launcher flags of the -np 1 runs")(
      "work", text(c.work), "working folder")("report", text(c.report), "the JSON report");
  return desc;
}

/// What the command line asks for: a run with `config`, a report to check, or the help text.
struct Command {
  std::optional<Config> config;
  std::string check;
};

Command parse(int argc, char** argv) {
  Config c;
  // --smoke first, so that explicit options override its sizes.
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (std::find(a.begin(), a.end(), "--smoke") != a.end()) {
    c.roof_batch = 1;
    c.roof_channels = 64;
    c.roof_size = 28;
    c.min_seconds = 0.2;
    c.min_iters = 2;
    c.batch = 2;
    c.image_size = 64;
    c.warmup = 1;
    c.loader_epochs = 1;
    c.per_class = 4;
    c.synth_classes = 3;
    c.epochs = 1;
    c.train_batch = 2;
    c.eval_batch = 2;
  }
  std::string loader_sweep = "1,2,4";
  Command command;
  const po::options_description desc = options_of(c, loader_sweep, command.check);
  po::variables_map vm;
  if (!pets::parse_command_line(argc, argv, desc, vm, "pets_bench")) return command;  // --help
  if (!command.check.empty()) {
    for (const auto& [name, value] : vm)
      if (name != "check" && !value.defaulted()) usage("--check FILE takes no other option");
    return command;
  }
  const auto sweep = pets::bench::worker_counts(loader_sweep, 1);
  if (!sweep) usage("--loader-sweep needs worker counts of at least 1, got '" + loader_sweep + "'");
  c.loader_sweep = *sweep;
  if (!(c.min_seconds >= 0) || !std::isfinite(c.min_seconds))
    usage("--min-seconds needs a non-negative number, got " + pets::format_number(c.min_seconds));
  if (c.bn_mode != "train" && c.bn_mode != "eval") usage("--bn-mode must be train or eval");
  if (c.device != "cpu" && c.device != "cuda") usage("--device must be cpu or cuda");
  if (c.device == "cuda" && !torch::cuda::is_available())
    usage("--device cuda: no CUDA device is available to this build");
  if (c.loader_only && c.e2e_only) usage("--loader-only and --e2e-only exclude each other");
  if (c.e2e_only && !c.e2e) usage("--e2e-only and --no-e2e exclude each other");
  for (const auto& name : e2e_run_names(c))
    if (e2e_run_kinds().count(name) == 0)
      usage("--e2e-runs: unknown run '" + name + "' (see --help)");
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, int>>{{"--batch", c.batch},
                                                {"--image-size", c.image_size},
                                                {"--roof-batch", c.roof_batch},
                                                {"--roof-channels", c.roof_channels},
                                                {"--roof-size", c.roof_size},
                                                {"--min-iters", c.min_iters},
                                                {"--loader-workers", c.loader_workers},
                                                {"--loader-world", c.loader_world},
                                                {"--loader-epochs", c.loader_epochs},
                                                {"--epochs", c.epochs},
                                                {"--per-class", c.per_class},
                                                {"--preprocess-np", c.preprocess_np}})
    if (value <= 0) usage(std::string(name) + " must be positive, got " + std::to_string(value));
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, int>>{{"--threads", c.threads},
                                                {"--classes", c.synth_classes},
                                                {"--train-batch", c.train_batch},
                                                {"--eval-batch", c.eval_batch}})
    if (value < 0) usage(std::string(name) + " must not be negative, got " + std::to_string(value));
  if (c.data.empty() && (c.synth_exe.empty() || c.preprocess_exe.empty()))
    usage("--synth and --preprocess are needed unless --data names a store");
  if (c.e2e && c.train_exe.empty()) usage("--train is needed (or --no-e2e)");
  command.config = c;
  return command;
}

int bench_main(int argc, char** argv) {
  const Command command = parse(argc, argv);
  if (!command.check.empty()) return check_report(command.check);
  if (!command.config) return 0;  // --help
  const Config& c = *command.config;
  fs::create_directories(c.work);
  torch::set_num_threads(c.threads > 0 ? c.threads : pets::affinity_cpu_count());
  torch::manual_seed(0);
  const auto start = Clock::now();

  utsname u{};
  uname(&u);
  double load[3] = {0, 0, 0};
  (void)getloadavg(load, 3);
  json r = {{"schema", "pets_bench/1"},
            {"date", now_iso()},
            {"host", u.nodename},
            {"cpu", first_line_of("lscpu 2>/dev/null | sed -n 's/^Model name: *//p'")},
            {"cores_in_affinity_mask", pets::affinity_cpu_count()},
            {"threads", torch::get_num_threads()},
            {"torch_version", TORCH_VERSION},
            {"device", c.device},
            {"smoke", c.smoke},
            {"load_average_start", {load[0], load[1], load[2]}}};

  std::string store;
  std::cerr << "pets_bench: data\n";
  const json data = prepare_data(c, store);

  if (c.device == "cuda")
    r["gpu"] = first_line_of(
        "nvidia-smi --query-gpu=name,driver_version,memory.total "
        "--format=csv,noheader 2>/dev/null");
  if (c.loader_only) {
    std::cerr << "pets_bench: 4. loader\n";
    r["loader"] = loader_bench(c, store);
    const std::string text = r.dump(2);
    std::ofstream(c.report) << text << "\n";
    std::cout << text << std::endl;
    return 0;
  }
  if (!c.e2e_only) {
    std::cerr << "pets_bench: 1. roofline\n";
    r["roofline"] = roofline(c);
    pets::model::ResNet50d model(c.classes);
    std::cerr << "pets_bench: 2. FLOPs\n";
    r["flops"] = count_flops(model, c);
    std::cerr << "pets_bench: 3. model step\n";
    const double step_gflop = r["flops"]["train_step_gflop_per_image"].get<double>();
    {
      // The step's backend needs MPI: a world of this process alone, ended before the pets_train
      // runs (mpirun does not start from inside an MPI process).
      int mpi_argc = argc;
      char** mpi_argv = argv;
      const pets::comm::MpiEnvironment environment(mpi_argc, mpi_argv);
      const pets::comm::MpiComm mpi;
      // The allocator lever, measured in this run: glibc's defaults of a fresh process first (no
      // mallopt call before this point), then what pets_train sets (pets/util/memory.hpp). A CPU
      // lever: on CUDA only the second is measured.
      if (!on_cuda(c))
        r["model_step_default_malloc"] = model_step(model, c, step_gflop, r["roofline"], mpi);
      PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
      r["model_step"] = model_step(model, c, step_gflop, r["roofline"], mpi);
    }
    std::cerr << "pets_bench: 4. loader\n";
    r["loader"] = loader_bench(c, store);
  }

  if (c.e2e) {
    json runs;
    const auto names = e2e_run_names(c);
    for (const auto& name : names) {
      const E2eKind& kind = e2e_run_kinds().at(name);
      std::cerr << "pets_bench: 5./6. end to end " << name << "\n";
      runs[name] = e2e_run(c, store, name, kind.np, kind.np1_preflags ? c.np1_preflags : "",
                           kind.args, kind.env);
    }
    r["end_to_end"] = {{"data", data},
                       {"epochs", c.epochs},
                       {"train_batch_per_rank", c.train_batch},
                       {"eval_batch_per_rank", c.eval_batch},
                       {"image_size", 224},
                       {"e2e_args", c.e2e_args},
                       {"run_names", names},
                       {"runs", runs}};
  }
  (void)getloadavg(load, 3);
  r["load_average_end"] = {load[0], load[1], load[2]};
  r["bench_seconds"] = seconds_since(start);

  const std::string text = r.dump(2);
  {
    std::ofstream out(c.report);
    out << text << "\n";
    PETS_CHECK(out.good(), "cannot write " + c.report);
  }
  std::cout << text << std::endl;
  print_table(r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return pets::run_program(argc, argv, bench_main); }
