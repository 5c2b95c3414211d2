#include "pets/train/run/memory_fit.hpp"

#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/compat/torch.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/device/cuda_parts.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {
namespace {

using model::ResNet50dImpl;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// The allowances and factors, calibrated on 28 CPU runs of 2 ranks (README, "Fine-tune the
// backbone", 2026-12-07: --unfreeze none, layer4, layer2 and all, 64 to 224 pixels, batches of
// 4 to 64, one in bf16): the estimate is 1.00 to 1.36 times each rank's peak resident memory
// (VmHWM). The process keeps freed memory for reuse (pets/util/memory.hpp), so its peak is above
// what is alive at any one time, and identical runs peaked up to 27 % apart.
//
// LibTorch, MPI, HDF5 and the threads' heaps: a frozen run of 64-pixel images in batches of 4
// peaked at 551 MiB on rank 1, of which the model is 90 MiB.
constexpr std::int64_t kCpuRuntime = 480 * kMiB;
// On a GPU (not calibrated): cuDNN's and cuBLAS's workspaces and the caching allocator's
// rounding and fragmentation.
constexpr std::int64_t kCudaRuntime = 1024 * kMiB;
// The loader's float batches alive at once on the CPU input path: the prefetched ones (3), the
// one a worker builds and the step's.
constexpr std::int64_t kLoaderBatches = 5;
// What the backward adds to the tensors autograd saved: the gradients in flight, counted as
// this many of the trained stages' largest tensor.
constexpr std::int64_t kBackwardTensors = 3;
// Bytes per trained parameter: its gradient, its slot in the step's fp32 allreduce buffer and in
// the previous step's (freed only once the new one is made), Adam's two moments, and 4 more
// measured (the reduction's and the optimiser's temporaries).
constexpr std::int64_t kTrainedBytes = 24;
// Rank 0's bytes per trained parameter for the stop checkpoint: its copies of the parameters
// and both moments (12 bytes each; the last two commits and the one being made, StopCheckpoint)
// measured at 2.5 copies, some of them reusing memory the step's activations left.
constexpr std::int64_t kCommitBytes = 30;
// Above what is alive, in percent: what autograd saves for a trained stage, and the tensors of
// a forward without autograd (a frozen stage's, an evaluation's).
constexpr std::int64_t kSavedPercent = 130;
constexpr std::int64_t kForwardPercent = 150;
constexpr int kWarnPercent = 80;

std::int64_t conv_out(std::int64_t in, const torch::nn::detail::ConvNdOptions<2>& o) {
  const std::int64_t k = (*o.kernel_size())[0];
  const std::int64_t s = (*o.stride())[0];
  const std::int64_t p = (*compat::variant_get<torch::ExpandingArray<2>>(o.padding()))[0];
  return (in + 2 * p - k) / s + 1;
}

std::int64_t channels_out(const torch::nn::Conv2d& conv) { return conv->options.out_channels(); }

/// Accumulates a stage's figures as its tensors are made (bytes per image).
struct Ledger {
  StageActivations figures;
  void saved(std::int64_t bytes) {
    figures.saved += bytes;
    figures.largest = std::max(figures.largest, bytes);
  }
  void alive(std::int64_t bytes) { figures.transient = std::max(figures.transient, bytes); }
};

/// The stem: conv1 (conv, BN, ReLU, conv, BN, ReLU, conv), bn1 and its ReLU, the max-pool.
/// Returns the output's side.
std::int64_t stem(ResNet50dImpl& m, std::int64_t side, int e, Ledger& l) {
  const std::int64_t image = 3 * side * side * 4;  // float images, also under autocast
  l.figures.input = image;
  std::int64_t in = image;  // the tensor a layer reads
  for (std::size_t i = 0; i < m.conv1->size(); ++i) {
    if (auto* conv = m.conv1->ptr(i)->as<torch::nn::Conv2dImpl>()) {
      side = conv_out(side, conv->options);
      const std::int64_t out = conv->options.out_channels() * side * side * e;
      l.alive(image + in + out);
      l.saved(out);  // saved by the BatchNorm after it
      in = out;
    } else if (m.conv1->ptr(i)->as<torch::nn::BatchNorm2dImpl>() != nullptr) {
      l.alive(image + 2 * in);  // its input and output; the ReLU after it works in place
      l.saved(in);              // saved by the ReLU and the next convolution
    }
  }
  // bn1 and its ReLU, then max_pool2d(3, 2, 1), whose indices (int64) autograd keeps.
  l.alive(image + 2 * in);
  l.saved(in);
  const std::int64_t channels = in / (side * side * e);
  side = (side + 2 - 3) / 2 + 1;
  const std::int64_t pooled = channels * side * side * e;
  l.alive(image + in + pooled);
  l.saved(channels * side * side * 8);
  l.saved(pooled);
  return side;
}

/// One Bottleneck on an input of `in_channels` x side x side, in BottleneckImpl::forward's
/// order. Returns the output's side.
std::int64_t bottleneck(model::BottleneckImpl& b, std::int64_t in_channels, std::int64_t side,
                        int e, Ledger& l) {
  const std::int64_t x = in_channels * side * side * e;
  const std::int64_t planes = channels_out(b.conv1);
  const std::int64_t outs = channels_out(b.conv3);
  const std::int64_t s1 = conv_out(side, b.conv1->options);
  const std::int64_t s2 = conv_out(s1, b.conv2->options);
  const std::int64_t s3 = conv_out(s2, b.conv3->options);
  const std::int64_t out = outs * s3 * s3 * e;
  std::int64_t shortcut = 0;  // a tensor of its own only with a downsample
  if (b.downsample) {
    auto& conv = model::module_at<torch::nn::Conv2dImpl>(b.downsample, 1);
    std::int64_t ds_side = side, pooled = 0;
    if (auto* pool = b.downsample->ptr(0)->as<torch::nn::AvgPool2dImpl>()) {
      const auto& o = pool->options;
      const std::int64_t k = (*o.kernel_size())[0], st = (*o.stride())[0];
      ds_side = o.ceil_mode() ? (side - k + st - 1) / st + 1 : (side - k) / st + 1;
      pooled = in_channels * ds_side * ds_side * e;
      l.saved(pooled);  // the convolution's input
    }
    ds_side = conv_out(ds_side, conv.options);
    shortcut = conv.options.out_channels() * ds_side * ds_side * e;
    l.saved(shortcut);  // the BatchNorm's input; its output is only added
    l.alive(x + std::max(pooled + shortcut, 2 * shortcut));
  }
  const std::int64_t a = planes * s1 * s1 * e, c = planes * s2 * s2 * e;
  l.saved(a);    // conv1's output, bn1's input
  l.saved(a);    // bn1's output (its ReLU in place), conv2's input
  l.saved(c);    // conv2's output
  l.saved(c);    // bn2's output, conv3's input
  l.saved(out);  // conv3's output
  l.saved(out);  // bn3's output, the residual added and the ReLU in place: the block's output
  // Each convolution's output and its BatchNorm's are alive together, with the layer's input;
  // the block's input and the shortcut stay alive throughout.
  l.alive(x + shortcut + std::max({2 * a, a + 2 * c, c + 2 * out}));
  return s3;
}

}  // namespace

