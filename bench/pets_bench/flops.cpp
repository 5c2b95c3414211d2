/// \file
/// pets_bench section 2: FLOPs per image of ResNet-50d at --image-size, counted from the
/// convolutions and linear layers the model's own forward executes.

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "harness.hpp"
#include "pets/util/error.hpp"

namespace pets::bench {
namespace {

/// Counted by a RecordFunction callback, i.e. a hook on every operator the forward dispatches:
/// aten::convolution (weight [Cout, Cin/groups, kh, kw], output [N, Cout, Hout, Wout]) gives
/// 2 * weight.numel() * Hout * Wout per image; aten::linear (weight [out, in]) gives 2*in*out
/// per row. Nested calls (aten::_convolution, mkldnn kernels, addmm) are not counted again.
struct FlopCounter {
  double conv_flop = 0;
  double linear_flop = 0;
  int64_t conv_calls = 0;
  int64_t linear_calls = 0;
  int64_t rows = 0;  // batch of the last counted call
};
thread_local FlopCounter* g_counter = nullptr;

/// Counted ops in progress on this thread: aten::linear may dispatch aten::addmm (and
/// aten::convolution its own kernels); only the outermost counted op is counted.
thread_local int g_depth = 0;

struct OpContext : at::ObserverContext {
  bool linear = false;
  int64_t conv_weight_numel = 0;  // Cout * Cin/groups * kh * kw
  double linear_flop = 0;
  int64_t rows = 0;
};

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (g_counter == nullptr) return nullptr;
  const std::string name = fn.name();
  const bool conv = name == "aten::convolution";
  // Linear's forward is aten::linear, or aten::addmm for 2-D input with bias (torch::nn).
  const bool linear = name == "aten::linear" || name == "aten::addmm" || name == "aten::mm" ||
                      name == "aten::matmul";
  if (!conv && !linear) return nullptr;
  if (g_depth > 0) return nullptr;
  const auto inputs = fn.inputs();
  auto ctx = std::make_unique<OpContext>();
  ctx->linear = linear;
  if (conv || name == "aten::linear") {
    if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return nullptr;
    const auto weight = inputs[1].toTensor();
    if (conv) {
      ctx->conv_weight_numel = weight.numel();
    } else {  // weight [out, in], input [..., in]
      ctx->rows = inputs[0].toTensor().numel() / weight.size(1);
      ctx->linear_flop = 2.0 * weight.numel() * ctx->rows;
    }
  } else {  // addmm(bias, a, b) / mm(a, b) / matmul(a, b): a [rows, in], b [in, out]
    const size_t first = name == "aten::addmm" ? 1 : 0;
    if (inputs.size() < first + 2 || !inputs[first].isTensor() || !inputs[first + 1].isTensor())
      return nullptr;
    const auto a = inputs[first].toTensor(), b = inputs[first + 1].toTensor();
    if (a.dim() != 2 || b.dim() != 2) return nullptr;
    ctx->rows = a.size(0);
    ctx->linear_flop = 2.0 * a.size(0) * a.size(1) * b.size(1);
  }
  ++g_depth;
  return ctx;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* raw) {
  auto* ctx = static_cast<OpContext*>(raw);
  if (ctx == nullptr) return;
  --g_depth;
  if (g_counter == nullptr) return;
  if (ctx->linear) {
    g_counter->linear_flop += ctx->linear_flop;
    g_counter->linear_calls += 1;
    g_counter->rows = ctx->rows;
    return;
  }
  if (fn.outputs().empty() || !fn.outputs()[0].isTensor()) return;
  const auto out = fn.outputs()[0].toTensor().sizes();  // [N, Cout, Hout, Wout]
  g_counter->conv_flop += 2.0 * ctx->conv_weight_numel * out[0] * out[2] * out[3];
  g_counter->conv_calls += 1;
  g_counter->rows = out[0];
}

}  // namespace

json count_flops(pets::model::ResNet50d& model, const Config& c) {
  int64_t conv_modules = 0, linear_modules = 0, conv_weight_numel = 0;
  for (const auto& m : model->modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
      ++conv_modules;
      conv_weight_numel += conv->weight.numel();
    }
    if (m->as<torch::nn::LinearImpl>() != nullptr) ++linear_modules;
  }
  FlopCounter counter;
  {
    torch::NoGradGuard no_grad;
    const int64_t n = 2;
    auto x = torch::randn({n, 3, c.image_size, c.image_size})
                 .contiguous(torch::MemoryFormat::ChannelsLast);
    auto handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&on_op_start, &on_op_end).needsInputs(true).needsOutputs(true));
    g_counter = &counter;
    const bool was_training = model->is_training();
    model->eval();  // the count does not depend on the mode; eval leaves BN statistics alone
    (void)model->forward(x);
    model->set_backbone_training(was_training);
    g_counter = nullptr;
    at::removeCallback(handle);
    counter.conv_flop /= static_cast<double>(n);
    counter.linear_flop /= static_cast<double>(n);
  }
  PETS_CHECK(counter.conv_calls == conv_modules,
             "FLOP hook saw " + std::to_string(counter.conv_calls) +
                 " convolutions, the model has " + std::to_string(conv_modules) +
                 " Conv2d modules");
  PETS_CHECK(counter.linear_calls == linear_modules, "FLOP hook missed the linear layer");
  const double forward = counter.conv_flop + counter.linear_flop;
  // A frozen-backbone step adds only fc's weight and bias gradients (the input needs none).
  const double fc_backward = counter.linear_flop;
  return {{"image_size", c.image_size},
          {"method",
           "RecordFunction hook on aten::convolution and aten::linear/addmm during the model's "
           "forward"},
          {"conv_modules", conv_modules},
          {"conv_calls", counter.conv_calls},
          {"linear_calls", counter.linear_calls},
          {"conv_weights", conv_weight_numel},
          {"conv_gflop_per_image", counter.conv_flop / 1e9},
          {"linear_gflop_per_image", counter.linear_flop / 1e9},
          {"forward_gflop_per_image", forward / 1e9},
          {"train_step_gflop_per_image", (forward + fc_backward) / 1e9},
          {"note", "BN, ReLU, pooling and the loss are not counted (memory-bound)"}};
}

}  // namespace pets::bench
