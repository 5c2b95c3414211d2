// The stop signal flag: SIGUSR1 and SIGTERM recorded, not fatal; a first interrupt stops, a
// second quits.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "pets/train/run/stop_signal.hpp"

namespace {

TEST(StopSignal, UsrOneAndTermAreRecordedNotFatal) {
  pets::train::install_stop_handlers(false);
  pets::train::reset_stop_signal();
  EXPECT_EQ(pets::train::stop_signal(), 0);
  std::raise(SIGUSR1);
  EXPECT_EQ(pets::train::stop_signal(), SIGUSR1);
  std::raise(SIGTERM);
  EXPECT_EQ(pets::train::stop_signal(), SIGTERM);
  std::raise(SIGTERM);
  EXPECT_EQ(pets::train::stop_signal(), SIGTERM);
  pets::train::reset_stop_signal();
  EXPECT_EQ(pets::train::stop_signal(), 0);
}

// Ctrl-C reaching the process: the first SIGINT is a stop request like SIGTERM; a second one
// ends the process at once (killed by SIGINT).
TEST(StopSignal, FirstInterruptStopsSecondQuits) {
  pets::train::install_stop_handlers(false);
  pets::train::reset_stop_signal();
  std::raise(SIGINT);
  EXPECT_EQ(pets::train::stop_signal(), SIGINT);
  pets::train::reset_stop_signal();
  EXPECT_EXIT(
      {
        pets::train::install_stop_handlers(true);
        std::raise(SIGINT);
        if (pets::train::stop_signal() != SIGINT) std::_Exit(3);
        std::raise(SIGINT);
        std::_Exit(4);  // not reached: the second SIGINT kills
      },
      ::testing::KilledBySignal(SIGINT),
      "pets_train: stop requested: rank 0 writes the checkpoint of the last step");
}
}  // namespace
