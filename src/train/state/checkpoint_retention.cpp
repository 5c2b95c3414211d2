#include "pets/train/state/checkpoint_retention.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "pets/model/state_dict.hpp"
#include "pets/train/state/checkpoint_names.hpp"

namespace pets::train {

namespace fs = std::filesystem;

namespace {

constexpr int kKeptWhileTrainingBackbone = 3;

/// The JSON state in a checkpoint's safetensors header, read without its tensors; nothing when
/// the file cannot be read as one.
std::optional<std::string> state_text_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char size_bytes[8];
  if (!in.read(reinterpret_cast<char*>(size_bytes), sizeof size_bytes)) return std::nullopt;
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | size_bytes[i];  // little-endian
  if (size == 0 || size > (uint64_t{100} << 20)) return std::nullopt;
  std::string header(size, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(size))) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto meta = j.find("__metadata__");
  if (meta == j.end() || !meta->is_object()) return std::nullopt;
  const auto state = meta->find(model::kTrainingStateMetadataKey);
  if (state == meta->end() || !state->is_string()) return std::nullopt;
  return state->get<std::string>();
}

/// The index of the checkpoint `dir`/latest names, if it names one.
std::optional<int64_t> latest_index(const fs::path& dir) {
  std::ifstream in(dir / "latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  return parse_checkpoint_file_name(name);
}

}  // namespace

int checkpoints_kept(const TrainOptions& options) {
  if (options.keep_checkpoints > 0) return options.keep_checkpoints;
  return options.unfreeze == Unfreeze::kNone ? 0 : kKeptWhileTrainingBackbone;
}

std::optional<int64_t> epoch_ended_by(const std::string& state_text) {
  const nlohmann::json j = nlohmann::json::parse(state_text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const auto epoch = j.find("epoch");
  const auto position = j.find("position");
  if (epoch == j.end() || !epoch->is_number_integer() || position == j.end() ||
      !position->is_object())
    return std::nullopt;
  const auto step = position->find("step");
  if (step == position->end() || !step->is_number_integer() || step->get<int64_t>() != 0 ||
      epoch->get<int64_t>() < 1)
    return std::nullopt;
  return epoch->get<int64_t>() - 1;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep,
                                           std::optional<int64_t> best_epoch) {
  std::vector<std::string> removed;
  const std::optional<int64_t> latest = latest_index(dir);
  if (keep <= 0 || !latest) return removed;
  // Only checkpoints older than `latest` are candidates: a newer file was never completed (a stop
  // whose shards did not all come) and is left as it is.
  std::vector<int64_t> older;
  std::vector<std::string> shard_names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const auto index = parse_checkpoint_file_name(name); index && *index < *latest)
      older.push_back(*index);
    else if (parse_shard_file_name(name))
      shard_names.push_back(name);
  }
  std::sort(older.begin(), older.end(), std::greater<>());
  // `latest` is the first of the `keep` newest.
  for (std::size_t i = static_cast<std::size_t>(keep) - 1; i < older.size(); ++i) {
    const fs::path path = fs::path(dir) / checkpoint_file_name(older[i]);
    const std::optional<std::string> state = state_text_of(path);
    if (!state) continue;
    if (best_epoch && epoch_ended_by(*state) == best_epoch) continue;
    std::error_code remove_error;
    if (!fs::remove(path, remove_error)) continue;
    removed.push_back(path.filename().string());
    for (const std::string& shard : shard_names)
      if (parse_shard_file_name(shard)->index == older[i] &&
          fs::remove(fs::path(dir) / shard, remove_error))
        removed.push_back(shard);
  }
  return removed;
}

}  // namespace pets::train
