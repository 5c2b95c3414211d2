#include "resize_kernel.hpp"

namespace pets::train::cuda {
namespace {

/// One output sample's taps along one axis: data::bilinear_taps' arithmetic (src/data/resize.cpp)
/// in the same double operations, so that the weights are the CPU path's, bit for bit.
struct Taps {
  double center;
  double filter_scale;
  int first;
  int count;
  double sum;

  __device__ Taps(int in_size, int out_size, int o) {
    const double scale = static_cast<double>(in_size) / out_size;
    filter_scale = scale > 1.0 ? scale : 1.0;
    const double support = 1.0 * filter_scale;
    const int max_taps = static_cast<int>(ceil(support)) * 2 + 1;
    center = (o + 0.5) * scale;
    // PIL truncates with a C cast here, as bilinear_taps does.
    first = max(static_cast<int>(center - support + 0.5), 0);
    const int last = min(static_cast<int>(center + support + 0.5), in_size);
    count = min(last - first, max_taps);
    sum = 0.0;
    for (int k = 0; k < count; ++k) sum += raw(k);
  }

  __device__ double raw(int k) const {
    const double x = (k + first - center + 0.5) / filter_scale;
    return fabs(x) < 1.0 ? 1.0 - fabs(x) : 0.0;
  }

  __device__ float weight(int k) const { return static_cast<float>(sum > 0 ? raw(k) / sum : 0.0); }
};

/// acc + w * v rounded twice, as the CPU path's separate multiply and add (no fused multiply-add,
/// which nvcc would otherwise contract them into).
__device__ float mul_add(float w, float v, float acc) { return __fadd_rn(acc, __fmul_rn(w, v)); }

/// One thread per output pixel (its three channels): the horizontal pass of each input row the
/// vertical taps read, then the vertical pass, in data::resize_crop_bilinear's order.
template <class T>
__global__ void resize_normalize_kernel(const std::uint8_t* __restrict__ bytes,
                                        const KernelSlot* __restrict__ slots, int size,
                                        const float* __restrict__ scale,
                                        const float* __restrict__ shift, T* __restrict__ out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  const int i = blockIdx.z;
  if (x >= size) return;
  const KernelSlot s = slots[i];
  const Taps ty(s.height, size, y);
  const Taps tx(s.width, size, x);
  float r = 0.0f, g = 0.0f, b = 0.0f;
  for (int ky = 0; ky < ty.count; ++ky) {
    const std::uint8_t* p = bytes + s.offset + (ty.first + ky) * s.stride + tx.first * 3;
    float hr = 0.0f, hg = 0.0f, hb = 0.0f;
    for (int kx = 0; kx < tx.count; ++kx, p += 3) {
      const float w = tx.weight(kx);
      hr = mul_add(w, p[0], hr);
      hg = mul_add(w, p[1], hg);
      hb = mul_add(w, p[2], hb);
    }
    const float w = ty.weight(ky);
    r = mul_add(w, hr, r);
    g = mul_add(w, hg, g);
    b = mul_add(w, hb, b);
  }
  T* o = out + ((static_cast<std::int64_t>(i) * size + y) * size + x) * 3;
  o[0] = from_float<T>(__fsub_rn(__fmul_rn(r, scale[0]), shift[0]));
  o[1] = from_float<T>(__fsub_rn(__fmul_rn(g, scale[1]), shift[1]));
  o[2] = from_float<T>(__fsub_rn(__fmul_rn(b, scale[2]), shift[2]));
}

template <class T>
cudaError_t launch(const std::uint8_t* bytes, const KernelSlot* slots, int n, int size,
                   const float* scale, const float* shift, void* out, cudaStream_t stream) {
  constexpr int kThreads = 128;
  const dim3 grid((size + kThreads - 1) / kThreads, size, n);
  resize_normalize_kernel<T>
      <<<grid, kThreads, 0, stream>>>(bytes, slots, size, scale, shift, static_cast<T*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_resize_normalize(const std::uint8_t* bytes, const KernelSlot* slots, int n,
                                    int size, const float* scale, const float* shift, void* out,
                                    ElementType type, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (type) {
    case ElementType::kFloat:
      return launch<float>(bytes, slots, n, size, scale, shift, out, stream);
    case ElementType::kBFloat16:
      return launch<__nv_bfloat16>(bytes, slots, n, size, scale, shift, out, stream);
    case ElementType::kHalf:
      return launch<__half>(bytes, slots, n, size, scale, shift, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pets::train::cuda
