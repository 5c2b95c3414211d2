/// \file
/// pets_bench: the benchmark harness. One run measures, on this machine and with the threads it
/// is given:
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
/// Each section is one file of this folder on the harness of harness.hpp; report.cpp runs them.
/// --device cuda runs sections 1 and 3 on the GPU (cuDNN convolution, fp32/bf16/fp16; the fp16
/// step with loss scaling) and passes --e2e-args (e.g. "--device cuda") to every pets_train run;
/// bench/device_check.sh runs it so on a GPU node.
/// It writes one JSON report (--report FILE and stdout) and a short table (stderr).
/// `pets_bench --check FILE` validates a report: every section present, every number positive.
///
/// Benchmarks are not timed tests; CI runs this in --smoke mode only (bench/run_bench.sh).

#include <torch/cuda.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "loader_measure.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace po = boost::program_options;

namespace pets::bench {
namespace {

[[noreturn]] void usage(const std::string& message) {
  throw pets::UsageError("pets_bench: " + message);
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
      "step-only", text(c.step_only),
      "PRECISION.UNFREEZE (e.g. bf16.layer4, fp32.none): that model step alone in this process, "
      "--batch, --image-size, --min-iters and --min-seconds as given; its images/s, each step, "
      "its phases and the peak resident memory")(
      "step-phases", po::bool_switch(&c.step_phases),
      "--step-only: also time the step's forward alone after it (the frozen stages, then the "
      "whole forward), as many calls as the timed steps")("roof-batch", count(c.roof_batch),
                                                          "roofline convolution: batch")(
      "roof-channels", count(c.roof_channels), "roofline convolution: channels")(
      "roof-size", count(c.roof_size), "roofline convolution: image side")(
      "min-seconds", po::value<double>(&c.min_seconds)->default_value(c.min_seconds),
      "least seconds of each measurement")("min-iters", count(c.min_iters),
                                           "least calls of each measurement")(
      "warmup", count(c.warmup), "untimed calls before each timed measurement")(
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
  const auto sweep = worker_counts(loader_sweep, 1);
  if (!sweep) usage("--loader-sweep needs worker counts of at least 1, got '" + loader_sweep + "'");
  c.loader_sweep = *sweep;
  if (!(c.min_seconds >= 0) || !std::isfinite(c.min_seconds))
    usage("--min-seconds needs a non-negative number, got " + pets::format_number(c.min_seconds));
  if (c.bn_mode != "train" && c.bn_mode != "eval") usage("--bn-mode must be train or eval");
  if (c.device != "cpu" && c.device != "cuda") usage("--device must be cpu or cuda");
  if (c.device == "cuda" && !torch::cuda::is_available())
    usage("--device cuda: no CUDA device is available to this build");
  if (!c.step_only.empty() && !known_step_only(c, c.step_only))
    usage("--step-only: '" + c.step_only +
          "' is not PRECISION.UNFREEZE (fp32 or bf16, fp16 too on cuda; none, layer4, layer3, "
          "layer2, layer1 or all)");
  if (c.step_phases && c.step_only.empty()) usage("--step-phases needs --step-only");
  if (!c.step_only.empty() && (c.loader_only || c.e2e_only))
    usage("--step-only excludes --loader-only and --e2e-only");
  if (c.loader_only && c.e2e_only) usage("--loader-only and --e2e-only exclude each other");
  if (c.e2e_only && !c.e2e) usage("--e2e-only and --no-e2e exclude each other");
  for (const auto& name : e2e_run_names(c))
    if (!known_e2e_run(name)) usage("--e2e-runs: unknown run '" + name + "' (see --help)");
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
                                                {"--warmup", c.warmup},
                                                {"--classes", c.synth_classes},
                                                {"--train-batch", c.train_batch},
                                                {"--eval-batch", c.eval_batch}})
    if (value < 0) usage(std::string(name) + " must not be negative, got " + std::to_string(value));
  if (!c.step_only.empty()) {  // no data and no pets_train run
    command.config = c;
    return command;
  }
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
  run_report(*command.config, argc, argv);
  return 0;
}

}  // namespace
}  // namespace pets::bench

int main(int argc, char** argv) { return pets::run_program(argc, argv, pets::bench::bench_main); }
