#pragma once
/// \file
/// The element types of the kernels' activations (src/train/device/cuda/*.cu), and, for the kernels
/// themselves, their conversions to and from float, rounded to nearest.

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace pets::train::cuda {

/// float, bf16 or fp16: at::kFloat, at::kBFloat16, at::kHalf.
enum class ElementType { kFloat, kBFloat16, kHalf };

#if defined(__CUDACC__)
template <class T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(__half v) { return __half2float(v); }
#endif

}  // namespace pets::train::cuda
