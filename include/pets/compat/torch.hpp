#pragma once
/// The differences between the LibTorch versions the project builds against (Debian's 1.13 and
/// the current wheel's 2.x), in this one header: code elsewhere calls these and never tests the
/// LibTorch version itself. Header-only (pets::compat, cmake/PetsLayers.cmake).

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include <variant>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define PETS_AUTOCAST_BY_DEVICE_TYPE 1
#endif

namespace pets::compat {

/// Turns autocast for `device` (kCPU or kCUDA) on with the lower precision `dtype`, or off.
/// LibTorch 2.4 takes the device type as an argument and deprecates 1.x's per-device functions.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if defined(PETS_AUTOCAST_BY_DEVICE_TYPE)
  at::autocast::set_autocast_enabled(device, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    if (enabled) at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    if (enabled) at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

/// Turns autocast for `device` off and drops the casts it cached.
inline void end_autocast(c10::DeviceType device) {
  set_autocast(device, false, at::kFloat);
  at::autocast::clear_cache();
}

/// The alternative `T` held by an option of LibTorch's (ConvOptions::padding and the like): a
/// c10::variant in 1.x, a std::variant in 2.x. The unqualified call finds std::get by the using
/// declaration and c10::get by argument-dependent lookup, whichever takes the variant.
template <typename T, typename Variant>
const T& variant_get(const Variant& v) {
  using std::get;
  return get<T>(v);
}

}  // namespace pets::compat
