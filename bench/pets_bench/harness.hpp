#pragma once
/// \file
/// pets_bench's shared harness: the settings of a run (Config), the timing loop, and the
/// benchmarks, one per file (roofline.cpp, flops.cpp, model_step.cpp, loader.cpp,
/// end_to_end.cpp). report.cpp runs them in order into one report, writes, prints and checks it;
/// main.cpp parses the command line.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pets/comm/mpi_comm.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/options/options.hpp"

namespace pets::bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// One run's settings: the command line's options (main.cpp), --smoke's sizes applied first.
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
  // --step-only PRECISION.UNFREEZE: that one model step alone (model_step_only), e.g. bf16.layer4
  std::string step_only;
  bool step_phases = false;  // --step-only: also time the forward alone (frozen stages, whole)
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
  std::string e2e_runs;   // comma-separated run names (end_to_end.cpp); empty: the default three
  std::string e2e_args;   // added to every pets_train run, e.g. "--device cuda"
  int preprocess_np = 2;  // ranks of pets_preprocess for a synthesised set
  std::string data;       // an existing store; empty: synthesise one
  int per_class = 20;
  int synth_classes = 37;
  int epochs = 5;
  int train_batch = train::TrainOptions{}.batch_size;  // pets_train's defaults
  int eval_batch = train::TrainOptions{}.eval_batch_size;
  std::string work = "bench-work";
  std::string train_exe, preprocess_exe, synth_exe;
  std::string mpiexec = "mpirun";
  std::string np_flag = "-np";
  std::string mpi_preflags;                     // for every launch
  std::string np1_preflags = "--bind-to none";  // -np 1 --threads 2 must not be bound to one core
  std::string report = "bench-report.json";
};

double seconds_since(Clock::time_point t);

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

double mean(const std::vector<double>& v);

inline bool on_cuda(const Config& c) { return c.device == "cuda"; }

/// The precisions measured: fp16 only on CUDA (pets_train refuses it elsewhere).
std::vector<std::string> precisions(const Config& c);

// ---- the benchmarks ------------------------------------------------------------------------

/// 1. GFLOP/s of a large channels-last 3x3 convolution per precision (roofline.cpp).
json roofline(const Config& c);

/// 2. FLOPs per image of `model`, counted from the operators its forward dispatches (flops.cpp).
json count_flops(pets::model::ResNet50d& model, const Config& c);

/// 3. pets_train's training step alone per precision, as images/s and as a fraction of `roof`'s
/// GFLOP/s at `step_gflop` per image, one rank of `mpi` (model_step.cpp).
json model_step(pets::model::ResNet50d& model, const Config& c, double step_gflop, const json& roof,
                const pets::comm::MpiComm& mpi);

/// --step-only: pets_train's step of one precision and one --unfreeze (`c.step_only`, e.g.
/// "bf16.layer4") alone in this process, with the allocator as pets_train sets it: images/s, each
/// timed step, the process's peak resident memory, and where a step's time goes (model_step.cpp).
json model_step_only(pets::model::ResNet50d& model, const Config& c,
                     const pets::comm::MpiComm& mpi);

/// Whether `value` names a --step-only configuration (a precision of `c`'s device, a dot and an
/// --unfreeze value).
bool known_step_only(const Config& c, const std::string& value);

/// 4. The loader alone on `store`: the CPU path, the device path's staging and its resident
/// store, each with its worker sweep (loader.cpp).
json loader(const Config& c, const std::string& store);

/// The store the runs read: --data, else a set synthesised and preprocessed into --work
/// (end_to_end.cpp). Returns how it was made.
json prepare_data(const Config& c, std::string& store);

/// 5./6. The pets_train runs of e2e_run_names(c) on `store` (end_to_end.cpp).
json end_to_end(const Config& c, const std::string& store, const json& data);

/// The runs of sections 5/6 without --e2e-runs (and np2_bf16 with --e2e-bf16).
extern const std::vector<std::string> kDefaultE2eRuns;

/// The runs of sections 5/6: --e2e-runs, else kDefaultE2eRuns.
std::vector<std::string> e2e_run_names(const Config& c);

/// Whether --e2e-runs can name `name`.
bool known_e2e_run(const std::string& name);

/// --e2e-runs's help: every run it can name and the default runs.
std::string e2e_runs_help();

// ---- the report (report.cpp) ---------------------------------------------------------------

/// Runs the benchmarks `c` asks for into one report, written to --report and stdout, its table
/// to stderr. argc and argv start section 3's MPI world.
void run_report(const Config& c, int argc, char** argv);

/// `pets_bench --check FILE`: 0 when every section is present, every measured number finite and
/// positive and the FLOP hook complete; else 1, each fault on stderr.
int check_report(const std::string& path);

}  // namespace pets::bench
