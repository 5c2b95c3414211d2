/// \file
/// pets_bench's timing and precision helpers (harness.hpp).

#include "harness.hpp"

namespace pets::bench {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

std::vector<std::string> precisions(const Config& c) {
  if (on_cuda(c)) return {"fp32", "bf16", "fp16"};
  return {"fp32", "bf16"};
}

}  // namespace pets::bench
