#include "pets/train/run/stop_checkpoint.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

struct StopCheckpoint::Committed {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  std::optional<TrainingState> state;  ///< empty: its checkpoint is on disk
};

namespace {

void print_line(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

// Another rank's shard that could not be written: a warning, since rank 0 decides the stop's
// outcome (it names the ranks whose shards are missing and keeps the previous checkpoint as the
// latest) and a job that ends in an error, aborting every rank, has its one error line already.
void warn_shard_not_written(const std::string& why) {
  print_line(
      "warning: a shard of the stop's checkpoint was not written, so the checkpoint before "
      "it stays the latest: " +
      why);
}

}  // namespace

StopCheckpoint::StopCheckpoint(Writer writer, std::string out, bool leader)
    : writer_(std::move(writer)), out_(std::move(out)), leader_(leader) {
  if (writer_ && stop_signal_fd() >= 0) thread_ = std::thread([this] { run(); });
}

StopCheckpoint::~StopCheckpoint() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    wake_stop_reader('q');
    thread_.join();
  }
}

void StopCheckpoint::run() {
  const int fd = stop_signal_fd();
  while (true) {
    char byte = 0;
    const ssize_t n = ::read(fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (quit_) return;
      if (byte != 's' || began_ || closed_) continue;
      began_ = true;
    }
    if (leader_)
      write_and_report();
    else
      write_parts();
  }
}

void StopCheckpoint::write_and_report() {
  // The write lock first: an end-of-epoch checkpoint the main thread is writing is finished and
  // becomes the latest commit before this one is chosen.
  std::unique_lock<std::mutex> write_lock(write_mutex_);
  std::shared_ptr<const Committed> latest;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!latest_ && !quit_) {
      print_line(
          "pets_train: no step completed yet: the checkpoint follows once the start-up ends");
      changed_.wait(lock, [&] { return latest_ || quit_; });
    }
    latest = latest_;
  }
  std::string error;
  while (latest && latest->state) {
    try {
      writer_(*latest->state);
      break;
    } catch (const StaleState& e) {
      // The step after it updated the live tensors; its commit follows at once (the main thread
      // commits right after the update), and that step is then the last completed one.
      std::unique_lock<std::mutex> lock(mutex_);
      const bool newer = changed_.wait_for(lock, std::chrono::seconds(60),
                                           [&] { return latest_ != latest || quit_; });
      if (!newer || latest_ == latest) {
        error = e.what();
        break;
      }
      latest = latest_;
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
  }
  write_lock.unlock();
  // A failed write is not printed here: stop() or close() throws it, and main prints it once.
  if (latest && error.empty())
    print_line(stop_line(stop_signal(), latest->epoch, latest->step, out_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = error;
  }
  changed_.notify_all();
}

void StopCheckpoint::write_parts() {
  // Rank 0 chose its last commit when the stop reached it; this rank's last two commits (and
  // those after, written by commit()) include that step, whichever of them it is.
  std::unique_lock<std::mutex> write_lock(write_mutex_);
  std::vector<std::shared_ptr<const Committed>> parts;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& c : {previous_, latest_})
      if (c && c->state) parts.push_back(c);
  }
  std::string error;
  for (const auto& c : parts) {
    try {
      writer_(*c->state);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  write_lock.unlock();
  if (!error.empty()) warn_shard_not_written(error);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    if (error_.empty()) error_ = error;
  }
  changed_.notify_all();
}

void StopCheckpoint::commit(std::int64_t epoch, std::int64_t step,
                            const std::function<TrainingState()>& make) {
  if (!writer_) return;
  // Built outside the lock: the stop thread meanwhile keeps the previous commit. The leader keeps
  // committing after a stop began: its thread takes a later commit when the one it chose is stale.
  auto committed = std::make_shared<Committed>();
  committed->epoch = epoch;
  committed->step = step;
  committed->state.emplace(make());
  bool write_now = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous_ = latest_;
    latest_ = committed;
    write_now = !leader_ && began_;
  }
  changed_.notify_all();
  if (!write_now) return;
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  try {
    writer_(*committed->state);
  } catch (const std::exception& e) {
    warn_shard_not_written(e.what());
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = e.what();
  }
}

void StopCheckpoint::commit_on_disk(std::int64_t epoch, std::int64_t step) {
  if (!writer_) return;
  auto committed = std::make_shared<Committed>();
  committed->epoch = epoch;
  committed->step = step;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous_ = latest_;
    latest_ = std::move(committed);
  }
  changed_.notify_all();
}

bool StopCheckpoint::save(std::int64_t epoch, const TrainingState& state) {
  if (!writer_) return true;
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (began_) return false;
  }
  writer_(state);
  // Committed even when a stop began during the write: it is what `latest` names now, and the
  // stop thread (waiting for the write lock) reports it.
  auto committed = std::make_shared<Committed>();
  committed->epoch = epoch;
  committed->step = state.position.step;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous_ = latest_;
    latest_ = std::move(committed);
  }
  changed_.notify_all();
  return true;
}

void StopCheckpoint::stop() {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!began_) {
    // The signal came to another rank only: this rank writes its part now.
    began_ = true;
    lock.unlock();
    if (leader_)
      write_and_report();
    else
      write_parts();
    lock.lock();
  }
  changed_.wait(lock, [&] { return done_; });
  throw_if_failed();
}

void StopCheckpoint::throw_if_failed() const {
  if (!error_.empty()) PETS_ERROR("the stop's checkpoint was not written: " + error_);
}

bool StopCheckpoint::close() {
  set_final_stretch();
  if (!writer_) return false;
  std::unique_lock<std::mutex> lock(mutex_);
  closed_ = true;
  if (!began_) return false;
  changed_.wait(lock, [&] { return done_; });
  if (leader_) throw_if_failed();
  return true;
}

}  // namespace pets::train
