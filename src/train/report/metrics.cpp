#include "pets/train/report/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "pets/util/number_text.hpp"

namespace pets::train {

EpochMetrics training_metrics(int64_t epoch, const EpochPosition& position, double lr) {
  EpochMetrics m;
  m.epoch = epoch;
  m.lr = lr;
  m.train_seconds = position.seconds;
  m.train_loss = position.images > 0 ? position.loss_sum / position.images : 0.0;
  m.train_images_per_s = position.seconds > 0 ? position.images / position.seconds : 0.0;
  m.loader_wait_share = position.seconds > 0 ? position.wait_seconds / position.seconds : 0.0;
  m.bytes_per_step = position.step > 0 ? position.comm_bytes / position.step : 0;
  m.comm_share = position.seconds > 0 ? position.comm_seconds / position.seconds : 0.0;
  return m;
}

void set_evaluation(EpochMetrics& m, int64_t correct, int64_t evaluated, double seconds) {
  m.eval_seconds = seconds;
  m.correct = correct;
  m.evaluated = evaluated;
  m.accuracy = evaluated > 0 ? 100.0 * static_cast<double>(correct) / evaluated : 0.0;
  m.eval_images_per_s = evaluated / seconds;
}

std::string result_line(const EpochMetrics& m) {
  char line[64];
  std::snprintf(line, sizeof line, "epoch %lld: %.2f", static_cast<long long>(m.epoch), m.accuracy);
  return line;
}

std::string summary_line(const EpochMetrics& m) {
  char line[200];
  std::snprintf(line, sizeof line,
                "[epoch %lld] loss %.4f, train %.1f img/s (%.1fs, loader wait %.0f%%), eval %.1f "
                "img/s",
                static_cast<long long>(m.epoch), m.train_loss, m.train_images_per_s,
                m.train_seconds, 100.0 * m.loader_wait_share, m.eval_images_per_s);
  return line;
}

const EpochMetrics* best_epoch(const std::vector<EpochMetrics>& epochs) {
  const EpochMetrics* best = nullptr;
  for (const EpochMetrics& m : epochs)
    if (best == nullptr || m.accuracy > best->accuracy) best = &m;
  return best;
}

std::string run_summary_line(const std::vector<EpochMetrics>& epochs, double wall_seconds,
                             const std::string& model_path) {
  if (epochs.empty()) return "[run] no epoch finished";
  const EpochMetrics* best = best_epoch(epochs);
  double images = 0.0;
  double seconds = 0.0;
  for (const EpochMetrics& m : epochs) {
    images += m.train_images_per_s * m.train_seconds;
    seconds += m.train_seconds;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                ", final accuracy %.2f %%, best %.2f %% at epoch %lld; %.1f s wall, %.1f train "
                "img/s; model ",
                epochs.back().accuracy, best->accuracy, static_cast<long long>(best->epoch),
                wall_seconds, seconds > 0 ? images / seconds : 0.0);
  return "[run] " + count_text(static_cast<long long>(epochs.size()), "epoch") + line +
         (model_path.empty() ? std::string("not written") : model_path);
}

std::string metrics_jsonl(const std::vector<EpochMetrics>& epochs) {
  std::string text;
  for (const auto& m : epochs) text += nlohmann::json(m).dump() + "\n";
  return text;
}

namespace {

// Each struct's fields, listed once for both directions: f(key, member).
template <class M, class F>
void epoch_metrics_fields(M& m, F&& f) {
  f("epoch", m.epoch);
  f("accuracy", m.accuracy);
  f("correct", m.correct);
  f("evaluated", m.evaluated);
  f("train_loss", m.train_loss);
  f("lr", m.lr);
  f("train_images_per_s", m.train_images_per_s);
  f("eval_images_per_s", m.eval_images_per_s);
  f("train_seconds", m.train_seconds);
  f("eval_seconds", m.eval_seconds);
  f("loader_wait_share", m.loader_wait_share);
  f("upload_share", m.upload_share);
  f("bytes_per_step", m.bytes_per_step);
  f("comm_share", m.comm_share);
}

template <class P, class F>
void epoch_position_fields(P& p, F&& f) {
  f("step", p.step);
  f("loss_sum", p.loss_sum);
  f("images", p.images);
  f("seconds", p.seconds);
  f("wait_seconds", p.wait_seconds);
  f("comm_bytes", p.comm_bytes);
  f("comm_seconds", p.comm_seconds);
}

/// Keys an earlier pets_train did not write: read as 0 (comm_share: as not measured).
bool added_later(std::string_view key) {
  return key == "upload_share" || key == "bytes_per_step" || key == "comm_share" ||
         key == "comm_bytes" || key == "comm_seconds";
}

}  // namespace

void to_json(nlohmann::json& j, const EpochMetrics& m) {
  j = nlohmann::json::object();
  epoch_metrics_fields(m, [&](const char* key, const auto& value) { j[key] = value; });
  if (std::isnan(m.comm_share)) j["comm_share"] = nullptr;  // not measured
}

void from_json(const nlohmann::json& j, EpochMetrics& m) {
  epoch_metrics_fields(m, [&](const char* key, auto& value) {
    if (added_later(key) && (!j.contains(key) || j.at(key).is_null())) return;
    j.at(key).get_to(value);
  });
  // Not measured: written as null (NaN), read back as NaN.
  if (const auto it = j.find("comm_share"); it == j.end() || it->is_null())
    m.comm_share = std::numeric_limits<double>::quiet_NaN();
}

void to_json(nlohmann::json& j, const EpochPosition& p) {
  j = nlohmann::json::object();
  epoch_position_fields(p, [&](const char* key, const auto& value) { j[key] = value; });
}

void from_json(const nlohmann::json& j, EpochPosition& p) {
  epoch_position_fields(p, [&](const char* key, auto& value) {
    if (added_later(key) && !j.contains(key)) return;
    j.at(key).get_to(value);
  });
}

}  // namespace pets::train