std::string MemoryEstimate::text() const {
  std::vector<std::pair<std::int64_t, std::string>> parts = {{activations, "activations"},
                                                             {training, "training state"},
                                                             {checkpoint, "checkpoint copies"},
                                                             {model, "model"},
                                                             {runtime, "runtime"}};
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string text = byte_size_text(total()) + " (";
  bool first = true;
  for (const auto& [bytes, name] : parts) {
    if (bytes == 0) continue;
    text += (first ? "" : ", ") + name + " " + byte_size_text(bytes);
    first = false;
  }
  return text + ")";
}

std::array<StageActivations, ResNet50dImpl::kStages> stage_activations(ResNet50dImpl& model,
                                                                       std::int64_t image_size,
                                                                       int element_bytes) {
  PETS_CHECK(image_size > 0 && element_bytes > 0, "stage_activations: bad size");
  std::array<StageActivations, ResNet50dImpl::kStages> stages{};
  Ledger stem_ledger;
  std::int64_t side = stem(model, image_size, element_bytes, stem_ledger);
  stages[0] = stem_ledger.figures;
  std::int64_t channels = model.bn1->options.num_features();
  torch::nn::Sequential* const layers[] = {&model.layer1, &model.layer2, &model.layer3,
                                           &model.layer4};
  for (int s = 1; s < ResNet50dImpl::kStages; ++s) {
    Ledger l;
    l.figures.input = channels * side * side * element_bytes;
    for (std::size_t i = 0; i < (*layers[s - 1])->size(); ++i) {
      auto& block = model::module_at<model::BottleneckImpl>(*layers[s - 1], i);
      side = bottleneck(block, channels, side, element_bytes, l);
      channels = channels_out(block.conv3);
    }
    stages[static_cast<std::size_t>(s)] = l.figures;
  }
  return stages;
}

