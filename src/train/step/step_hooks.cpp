#include "pets/train/step/step_hooks.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

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
    h.averaged = [this](int64_t step, const at::Tensor& weight_grad, const at::Tensor& bias_grad) {
      check_same_on_all_ranks(*verify_, comm::tensors_digest({weight_grad, bias_grad}),
                              "the averaged gradients at step " + std::to_string(step));
      ++verified_;
    };
  return h;
}

}  // namespace pets::train
