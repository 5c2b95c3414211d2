#include "pets/train/report/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "pets/util/error.hpp"
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

double percent(int64_t correct, int64_t evaluated) {
  return evaluated > 0 ? 100.0 * static_cast<double>(correct) / evaluated : 0.0;
}

void set_evaluation(EpochMetrics& m, int64_t correct, int64_t evaluated, double seconds) {
  m.eval_seconds = seconds;
  m.correct = correct;
  m.evaluated = evaluated;
  m.accuracy = percent(correct, evaluated);
  m.eval_images_per_s = evaluated / seconds;
}

int best_head(const std::vector<HeadMetrics>& heads) {
  int best = 0;
  for (std::size_t k = 1; k < heads.size(); ++k)
    if (heads[k].accuracy > heads[best].accuracy) best = static_cast<int>(k);
  return best;
}

void set_heads(EpochMetrics& m, std::vector<HeadMetrics> heads) {
  m.head = best_head(heads);
  const HeadMetrics& h = heads.at(m.head);
  m.train_loss = h.train_loss;
  m.lr = h.lr;
  m.max_lr = h.max_lr;
  m.accuracy = h.accuracy;
  m.correct = h.correct;
  m.evaluated = h.evaluated;
  m.class_correct = h.class_correct;
  m.class_evaluated = h.class_evaluated;
  if (heads.size() > 1) m.heads = std::move(heads);
}

std::string head_line(const EpochMetrics& m, int head) {
  const HeadMetrics& h = m.heads.at(head);
  char line[200];
  std::snprintf(line, sizeof line, "[epoch %lld] head %d max-lr %s: loss %.4f, accuracy %.2f %%%s",
                static_cast<long long>(m.epoch), head, format_number(h.max_lr).c_str(),
                h.train_loss, h.accuracy, head == m.head ? " (best)" : "");
  return line;
}

std::vector<int> worst_classes(const std::vector<int64_t>& correct,
                               const std::vector<int64_t>& evaluated, int n) {
  std::vector<int> classes;
  for (std::size_t c = 0; c < evaluated.size() && c < correct.size(); ++c)
    if (evaluated[c] > 0) classes.push_back(static_cast<int>(c));
  std::stable_sort(classes.begin(), classes.end(), [&](int a, int b) {
    return percent(correct[a], evaluated[a]) < percent(correct[b], evaluated[b]);
  });
  if (static_cast<int>(classes.size()) > n) classes.resize(n);
  return classes;
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
                             const std::string& model_path,
                             const std::vector<std::string>& labels) {
  if (epochs.empty()) return "[run] no epoch finished";
  const EpochMetrics* best = best_epoch(epochs);
  double images = 0.0;
  double seconds = 0.0;
  for (const EpochMetrics& m : epochs) {
    images += m.train_images_per_s * m.train_seconds;
    seconds += m.train_seconds;
  }
  const EpochMetrics& last = epochs.back();
  // After the final accuracy: a sweep's head, the final epoch's three worst classes.
  std::string about;
  if (!last.heads.empty())
    about = "head " + std::to_string(last.head) + " of " + std::to_string(last.heads.size()) +
            ", max-lr " + format_number(last.heads.at(last.head).max_lr);
  std::string worst;
  for (const int c : worst_classes(last.class_correct, last.class_evaluated, 3)) {
    char figure[32];
    std::snprintf(figure, sizeof figure, " %.2f %%",
                  percent(last.class_correct[c], last.class_evaluated[c]));
    worst += (worst.empty() ? "worst: " : ", ") +
             (c < static_cast<int>(labels.size()) ? labels[c] : "class " + std::to_string(c)) +
             figure;
  }
  if (!worst.empty()) about += (about.empty() ? "" : "; ") + worst;
  char accuracy[32];
  std::snprintf(accuracy, sizeof accuracy, ", final accuracy %.2f %%", last.accuracy);
  const std::string best_head =
      best->heads.empty() ? "" : " (head " + std::to_string(best->head) + ")";
  char line[200];
  std::snprintf(line, sizeof line, ", best %.2f %% at epoch %lld%s; %.1f s wall, %.1f train img/s",
                best->accuracy, static_cast<long long>(best->epoch), best_head.c_str(),
                wall_seconds, seconds > 0 ? images / seconds : 0.0);
  return "[run] " + count_text(static_cast<long long>(epochs.size()), "epoch") + accuracy +
         (about.empty() ? "" : " (" + about + ")") + line + "; model " +
         (model_path.empty() ? std::string("not written") : model_path);
}

namespace {

/// Percent right per class, by name; null for a class without held-out images.
nlohmann::json class_accuracy(const std::vector<int64_t>& correct,
                              const std::vector<int64_t>& evaluated,
                              const std::vector<std::string>& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t c = 0; c < labels.size() && c < correct.size() && c < evaluated.size(); ++c)
    j[labels[c]] = evaluated[c] > 0 ? nlohmann::json(percent(correct[c], evaluated[c])) : nullptr;
  return j;
}

}  // namespace