MemoryEstimate estimate_memory(ResNet50dImpl& model, const MemoryShape& shape) {
  const int first = shape.first_trained_stage;
  PETS_CHECK(0 <= first && first <= ResNet50dImpl::kStages,
             "estimate_memory: no stage " + std::to_string(first));
  const int e = shape.mixed_precision ? 2 : 4;
  const auto stages = stage_activations(model, shape.image_size, e);
  const std::int64_t image = 3 * shape.image_size * shape.image_size * 4;  // fp32 input

  std::int64_t params = 0, buffers = 0, conv_params = 0;
  for (const auto& p : model.parameters()) {
    params += p.numel();
    if (p.dim() == 4) conv_params += p.numel();
  }
  for (const auto& b : model.buffers()) buffers += b.numel();
  const std::int64_t backbone = params - model.fc->weight.numel() - model.fc->bias.numel();
  std::int64_t trained = model.fc->weight.numel() + model.fc->bias.numel();
  for (const auto& named : model.stage_parameters(first)) trained += named.second.numel();

  MemoryEstimate m;
  m.runtime = shape.cuda ? kCudaRuntime
                         : kCpuRuntime + kLoaderBatches * image *
                                             std::max(shape.train_batch, shape.eval_batch);
  m.model = 4 * (params + buffers) + (shape.folded ? 4 * backbone : 0) +
            (shape.mixed_precision ? 2 * conv_params : 0);  // autocast's casts of the weights
  m.training = kTrainedBytes * trained;
  // Rank 0's copies of the trained state; on the CPU also the files it writes (the checkpoint,
  // then the final model), each whole in memory before it is written.
  if (shape.leader)
    m.checkpoint = kCommitBytes * trained + (shape.cuda ? 0 : 4 * (params + buffers));

  // A training step: the frozen stages run without autograd (their largest moment), then the
  // trained ones keep what their backward needs, plus the gradients in flight.
  std::int64_t frozen = 0, saved = 0, largest = 0, any = 0;
  for (int s = 0; s < first; ++s)
    frozen = std::max(frozen, stages[static_cast<std::size_t>(s)].transient);
  if (first < ResNet50dImpl::kStages) {
    saved = stages[static_cast<std::size_t>(first)].input;
    for (int s = first; s < ResNet50dImpl::kStages; ++s) {
      saved += stages[static_cast<std::size_t>(s)].saved;
      largest = std::max(largest, stages[static_cast<std::size_t>(s)].largest);
    }
    saved += kBackwardTensors * largest;
  }
  for (const auto& s : stages) any = std::max(any, s.transient);
  const std::int64_t per_image = std::max(frozen * kForwardPercent, saved * kSavedPercent) / 100;
  const std::int64_t step = shape.train_batch * (per_image + (first > 0 ? image : 0));
  // An evaluation: every stage without autograd.
  const std::int64_t evaluation = shape.eval_batch * any * kForwardPercent / 100;
  m.activations = std::max(step, evaluation);
  return m;
}

std::optional<std::int64_t> parse_cgroup_limit(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos || word.size() > 18)
    return std::nullopt;
  const std::int64_t value = std::stoll(word);
  if (value >= (std::int64_t{1} << 60)) return std::nullopt;
  return value;
}

std::vector<std::string> cgroup_limit_files(const std::string& cgroup,
                                            const std::string& mountinfo) {
  // The process's path in each hierarchy: "0::/path" (v2), "N:a,memory,b:/path" (v1).
  std::optional<std::string> v2_path, v1_path;
  std::istringstream lines(cgroup);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "memory") v1_path = path;
  }
  // The mounts: "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER".
  struct Mount {
    std::string root, point;
  };
  std::optional<Mount> v2_mount, v1_mount;
  std::istringstream mounts(mountinfo);
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields),
                               std::istream_iterator<std::string>()};
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || std::distance(dash, f.end()) < 2) continue;
    const std::string& type = *(dash + 1);
    const std::string super = std::distance(dash, f.end()) >= 4 ? *(dash + 3) : "";
    if (type == "cgroup2" && !v2_mount) v2_mount = Mount{f[3], f[4]};
    if (type == "cgroup" && !v1_mount && ("," + super + ",").find(",memory,") != std::string::npos)
      v1_mount = Mount{f[3], f[4]};
  }
  std::vector<std::string> files;
  const auto walk = [&](const std::optional<std::string>& path, const std::optional<Mount>& mount,
                        const std::string& file) {
    if (!path || !mount) return;
    // Below the mount's root; a path outside it (another namespace's view) starts at the root.
    std::string rel = path->rfind(mount->root, 0) == 0 ? path->substr(mount->root.size()) : "";
    if (mount->root == "/") rel = *path;
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    while (true) {
      files.push_back(mount->point + rel + "/" + file);
      if (rel.empty()) break;
      rel.erase(rel.rfind('/'));
    }
  };
  walk(v2_path, v2_mount, "memory.max");
  walk(v1_path, v1_mount, "memory.limit_in_bytes");
  return files;
}

