#pragma once
/// \file
/// The test switches' hooks around a training step (StepHooks): PETS_PAUSE_STEP's pause on rank
/// 0, PETS_INJECT_FAULT's fault before the allreduce (a `skew` alters the summed gradient after
/// it, on its rank) and PETS_VERIFY_RANKS' comparison of every head's averaged gradients over
/// the ranks.

#include <cstdint>
#include <optional>

#include "pets/train/options/debug_switches.hpp"
#include "pets/train/step/train_step.hpp"

namespace pets::comm {
class Communicator;
}

namespace pets::train {

class SwitchHooks {
 public:
  /// The hooks `switches` ask for on rank `rank`; `verify` (collective, host) compares the
  /// gradients under PETS_VERIFY_RANKS and must then be given.
  SwitchHooks(const DebugSwitches& switches, int rank, comm::Communicator* verify);
  SwitchHooks(const SwitchHooks&) = delete;
  SwitchHooks& operator=(const SwitchHooks&) = delete;

  /// The hooks, for StepSettings::hooks; they refer to this object, which must outlive them.
  StepHooks hooks();
  /// Steps whose averaged gradients were compared across the ranks.
  int64_t steps_verified() const { return verified_; }

 private:
  std::optional<FaultSpec> fault_;
  std::optional<StepPause> pause_;
  int rank_;
  comm::Communicator* verify_;
  bool skew_ = false;
  int64_t verified_ = 0;
};

}  // namespace pets::train
