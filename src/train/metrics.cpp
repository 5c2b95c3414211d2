#include "pets/train/metrics.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace pets::train {

EpochMetrics training_metrics(int64_t epoch, const EpochPosition& position, double lr) {
  EpochMetrics m;
  m.epoch = epoch;
  m.lr = lr;
  m.train_seconds = position.seconds;
  m.train_loss = position.images > 0 ? position.loss_sum / position.images : 0.0;
  m.train_images_per_s = position.seconds > 0 ? position.images / position.seconds : 0.0;
  m.loader_wait_share = position.seconds > 0 ? position.wait_seconds / position.seconds : 0.0;
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

std::string progress_text(int64_t epoch, int64_t step, int64_t steps, double images_per_s,
                          double loss, double eta_seconds) {
  char line[160];
  std::snprintf(line, sizeof line, "[epoch %lld] step %lld/%lld  %.1f img/s  loss %.4f  ETA %.0fs",
                static_cast<long long>(epoch), static_cast<long long>(step),
                static_cast<long long>(steps), images_per_s, loss, eta_seconds);
  return line;
}

std::string run_summary_line(const std::vector<EpochMetrics>& epochs, double wall_seconds,
                             const std::string& model_path) {
  if (epochs.empty()) return "[run] no epoch finished";
  const EpochMetrics* best = &epochs.front();
  double images = 0.0;
  double seconds = 0.0;
  for (const EpochMetrics& m : epochs) {
    if (m.accuracy > best->accuracy) best = &m;
    images += m.train_images_per_s * m.train_seconds;
    seconds += m.train_seconds;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "[run] %zu epochs, final accuracy %.2f %%, best %.2f %% at epoch %lld; %.1f s "
                "wall, %.1f train img/s; model ",
                epochs.size(), epochs.back().accuracy, best->accuracy,
                static_cast<long long>(best->epoch), wall_seconds,
                seconds > 0 ? images / seconds : 0.0);
  return line + (model_path.empty() ? std::string("not written") : model_path);
}

std::string metrics_jsonl(const std::vector<EpochMetrics>& epochs) {
  std::string text;
  for (const auto& m : epochs) text += nlohmann::json(m).dump() + "\n";
  return text;
}

void to_json(nlohmann::json& j, const EpochMetrics& m) {
  j = {{"epoch", m.epoch},
       {"accuracy", m.accuracy},
       {"correct", m.correct},
       {"evaluated", m.evaluated},
       {"train_loss", m.train_loss},
       {"lr", m.lr},
       {"train_images_per_s", m.train_images_per_s},
       {"eval_images_per_s", m.eval_images_per_s},
       {"train_seconds", m.train_seconds},
       {"eval_seconds", m.eval_seconds},
       {"loader_wait_share", m.loader_wait_share}};
}

void from_json(const nlohmann::json& j, EpochMetrics& m) {
  j.at("epoch").get_to(m.epoch);
  j.at("accuracy").get_to(m.accuracy);
  j.at("correct").get_to(m.correct);
  j.at("evaluated").get_to(m.evaluated);
  j.at("train_loss").get_to(m.train_loss);
  j.at("lr").get_to(m.lr);
  j.at("train_images_per_s").get_to(m.train_images_per_s);
  j.at("eval_images_per_s").get_to(m.eval_images_per_s);
  j.at("train_seconds").get_to(m.train_seconds);
  j.at("eval_seconds").get_to(m.eval_seconds);
  j.at("loader_wait_share").get_to(m.loader_wait_share);
}

void to_json(nlohmann::json& j, const EpochPosition& p) {
  j = {{"step", p.step},
       {"loss_sum", p.loss_sum},
       {"images", p.images},
       {"seconds", p.seconds},
       {"wait_seconds", p.wait_seconds}};
}

void from_json(const nlohmann::json& j, EpochPosition& p) {
  j.at("step").get_to(p.step);
  j.at("loss_sum").get_to(p.loss_sum);
  j.at("images").get_to(p.images);
  j.at("seconds").get_to(p.seconds);
  j.at("wait_seconds").get_to(p.wait_seconds);
}

}  // namespace pets::train
