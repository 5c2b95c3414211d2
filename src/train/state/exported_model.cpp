#include "pets/train/state/exported_model.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "pets/data/loader.hpp"
#include "pets/model/safetensors.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

/// The shortest text that reads back as the same float ("0.485", not "0.48500001430511475").
std::string float_text(float value) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  PETS_CHECK(ec == std::errc(), "cannot format a float");
  return std::string(text, end);
}

std::string float_list(const std::array<float, 3>& values) {
  return "[" + float_text(values[0]) + ", " + float_text(values[1]) + ", " + float_text(values[2]) +
         "]";
}

/// Reads a card's metadata, naming the file and the key in every refusal.
class CardReader {
 public:
  explicit CardReader(const model::SafetensorsFile& file) : file_(file) {}

  const std::string& text(const std::string& key) const {
    const auto it = file_.metadata().find(key);
    if (it == file_.metadata().end()) refuse(key, "is missing");
    return it->second;
  }

  nlohmann::json json(const std::string& key) const {
    const nlohmann::json value = nlohmann::json::parse(text(key), nullptr, false);
    if (value.is_discarded()) refuse(key, "is not JSON: '" + text(key) + "'");
    return value;
  }

  int64_t integer(const std::string& key, int64_t min, int64_t max = INT32_MAX) const {
    const std::string& t = text(key);
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || value < min || value > max)
      refuse(key, "is not an integer in " + std::to_string(min) + " .. " + std::to_string(max) +
                      ": '" + t + "'");
    return value;
  }

  double number(const std::string& key) const {
    const nlohmann::json value = json(key);
    if (!value.is_number() || !std::isfinite(value.get<double>()))
      refuse(key, "is not a number: '" + text(key) + "'");
    return value.get<double>();
  }

  std::array<float, 3> channels(const std::string& key) const {
    const nlohmann::json value = json(key);
    if (!value.is_array() || value.size() != 3)
      refuse(key, "is not a list of 3 numbers: '" + text(key) + "'");
    std::array<float, 3> out{};
    for (std::size_t c = 0; c < 3; ++c) {
      if (!value[c].is_number()) refuse(key, "is not a list of 3 numbers: '" + text(key) + "'");
      out[c] = static_cast<float>(value[c].get<double>());
    }
    return out;
  }

  void expect(const std::string& key, const std::string& want) const {
    if (text(key) != want)
      refuse(key, "is '" + text(key) + "'; this program runs '" + want + "' only");
  }

  [[noreturn]] void refuse(const std::string& key, const std::string& what) const {
    throw UsageError(file_.path() + ": metadata '" + key + "' " + what);
  }

 private:
  const model::SafetensorsFile& file_;
};

}  // namespace

std::map<std::string, std::string> model_metadata(const ModelCard& card) {
  const Preprocessing& p = card.preprocessing;
  const std::string size = std::to_string(p.image_size);
  std::map<std::string, std::string> m{
      {"format", "pt"},
      {"arch", "resnet50d"},
      {"num_classes", std::to_string(card.labels.size())},
      {"label_names", nlohmann::json(card.labels).dump()},
      {"input_size", "[3, " + size + ", " + size + "]"},
      {"interpolation", "bilinear"},
      {"crop_pct", "1.0"},
      {"crop_mode", "squash"},
      {"mean", float_list(p.mean)},
      {"std", float_list(p.std)},
      {"max_side", std::to_string(p.max_side)},
  };
  if (card.epoch) {
    m["epoch"] = std::to_string(card.epoch->epoch);
    m["accuracy"] = nlohmann::json(card.epoch->accuracy).dump();
    m["correct"] = std::to_string(card.epoch->correct);
    m["evaluated"] = std::to_string(card.epoch->evaluated);
  }
  if (card.sweep.size() > 1) {
    m["max_lr"] = nlohmann::json(card.sweep.at(card.head)).dump();
    m["head"] = std::to_string(card.head);
    m["sweep_max_lr"] = nlohmann::json(card.sweep).dump();
  }
  return m;
}

