#include "pets/train/state/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/digest.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;

const char* const kLatest = "latest";
const char* const kShards = "shards";  // the state's record of the shards that belong to it

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

/// The bytes of a checkpoint file of `state` (its whole JSON state: "index" included) and
/// `tensors`; `label` names it in errors.
std::string file_bytes(const nlohmann::json& state, const model::NamedTensors& tensors,
                       const std::string& label) {
  const std::string state_text = state.dump();
  return model::tensors_bytes(tensors,
                              {{"format", "pt"},
                               {model::kTrainingStateMetadataKey, state_text},
                               {"pets_digest", digest_of(state_text, tensors)}},
                              label);
}

/// Writes `<dir>/<name>` with `state` (and its "index") and `tensors`, replaced atomically.
std::string write_file(const std::string& dir, const std::string& name, int64_t index,
                       nlohmann::json state, const model::NamedTensors& tensors) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) PETS_ERROR("cannot create checkpoint folder '" + dir + "': " + ec.message());
  state["index"] = index;
  const std::string path = (fs::path(dir) / name).string();
  write_file_atomically(path, file_bytes(state, tensors, path));
  return path;
}

/// A checkpoint from its file's contents, verified; `file.path()` names it.
Checkpoint checkpoint_of(const model::SafetensorsFile& file) {
  const std::string& path = file.path();
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
    if (const auto it = ckpt.state.find(kShards); it != ckpt.state.end())
      ckpt.shards = ShardSet{it->at("epoch").get<int64_t>(), it->at("step").get<int64_t>(),
                             it->at("ranks").get<int>()};
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": bad checkpoint state: " + e.what());
  }
  return ckpt;
}

}  // namespace

std::string write_checkpoint_file(const std::string& dir, int64_t index,
                                  const nlohmann::json& state, const model::NamedTensors& tensors,
                                  const std::optional<ShardSet>& shards) {
  nlohmann::json with = state;
  if (shards)
    with[kShards] = {{"epoch", shards->epoch}, {"step", shards->step}, {"ranks", shards->ranks}};
  return write_file(dir, checkpoint_file_name(index), index, std::move(with), tensors);
}

void point_latest_at(const std::string& dir, int64_t index) {
  write_file_atomically((fs::path(dir) / kLatest).string(), checkpoint_file_name(index) + "\n");
}

std::string save_checkpoint(const std::string& dir, int64_t index, const nlohmann::json& state,
                            const model::NamedTensors& tensors) {
  const std::string path = write_checkpoint_file(dir, index, state, tensors);
  point_latest_at(dir, index);
  return path;
}

std::string write_shard_file(const std::string& dir, const ShardKey& key,
                             const nlohmann::json& state, const model::NamedTensors& tensors) {
  return write_file(dir, shard_file_name(key), key.index, state, tensors);
}

std::vector<std::string> remove_stray_shards(const std::string& dir) {
  // Per checkpoint index: whether its file is there and readable, and the shards it records.
  struct Owner {
    bool readable = false;
    std::optional<ShardSet> shards;
  };
  std::map<int64_t, std::optional<Owner>> owners;  // nullopt: no such checkpoint file
  const auto owner_of = [&](int64_t index) -> const std::optional<Owner>& {
    auto it = owners.find(index);
    if (it != owners.end()) return it->second;
    std::optional<Owner> owner;
    std::error_code ec;
    const fs::path path = fs::path(dir) / checkpoint_file_name(index);
    if (fs::exists(path, ec)) {
      owner.emplace();
      try {
        owner->shards = read_checkpoint(path.string()).shards;
        owner->readable = true;
      } catch (const std::exception&) {
        // Unreadable now: its shards are kept, whatever they are.
      }
    }
    return owners.emplace(index, owner).first->second;
  };
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> removed;
  for (const std::string& name : names) {
    const std::optional<ShardKey> key = parse_shard_file_name(name);
    if (!key) continue;
    const std::optional<Owner>& owner = owner_of(key->index);
    if (owner && !owner->readable) continue;
    const bool belongs = owner && owner->shards && owner->shards->epoch == key->epoch &&
                         owner->shards->step == key->step;
    std::error_code remove_error;
    if (!belongs && fs::remove(fs::path(dir) / name, remove_error)) removed.push_back(name);
  }
  return removed;
}