std::optional<std::int64_t> parse_kib_field(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    std::int64_t kib = 0;
    std::string unit;
    if (!(fields >> kib) || kib < 0) return std::nullopt;
    fields >> unit;
    if (!unit.empty() && unit != "kB") return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

namespace {

/// A Slurm variable's whole positive number (MB, a count), or nothing.
std::optional<std::int64_t> slurm_number(const std::function<const char*(const char*)>& env,
                                         const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::nullopt;
  // SLURM_CPUS_PER_TASK and the like may be lists ("2(x3)"); the first number is this node's.
  const std::string text(v);
  const std::size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || text.empty() || std::min(digits, text.size()) > 15) return std::nullopt;
  const std::int64_t value = std::stoll(text.substr(0, digits));
  if (value <= 0) return std::nullopt;
  return value;
}

std::string ranks_text(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

void take_smaller(MemoryLimit& limit, std::int64_t bytes, const std::string& source) {
  if (!limit.known() || bytes < limit.bytes) limit = {bytes, source};
}

}  // namespace

MemoryLimit slurm_memory_limit(const std::function<const char*(const char*)>& env,
                               int ranks_on_host) {
  const int ranks = std::max(1, ranks_on_host);
  MemoryLimit limit;
  if (const auto node = slurm_number(env, "SLURM_MEM_PER_NODE"))
    take_smaller(limit, *node * kMiB / ranks,
                 "Slurm's SLURM_MEM_PER_NODE=" + std::to_string(*node) + " MB shared by " +
                     ranks_text(ranks) + " on this host");
  if (const auto cpu = slurm_number(env, "SLURM_MEM_PER_CPU")) {
    const std::int64_t cpus = slurm_number(env, "SLURM_CPUS_PER_TASK").value_or(1);
    take_smaller(limit, *cpu * cpus * kMiB,
                 "Slurm's SLURM_MEM_PER_CPU=" + std::to_string(*cpu) + " MB times " +
                     std::to_string(cpus) + " CPU" + (cpus == 1 ? "" : "s") + " a rank");
  }
  if (const auto gpu = slurm_number(env, "SLURM_MEM_PER_GPU")) {
    const auto gpus = slurm_number(env, "SLURM_GPUS_ON_NODE");
    const std::int64_t n = gpus.value_or(ranks);
    take_smaller(limit, *gpu * n * kMiB / ranks,
                 "Slurm's SLURM_MEM_PER_GPU=" + std::to_string(*gpu) + " MB times " +
                     std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + " shared by " +
                     ranks_text(ranks) + " on this host");
  }
  return limit;
}

MemoryLimit host_memory_limit(const HostMemory& host) {
  MemoryLimit limit;
  if (host.cgroup_limit) {
    const int n = std::max(1, host.ranks_in_cgroup);
    take_smaller(limit, *host.cgroup_limit / n,
                 "the cgroup limit " + byte_size_text(*host.cgroup_limit) + " of " +
                     host.cgroup_file + " shared by " + ranks_text(n));
  }
  if (host.slurm.known()) take_smaller(limit, host.slurm.bytes, host.slurm.source);
  if (host.available) {
    const int n = std::max(1, host.ranks_on_host);
    take_smaller(limit, (*host.available + host.ranks_resident) / n,
                 "the host's available memory " + byte_size_text(*host.available) + " and the " +
                     byte_size_text(host.ranks_resident) + " its ranks hold, shared by " +
                     ranks_text(n));
  }
  return limit;
}

bool memory_check_enabled(const char* value) {
  return value == nullptr || std::string(value) != "0";
}

std::string memory_refusal_text(int rank, const std::string& host, const std::string& run,
                                const MemoryEstimate& estimate, const MemoryLimit& limit,
                                const std::vector<std::string>& changes) {
  std::string text = "not enough memory: rank " + std::to_string(rank) + " on " + host +
                     " would need about " + estimate.text() + " for " + run + ", more than the " +
                     byte_size_text(limit.bytes) + " it can have (" + limit.source + ")";
  if (!changes.empty()) {
    text += "; try ";
    for (std::size_t i = 0; i < changes.size(); ++i)
      text += (i == 0 ? "" : i + 1 == changes.size() ? " or " : ", ") + changes[i];
  }
  return text +
         "; PETS_MEMORY_CHECK=0 skips this check (mpirun -x PETS_MEMORY_CHECK=0) if the estimate "
         "is wrong";
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string host_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  PETS_MPI_CHECK(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<std::size_t>(length));
}

/// The smallest limit of this process's cgroup and its ancestors, and its file.
std::pair<std::optional<std::int64_t>, std::string> cgroup_limit() {
  std::pair<std::optional<std::int64_t>, std::string> best;
  for (const std::string& file :
       cgroup_limit_files(read_text("/proc/self/cgroup"), read_text("/proc/self/mountinfo"))) {
    const auto value = parse_cgroup_limit(read_text(file));
    if (value && (!best.first || *value < *best.first)) best = {value, file};
  }
  return best;
}

/// The host's figures (collective over the node-local communicator).
HostMemory host_memory(const comm::MpiComm& mpi) {
  HostMemory host;
  std::tie(host.cgroup_limit, host.cgroup_file) = cgroup_limit();
  // The ranks under one limit: those whose smallest limit is in the same file.
  const std::vector<std::string> files =
      comm::allgather_strings({host.cgroup_limit ? host.cgroup_file : ""}, mpi.local());
  host.ranks_in_cgroup = static_cast<int>(
      std::count(files.begin(), files.end(), files.at(static_cast<std::size_t>(mpi.local_rank()))));
  host.ranks_on_host = mpi.local_size();
  host.slurm =
      slurm_memory_limit([](const char* name) { return std::getenv(name); }, mpi.local_size());
  host.available = parse_kib_field(read_text("/proc/meminfo"), "MemAvailable");
  const long long mine = parse_kib_field(read_text("/proc/self/status"), "VmRSS").value_or(0);
  long long all = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, mpi.local()));
  host.ranks_resident = all;
  return host;
}

