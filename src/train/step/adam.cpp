#include "pets/train/step/adam.hpp"

#include <cmath>

#include "pets/util/error.hpp"

namespace pets::train {

Adam::Adam(std::vector<torch::Tensor> params, double beta2, double eps)
    : params_(std::move(params)), beta2_(beta2), eps_(eps) {
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  }
}

void Adam::step(double lr, double beta1) {
  torch::NoGradGuard no_grad;
  ++step_;
  // As torch: the bias corrections use the beta1 in force now, raised to the step count.
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& grad = params_[i].grad();
    if (!grad.defined()) continue;
    exp_avg_[i].mul_(beta1).add_(grad, 1.0 - beta1);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(grad, grad, 1.0 - beta2_);
    const torch::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(eps_);
    params_[i].addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

void Adam::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

void Adam::restore(const std::vector<torch::Tensor>& exp_avg,
                   const std::vector<torch::Tensor>& exp_avg_sq, int64_t steps) {
  PETS_CHECK(exp_avg.size() == params_.size() && exp_avg_sq.size() == params_.size() && steps >= 0,
             "Adam state does not match the parameters");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    PETS_CHECK(
        exp_avg[i].sizes() == params_[i].sizes() && exp_avg_sq[i].sizes() == params_[i].sizes(),
        "Adam state shape does not match parameter " + std::to_string(i));
    exp_avg_[i].copy_(exp_avg[i]);
    exp_avg_sq_[i].copy_(exp_avg_sq[i]);
  }
  step_ = steps;
}

}  // namespace pets::train