std::vector<int> missing_shards(const std::string& dir, int64_t index, const ShardSet& shards,
                                const std::vector<int>* among) {
  std::vector<int> all;
  if (among == nullptr)
    for (int r = 1; r < shards.ranks; ++r) all.push_back(r);
  std::vector<int> missing;
  for (const int r : among != nullptr ? *among : all) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(dir) / shard_file_name({index, shards.epoch, shards.step, r}),
                             ec))
      missing.push_back(r);
  }
  return missing;
}

Checkpoint read_checkpoint(const std::string& path) {
  return checkpoint_of(model::SafetensorsFile::open(path));
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* notices) {
  std::vector<std::pair<int64_t, std::string>> candidates;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (const auto index = parse_checkpoint_file_name(entry.path().filename().string()))
      candidates.emplace_back(*index, entry.path().string());
  // The pointer decides which is newest; files beyond it were never completed as "latest".
  int64_t newest = INT64_MAX;
  std::ifstream latest((fs::path(dir) / kLatest).string());
  std::string pointed;
  if (latest >> pointed)
    if (const auto index = parse_checkpoint_file_name(pointed)) newest = *index;
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [index, path] : candidates) {
    if (index > newest) continue;
    try {
      Checkpoint ckpt = read_checkpoint(path);
      if (!ckpt.shards) return ckpt;
      const std::vector<int> missing = missing_shards(dir, index, *ckpt.shards);
      if (missing.empty()) return ckpt;
      std::string ranks;
      for (const int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      throw UsageError(
          path + ": the shard" + (missing.size() == 1 ? "" : "s") + " of rank" +
          (missing.size() == 1 ? " " : "s ") + ranks + " (" +
          shard_file_name({index, ckpt.shards->epoch, ckpt.shards->step, missing.front()}) +
          (missing.size() == 1 ? ") is" : ", ...) are") + " not there");
    } catch (const IncompatibleCheckpoint&) {
      throw;  // older checkpoints are no better: the run must start afresh
    } catch (const UsageError& e) {
      if (notices)
        notices->push_back(std::string(e.what()) + "; falling back to an older checkpoint");
    }
  }
  return std::nullopt;
}

std::optional<Checkpoint> share_latest_checkpoint(const std::string& dir,
                                                  std::vector<std::string>* notices,
                                                  MPI_Comm comm) {
  // What rank 0 found, as its kind ('c' a checkpoint, 'n' none, 'u' a UsageError, 'i' an
  // IncompatibleCheckpoint) and its path or message; then a checkpoint's file contents.
  constexpr char kFound = 'c', kNone = 'n', kUsage = 'u', kIncompatible = 'i';
  int rank = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::optional<Checkpoint> found;
  std::string outcome;
  if (rank == 0) {
    try {
      found = load_latest_checkpoint(dir, notices);
      outcome = found ? kFound + found->path : std::string(1, kNone);
    } catch (const IncompatibleCheckpoint& e) {
      outcome = kIncompatible + std::string(e.what());
    } catch (const UsageError& e) {
      outcome = kUsage + std::string(e.what());
    }
  }
  outcome = comm::broadcast_string(std::move(outcome), comm);
  PETS_CHECK(!outcome.empty(), "share_latest_checkpoint: no outcome from rank 0");
  const std::string text = outcome.substr(1);
  switch (outcome.front()) {
    case kNone:
      return std::nullopt;
    case kUsage:
      throw UsageError(text);
    case kIncompatible:
      throw IncompatibleCheckpoint(text);
    default:
      break;
  }
  // Rank 0's checkpoint as its file holds it, read back here as from the file.
  std::string bytes = rank == 0 ? file_bytes(found->state, found->tensors, text) : std::string();
  bytes = comm::broadcast_string(std::move(bytes), comm);
  if (rank == 0) return found;
  return checkpoint_of(
      model::SafetensorsFile::parse(std::vector<uint8_t>(bytes.begin(), bytes.end()), text));
}

}  // namespace pets::train
