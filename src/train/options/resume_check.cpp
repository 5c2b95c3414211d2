#include "pets/train/options/resume_check.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {

RunConfig RunConfig::of(const TrainOptions& o, std::vector<std::string> labels) {
  RunConfig c;
  c.options = recorded_option_values(o);
  // A resumed run may start in another folder: its files are recorded where they are.
  for (const char* key : {"data", "pretrained", "tensorboard"}) {
    std::string& path = c.options[key];
    if (!path.empty()) path = std::filesystem::absolute(path).lexically_normal().string();
  }
  c.labels = std::move(labels);
  return c;
}

void to_json(nlohmann::json& j, const RunConfig& c) {
  j = {{"options", c.options}, {"labels", c.labels}};
}

void from_json(const nlohmann::json& j, RunConfig& c) {
  j.at("labels").get_to(c.labels);
  if (const auto it = j.find("options"); it != j.end()) {
    it->get_to(c.options);
    return;
  }
  // An older checkpoint: six settings under their own keys.
  c.options.clear();
  c.options["epochs"] = std::to_string(j.at("epochs").get<int64_t>());
  c.options[kBatchSizeKey] = std::to_string(j.at("batch_size").get<int64_t>());
  c.options["max-lr"] = format_number(j.at("max_lr").get<double>());
  c.options["seed"] = std::to_string(j.at("seed").get<std::uint64_t>());
  c.options["bn-mode"] = j.at("bn_mode").get<std::string>();
  c.options["mixed-precision"] = j.at("mixed_precision").get<std::string>();
}

namespace {

using Values = std::map<std::string, std::string>;

/// "--batch-size 8 (<label>: 16), --epochs 4 (<label>: 5)": the run settings among `keys` that
/// `saved` records and `current` gives otherwise; empty when none.
std::string differing_settings(const Values& saved, const Values& current,
                               const std::vector<std::string>& keys, const std::string& label) {
  std::string text;
  for (const std::string& key : keys) {
    const auto was = saved.find(key);
    const auto is = current.find(key);
    if (was == saved.end() || is == current.end() || was->second == is->second) continue;
    const auto shown = [](const std::string& v) { return v.empty() ? "(none)" : v; };
    text += (text.empty() ? "" : ", ") + ("--" + key) + " " + shown(was->second) + " (" + label +
            ": " + shown(is->second) + ")";
  }
  return text;
}

}  // namespace

TrainOptions resume_options(const TrainOptions& options, const std::vector<std::string>& given,
                            const RunConfig& saved, const std::string& checkpoint_path,
                            bool finished) {
  // Compared with paths made absolute, as recorded; taken as typed (this start's folder).
  const Values current = RunConfig::of(options, {}).options;
  const Values typed = recorded_option_values(options);
  Values merged = saved.options;
  for (const std::string& key : given)
    if (const auto it = typed.find(key); it != typed.end()) merged[key] = it->second;
  std::vector<std::string> compared;
  for (const std::string& key : run_setting_keys())
    if (std::find(given.begin(), given.end(), key) != given.end()) compared.push_back(key);
  if (const std::string differ = differing_settings(saved.options, current, compared, "given");
      !differ.empty()) {
    std::string message =
        "--resume: the run in " + options.out + " was started with other settings: " + differ +
        "; leave these options out to continue it with its own (its "
        "checkpoint " +
        checkpoint_path + " holds them), or start a new run (--overwrite, or another --out)";
    const auto epochs = saved.options.find("epochs");
    if (finished && epochs != saved.options.end() && differ.find("--epochs ") != std::string::npos)
      message += ". A finished run cannot be extended: its OneCycle schedule spanned its " +
                 epochs->second +
                 " epochs and has ended. To train on from its model, start a new run from it: "
                 "--pretrained " +
                 (std::filesystem::path(options.out) / "model.safetensors").string() +
                 " --out NEW_DIR";
    throw UsageError(message);
  }
  TrainOptions resumed = options_from_values(merged, checkpoint_path);
  resumed.out = options.out;
  resumed.resume = options.resume;
  resumed.overwrite = options.overwrite;
  resumed.config = options.config;
  resumed.write_config = options.write_config;
  if (resumed.data.empty())
    throw UsageError(checkpoint_path +
                     " does not record its --data (an older pets_train wrote it): give the "
                     "run's options again, --data included");
  return resumed;
}