/// On CUDA: the device's free memory shared by the ranks that take it, plus the model this
/// rank holds there already (in the estimate, not in the free memory).
MemoryLimit device_memory_limit(const comm::MpiComm& mpi, const c10::Device& device, int sharing,
                                std::int64_t held) {
  // Every rank's model is on its device before any rank asks what is free.
  PETS_MPI_CHECK(MPI_Barrier(mpi.local()));
  const CudaParts* cuda = cuda_parts();
  if (cuda == nullptr) return {};
  const std::int64_t free = cuda->free_memory(device.index());
  if (free < 0) return {};
  return {free / sharing + held, "the free memory " + byte_size_text(free) + " of " + device.str() +
                                     " shared by " + ranks_text(sharing) + ", and the " +
                                     byte_size_text(held) + " of the model already there"};
}

/// "steps of 64 images of 224 px and evaluations of 128, --unfreeze all, fp32".
std::string run_text(const MemoryShape& shape, const TrainOptions& options) {
  return "steps of " + std::to_string(shape.train_batch) + " images of " +
         std::to_string(shape.image_size) + " px and evaluations of " +
         std::to_string(shape.eval_batch) + ", --unfreeze " + to_string(options.unfreeze) +
         (shape.mixed_precision ? ", " + to_string(options.mixed_precision) : std::string());
}

const char* smaller_unfreeze(Unfreeze value) {
  switch (value) {
    case Unfreeze::kAll:
      return "layer1";
    case Unfreeze::kLayer1:
      return "layer2";
    case Unfreeze::kLayer2:
      return "layer3";
    case Unfreeze::kLayer3:
      return "layer4";
    case Unfreeze::kLayer4:
      return "none";
    case Unfreeze::kNone:
      return nullptr;
  }
  return nullptr;
}

