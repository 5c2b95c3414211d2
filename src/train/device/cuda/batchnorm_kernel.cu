#include <algorithm>

#include "batchnorm_kernel.hpp"

namespace pets::train::cuda {
namespace {

// The partial sums' tile: 32 channels (a warp reads 32 neighbouring values of a row) x 8 rows.
constexpr int kTileChannels = 32;
constexpr int kTileRows = 8;
// The fewest rows one thread of the partial sums should read.
constexpr int kRowsPerThread = 16;
// The values one thread of the elementwise pass handles: 16 bytes of bf16 or fp16.
constexpr int kPack = kBatchNormChannelMultiple;

/// Pass 1. Block (channel tile, group g) sums, for each of its channels c, v = x[r, c] - x[0, c]
/// and v * v over the rows r of group g (r = g * 8 + k + i * groups * 8): float within a thread,
/// double across the block, written to sums[g][0][c] and sums[g][1][c]. Subtracting the first
/// value keeps the sums small where a channel's mean is large against its spread.
template <class T>
__global__ void partial_sums_kernel(const T* __restrict__ x, std::int64_t rows, int channels,
                                    double* __restrict__ sums) {
  const int c = blockIdx.x * kTileChannels + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * kTileRows;
  float s = 0.0f, ss = 0.0f;
  if (c < channels) {
    const float shift = to_float(x[c]);
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kTileRows + threadIdx.y; r < rows;
         r += step) {
      const float v = to_float(x[r * channels + c]) - shift;
      s += v;
      ss = fmaf(v, v, ss);
    }
  }
  __shared__ double tile_s[kTileRows][kTileChannels];
  __shared__ double tile_ss[kTileRows][kTileChannels];
  tile_s[threadIdx.y][threadIdx.x] = s;
  tile_ss[threadIdx.y][threadIdx.x] = ss;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  double a = 0.0, b = 0.0;
  for (int k = 0; k < kTileRows; ++k) {
    a += tile_s[k][threadIdx.x];
    b += tile_ss[k][threadIdx.x];
  }
  double* group = sums + static_cast<std::int64_t>(blockIdx.y) * 2 * channels;
  group[c] = a;
  group[channels + c] = b;
}

/// Pass 2. One thread per channel: the groups' sums in group order, the batch mean and biased
/// variance from them, the running statistics updated as at::batch_norm does (the variance
/// unbiased), and the elementwise pass's per-channel values: stats[c] = mean, stats[C + c] =
/// weight / sqrt(var + eps), stats[2C + c] = bias.
template <class T>
__global__ void finalize_kernel(const T* __restrict__ x, const double* __restrict__ sums,
                                int groups, std::int64_t rows, int channels,
                                const float* __restrict__ weight, const float* __restrict__ bias,
                                float* __restrict__ running_mean, float* __restrict__ running_var,
                                float momentum, float eps, float* __restrict__ stats) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s = 0.0, ss = 0.0;
  for (int g = 0; g < groups; ++g) {
    s += sums[static_cast<std::int64_t>(g) * 2 * channels + c];
    ss += sums[(static_cast<std::int64_t>(g) * 2 + 1) * channels + c];
  }
  const double n = static_cast<double>(rows);
  const double shifted_mean = s / n;
  const double var = fmax(ss / n - shifted_mean * shifted_mean, 0.0);
  const double mean = static_cast<double>(to_float(x[c])) + shifted_mean;
  const float mean_f = static_cast<float>(mean);
  const float var_f = static_cast<float>(var);
  const float unbiased = static_cast<float>(var * n / (n - 1.0));
  running_mean[c] = momentum * mean_f + (1.0f - momentum) * running_mean[c];
  running_var[c] = momentum * unbiased + (1.0f - momentum) * running_var[c];
  stats[c] = mean_f;
  stats[channels + c] =
      weight[c] * static_cast<float>(1.0 / sqrt(static_cast<double>(var_f) + eps));
  stats[2 * channels + c] = bias[c];
}

/// kPack values of T, loaded and stored as one (16 bytes for bf16 and fp16, two for float).
template <class T>
struct alignas(sizeof(T) * kPack < 16 ? sizeof(T) * kPack : 16) Pack {
  T v[kPack];
};

