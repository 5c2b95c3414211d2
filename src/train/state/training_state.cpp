#include "pets/train/state/training_state.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>

#include "pets/data/loader.hpp"
#include "pets/train/state/checkpoint.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

// The schema's names.
const char* const kModelPrefix = "model.";
const char* const kRankBuffers = "rank_buffers";
const char* const kExpAvg = "adam.exp_avg.";
const char* const kExpAvgSq = "adam.exp_avg_sq.";

}  // namespace

TrainingState TrainingState::at(const RunShape& shape, int64_t epoch, const EpochPosition& position,
                                std::vector<EpochMetrics> history) {
  TrainingState s;
  s.config = shape.config;
  s.version = PETS_VERSION;
  s.batching = data::kTrainBatching;
  s.world_size = shape.world_size;
  s.steps_per_epoch = shape.steps_per_epoch;
  s.store = shape.store;
  s.epoch = epoch;
  s.position = position;
  s.history = std::move(history);
  return s;
}

TrainingState TrainingState::cloned() const {
  TrainingState s = *this;
  for (auto& [name, t] : s.model) t = t.detach().clone();
  if (s.rank_buffers.defined()) s.rank_buffers = s.rank_buffers.clone();
  for (auto& t : s.adam_exp_avg) t = t.clone();
  for (auto& t : s.adam_exp_avg_sq) t = t.clone();
  return s;
}

TrainingState TrainingState::shard_part() const {
  TrainingState s;
  s.config = config;
  s.world_size = world_size;
  s.steps_per_epoch = steps_per_epoch;
  s.epoch = epoch;
  s.position = position;
  s.schedule_steps = schedule_steps;
  s.store = store;
  s.rank_shards = rank_shards;
  if (!rank_shards) return s;
  s.per_rank = per_rank;
  const std::set<std::string> names(per_rank.begin(), per_rank.end());
  for (const auto& [name, t] : model)
    if (names.count(name) != 0) s.model.emplace_back(name, t.detach().clone());
  return s;
}

void TrainingState::restore_model_tensors(const Tensors& targets, const std::string& path) const {
  std::map<std::string, at::Tensor> saved(model.begin(), model.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    const auto it = saved.find(name);
    if (it == saved.end()) throw UsageError(path + ": no tensor 'model." + name + "'");
    at::Tensor target = t;
    target.copy_(it->second);
  }
}

nlohmann::json TrainingState::to_json() const {
  nlohmann::json state = {{"config", config},
                          {"version", version},
                          {"batching", batching},
                          {"adam_steps", adam_steps},
                          {"schedule_steps", schedule_steps},
                          {"schedule_steps_per_update", schedule_steps_per_update},
                          {"steps_per_epoch", steps_per_epoch},
                          {"epoch", epoch},
                          {"position", position},
                          {"last_lr", last_lr},
                          {"world_size", world_size},
                          {"history", history},
                          {"store", {{"id", store.id}, {"path", store.path}}}};
  const auto scaler_json = [](const GradScalerState& g) {
    return nlohmann::json{{"scale", g.scale}, {"growth_tracker", g.growth_tracker}};
  };
  if (grad_scaler) state["grad_scaler"] = scaler_json(*grad_scaler);
  if (backbone_adam_steps > 0) state["backbone_adam_steps"] = backbone_adam_steps;
  for (const HeadState& h : more_heads) {
    nlohmann::json head = {
        {"adam_steps", h.adam_steps}, {"schedule_steps", h.schedule_steps}, {"last_lr", h.last_lr}};
    if (h.grad_scaler) head["grad_scaler"] = scaler_json(*h.grad_scaler);
    state["more_heads"].push_back(head);
  }
  return state;
}

TrainingState::Tensors TrainingState::tensors() const {
  PETS_CHECK(adam_exp_avg.size() == adam_exp_avg_sq.size(),
             "training state: Adam's moments differ in count");
  Tensors out;
  for (const auto& [name, t] : model) out.emplace_back(kModelPrefix + name, t.cpu());
  if (rank_buffers.defined()) out.emplace_back(kRankBuffers, rank_buffers.cpu());
  for (std::size_t i = 0; i < adam_exp_avg.size(); ++i) {
    out.emplace_back(kExpAvg + std::to_string(i), adam_exp_avg[i].cpu());
    out.emplace_back(kExpAvgSq + std::to_string(i), adam_exp_avg_sq[i].cpu());
  }
  return out;
}

std::string TrainingState::save(const std::string& dir) const {
  PETS_CHECK(!rank_shards, "a checkpoint with shards is committed once they are written");
  return save_checkpoint(dir, schedule_steps, to_json(), tensors());
}

std::string TrainingState::write(const std::string& dir) const {
  return write_checkpoint_file(dir, schedule_steps, to_json(), tensors(), shards());
}

std::optional<ShardSet> TrainingState::shards() const {
  if (!rank_shards) return std::nullopt;
  return ShardSet{epoch, position.step, static_cast<int>(world_size)};
}

void TrainingState::commit(const std::string& dir) const { point_latest_at(dir, schedule_steps); }

std::string TrainingState::save_shard(const std::string& dir, int rank) const {
  PETS_CHECK(rank_shards && rank > 0 && rank < world_size,
             "no shard of rank " + std::to_string(rank));
  const std::set<std::string> names(per_rank.begin(), per_rank.end());
  Tensors out;
  for (const auto& [name, t] : model)
    if (names.count(name) != 0) out.emplace_back(kModelPrefix + name, t.cpu());
  PETS_CHECK(out.size() == names.size(), "a shard names tensors the state does not hold");
  const nlohmann::json state = {
      {"epoch", epoch}, {"step", position.step}, {"rank", rank}, {"world_size", world_size}};
  return write_shard_file(dir, {schedule_steps, epoch, position.step, rank}, state, out);
}

