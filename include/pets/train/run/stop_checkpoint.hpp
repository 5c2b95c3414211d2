#pragma once
/// \file
/// The checkpoint a stop writes: that of the last step completed, written by a thread of each
/// rank as soon as the signal comes, without waiting for the step in flight. Rank 0 (the leader)
/// writes its last commit: everything but the other ranks' own BatchNorm statistics, which each
/// rank writes as its shard (docs/design.md, "The stop checkpoint", says why and which steps);
/// once a stop has begun, rank 0 writes a later commit only when the one it took was stale (a
/// trained backbone's live tensors moved on: StaleState).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace pets::train {

struct TrainingState;

/// Thrown by a Writer given a commit whose tensors have moved on since (a trained backbone's,
/// which commits refer to instead of copying: TrainStep::copy_for_stop): the leader then writes
/// the next commit, which follows at once.
class StaleState : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StopCheckpoint {
 public:
  /// Writes this rank's part of a state's checkpoint (RunSession::save_stop) and returns its
  /// path; on rank 0 also makes it the newest checkpoint.
  using Writer = std::function<std::string(const TrainingState&)>;

  /// `writer`: this rank keeps commits and runs the stop thread; null where a rank has nothing
  /// of its own to write (every call then does nothing). `leader` (rank 0): chooses the step, a
  /// stop writes its last commit and prints the stop line. Another rank writes its last two
  /// commits when the stop reaches it and every commit after (its shard of whichever step rank
  /// 0 chose, which is one of them). `out`: --out as given, for the stop line.
  StopCheckpoint(Writer writer, std::string out, bool leader = true);
  /// Ends the thread (a stop under way is finished first).
  ~StopCheckpoint();
  StopCheckpoint(const StopCheckpoint&) = delete;
  StopCheckpoint& operator=(const StopCheckpoint&) = delete;

  /// After a completed step (or the start, or an end-of-epoch checkpoint): the state at
  /// (epoch, step) that a stop now writes. `make` builds it (its tensors must not change
  /// afterwards, TrainingState::cloned(), or the writer must know when they have: StaleState);
  /// `on_disk`: the checkpoint of that state is already
  /// written (`make` is not called). The leader's stop writes the last commit when it begins (or
  /// the first, when it began during the start-up), a later one only when that one was stale;
  /// another rank writes each commit at once once a stop began.
  void commit(std::int64_t epoch, std::int64_t step, const std::function<TrainingState()>& make);
  void commit_on_disk(std::int64_t epoch, std::int64_t step);
  /// The end-of-epoch checkpoint of the main thread: written (never while the stop thread
  /// writes) and committed as on disk, unless a stop began (then nothing is written: the stop's
  /// checkpoint stays the latest). Returns whether it was written.
  bool save(std::int64_t epoch, const TrainingState& state);
  /// The ranks agreed to stop: each rank makes sure its part of the stop checkpoint is written
  /// (rank 0: and its line printed; the thread's work, begun now when the signal came to another
  /// rank) and waits for it. Throws pets::Error when the write failed: on rank 0 that error is
  /// the failure's one report (the thread prints nothing of it).
  void stop();
  /// After the last epoch's checkpoint: a later signal writes nothing (the run ends once the
  /// final model is written). Returns whether a stop had begun before (rank 0: the run ends as
  /// stopped, its line printed); on rank 0 throws as stop() when that stop's write failed.
  bool close();

 private:
  struct Committed;
  void run();
  /// What a stop writes: the leader's last commit, with the stop line; another rank's last two.
  void write_and_report();
  void write_parts();
  /// The error stop() throws when this rank's part of the stop was not written (under mutex_).
  void throw_if_failed() const;

  Writer writer_;
  std::string out_;
  bool leader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::mutex write_mutex_;  ///< one checkpoint write at a time
  std::shared_ptr<const Committed> latest_;
  std::shared_ptr<const Committed> previous_;  ///< the commit before latest_ (other ranks)
  bool began_ = false;                         ///< a stop began: commits are ignored
  bool done_ = false;                          ///< its checkpoint is written and its line printed
  bool closed_ = false;                        ///< close(): signals write nothing
  bool quit_ = false;                          ///< the destructor: the thread ends
  std::string error_;                          ///< why the stop's write failed
  std::thread thread_;
};

}  // namespace pets::train