std::string metrics_jsonl(const std::vector<EpochMetrics>& epochs,
                          const std::vector<std::string>& labels) {
  std::string text;
  for (const auto& m : epochs) {
    nlohmann::json j = m;
    if (!labels.empty() && !m.class_evaluated.empty()) {
      j["class_accuracy"] = class_accuracy(m.class_correct, m.class_evaluated, labels);
      for (std::size_t k = 0; k < m.heads.size(); ++k)
        j["heads"][k]["class_accuracy"] =
            class_accuracy(m.heads[k].class_correct, m.heads[k].class_evaluated, labels);
    }
    text += j.dump() + "\n";
  }
  return text;
}

nlohmann::json confusion_json(const EpochMetrics& epoch,
                              const std::vector<std::vector<int64_t>>& confusions,
                              const std::vector<std::string>& labels) {
  const std::size_t classes = labels.size();
  PETS_CHECK(confusions.size() == std::max<std::size_t>(epoch.heads.size(), 1),
             "confusion.json: " + std::to_string(confusions.size()) + " matrices for " +
                 std::to_string(std::max<std::size_t>(epoch.heads.size(), 1)) + " heads");
  nlohmann::json heads = nlohmann::json::array();
  for (std::size_t k = 0; k < confusions.size(); ++k) {
    const std::vector<int64_t>& c = confusions[k];
    PETS_CHECK(c.size() == classes * classes, "confusion.json: head " + std::to_string(k) +
                                                  "'s matrix is not " + std::to_string(classes) +
                                                  " x " + std::to_string(classes));
    nlohmann::json matrix = nlohmann::json::array();
    for (std::size_t t = 0; t < classes; ++t) {
      const auto row = c.begin() + static_cast<std::ptrdiff_t>(t * classes);
      matrix.push_back(std::vector<int64_t>(row, row + static_cast<std::ptrdiff_t>(classes)));
    }
    const bool sweep = !epoch.heads.empty();
    heads.push_back({{"max_lr", sweep ? epoch.heads[k].max_lr : epoch.max_lr},
                     {"accuracy", sweep ? epoch.heads[k].accuracy : epoch.accuracy},
                     {"matrix", std::move(matrix)}});
  }
  return {{"epoch", epoch.epoch}, {"labels", labels}, {"chosen", epoch.head}, {"heads", heads}};
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
  f("max_lr", m.max_lr);
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

template <class H, class F>
void head_metrics_fields(H& h, F&& f) {
  f("max_lr", h.max_lr);
  f("lr", h.lr);
  f("train_loss", h.train_loss);
  f("accuracy", h.accuracy);
  f("correct", h.correct);
  f("evaluated", h.evaluated);
  f("class_correct", h.class_correct);
  f("class_evaluated", h.class_evaluated);
}

/// Keys an earlier pets_train did not write: read as 0 (comm_share: as not measured).
bool added_later(std::string_view key) {
  return key == "upload_share" || key == "bytes_per_step" || key == "comm_share" ||
         key == "comm_bytes" || key == "comm_seconds" || key == "max_lr";
}

}  // namespace

void to_json(nlohmann::json& j, const EpochMetrics& m) {
  j = nlohmann::json::object();
  epoch_metrics_fields(m, [&](const char* key, const auto& value) { j[key] = value; });
  if (std::isnan(m.comm_share)) j["comm_share"] = nullptr;  // not measured
  if (!m.class_evaluated.empty()) {
    j["class_correct"] = m.class_correct;
    j["class_evaluated"] = m.class_evaluated;
  }
  if (!m.heads.empty()) {
    j["head"] = m.head;
    j["heads"] = m.heads;
  }
}

void from_json(const nlohmann::json& j, EpochMetrics& m) {
  epoch_metrics_fields(m, [&](const char* key, auto& value) {
    if (added_later(key) && (!j.contains(key) || j.at(key).is_null())) return;
    j.at(key).get_to(value);
  });
  // Not measured: written as null (NaN), read back as NaN.
  if (const auto it = j.find("comm_share"); it == j.end() || it->is_null())
    m.comm_share = std::numeric_limits<double>::quiet_NaN();
  // Written since per-class counts and sweeps: absent from earlier epochs and single heads.
  if (const auto it = j.find("class_correct"); it != j.end()) it->get_to(m.class_correct);
  if (const auto it = j.find("class_evaluated"); it != j.end()) it->get_to(m.class_evaluated);
  if (const auto it = j.find("head"); it != j.end()) it->get_to(m.head);
  if (const auto it = j.find("heads"); it != j.end()) it->get_to(m.heads);
}

void to_json(nlohmann::json& j, const HeadMetrics& h) {
  j = nlohmann::json::object();
  head_metrics_fields(h, [&](const char* key, const auto& value) { j[key] = value; });
}

void from_json(const nlohmann::json& j, HeadMetrics& h) {
  head_metrics_fields(h, [&](const char* key, auto& value) { j.at(key).get_to(value); });
}

void to_json(nlohmann::json& j, const EpochPosition& p) {
  j = nlohmann::json::object();
  epoch_position_fields(p, [&](const char* key, const auto& value) { j[key] = value; });
  if (!p.more_loss_sums.empty()) j["more_loss_sums"] = p.more_loss_sums;
}

void from_json(const nlohmann::json& j, EpochPosition& p) {
  epoch_position_fields(p, [&](const char* key, auto& value) {
    if (added_later(key) && !j.contains(key)) return;
    j.at(key).get_to(value);
  });
  if (const auto it = j.find("more_loss_sums"); it != j.end()) it->get_to(p.more_loss_sums);
}

}  // namespace pets::train