TrainingState TrainingState::read_shard(const std::string& dir, int rank) const {
  PETS_CHECK(rank_shards && rank > 0 && rank < world_size,
             "no shard of rank " + std::to_string(rank));
  const std::string path =
      (std::filesystem::path(dir) / shard_file_name({schedule_steps, epoch, position.step, rank}))
          .string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(path + ": rank " + std::to_string(rank) +
                     "'s part of the checkpoint is not there");
  const Checkpoint shard = read_checkpoint(path);
  TrainingState s;
  try {
    const nlohmann::json& j = shard.state;
    if (shard.index != schedule_steps || j.at("epoch").get<int64_t>() != epoch ||
        j.at("step").get<int64_t>() != position.step || j.at("rank").get<int>() != rank ||
        j.at("world_size").get<int64_t>() != world_size)
      throw UsageError(path + ": not rank " + std::to_string(rank) + "'s part of checkpoint " +
                       std::to_string(schedule_steps) + " at epoch " + std::to_string(epoch) +
                       ", step " + std::to_string(position.step));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": bad shard state: " + e.what());
  }
  for (const auto& [name, t] : shard.tensors) {
    if (name.compare(0, std::char_traits<char>::length(kModelPrefix), kModelPrefix) != 0)
      throw UsageError(path + ": unexpected tensor '" + name + "'");
    s.model.emplace_back(name.substr(std::char_traits<char>::length(kModelPrefix)), t);
  }
  return s;
}

TrainingState TrainingState::from_checkpoint(const Checkpoint& ckpt) {
  TrainingState s;
  try {
    const nlohmann::json& j = ckpt.state;
    j.at("config").get_to(s.config);
    // Absent from checkpoints written before pets_train recorded them.
    s.version = j.value("version", std::string());
    s.batching = j.value("batching", std::string());
    j.at("world_size").get_to(s.world_size);
    j.at("steps_per_epoch").get_to(s.steps_per_epoch);
    j.at("epoch").get_to(s.epoch);
    j.at("position").get_to(s.position);
    j.at("adam_steps").get_to(s.adam_steps);
    j.at("schedule_steps").get_to(s.schedule_steps);
    j.at("last_lr").get_to(s.last_lr);
    // An earlier pets_train stepped OneCycle once per optimiser step and wrote no such key.
    s.schedule_steps_per_update = j.value("schedule_steps_per_update", int64_t{1});
    s.backbone_adam_steps = j.value("backbone_adam_steps", int64_t{0});
    j.at("history").get_to(s.history);
    // Checkpoints from before store ids have no "store": its id stays empty.
    if (const auto it = j.find("store"); it != j.end()) {
      it->at("id").get_to(s.store.id);
      it->at("path").get_to(s.store.path);
    }
    s.rank_shards = ckpt.shards.has_value();
    const auto scaler_of = [](const nlohmann::json& g) {
      return GradScalerState{g.at("scale").get<double>(), g.at("growth_tracker").get<int64_t>()};
    };
    if (const auto it = j.find("grad_scaler"); it != j.end()) s.grad_scaler = scaler_of(*it);
    if (const auto it = j.find("more_heads"); it != j.end()) {
      for (const nlohmann::json& head : *it) {
        HeadState h;
        head.at("adam_steps").get_to(h.adam_steps);
        head.at("schedule_steps").get_to(h.schedule_steps);
        head.at("last_lr").get_to(h.last_lr);
        if (const auto g = head.find("grad_scaler"); g != head.end()) h.grad_scaler = scaler_of(*g);
        s.more_heads.push_back(h);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(ckpt.path + ": bad checkpoint state: " + e.what());
  }
  std::map<std::string, at::Tensor> exp_avg, exp_avg_sq;
  const auto starts = [](const std::string& name, const std::string& prefix) {
    return name.compare(0, prefix.size(), prefix) == 0;
  };
  for (const auto& [name, t] : ckpt.tensors) {
    if (starts(name, kModelPrefix))
      s.model.emplace_back(name.substr(std::char_traits<char>::length(kModelPrefix)), t);
    else if (name == kRankBuffers)
      s.rank_buffers = t;
    else if (starts(name, kExpAvgSq))
      exp_avg_sq[name.substr(std::char_traits<char>::length(kExpAvgSq))] = t;
    else if (starts(name, kExpAvg))
      exp_avg[name.substr(std::char_traits<char>::length(kExpAvg))] = t;
    else
      throw UsageError(ckpt.path + ": unexpected tensor '" + name + "'");
  }
  // Moments 0, 1, ... of both kinds, none missing.
  for (std::size_t i = 0; i < exp_avg.size() || i < exp_avg_sq.size(); ++i) {
    const std::string key = std::to_string(i);
    const auto m = exp_avg.find(key), v = exp_avg_sq.find(key);
    if (m == exp_avg.end() || v == exp_avg_sq.end())
      throw UsageError(ckpt.path + ": no tensor '" + (m == exp_avg.end() ? kExpAvg : kExpAvgSq) +
                       key + "'");
    s.adam_exp_avg.push_back(m->second);
    s.adam_exp_avg_sq.push_back(v->second);
  }
  if (s.rank_buffers.defined() &&
      (s.rank_buffers.dim() != 2 || s.rank_buffers.scalar_type() != at::kDouble))
    throw UsageError(ckpt.path + ": '" + std::string(kRankBuffers) +
                     "' is not a [ranks, n] float64 tensor");
  return s;
}

}  // namespace pets::train
