// StopCheckpoint: on a stop signal, rank 0's thread writes the last state committed at once,
// while the main thread is still busy in a step; later commits and the end-of-epoch checkpoint
// write nothing then; after close() a signal writes nothing. Another rank writes its last two
// commits and every later one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include "pets/train/run/stop_checkpoint.hpp"
#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::StopCheckpoint;
using pets::train::TrainingState;
using Clock = std::chrono::steady_clock;

struct Written {
  std::mutex mutex;
  std::vector<int64_t> epochs;  ///< the epoch of every state written, in order
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return epochs.size();
  }
};

StopCheckpoint::Writer writer(Written& written) {
  return [&written](const TrainingState& s) {
    std::lock_guard<std::mutex> lock(written.mutex);
    written.epochs.push_back(s.epoch);
    return std::string("ckpt");
  };
}

TrainingState state(int64_t epoch, int64_t step) {
  TrainingState s;
  s.epoch = epoch;
  s.position.step = step;
  return s;
}

/// Whether `done` holds within `seconds`.
template <typename Done>
bool within(double seconds, Done done) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class StopCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pets::train::install_stop_handlers(false);
    pets::train::reset_stop_signal();
  }
  void TearDown() override { pets::train::reset_stop_signal(); }
};

TEST_F(StopCheckpointTest, ASignalWritesTheLastCommitAtOnce) {
  Written written;
  StopCheckpoint stop(writer(written), "out");
  stop.commit(0, 1, [] { return state(0, 1); });
  stop.commit(0, 2, [] { return state(7, 2); });
  ASSERT_EQ(written.count(), 0u);
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  // The main thread does nothing more (it would be in the next step): the thread writes.
  const bool in_time = within(5.0, [&] { return written.count() == 1; });
  stop.commit(0, 3, [] { return state(9, 3); });  // the step in flight: ignored
  EXPECT_FALSE(stop.save(1, state(1, 0)));        // an end-of-epoch checkpoint: not written
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(in_time) << "no checkpoint within 5 s of the signal";
  EXPECT_EQ(written.epochs, std::vector<int64_t>{7});
  EXPECT_NE(err.find("stopped by signal 15 at epoch 0, step 2 (SIGTERM); checkpoint written in "
                     "out; continue with --resume: pets_train --resume --out out"),
            std::string::npos)
      << err;
  EXPECT_TRUE(stop.close());  // the run ends as stopped
}

