/// \file
/// pets_bench section 1, the roofline: GFLOP/s of a 3x3 stride-1 pad-1 channels-last conv2d,
/// [roof_batch, roof_channels, roof_size, roof_size] -> same, per precision; cuDNN's on CUDA.

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>

#include "harness.hpp"

namespace pets::bench {
namespace {

torch::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return torch::kBFloat16;
  if (precision == "fp16") return torch::kHalf;
  return torch::kFloat32;
}

}  // namespace

json roofline(const Config& c) {
  torch::NoGradGuard no_grad;
  const int64_t n = c.roof_batch, ch = c.roof_channels, s = c.roof_size;
  // On CUDA one timed call is `reps` launches and a synchronisation: the launches queue up
  // and the GPU runs them back to back, as it runs a model's convolutions.
  const int reps = on_cuda(c) ? 20 : 1;
  const double flop = 2.0 * ch * ch * 9 * s * s * n;  // pad 1, stride 1: Hout = Hin
  json out = {{"op", on_cuda(c) ? "conv2d 3x3 stride 1 pad 1, channels-last, cuDNN"
                                : "conv2d 3x3 stride 1 pad 1, channels-last"},
              {"device", c.device},
              {"input", {n, ch, s, s}},
              {"weight", {ch, ch, 3, 3}},
              {"launches_per_call", reps},
              {"gflop_per_call", flop * reps / 1e9}};
  if (on_cuda(c)) out["fp32_tf32_allowed"] = at::globalContext().allowTF32CuDNN();
  const torch::Device device(on_cuda(c) ? torch::kCUDA : torch::kCPU);
  for (const auto& precision : precisions(c)) {
    const auto dtype = dtype_of(precision);
    // Random data (zeros can run faster than real data on a GPU).
    auto x =
        torch::randn({n, ch, s, s}).contiguous(torch::MemoryFormat::ChannelsLast).to(device, dtype);
    auto w = (torch::randn({ch, ch, 3, 3}) * 0.05)
                 .contiguous(torch::MemoryFormat::ChannelsLast)
                 .to(device, dtype);
    auto call = [&] {
      for (int i = 0; i < reps; ++i) (void)torch::conv2d(x, w, {}, 1, 1);
      if (on_cuda(c)) torch::cuda::synchronize();
    };
    const auto times = time_calls(call, 2, c.min_iters, c.min_seconds);
    const double best = *std::min_element(times.begin(), times.end());
    // The best call is the ceiling (other processes on a shared machine only slow calls down).
    out[precision] = {{"gflops", flop * reps / best / 1e9},
                      {"gflops_mean", flop * reps / mean(times) / 1e9},
                      {"calls", times.size()}};
  }
  return out;
}

}  // namespace pets::bench
