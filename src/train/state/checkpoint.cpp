#include "pets/train/state/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "pets/comm/communicator.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/digest.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;

const char* const kLatest = "latest";

std::string checkpoint_name(int64_t index) {
  return "ckpt-" + std::to_string(index) + ".safetensors";
}

/// "xxh3-64:<hex>" over the state text and every tensor's name, dtype, shape and bytes, so a
/// flipped byte in the header or the data is caught.
std::string digest_of(const std::string& state_text, const model::NamedTensors& tensors) {
  Digest digest;
  digest.add_string(state_text);
  for (const auto& [name, tensor] : tensors) comm::add_tensor_to_digest(digest, name, tensor);
  return std::string(Digest::kAlgorithm) + ":" + digest.hex();
}

/// The digest pets_train wrote before it used xxh3-64: 16 hex digits of FNV-1a 64, no prefix.
bool is_fnv1a_digest(const std::string& text) {
  return text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t index, const nlohmann::json& state,
                            const model::NamedTensors& tensors) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) PETS_ERROR("cannot create checkpoint folder '" + dir + "': " + ec.message());
  nlohmann::json full = state;
  full["index"] = index;
  const std::string state_text = full.dump();
  const std::string path = (fs::path(dir) / checkpoint_name(index)).string();
  model::write_tensors(path, tensors,
                       {{"format", "pt"},
                        {model::kTrainingStateMetadataKey, state_text},
                        {"pets_digest", digest_of(state_text, tensors)}});
  write_file_atomically((fs::path(dir) / kLatest).string(), checkpoint_name(index) + "\n");
  return path;
}

Checkpoint read_checkpoint(const std::string& path) {
  const auto file = model::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  const auto state_it = meta.find(model::kTrainingStateMetadataKey);
  const auto digest_it = meta.find("pets_digest");
  if (state_it == meta.end() || digest_it == meta.end())
    throw UsageError(path + ": not a pets_train checkpoint (no pets_state/pets_digest metadata)");
  if (is_fnv1a_digest(digest_it->second))
    throw IncompatibleCheckpoint(
        path + ": written by an older pets_train (digest format fnv1a-64; this one reads " +
        Digest::kAlgorithm + "); it cannot be resumed: start a fresh run (another --out, or " +
        "remove its checkpoints)");
  Checkpoint ckpt;
  ckpt.path = path;
  for (const auto& info : file.tensors())
    ckpt.tensors.emplace_back(info.name, model::to_tensor(file, info));
  if (digest_of(state_it->second, ckpt.tensors) != digest_it->second)
    throw UsageError(path + ": checksum mismatch (the checkpoint is damaged)");
  try {
    ckpt.state = nlohmann::json::parse(state_it->second);
    ckpt.index = ckpt.state.at("index").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": bad checkpoint state: " + e.what());
  }
  return ckpt;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* notices) {
  std::vector<std::pair<int64_t, std::string>> candidates;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  const std::regex pattern(R"(ckpt-(\d+)\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern))
      candidates.emplace_back(std::stoll(m[1]), entry.path().string());
  }
  // The pointer decides which is newest; files beyond it were never completed as "latest".
  int64_t newest = INT64_MAX;
  std::ifstream latest((fs::path(dir) / kLatest).string());
  std::string pointed;
  if (latest >> pointed) {
    std::smatch m;
    if (std::regex_match(pointed, m, pattern)) newest = std::stoll(m[1]);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [index, path] : candidates) {
    if (index > newest) continue;
    try {
      return read_checkpoint(path);
    } catch (const IncompatibleCheckpoint&) {
      throw;  // older checkpoints are no better: the run must start afresh
    } catch (const UsageError& e) {
      if (notices)
        notices->push_back(std::string(e.what()) + "; falling back to an older checkpoint");
    }
  }
  return std::nullopt;
}

}  // namespace pets::train