// A commit whose live tensors moved on (a trained backbone updated by the step after it, not yet
// committed): the writer says so, and the leader writes the next commit, which the main thread
// makes at once after the update; the stop line names that step.
TEST_F(StopCheckpointTest, AStaleCommitIsFollowedByTheNext) {
  Written written;
  std::atomic<int> tries{0};
  StopCheckpoint stop(
      [&](const TrainingState& s) {
        ++tries;
        if (s.position.step == 2) throw pets::train::StaleState("moved on");
        return writer(written)(s);
      },
      "out");
  stop.commit(0, 2, [] { return state(0, 2); });
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  const bool tried = within(5.0, [&] { return tries.load() == 1; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(written.count(), 0u);
  stop.commit(0, 3, [] { return state(5, 3); });  // the step whose update it saw: taken
  const bool in_time = within(5.0, [&] { return written.count() == 1; });
  stop.commit(0, 4, [] { return state(6, 4); });  // the step in flight after that: ignored
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(tried && in_time) << "the stale commit was not followed by the next within 5 s";
  EXPECT_EQ(written.epochs, std::vector<int64_t>{5});
  EXPECT_NE(err.find("stopped by signal 15 at epoch 0, step 3 (SIGTERM)"), std::string::npos)
      << err;
}

TEST_F(StopCheckpointTest, AStopAgreedForAnotherRanksSignalWritesTheLastCommit) {
  Written written;
  StopCheckpoint stop(writer(written), "out");
  stop.commit(2, 5, [] { return state(2, 5); });
  testing::internal::CaptureStderr();
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(written.epochs, std::vector<int64_t>{2});
  EXPECT_NE(err.find("stopped by a signal to another rank at epoch 2, step 5;"), std::string::npos)
      << err;
}

TEST_F(StopCheckpointTest, ACheckpointOnDiskIsNotWrittenAgain) {
  Written written;
  StopCheckpoint stop(writer(written), "out");
  EXPECT_TRUE(stop.save(1, state(1, 0)));
  EXPECT_EQ(written.count(), 1u);
  testing::internal::CaptureStderr();
  std::raise(SIGUSR1);
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(written.count(), 1u);
  EXPECT_NE(err.find("stopped by signal 10 at epoch 1, step 0 (SIGUSR1)"), std::string::npos)
      << err;
}

TEST_F(StopCheckpointTest, ASignalBeforeTheFirstCommitWritesThatCommit) {
  Written written;
  StopCheckpoint stop(writer(written), "out");
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  // The start-up is still running: nothing to write yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(written.count(), 0u);
  stop.commit(3, 0, [] { return state(3, 0); });  // the start-up's commit: written
  const bool in_time = within(5.0, [&] { return written.count() == 1; });
  stop.commit(3, 1, [] { return state(4, 1); });  // the step after it: ignored
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(in_time) << "no checkpoint within 5 s of the first commit";
  EXPECT_EQ(written.epochs, std::vector<int64_t>{3});
  EXPECT_NE(err.find("no step completed yet: the checkpoint follows once the start-up ends"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("stopped by signal 15 at epoch 3, step 0 (SIGTERM)"), std::string::npos)
      << err;
}

TEST_F(StopCheckpointTest, AfterCloseASignalWritesNothing) {
  Written written;
  StopCheckpoint stop(writer(written), "out");
  stop.commit(0, 1, [] { return state(0, 1); });
  EXPECT_FALSE(stop.close());
  std::raise(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(written.count(), 0u);
}

// Another rank (not the leader): on a signal it writes its last two commits at once (rank 0
// chose one of them, or chooses the next, which it writes at once too: every commit after),
// prints no stop line, and nothing after close().
TEST_F(StopCheckpointTest, AnotherRankWritesItsLastTwoCommitsAndEveryLaterOne) {
  Written written;
  StopCheckpoint stop(writer(written), "out", /*leader=*/false);
  stop.commit(0, 1, [] { return state(1, 1); });
  stop.commit(0, 2, [] { return state(2, 2); });
  stop.commit(0, 3, [] { return state(3, 3); });
  ASSERT_EQ(written.count(), 0u);
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  const bool in_time = within(5.0, [&] { return written.count() == 2; });
  stop.commit(0, 4, [] { return state(4, 4); });  // the step in flight completes: written too
  stop.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(in_time) << "nothing written within 5 s of the signal";
  EXPECT_EQ(written.epochs, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(err.find("stopped by"), std::string::npos) << err;
  EXPECT_TRUE(stop.close());
}

TEST_F(StopCheckpointTest, AnotherRankWritesItsPartWhenTheRanksAgreeToStop) {
  Written written;
  StopCheckpoint stop(writer(written), "out", /*leader=*/false);
  stop.commit(0, 0, [] { return state(0, 0); });
  stop.commit(0, 1, [] { return state(1, 1); });
  stop.stop();  // the signal came to rank 0 only
  EXPECT_EQ(written.epochs, (std::vector<int64_t>{0, 1}));
}

TEST_F(StopCheckpointTest, AnotherRanksFailedWriteFailsTheStop) {
  StopCheckpoint stop([](const TrainingState&) -> std::string { throw pets::Error("disk full"); },
                      "out", /*leader=*/false);
  stop.commit(0, 1, [] { return state(1, 1); });
  testing::internal::CaptureStderr();
  EXPECT_THROW(stop.stop(), pets::Error);
  const std::string err = testing::internal::GetCapturedStderr();
  // Printed when the write fails (a plain mpirun may kill the rank before stop() returns), as a
  // warning: rank 0's verdict, or the error stop() throws, is the job's one error line.
  EXPECT_NE(err.find("warning: a shard of the stop's checkpoint was not written, so the checkpoint "
                     "before it stays the latest: disk full"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("error:"), std::string::npos) << err;
}

/// How often `part` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

/// A writer that counts its calls in `tries` and fails each with `why`.
StopCheckpoint::Writer failing_writer(std::atomic<int>& tries, const std::string& why) {
  return [&tries, why](const TrainingState&) -> std::string {
    ++tries;
    throw pets::Error(why);
  };
}

// Rank 0's failed write is reported once: not by the thread when it fails, but by the error that
// stop() throws (which main prints as the job's one error line).
TEST_F(StopCheckpointTest, ALeadersFailedWriteIsReportedOnceByStop) {
  std::atomic<int> tries{0};
  StopCheckpoint stop(
      failing_writer(tries, "cannot write 'out/ckpt-1.safetensors': No space left on device"),
      "out");
  stop.commit(0, 1, [] { return state(0, 1); });
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  const bool in_time = within(5.0, [&] { return tries == 1; });
  std::string thrown;
  try {
    stop.stop();
  } catch (const pets::Error& e) {
    thrown = e.what();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(in_time) << "no write within 5 s of the signal";
  EXPECT_EQ(tries.load(), 1);
  EXPECT_NE(thrown.find("the stop's checkpoint was not written: cannot write "
                        "'out/ckpt-1.safetensors': No space left on device"),
            std::string::npos)
      << thrown;
  // What the job prints: the thread's lines, then main's "error: <what stop() threw>".
  const std::string printed = err + "error: " + thrown + "\n";
  EXPECT_EQ(occurrences(printed, "No space left on device"), 1u) << printed;
  EXPECT_EQ(occurrences(printed, "error:"), 1u) << printed;
  EXPECT_EQ(err.find("stopped by"), std::string::npos) << err;
}

// A stop that began before the final stretch and failed: close() throws it, as stop() would.
TEST_F(StopCheckpointTest, ALeadersFailedWriteFailsTheClose) {
  std::atomic<int> tries{0};
  StopCheckpoint stop(failing_writer(tries, "disk full"), "out");
  stop.commit(0, 1, [] { return state(0, 1); });
  testing::internal::CaptureStderr();
  std::raise(SIGTERM);
  const bool in_time = within(5.0, [&] { return tries == 1; });
  EXPECT_THROW(stop.close(), pets::Error);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(in_time) << "no write within 5 s of the signal";
  EXPECT_EQ(err.find("disk full"), std::string::npos) << err;
}

TEST_F(StopCheckpointTest, ARankWithNothingOfItsOwnKeepsNothing) {
  StopCheckpoint stop(nullptr, "out");
  bool made = false;
  stop.commit(0, 1, [&] {
    made = true;
    return state(0, 1);
  });
  EXPECT_FALSE(made);
  stop.stop();
  EXPECT_FALSE(stop.close());
}

}  // namespace
