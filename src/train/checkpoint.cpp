#include "pets/train/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;

const char* const kLatest = "latest";

std::string checkpoint_name(int64_t index) {
  return "ckpt-" + std::to_string(index) + ".safetensors";
}

/// Covers the state text and every tensor's name, dtype, shape and bytes, so a flipped byte in
/// the header or the data is caught.
std::string digest_of(const std::string& state_text, const model::NamedTensors& tensors) {
  uint64_t h = fnv1a(state_text.data(), state_text.size());
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    h = fnv1a(name.data(), name.size(), h);
    const std::string type = c10::toString(t.scalar_type());
    h = fnv1a(type.data(), type.size(), h);
    for (int64_t d : t.sizes()) h = fnv1a(&d, sizeof d, h);
    h = fnv1a(t.data_ptr(), t.numel() * t.element_size(), h);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace

uint64_t fnv1a(const void* data, std::size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

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
                       {{"format", "pt"}, {"pets_state", state_text},
                        {"pets_digest", digest_of(state_text, tensors)}});
  write_file_atomically((fs::path(dir) / kLatest).string(), checkpoint_name(index) + "\n");
  return path;
}

Checkpoint read_checkpoint(const std::string& path) {
  const auto file = model::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  const auto state_it = meta.find("pets_state");
  const auto digest_it = meta.find("pets_digest");
  if (state_it == meta.end() || digest_it == meta.end())
    throw UsageError(path + ": not a pets_train checkpoint (no pets_state/pets_digest metadata)");
  Checkpoint ckpt;
  ckpt.path = path;
  for (const auto& info : file.tensors()) ckpt.tensors.emplace_back(info.name, model::to_tensor(file, info));
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
    if (std::regex_match(name, m, pattern)) candidates.emplace_back(std::stoll(m[1]), entry.path().string());
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
    } catch (const UsageError& e) {
      if (notices) notices->push_back(std::string(e.what()) + "; falling back to an older checkpoint");
    }
  }
  return std::nullopt;
}

}  // namespace pets::train