namespace {

/// A checkpoint continues only on the image store it was trained on: same labels and step count
/// are not enough (another split, other images).
void check_same_store(const std::string& path, const StoreIdentity& saved,
                      const StoreIdentity& current, const std::string& data_path) {
  if (saved.id == current.id) return;
  const auto id = [](const std::string& s) { return "store_id " + s; };
  const std::string written =
      path + " was written from the image store " + (saved.path.empty() ? "?" : saved.path);
  if (saved.id.empty())
    throw UsageError(path + " records no image store identity (an older pets_train wrote it), " +
                     "so it cannot be resumed on --data " + data_path + " (" + id(current.id) +
                     "); start over with --overwrite");
  if (current.id.empty())
    throw UsageError(written + " (" + id(saved.id) + "); --data " + data_path +
                     " has no store_id (an older pets_preprocess wrote it), so it is another "
                     "store");
  throw UsageError(written + " (" + id(saved.id) + "); --data " + data_path +
                   " is another store (" + id(current.id) +
                   "; pets_preprocess gives every file it writes a new id): resume with the "
                   "store it was written from, or start over with --overwrite");
}

}  // namespace

void check_resume_compatible(const std::string& path, const RunShape& saved, bool mid_epoch,
                             const RunShape& current, const std::string& data_path) {
  if (saved.config.labels != current.config.labels)
    throw UsageError(path + ": its " + std::to_string(saved.config.labels.size()) +
                     " class labels differ from the " +
                     std::to_string(current.config.labels.size()) + " labels of " + data_path);
  if (const std::string differ = differing_settings(saved.config.options, current.config.options,
                                                    run_setting_keys(), "this run");
      !differ.empty())
    throw UsageError(path + ": written with other settings: " + differ);
  check_same_store(path, saved.store, current.store, data_path);
  if (saved.world_size != current.world_size && mid_epoch)
    throw UsageError(path + ": a mid-epoch checkpoint of " + std::to_string(saved.world_size) +
                     " ranks; resume it with as many (an end-of-epoch one resumes with any)");
  if (saved.world_size == current.world_size && saved.steps_per_epoch != current.steps_per_epoch)
    throw UsageError(path + ": written with " + std::to_string(saved.steps_per_epoch) +
                     " steps per epoch, this run has " + std::to_string(current.steps_per_epoch) +
                     " (another data set)");
}

void check_schedule_resumable(const std::string& path, int64_t world_size, int64_t steps_per_update,
                              bool finished) {
  if (steps_per_update == world_size || finished) return;
  const auto steps = [](int64_t n) {
    return n == 1 ? std::string("one step") : std::to_string(n) + " steps";
  };
  throw UsageError(path + ": written by an earlier pets_train, whose OneCycle schedule at " +
                   std::to_string(world_size) + " ranks took " + steps(steps_per_update) +
                   " per optimiser step; this one takes " + steps(world_size) +
                   " (one per rank, as Accelerate, over one process's batches), so the learning "
                   "rates of the run so far do not continue on its schedule: start over with "
                   "--overwrite, or finish the run with the pets_train that wrote it");
}

void check_batching_resumable(const std::string& path, const SavedBatching& saved,
                              int64_t world_size, const std::string& current, bool finished) {
  if (saved.world_size == 1 || world_size == 1 || finished) return;
  const std::string what_to_do =
      ": resume it at one rank (-np 1), where the batches are the same, or start over with "
      "--overwrite";
  if (!saved.batching.empty()) {
    if (saved.batching == current) return;
    throw UsageError(path + ": written by pets_train " +
                     (saved.version.empty() ? std::string("?") : saved.version) +
                     ", whose ranks made their training batches as '" + saved.batching +
                     "'; this one makes them as '" + current +
                     "', so the run would not continue on the images it was training with" +
                     what_to_do);
  }
  if (saved.options == nullptr || saved.options->count("image-size") != 0) return;
  throw UsageError(path + ": written at " + std::to_string(saved.world_size) +
                   " ranks by an earlier pets_train (it records no --image-size), whose ranks "
                   "split each step's --batch-size images between them; this one batches as "
                   "Accelerate, every rank taking --batch-size images at every step, so the run "
                   "would not continue as it started" +
                   what_to_do);
}

}  // namespace pets::train