/// Pass 3. Each thread a pack of kPack neighbouring values of one row: (x - mean) * scale + bias,
/// then, as the model's own operations round: + residual after rounding to T, then ReLU, rounded
/// to T once more.
template <class T, bool kResidual, bool kRelu>
__global__ void apply_kernel(const T* __restrict__ x, const T* __restrict__ residual,
                             T* __restrict__ y, std::int64_t packs, int channels,
                             const float* __restrict__ stats) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const std::int64_t base = p * kPack;
    const int c0 = static_cast<int>(base % channels);
    const Pack<T> in = *reinterpret_cast<const Pack<T>*>(x + base);
    Pack<T> res;
    if (kResidual) res = *reinterpret_cast<const Pack<T>*>(residual + base);
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const int c = c0 + k;
      float v = (to_float(in.v[k]) - stats[c]) * stats[channels + c] + stats[2 * channels + c];
      if (kResidual) v = to_float(from_float<T>(v)) + to_float(res.v[k]);
      // Not fmaxf: a NaN stays a NaN, as with relu_.
      if (kRelu) v = v < 0.0f ? 0.0f : v;
      out.v[k] = from_float<T>(v);
    }
    *reinterpret_cast<Pack<T>*>(y + base) = out;
  }
}

template <class T, bool kResidual, bool kRelu>
void apply(const BatchNormTrain& a, const float* stats, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t packs = a.rows * a.channels / kPack;
  // As many blocks as the work needs; the loop covers any rest (grid-stride).
  const int blocks = static_cast<int>(
      std::min<std::int64_t>((packs + kThreads - 1) / kThreads, std::int64_t{1} << 20));
  apply_kernel<T, kResidual, kRelu><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(a.x), static_cast<const T*>(a.residual), static_cast<T*>(a.y), packs,
      a.channels, stats);
}

template <class T>
cudaError_t launch(const BatchNormTrain& a, cudaStream_t stream) {
  auto* sums = static_cast<double*>(a.workspace);
  auto* stats =
      reinterpret_cast<float*>(sums + static_cast<std::int64_t>(a.groups) * 2 * a.channels);
  const T* x = static_cast<const T*>(a.x);
  const dim3 tile(kTileChannels, kTileRows);
  const dim3 grid((a.channels + kTileChannels - 1) / kTileChannels, a.groups);
  partial_sums_kernel<T><<<grid, tile, 0, stream>>>(x, a.rows, a.channels, sums);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  constexpr int kFinalizeThreads = 128;
  finalize_kernel<T>
      <<<(a.channels + kFinalizeThreads - 1) / kFinalizeThreads, kFinalizeThreads, 0, stream>>>(
          x, sums, a.groups, a.rows, a.channels, a.weight, a.bias, a.running_mean, a.running_var,
          a.momentum, a.eps, stats);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (a.residual != nullptr && a.relu)
    apply<T, true, true>(a, stats, stream);
  else if (a.residual != nullptr)
    apply<T, true, false>(a, stats, stream);
  else if (a.relu)
    apply<T, false, true>(a, stats, stream);
  else
    apply<T, false, false>(a, stats, stream);
  return cudaGetLastError();
}

}  // namespace

int batch_norm_groups(std::int64_t rows, int channels, int multiprocessors) {
  const std::int64_t tiles = (channels + kTileChannels - 1) / kTileChannels;
  // Eight blocks of 256 threads fill a multiprocessor.
  const std::int64_t wanted = (std::int64_t{8} * std::max(multiprocessors, 1) + tiles - 1) / tiles;
  const std::int64_t most = std::max<std::int64_t>(1, rows / (kTileRows * kRowsPerThread));
  return static_cast<int>(std::clamp<std::int64_t>(std::min(wanted, most), 1, 65535));
}

std::int64_t batch_norm_workspace_bytes(int channels, int groups) {
  return static_cast<std::int64_t>(groups) * 2 * channels * sizeof(double) +
         std::int64_t{3} * channels * sizeof(float);
}

cudaError_t launch_batch_norm_train(const BatchNormTrain& args, cudaStream_t stream) {
  if (args.rows < 2 || args.channels <= 0 || args.channels % kPack != 0 || args.groups < 1 ||
      args.groups > 65535)
    return cudaErrorInvalidValue;
  switch (args.type) {
    case ElementType::kFloat:
      return launch<float>(args, stream);
    case ElementType::kBFloat16:
      return launch<__nv_bfloat16>(args, stream);
    case ElementType::kHalf:
      return launch<__half>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pets::train::cuda
