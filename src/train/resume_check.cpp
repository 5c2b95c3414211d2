#include "pets/train/resume_check.hpp"

#include <nlohmann/json.hpp>

#include "pets/util/error.hpp"

namespace pets::train {

RunConfig RunConfig::of(const TrainOptions& o, std::vector<std::string> labels) {
  RunConfig c;
  c.epochs = o.epochs;
  c.batch_size = o.batch_size;
  c.max_lr = o.max_lr;
  c.seed = o.seed;
  c.bn_mode = to_string(o.bn_mode);
  c.mixed_precision = to_string(o.mixed_precision);
  c.labels = std::move(labels);
  return c;
}

namespace {

// The fields, listed once for both directions: f(key, member).
template <class C, class F>
void run_config_fields(C& c, F&& f) {
  f("epochs", c.epochs);
  f("batch_size", c.batch_size);
  f("max_lr", c.max_lr);
  f("seed", c.seed);
  f("bn_mode", c.bn_mode);
  f("mixed_precision", c.mixed_precision);
  f("labels", c.labels);
}

}  // namespace

void to_json(nlohmann::json& j, const RunConfig& c) {
  j = nlohmann::json::object();
  run_config_fields(c, [&](const char* key, const auto& value) { j[key] = value; });
}

void from_json(const nlohmann::json& j, RunConfig& c) {
  run_config_fields(c, [&](const char* key, auto& value) { j.at(key).get_to(value); });
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
  // In the order of the checkpoint's JSON keys, each shown as it is written there.
  const auto differs = [&](const char* key, const nlohmann::json& was, const nlohmann::json& is) {
    if (was != is)
      throw UsageError(path + ": was written with " + key + " = " + was.dump() + ", this run has " +
                       is.dump());
  };
  const RunConfig& s = saved.config;
  const RunConfig& c = current.config;
  differs("batch_size", s.batch_size, c.batch_size);
  differs("bn_mode", s.bn_mode, c.bn_mode);
  differs("epochs", s.epochs, c.epochs);
  differs("max_lr", s.max_lr, c.max_lr);
  differs("mixed_precision", s.mixed_precision, c.mixed_precision);
  differs("seed", s.seed, c.seed);
  check_same_store(path, saved.store, current.store, data_path);
  if (saved.world_size != current.world_size && mid_epoch)
    throw UsageError(path + ": a mid-epoch checkpoint of " + std::to_string(saved.world_size) +
                     " ranks; resume it with as many (an end-of-epoch one resumes with any)");
  if (saved.world_size == current.world_size && saved.steps_per_epoch != current.steps_per_epoch)
    throw UsageError(path + ": written with " + std::to_string(saved.steps_per_epoch) +
                     " steps per epoch, this run has " + std::to_string(current.steps_per_epoch) +
                     " (another data set)");
}

}  // namespace pets::train
