#include "pets/train/report/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pets/util/number_text.hpp"

namespace pets::train {

std::string startup_text(const StartupFacts& f) {
  std::string input = f.device_input ? "device" : "cpu";
  if (f.resident_bytes >= 0) input += " (resident, " + byte_size_text(f.resident_bytes) + ")";
  const std::string precision =
      f.precision == MixedPrecision::kNo ? "fp32" : "mixed precision " + to_string(f.precision);
  std::string backbone;
  if (f.unfreeze != Unfreeze::kNone)
    backbone = ", training " + to_string(f.unfreeze) + " (lr x" +
               format_number(f.backbone_lr_ratio) + ") from epoch " +
               std::to_string(f.unfreeze_epoch);
  return "pets_train: " + count_text(f.ranks, "rank") + " on " + count_text(f.hosts, "host") +
         ", " + f.device + ", " + count_text(f.threads, "thread") + (f.ranks > 1 ? " each" : "") +
         ", " + precision + ", BN " + to_string(f.bn_mode) + backbone + ", input " + input +
         ", data " + f.data + " (" +
         (f.store_id.empty() ? std::string("a store without id") : "store " + f.store_id) + "), " +
         std::to_string(f.train_images) + " train / " + std::to_string(f.eval_images) +
         " eval images, " + count_text(f.steps_per_epoch, "step") + "/epoch, " +
         count_text(f.epochs, "epoch") + ", out " + f.out;
}

std::string duration_text(double seconds) {
  const long long s = std::isfinite(seconds) ? std::max(0LL, std::llround(seconds)) : 0;
  char text[48];
  if (s < 60)
    std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return text;
}

RunProgress::RunProgress(const Shape& shape, Clock::time_point start)
    : shape_(shape), last_(start) {}

void RunProgress::timed(Clock::time_point now, double* sum, int64_t* count) {
  if (sum != nullptr) {
    *sum += std::chrono::duration<double>(now - last_).count();
    ++*count;
  }
  last_ = now;
}

std::string RunProgress::trained(int64_t epoch, int64_t step, double images_per_s, double loss,
                                 Clock::time_point now) {
  timed(now, &train_seconds_, &train_steps_);
  const int64_t later_epochs = shape_.epochs - epoch - 1;
  train_left_ = shape_.steps - step + later_epochs * shape_.steps;
  // This epoch's evaluation and the later ones; with evaluate_once only the first reads batches.
  const int64_t evaluations = shape_.evaluate_once ? (evaluated_ ? 0 : 1) : later_epochs + 1;
  eval_left_ = evaluations * shape_.eval_steps;
  char text[160];
  std::snprintf(text, sizeof text, " step %lld/%lld  %.1f img/s  loss %.4f",
                static_cast<long long>(step), static_cast<long long>(shape_.steps), images_per_s,
                loss);
  return epoch_text(epoch) + text + eta_text();
}

std::string RunProgress::evaluating(int64_t epoch, int64_t done, Clock::time_point now) {
  // The time before the first batch (the BatchNorm statistics' sync, the fold) is no batch's.
  if (done > 0)
    timed(now, &eval_seconds_, &eval_steps_);
  else
    timed(now, nullptr, nullptr);
  if (done >= shape_.eval_steps) evaluated_ = true;
  const int64_t later_epochs = shape_.epochs - epoch - 1;
  train_left_ = later_epochs * shape_.steps;
  eval_left_ = std::max<int64_t>(0, shape_.eval_steps - done) +
               (shape_.evaluate_once ? 0 : later_epochs * shape_.eval_steps);
  const int64_t images = std::min(done * shape_.eval_step_images, shape_.eval_images);
  return epoch_text(epoch) + " evaluating " + std::to_string(images) + "/" +
         std::to_string(shape_.eval_images) + eta_text();
}

std::optional<double> RunProgress::eta_seconds() const {
  if (train_steps_ == 0) return std::nullopt;
  const double per_step = train_seconds_ / static_cast<double>(train_steps_);
  // An evaluation batch not yet timed: a training step's time per image.
  double per_batch = per_step;
  if (eval_steps_ > 0)
    per_batch = eval_seconds_ / static_cast<double>(eval_steps_);
  else if (shape_.train_step_images > 0)
    per_batch = per_step * static_cast<double>(shape_.eval_step_images) /
                static_cast<double>(shape_.train_step_images);
  return static_cast<double>(train_left_) * per_step + static_cast<double>(eval_left_) * per_batch;
}

std::string RunProgress::epoch_text(int64_t epoch) const {
  return "[epoch " + std::to_string(epoch + 1) + "/" + std::to_string(shape_.epochs) + "]";
}

std::string RunProgress::eta_text() const {
  const std::optional<double> eta = eta_seconds();
  return eta ? "  ETA " + duration_text(*eta) : "";
}

}  // namespace pets::train
