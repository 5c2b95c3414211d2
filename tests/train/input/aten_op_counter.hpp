#pragma once
/// \file
/// Counts the ATen operators one thread runs (LibTorch's RecordFunction observers, the
/// profiler's source): for the device input path, how many calls, hence on a GPU how many
/// kernel launches at most, one batch takes. Used by tests/train/input/test_device_input.cpp and
/// bench/device_input_bench/resize.cpp.

#include <ATen/record_function.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace pets::testing {

struct AtenOps {
  std::int64_t top = 0;  ///< operators called from outside any other operator
  std::int64_t all = 0;  ///< every operator, nested ones included
  std::map<std::string, std::int64_t> top_names;  ///< the top-level ones by name
  std::map<std::string, double> top_seconds;      ///< their wall time by name

  /// The top-level calls that may launch a kernel: all but views and allocations.
  std::int64_t computing() const {
    static const std::set<std::string> no_kernel = {
        "aten::view",           "aten::narrow",    "aten::permute",    "aten::unfold",
        "aten::select",         "aten::slice",     "aten::as_strided", "aten::expand",
        "aten::transpose",      "aten::alias",     "aten::empty",      "aten::empty_strided",
        "aten::_reshape_alias", "aten::unsqueeze", "aten::squeeze",    "aten::detach"};
    std::int64_t n = 0;
    for (const auto& [name, count] : top_names)
      if (no_kernel.count(name) == 0) n += count;
    return n;
  }
};

/// Counts the operators the constructing thread runs until the counter is destroyed. One at a
/// time per thread.
class AtenOpCounter {
 public:
  AtenOpCounter() {
    active() = &ops_;
    depth() = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&start, &end).scopes({at::RecordScope::FUNCTION}));
  }
  ~AtenOpCounter() {
    at::removeCallback(handle_);
    active() = nullptr;
  }
  AtenOpCounter(const AtenOpCounter&) = delete;
  AtenOpCounter& operator=(const AtenOpCounter&) = delete;

  const AtenOps& ops() const { return ops_; }

 private:
  static AtenOps*& active() {
    thread_local AtenOps* ops = nullptr;
    return ops;
  }
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
  static std::unique_ptr<at::ObserverContext> start(const at::RecordFunction& fn) {
    if (AtenOps* ops = active()) {
      ++ops->all;
      if (depth() == 0) {
        ++ops->top;
        ++ops->top_names[fn.name()];
        started() = std::chrono::steady_clock::now();
      }
    }
    ++depth();
    return nullptr;
  }
  static void end(const at::RecordFunction& fn, at::ObserverContext*) {
    if (--depth() == 0)
      if (AtenOps* ops = active())
        ops->top_seconds[fn.name()] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started()).count();
  }
  static std::chrono::steady_clock::time_point& started() {
    thread_local std::chrono::steady_clock::time_point t;
    return t;
  }

  at::CallbackHandle handle_ = 0;
  AtenOps ops_;
};

}  // namespace pets::testing
