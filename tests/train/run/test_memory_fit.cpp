// The memory check's arithmetic on the real ResNet-50d: the activations derived from its layers
// against figures worked out by hand, the estimate growing with the batch, the pixels and the
// trained stages; the limits read from cgroup, meminfo and Slurm text; the refusal's wording.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "pets/model/resnet50d.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/run/memory_fit.hpp"

namespace {

using pets::train::estimate_memory;
using pets::train::MemoryShape;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

pets::model::ResNet50d& model() {
  static pets::model::ResNet50d m(37);
  return m;
}

MemoryShape shape(std::int64_t batch, std::int64_t size, pets::train::Unfreeze unfreeze) {
  MemoryShape s;
  s.train_batch = batch;
  s.eval_batch = batch;
  s.image_size = size;
  s.first_trained_stage = pets::train::first_trained_stage(unfreeze);
  return s;
}

TEST(StageActivations, MatchTheArchitectureByHand) {
  const auto stages = pets::train::stage_activations(*model(), 224, 4);
  // layer4 on 1024 x 14 x 14. Its first block (stride 2, avg-down shortcut) keeps the pooled
  // input (1024 x 7 x 7) and the shortcut's convolution output (2048 x 7 x 7), conv1's output
  // and bn1's (512 x 14 x 14 each), conv2's and bn2's (512 x 7 x 7 each), conv3's and the
  // block's output (2048 x 7 x 7 each); the two other blocks the same without the shortcut and
  // with conv1 at 7 x 7.
  const std::int64_t first = 1024 * 49 + 2048 * 49 + 2 * 512 * 196 + 2 * 512 * 49 + 2 * 2048 * 49;
  const std::int64_t other = 4 * 512 * 49 + 2 * 2048 * 49;
  EXPECT_EQ(stages[4].saved, 4 * (first + 2 * other));
  EXPECT_EQ(stages[4].input, 4 * 1024 * 14 * 14);
  EXPECT_EQ(stages[4].largest, 4 * 2048 * 49);
  EXPECT_EQ(stages[0].input, 4 * 3 * 224 * 224);
  // The stem: three convolutions at 112 x 112 (32, 32, 64 channels), each with its BatchNorm's
  // output, the max-pool's int64 indices and its output (64 x 56 x 56).
  EXPECT_EQ(stages[0].saved,
            4 * (2 * 32 + 2 * 32 + 2 * 64) * 112 * 112 + 8 * 64 * 56 * 56 + 4 * 64 * 56 * 56);
  EXPECT_EQ(stages[0].largest, 4 * 64 * 112 * 112);
  // Without autograd, layer1's first block holds at most its input (64 ch), the shortcut
  // (256 ch), bn2's output (64 ch) and conv3's and bn3's outputs (256 ch each), at 56 x 56.
  EXPECT_EQ(stages[1].transient, 4 * (64 + 256 + 64 + 2 * 256) * 56 * 56);
  // Each stage's input is the one before's output.
  EXPECT_EQ(stages[1].input, 4 * 64 * 56 * 56);
  EXPECT_EQ(stages[2].input, 4 * 256 * 56 * 56);
  EXPECT_EQ(stages[3].input, 4 * 512 * 28 * 28);
  // Half-precision activations halve everything but the stem's int64 indices.
  const auto half = pets::train::stage_activations(*model(), 224, 2);
  for (int s = 1; s < 5; ++s) EXPECT_EQ(2 * half[s].saved, stages[s].saved) << "stage " << s;
  // An odd size: the shapes follow the convolutions' arithmetic (225 -> 113 -> 57 -> ...).
  const auto odd = pets::train::stage_activations(*model(), 225, 4);
  EXPECT_EQ(odd[1].input, 4 * 64 * 57 * 57);
  EXPECT_EQ(odd[4].input, 4 * 1024 * 15 * 15);
}

TEST(MemoryEstimate, GrowsWithBatchPixelsAndTrainedStages) {
  using U = pets::train::Unfreeze;
  const auto total = [](const MemoryShape& s) { return estimate_memory(*model(), s).total(); };
  for (const U u : {U::kNone, U::kLayer4, U::kAll}) {
    EXPECT_LT(total(shape(8, 224, u)), total(shape(16, 224, u)));
    EXPECT_LT(total(shape(16, 128, u)), total(shape(16, 224, u)));
  }
  std::int64_t previous = 0;
  for (const U u : {U::kNone, U::kLayer4, U::kLayer3, U::kLayer2, U::kLayer1, U::kAll}) {
    const auto e = estimate_memory(*model(), shape(16, 224, u));
    EXPECT_GT(e.total(), previous) << pets::train::to_string(u);
    previous = e.total();
  }
  // The activations of a step scale with its images: twice the batch, twice the activations.
  const auto a8 = estimate_memory(*model(), shape(8, 224, U::kAll));
  const auto a16 = estimate_memory(*model(), shape(16, 224, U::kAll));
  EXPECT_EQ(2 * a8.activations, a16.activations);
  EXPECT_EQ(a8.training, a16.training);
  // The trained state is the same number of bytes for every trained parameter (at least a
  // gradient, an allreduce buffer and two moments: 16); all of ResNet-50d is 23.5 M parameters
  // besides the head, layer4 15.0 M.
  const std::int64_t head = 2048 * 37 + 37;
  const std::int64_t per_parameter =
      estimate_memory(*model(), shape(8, 224, U::kNone)).training / head;
  EXPECT_GE(per_parameter, 16);
  EXPECT_EQ(estimate_memory(*model(), shape(8, 224, U::kNone)).training, per_parameter * head);
  EXPECT_EQ(a8.training, per_parameter * (23'527'264 + head));
  EXPECT_EQ(estimate_memory(*model(), shape(8, 224, U::kLayer4)).training,
            per_parameter * (14'964'736 + head));
  // Rank 0's copies of the trained state for a stop (12 bytes a parameter each) come on top.
  MemoryShape leader = shape(8, 224, U::kLayer4);
  leader.leader = true;
  EXPECT_GT(estimate_memory(*model(), leader).checkpoint, 2 * 12 * 14'964'736);
  EXPECT_EQ(estimate_memory(*model(), leader).total() -
                estimate_memory(*model(), shape(8, 224, U::kLayer4)).total(),
            estimate_memory(*model(), leader).checkpoint);
  EXPECT_EQ(estimate_memory(*model(), shape(8, 224, U::kLayer4)).checkpoint, 0);
  // bf16 activations take half the bytes.
  MemoryShape bf16 = shape(16, 224, U::kAll);
  bf16.mixed_precision = true;
  EXPECT_LT(estimate_memory(*model(), bf16).activations, a16.activations * 3 / 4);
  // A frozen run's evaluation of a larger batch is its peak, and grows with that batch.
  MemoryShape eval = shape(16, 224, U::kNone);
  eval.eval_batch = 128;
  MemoryShape eval64 = eval;
  eval64.eval_batch = 64;
  EXPECT_EQ(estimate_memory(*model(), eval).activations,
            2 * estimate_memory(*model(), eval64).activations);
  EXPECT_GT(estimate_memory(*model(), eval64).activations,
            estimate_memory(*model(), shape(16, 224, U::kNone)).activations);
  EXPECT_NE(a8.text().find("activations"), std::string::npos);
}

TEST(MemoryLimits, CgroupValues) {
  using pets::train::parse_cgroup_limit;
  EXPECT_EQ(parse_cgroup_limit("8589934592\n"), 8589934592);
  EXPECT_EQ(parse_cgroup_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), std::nullopt);  // v1: no limit
  EXPECT_EQ(parse_cgroup_limit(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("-1\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("lots\n"), std::nullopt);
}

TEST(MemoryLimits, CgroupFiles) {
  using pets::train::cgroup_limit_files;
  // cgroup v2 alone (a Slurm job's step), mounted at /sys/fs/cgroup.
  const std::string v2_mounts =
      "24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
      "rw,nsdelegate\n";
  EXPECT_EQ(cgroup_limit_files("0::/system.slice/slurmstepd.scope/job_7/step_0\n", v2_mounts),
            (std::vector<std::string>{
                "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max",
                "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max",
                "/sys/fs/cgroup/system.slice/slurmstepd.scope/memory.max",
                "/sys/fs/cgroup/system.slice/memory.max", "/sys/fs/cgroup/memory.max"}));
  // Hybrid: v1's memory controller beside an empty v2 hierarchy.
  const std::string hybrid =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(cgroup_limit_files("4:memory:/batch/job1\n1:cpu:/\n0::/\n", hybrid),
            (std::vector<std::string>{"/sys/fs/cgroup/unified/memory.max",
                                      "/sys/fs/cgroup/memory/batch/job1/memory.limit_in_bytes",
                                      "/sys/fs/cgroup/memory/batch/memory.limit_in_bytes",
                                      "/sys/fs/cgroup/memory/memory.limit_in_bytes"}));
  // A container: the mount's root is the container's own cgroup; a controller listed with
  // others.
  const std::string container =
      "40 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,cpuacct,memory\n";
  EXPECT_EQ(cgroup_limit_files("5:cpuacct,memory:/docker/abc\n", container),
            (std::vector<std::string>{"/sys/fs/cgroup/memory/memory.limit_in_bytes"}));
  EXPECT_TRUE(cgroup_limit_files("", "").empty());
}

TEST(MemoryLimits, MeminfoFields) {
  const std::string meminfo =
      "MemTotal:       24531352 kB\nMemFree:        16012128 kB\nMemAvailable:   21874012 kB\n";
  EXPECT_EQ(pets::train::parse_kib_field(meminfo, "MemAvailable"), 21874012LL * 1024);
  EXPECT_EQ(pets::train::parse_kib_field(meminfo, "MemTotal"), 24531352LL * 1024);
  EXPECT_EQ(pets::train::parse_kib_field(meminfo, "Mem"), std::nullopt);
  EXPECT_EQ(pets::train::parse_kib_field("VmRSS:\t  551234 kB\n", "VmRSS"), 551234LL * 1024);
  EXPECT_EQ(pets::train::parse_kib_field("", "MemAvailable"), std::nullopt);
}

TEST(MemoryLimits, SlurmVariables) {
  const auto limit = [](std::map<std::string, std::string> vars, int ranks) {
    return pets::train::slurm_memory_limit(
        [&vars](const char* name) -> const char* {
          const auto it = vars.find(name);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        ranks);
  };
  EXPECT_FALSE(limit({}, 2).known());
  EXPECT_FALSE(limit({{"SLURM_MEM_PER_NODE", "lots"}}, 2).known());
  const auto node = limit({{"SLURM_MEM_PER_NODE", "200"}}, 2);
  EXPECT_EQ(node.bytes, 100 * kMiB);
  EXPECT_NE(node.source.find("SLURM_MEM_PER_NODE=200 MB shared by 2 ranks"), std::string::npos)
      << node.source;
  EXPECT_EQ(limit({{"SLURM_MEM_PER_CPU", "1000"}}, 4).bytes, 1000 * kMiB);
  EXPECT_EQ(limit({{"SLURM_MEM_PER_CPU", "1000"}, {"SLURM_CPUS_PER_TASK", "4"}}, 4).bytes,
            4000 * kMiB);
  // The smallest of those set: 64000 MB for 8 ranks is less than 4 CPUs of 4000 MB.
  const auto both = limit({{"SLURM_MEM_PER_NODE", "64000"},
                           {"SLURM_MEM_PER_CPU", "4000"},
                           {"SLURM_CPUS_PER_TASK", "4"}},
                          8);
  EXPECT_EQ(both.bytes, 8000 * kMiB);
  EXPECT_NE(both.source.find("SLURM_MEM_PER_NODE"), std::string::npos);
  EXPECT_EQ(limit({{"SLURM_MEM_PER_GPU", "8000"}, {"SLURM_GPUS_ON_NODE", "4"}}, 8).bytes,
            4000 * kMiB);
  EXPECT_EQ(limit({{"SLURM_MEM_PER_GPU", "8000"}}, 2).bytes, 8000 * kMiB);
}

TEST(MemoryLimits, HostTakesTheSmallestAndNamesIt) {
  pets::train::HostMemory host;
  EXPECT_FALSE(pets::train::host_memory_limit(host).known());
  host.available = 10 * 1024 * kMiB;
  host.ranks_resident = 2 * 1024 * kMiB;
  host.ranks_on_host = 4;
  auto limit = pets::train::host_memory_limit(host);
  EXPECT_EQ(limit.bytes, 3 * 1024 * kMiB);  // (10 GiB available + 2 GiB held) / 4 ranks
  EXPECT_NE(limit.source.find("available memory"), std::string::npos);
  host.cgroup_limit = 8 * 1024 * kMiB;
  host.cgroup_file = "/sys/fs/cgroup/job_7/memory.max";
  host.ranks_in_cgroup = 4;
  limit = pets::train::host_memory_limit(host);
  EXPECT_EQ(limit.bytes, 2 * 1024 * kMiB);
  EXPECT_NE(limit.source.find("/sys/fs/cgroup/job_7/memory.max shared by 4 ranks"),
            std::string::npos)
      << limit.source;
  host.slurm = {1024 * kMiB, "Slurm's SLURM_MEM_PER_CPU=1024 MB times 1 CPU a rank"};
  limit = pets::train::host_memory_limit(host);
  EXPECT_EQ(limit.bytes, 1024 * kMiB);
  EXPECT_EQ(limit.source, host.slurm.source);
}

TEST(MemoryCheck, SwitchAndRefusal) {
  EXPECT_TRUE(pets::train::memory_check_enabled(nullptr));
  EXPECT_TRUE(pets::train::memory_check_enabled("1"));
  EXPECT_FALSE(pets::train::memory_check_enabled("0"));
  pets::train::MemoryEstimate e;
  e.runtime = 480 * kMiB;
  e.activations = 3 * 1024 * kMiB;
  const std::string text = pets::train::memory_refusal_text(
      1, "node7", "steps of 64 images of 224 px and evaluations of 128, --unfreeze all", e,
      {1024 * kMiB, "Slurm's SLURM_MEM_PER_NODE=2048 MB shared by 2 ranks"},
      {"a smaller --batch-size (8 fits)", "fewer ranks per host", "--unfreeze layer4"});
  EXPECT_EQ(
      text,
      "not enough memory: rank 1 on node7 would need about 3.47 GiB (activations 3.00 GiB, runtime "
      "480.00 MiB) "
      "for steps of 64 images of 224 px and evaluations of 128, --unfreeze all, more than the 1.00 "
      "GiB it can have (Slurm's SLURM_MEM_PER_NODE=2048 MB shared by 2 "
      "ranks); try a smaller --batch-size (8 fits), fewer ranks per host or --unfreeze layer4; "
      "PETS_MEMORY_CHECK=0 skips this check (mpirun -x PETS_MEMORY_CHECK=0) if the estimate "
      "is wrong");
}

}  // namespace
