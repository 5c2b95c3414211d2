#pragma once
/// \file
/// Whether a run fits in the memory its ranks can have, checked once before the first step
/// (check_memory_fit): an estimate of a rank's peak (estimate_memory: the model, what training
/// its stages holds, the activations of a step and of an evaluation, a measured allowance for
/// the rest), against what the rank can have (a cgroup's or Slurm's limit, the host's available
/// memory, a GPU's free memory, each shared by the ranks that draw on it). The parsers take the
/// text of the files and the values of the variables, so that tests give them their own.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pets/model/resnet50d.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets::data {
class Loader;
}

namespace pets {
class RankLog;
}

namespace pets::train {

class Backend;
struct TrainOptions;

/// What a rank runs, as far as its memory goes.
struct MemoryShape {
  std::int64_t train_batch = 64;  ///< images of this rank's largest training step
  std::int64_t eval_batch = 128;  ///< images of its largest evaluation batch
  std::int64_t image_size = 224;  ///< side of the (square) images the backbone sees
  /// The first stage that trains (pets::train::first_trained_stage); kStages: the head alone.
  int first_trained_stage = model::ResNet50dImpl::kStages;
  bool mixed_precision = false;  ///< bf16/fp16 autocast: activations of 2 bytes, weights cast
  bool folded = false;           ///< --bn-mode eval: a folded copy of the backbone's weights
  bool cuda = false;             ///< the model's memory is a GPU's, not the host's
  bool leader = false;           ///< rank 0: the stop checkpoint's copies, the files it writes
};

/// A rank's estimated peak, in bytes, by part.
struct MemoryEstimate {
  /// On the CPU: the libraries, MPI and the loader's batches (an allowance measured on frozen
  /// runs); on a GPU: an allowance for the workspaces and the allocator's cache.
  std::int64_t runtime = 0;
  std::int64_t model = 0;  ///< every parameter and buffer, and a folded copy of the backbone
  /// The trained parameters' gradients, their fp32 allreduce buffer and Adam's two moments.
  std::int64_t training = 0;
  /// Rank 0: its copies of the trained state for a stop, and the checkpoint file it writes.
  std::int64_t checkpoint = 0;
  /// The larger of a training step's (autograd's saved tensors of the trained stages and the
  /// backward's gradients, or the frozen stages' forward) and an evaluation's forward.
  std::int64_t activations = 0;
  std::int64_t total() const { return runtime + model + training + checkpoint + activations; }
  /// "5.31 GiB (activations 3.90 GiB, training 0.35 GiB, ...)": the total and its parts, largest
  /// first.
  std::string text() const;
};

/// Per image, in bytes, what one stage of the backbone holds at an image size.
struct StageActivations {
  /// What autograd keeps for the stage's backward when it trains: every tensor it makes but
  /// those only added into the residual, its output included (its input is the stage before's).
  std::int64_t saved = 0;
  /// The most alive at once in its forward without autograd, its input and output included.
  std::int64_t transient = 0;
  std::int64_t largest = 0;  ///< its largest single tensor
  std::int64_t input = 0;    ///< its input
};

/// Each stage's figures for images of side `image_size` and activations of `element_bytes`
/// (4: fp32, 2: bf16/fp16), derived from the model's layers (their channels, kernels, strides
/// and paddings) and the order of model::BottleneckImpl::forward: which tensors are alive at
/// once, which autograd saves. Throws pets::Error when the model is not laid out as ResNet-50d.
std::array<StageActivations, model::ResNet50dImpl::kStages> stage_activations(
    model::ResNet50dImpl& model, std::int64_t image_size, int element_bytes);

/// A rank's peak for `shape`, from `model`'s parameters, buffers and layers (stage_activations).
MemoryEstimate estimate_memory(model::ResNet50dImpl& model, const MemoryShape& shape);

/// What a rank can have, and where that figure comes from.
struct MemoryLimit {
  std::int64_t bytes = -1;  ///< -1: nothing known
  /// "the cgroup limit 8.00 GiB (/sys/fs/cgroup/job_1/memory.max) shared by 2 ranks".
  std::string source;
  bool known() const { return bytes >= 0; }
};

/// A cgroup memory limit file's value (v2 memory.max, v1 memory.limit_in_bytes): the bytes, or
/// nothing for "max" and for values of 2^60 and more (v1's "no limit" is 2^63 rounded down to
/// a page) or text that is no number.
std::optional<std::int64_t> parse_cgroup_limit(const std::string& text);

/// The memory limit files of a process's cgroup and of its ancestors up to its hierarchy's
/// mount, innermost first: the v2 memory.max files, then the v1 memory.limit_in_bytes ones,
/// from the text of /proc/self/cgroup and /proc/self/mountinfo (a mount whose root is a cgroup
/// of its own, as in a container, maps that cgroup to the mount point).
std::vector<std::string> cgroup_limit_files(const std::string& cgroup,
                                            const std::string& mountinfo);

/// A `Key:  N kB` field of /proc/meminfo or /proc/self/status (MemAvailable, VmRSS) in bytes.
std::optional<std::int64_t> parse_kib_field(const std::string& text, const std::string& key);

/// Slurm's memory for one rank, from its variables (`env` returns a variable's value or null):
/// SLURM_MEM_PER_NODE (MB for the node) shared by the `ranks_on_host`, SLURM_MEM_PER_CPU (MB)
/// times SLURM_CPUS_PER_TASK (1 when unset), SLURM_MEM_PER_GPU (MB) times SLURM_GPUS_ON_NODE
/// (one a rank when unset) shared by the ranks; the smallest, or unknown when none is set.
MemoryLimit slurm_memory_limit(const std::function<const char*(const char*)>& env,
                               int ranks_on_host);

/// What a rank on the CPU can have, from the figures of its host.
struct HostMemory {
  std::optional<std::int64_t> cgroup_limit;  ///< the smallest of its cgroup's and ancestors'
  std::string cgroup_file;                   ///< the file that holds it
  int ranks_in_cgroup = 1;                   ///< this run's ranks under that limit
  MemoryLimit slurm;                         ///< slurm_memory_limit
  std::optional<std::int64_t> available;     ///< MemAvailable of /proc/meminfo
  /// What this run's ranks on the host hold already (their VmRSS): MemAvailable no longer
  /// counts it, the estimate does.
  std::int64_t ranks_resident = 0;
  int ranks_on_host = 1;
};

/// The smallest of: the cgroup limit shared by its ranks, Slurm's limit, and the host's
/// available memory (with what the ranks hold already) shared by its ranks; unknown when none
/// is known.
MemoryLimit host_memory_limit(const HostMemory& host);

/// Whether PETS_MEMORY_CHECK's value (null when unset) leaves the check on: anything but "0".
bool memory_check_enabled(const char* value);

/// The refusal of a rank that does not fit: one line ("not enough memory: rank 1 on node7 would
/// need about ...") naming the rank, its host, the estimate
/// and its parts for `run` (what it runs: "steps of 64 images of 224 px ..."), the limit and
/// where it comes from, and what to change (`changes`), ending with how PETS_MEMORY_CHECK=0
/// skips the check.
std::string memory_refusal_text(int rank, const std::string& host, const std::string& run,
                                const MemoryEstimate& estimate, const MemoryLimit& limit,
                                const std::vector<std::string>& changes);

/// Before the first step (collective over `mpi`): every rank estimates its peak for `options`
/// with `model` (made, on its device) and `loader`'s batch sizes, and compares it with what it
/// can have: on the CPU, host_memory_limit; on a GPU, its device's free memory shared by the
/// ranks on that device, plus the model it holds there already. When a rank does not fit,
/// every rank throws the same pets::UsageError (memory_refusal_text of the lowest such rank);
/// when one needs more than 80 % of its limit, rank 0 notes a warning on `log`. Nothing when
/// PETS_MEMORY_CHECK=0 or no limit is known.
void check_memory_fit(const TrainOptions& options, const comm::MpiComm& mpi, const Backend& backend,
                      model::ResNet50dImpl& model, const data::Loader& loader, RankLog& log);

}  // namespace pets::train
