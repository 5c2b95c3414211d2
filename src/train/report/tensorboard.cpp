#include "pets/train/report/tensorboard.hpp"

#include <utility>
#include <vector>

#include "pets/util/error.hpp"
#include "pets/util/event_file.hpp"

namespace pets::train {

TensorBoardLog::TensorBoardLog(std::string dir, bool enabled,
                               std::chrono::duration<double> interval, RankLog& log)
    : dir_(std::move(dir)), active_(enabled && !dir_.empty()), interval_(interval), log_(log) {}

TensorBoardLog::~TensorBoardLog() = default;

std::string TensorBoardLog::path() const { return writer_ ? writer_->path() : std::string(); }

template <typename Write>
void TensorBoardLog::write(Write&& write) {
  if (!active_) return;
  try {
    if (!writer_) {
      writer_ = std::make_unique<EventFileWriter>(dir_);
      if (start_step_) writer_->add_session_start(*start_step_);
    }
    write(*writer_);
  } catch (const Error& e) {
    active_ = false;
    log_.note(std::string("warning: --tensorboard: ") + e.what() +
              "; the run goes on without TensorBoard points");
  }
}

void TensorBoardLog::resumed(std::optional<std::int64_t> steps_done) {
  start_step_.reset();
  if (steps_done) start_step_ = *steps_done + 1;
}

void TensorBoardLog::progress(std::int64_t step, double loss, double images_per_s, double lr,
                              Clock::time_point now) {
  if (!active_ || (last_progress_ && now - *last_progress_ < interval_)) return;
  last_progress_ = now;
  write([&](EventFileWriter& w) {
    w.add_scalars(step, {{"train/loss", static_cast<float>(loss)},
                         {"train/images_per_s", static_cast<float>(images_per_s)},
                         {"train/lr", static_cast<float>(lr)}});
    last_train_step_ = step;
  });
}

void TensorBoardLog::epoch(std::int64_t step, const EpochMetrics& m) {
  write([&](EventFileWriter& w) {
    std::vector<Scalar> values{{"eval/accuracy", static_cast<float>(m.accuracy)},
                               {"eval/images_per_s", static_cast<float>(m.eval_images_per_s)}};
    // The progress point at this step, if any, already holds the same values.
    if (step != last_train_step_) {
      values.push_back({"train/loss", static_cast<float>(m.train_loss)});
      values.push_back({"train/images_per_s", static_cast<float>(m.train_images_per_s)});
      values.push_back({"train/lr", static_cast<float>(m.lr)});
    }
    // A sweep: a series per head besides the run's (which follow the epoch's best head).
    for (std::size_t k = 0; k < m.heads.size(); ++k) {
      const std::string head = "/head_" + std::to_string(k);
      values.push_back({"eval/accuracy" + head, static_cast<float>(m.heads[k].accuracy)});
      values.push_back({"train/loss" + head, static_cast<float>(m.heads[k].train_loss)});
      values.push_back({"train/lr" + head, static_cast<float>(m.heads[k].lr)});
    }
    w.add_scalars(step, values);
    last_train_step_ = step;
  });
}

}  // namespace pets::train
