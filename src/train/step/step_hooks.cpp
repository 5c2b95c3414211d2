#include "pets/train/step/step_hooks.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/train/step/verify_ranks.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

SwitchHooks::SwitchHooks(const DebugSwitches& switches, int rank, comm::Communicator* verify)
    : fault_(switches.inject_fault),
      pause_(switches.pause_step),
      rank_(rank),
      verify_(switches.verify_ranks ? verify : nullptr) {
  PETS_CHECK(!switches.verify_ranks || verify != nullptr,
             "PETS_VERIFY_RANKS needs a communicator to compare the gradients over");
}

StepHooks SwitchHooks::hooks() {
  StepHooks h;
  if (pause_ || fault_)
    h.before_allreduce = [this](int64_t step) {
      if (pause_ && pause_->step == step && rank_ == 0) {
        std::fprintf(stderr, "pausing in step %lld (test switch, %.1f s)\n",
                     static_cast<long long>(step), pause_->seconds);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::duration<double>(pause_->seconds));
      }
      skew_ = inject_fault(fault_, rank_, step);
    };
  if (fault_)
    h.after_allreduce = [this](int64_t, StepSums& sums) {
      if (skew_) sums.buffer()[0] += 1.0;
    };
  if (verify_)
    h.averaged = [this](int64_t step, const std::vector<at::Tensor>& grads) {
      // One digest per head (its weight's and bias's gradients), so that the message names it.
      const std::size_t heads = grads.size() / 2;
      std::vector<std::uint64_t> digests;
      std::vector<std::string> names;
      for (std::size_t k = 0; k < heads; ++k) {
        digests.push_back(comm::tensors_digest({grads[2 * k], grads[2 * k + 1]}));
        names.push_back((heads > 1 ? "head " + std::to_string(k) + "'s" : std::string("the")) +
                        " averaged gradients at step " + std::to_string(step));
      }
      check_same_on_all_ranks(*verify_, digests, names);
      ++verified_;
    };
  return h;
}

}  // namespace pets::train