ModelCard model_card(const data::Loader& loader, const EpochMetrics* epoch) {
  ModelCard card;
  card.labels = loader.store().label_names();
  card.preprocessing.image_size = loader.options().image_size;
  card.preprocessing.max_side = loader.store().max_side();
  if (epoch != nullptr) card.epoch = *epoch;
  return card;
}

ModelCard read_model_card(const model::SafetensorsFile& file) {
  const auto& metadata = file.metadata();
  if (metadata.count(model::kTrainingStateMetadataKey) != 0)
    throw UsageError(file.path() +
                     " is a pets_train checkpoint, not an exported model: use the "
                     "model.safetensors (or best.safetensors) of its run");
  if (metadata.count("label_names") == 0)
    throw UsageError(file.path() +
                     " has no label_names in its metadata: it was exported by an older pets_train "
                     "(or is not a pets_train model); export it again: remove it and run the "
                     "run's pets_train command with --resume");
  const CardReader read(file);
  read.expect("arch", "resnet50d");
  ModelCard card;
  const nlohmann::json labels = read.json("label_names");
  if (!labels.is_array() || labels.empty()) read.refuse("label_names", "is not a list of names");
  for (const auto& name : labels) {
    if (!name.is_string()) read.refuse("label_names", "is not a list of names");
    card.labels.push_back(name.get<std::string>());
  }
  if (read.integer("num_classes", 1) != static_cast<int64_t>(card.labels.size()))
    read.refuse("num_classes", "is " + read.text("num_classes") + ", but label_names has " +
                                   std::to_string(card.labels.size()) + " names");
  Preprocessing& p = card.preprocessing;
  const nlohmann::json size = read.json("input_size");
  if (!size.is_array() || size.size() != 3 || size[0] != 3 || !size[1].is_number_integer() ||
      size[1] != size[2] || size[1].get<int64_t>() < 1 || size[1].get<int64_t>() > 65536)
    read.refuse("input_size", "is not [3, N, N]: '" + read.text("input_size") + "'");
  p.image_size = size[1].get<int>();
  read.expect("interpolation", "bilinear");
  read.expect("crop_pct", "1.0");
  read.expect("crop_mode", "squash");
  p.mean = read.channels("mean");
  p.std = read.channels("std");
  for (const float s : p.std)
    if (!(s > 0))
      read.refuse("std", "has a value that is not positive: '" + read.text("std") + "'");
  p.max_side = static_cast<int>(read.integer("max_side", 0));
  if (metadata.count("epoch") != 0) {
    EpochMetrics e;
    e.epoch = read.integer("epoch", 0);
    e.accuracy = read.number("accuracy");
    e.correct = read.integer("correct", 0, INT64_MAX);
    e.evaluated = read.integer("evaluated", 0, INT64_MAX);
    card.epoch = e;
  }
  if (metadata.count("sweep_max_lr") != 0) {
    const nlohmann::json sweep = read.json("sweep_max_lr");
    if (!sweep.is_array() || sweep.size() < 2)
      read.refuse("sweep_max_lr", "is not a list of learning rates");
    for (const auto& v : sweep) {
      if (!v.is_number()) read.refuse("sweep_max_lr", "is not a list of learning rates");
      card.sweep.push_back(v.get<double>());
    }
    card.head = static_cast<int>(read.integer("head", 0, static_cast<int64_t>(sweep.size()) - 1));
  }
  return card;
}

void write_exported_model(const std::string& path, const torch::nn::Module& model,
                          const ExportedHead& head, const ModelCard& card) {
  model::NamedTensors tensors;
  int replaced = 0;
  for (auto [name, t] : model::state_dict(model)) {
    const at::Tensor* written = name == "fc.weight" ? &head.weight
                                : name == "fc.bias" ? &head.bias
                                                    : nullptr;
    if (written != nullptr) {
      PETS_CHECK(written->sizes() == t.sizes(),
                 "export: the head's " + name + " has another shape " + "than the model's");
      t = *written;
      ++replaced;
    }
    tensors.emplace_back(name, t.detach().cpu().contiguous());
  }
  PETS_CHECK(replaced == 2, "export: the model has no fc.weight and fc.bias to write the head as");
  model::write_tensors(path, tensors, model_metadata(card));
}

}  // namespace pets::train