/// What would make `shape` fit in `limit` bytes, as advice.
std::vector<std::string> changes_that_fit(model::ResNet50dImpl& model, const MemoryShape& shape,
                                          const TrainOptions& options, int ranks_sharing,
                                          std::int64_t limit) {
  std::vector<std::string> out;
  const auto fits = [&](const MemoryShape& s) {
    return estimate_memory(model, s).total() <= limit;
  };
  // The largest batch below the run's that fits (the estimate grows with the batch), 0: none.
  MemoryShape smaller = shape;
  std::int64_t low = 0, high = shape.train_batch;
  while (high - low > 1) {
    smaller.train_batch = (low + high) / 2;
    (fits(smaller) ? low : high) = smaller.train_batch;
  }
  const std::string batch = "--" + std::string(kBatchSizeKey);
  if (low >= 1)
    out.push_back("a smaller " + batch + " (" + std::to_string(low) + " fits)");
  else
    out.push_back("a smaller " + batch);
  MemoryShape eval = shape;
  eval.eval_batch = 1;
  // The evaluation is the peak when a smaller evaluation batch lowers it.
  if (estimate_memory(model, eval).activations < estimate_memory(model, shape).activations)
    out.push_back("a smaller --" + std::string(kEvalBatchSizeKey));
  if (ranks_sharing > 1) out.push_back("fewer ranks per host");
  if (const char* less = smaller_unfreeze(options.unfreeze))
    out.push_back("--unfreeze " + std::string(less));
  return out;
}

}  // namespace

void check_memory_fit(const TrainOptions& options, const comm::MpiComm& mpi, const Backend& backend,
                      model::ResNet50dImpl& model, const data::Loader& loader, RankLog& log) {
  // The same decision on every rank: the variable is the job's (mpirun -x).
  const char* switch_value = std::getenv("PETS_MEMORY_CHECK");
  int on = memory_check_enabled(switch_value) ? 1 : 0, all_on = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&on, &all_on, 1, MPI_INT, MPI_MIN, mpi.get()));
  if (all_on == 0) return;

  MemoryShape shape;
  const auto largest_batch = [&](data::SplitKind kind) {
    return loader.steps_per_epoch(kind) > 0
               ? static_cast<std::int64_t>(loader.step_indices(kind, 0, 0).size())
               : std::int64_t{0};
  };
  shape.train_batch = std::max<std::int64_t>(1, largest_batch(data::SplitKind::kTrain));
  shape.eval_batch = std::max<std::int64_t>(1, largest_batch(data::SplitKind::kEval));
  shape.image_size = loader.options().image_size;
  shape.first_trained_stage = first_trained_stage(options.unfreeze);
  shape.mixed_precision = options.mixed_precision != MixedPrecision::kNo;
  shape.folded = options.bn_mode == BnMode::kEval;
  shape.cuda = backend.device().is_cuda();
  shape.leader = mpi.rank() == 0;
  const MemoryEstimate estimate = estimate_memory(model, shape);

  MemoryLimit limit;
  int sharing = mpi.local_size();  // the ranks that draw on the same memory
  if (shape.cuda) {
    // The backend's choice: device local_rank % count (pick_device).
    const int count = std::max(1, static_cast<int>(torch::cuda::device_count()));
    sharing = 0;
    for (int r = 0; r < mpi.local_size(); ++r) sharing += r % count == backend.device().index();
    std::int64_t held = 0;  // the model's tensors, on the device already
    for (const auto& t : model.parameters()) held += static_cast<std::int64_t>(t.nbytes());
    for (const auto& t : model.buffers()) held += static_cast<std::int64_t>(t.nbytes());
    limit = device_memory_limit(mpi, backend.device(), std::max(1, sharing), held);
  } else {
    const HostMemory host = host_memory(mpi);
    limit = host_memory_limit(host);
  }

  const std::int64_t need = estimate.total();
  const bool over = limit.known() && need > limit.bytes;
  agree_on_usage([&] {
    if (over)
      throw UsageError(
          memory_refusal_text(mpi.rank(), host_name(), run_text(shape, options), estimate, limit,
                              changes_that_fit(model, shape, options, sharing, limit.bytes)));
  });
  // The lowest rank's of those above kWarnPercent of their limit, on rank 0's terminal.
  const bool close = limit.known() && limit.bytes > 0 && need * 100 > limit.bytes * kWarnPercent;
  const std::string mine =
      close ? "warning: rank " + std::to_string(mpi.rank()) + " on " + host_name() + " may need " +
                  std::to_string(need * 100 / limit.bytes) + " % of the " +
                  byte_size_text(limit.bytes) + " it can have (" + limit.source + "): about " +
                  estimate.text() + "; PETS_MEMORY_CHECK=0 turns this check off"
            : std::string();
  const std::vector<std::string> warnings = comm::allgather_strings({mine}, mpi.get());
  for (const std::string& w : warnings)
    if (!w.empty()) {
      log.note(w);
      break;
    }
}

}  // namespace pets::train
