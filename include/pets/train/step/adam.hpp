#pragma once
/// \file
/// Adam exactly as torch.optim.Adam (single-tensor path, no weight decay, no amsgrad), with its
/// state in plain tensors so checkpoints do not depend on LibTorch's optimizer internals (which
/// changed between 1.13 and 2.x). lr and beta1 are set per step by the OneCycle schedule.

#include <torch/torch.h>

#include <vector>

namespace pets::train {

class Adam {
 public:
  explicit Adam(std::vector<torch::Tensor> params, double beta2 = 0.999, double eps = 1e-8);

  /// One update of every parameter with a defined gradient, with this step's lr and beta1.
  void step(double lr, double beta1);
  void zero_grad();

  int64_t steps() const { return step_; }
  const std::vector<torch::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<torch::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  /// Restores moments and step count (resume); shapes must match the parameters.
  void restore(const std::vector<torch::Tensor>& exp_avg,
               const std::vector<torch::Tensor>& exp_avg_sq, int64_t steps);

 private:
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
  double beta2_, eps_;
  int64_t step_ = 0;
};

}  // namespace pets::train
