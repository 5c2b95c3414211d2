/// \file
/// pets_bench sections 5/6, end to end: pets_train under mpiexec on a synthesised set (or
/// --data), the runs --e2e-runs names, each read from the metrics.jsonl it writes.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pets/util/error.hpp"

namespace fs = std::filesystem;

namespace pets::bench {
namespace {

/// Single-quotes for /bin/sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

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

/// Names joined by `separator`, for --help.
std::string joined(const std::vector<std::string>& names, const std::string& separator) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : separator) + name;
  return out;
}

}  // namespace

const std::vector<std::string> kDefaultE2eRuns = {"np2", "np2_bn_eval", "np1_threads2"};

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

std::string e2e_runs_help() {
  std::vector<std::string> names;
  for (const auto& kind : e2e_run_kinds()) names.push_back(kind.first);
  return "pets_train runs, comma-separated, of " + joined(names, " ") +
         " (empty: " + joined(kDefaultE2eRuns, ", ") + ")";
}

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

bool known_e2e_run(const std::string& name) { return e2e_run_kinds().count(name) != 0; }

json end_to_end(const Config& c, const std::string& store, const json& data) {
  json runs;
  const auto names = e2e_run_names(c);
  for (const auto& name : names) {
    const E2eKind& kind = e2e_run_kinds().at(name);
    std::cerr << "pets_bench: 5./6. end to end " << name << "\n";
    runs[name] = e2e_run(c, store, name, kind.np, kind.np1_preflags ? c.np1_preflags : "",
                         kind.args, kind.env);
  }
  return {{"data", data},
          {"epochs", c.epochs},
          {"train_batch_per_rank", c.train_batch},
          {"eval_batch_per_rank", c.eval_batch},
          {"image_size", 224},
          {"e2e_args", c.e2e_args},
          {"run_names", names},
          {"runs", runs}};
}

}  // namespace pets::bench
