#include "pets/train/input/batch_resize.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pets/data/augment.hpp"
#include "pets/data/image.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

namespace {

/// One axis of every crop of a batch, cut into tiles of `tile` output samples: tile t of crop i
/// reads the inputs start[i * tiles + t] + r, r < window (the batch's widest window; past the
/// crop's end the index is clamped and the weight is zero).
struct AxisPlan {
  int tiles = 0;
  int window = 0;
  std::vector<data::ResizeTaps> taps;  ///< per crop
  std::vector<int> start;              ///< per crop and tile
};

AxisPlan plan_axis(const std::vector<int>& in_sizes, int out, int tile) {
  AxisPlan p;
  p.tiles = (out + tile - 1) / tile;
  p.taps.reserve(in_sizes.size());
  p.start.resize(in_sizes.size() * static_cast<std::size_t>(p.tiles));
  for (std::size_t i = 0; i < in_sizes.size(); ++i) {
    p.taps.push_back(data::bilinear_taps(in_sizes[i], out));
    const data::ResizeTaps& t = p.taps.back();
    for (int k = 0; k < p.tiles; ++k) {
      const int o0 = k * tile, o1 = std::min(out, o0 + tile);
      int lo = t.first[static_cast<std::size_t>(o0)], hi = lo;
      for (int o = o0; o < o1; ++o) {
        const auto u = static_cast<std::size_t>(o);
        lo = std::min(lo, t.first[u]);
        hi = std::max(hi, t.first[u] + t.count[u]);
      }
      p.start[i * static_cast<std::size_t>(p.tiles) + static_cast<std::size_t>(k)] = lo;
      p.window = std::max(p.window, hi - lo);
    }
  }
  return p;
}

/// The tiles' weight matrices, [n * tiles, tile, window] (zero-filled by the caller): row b of
/// tile t holds output sample t * tile + b's taps at their places in the tile's window.
void fill_weights(const AxisPlan& p, int out, int tile, float* w) {
  const auto window = static_cast<std::size_t>(p.window);
  for (std::size_t i = 0; i < p.taps.size(); ++i) {
    const data::ResizeTaps& t = p.taps[i];
    for (int o = 0; o < out; ++o) {
      const auto u = static_cast<std::size_t>(o);
      const std::size_t tile_index = i * static_cast<std::size_t>(p.tiles) + u / tile;
      float* row = w + (tile_index * tile + u % tile) * window;
      const int first = t.first[u] - p.start[tile_index];
      for (int k = 0; k < t.count[u]; ++k)
        row[first + k] = t.weight[u * t.max_taps + static_cast<std::size_t>(k)];
    }
  }
}

}  // namespace

InputNormalization input_normalization(const c10::Device& device) {
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * data::kStd[c]);
    shift[c] = data::kMean[c] / data::kStd[c];
  }
  // clone: on the CPU, to() would return the view of these locals itself.
  return {torch::from_blob(scale, {1, 3, 1, 1}, torch::kFloat32).clone().to(device),
          torch::from_blob(shift, {1, 3, 1, 1}, torch::kFloat32).clone().to(device)};
}

at::Tensor resize_normalize(const at::Tensor& bytes, const std::vector<CropSlot>& slots, int size,
                            const at::Tensor& scale, const at::Tensor& shift, c10::ScalarType dtype,
                            int tile) {
  PETS_CHECK(bytes.defined() && bytes.scalar_type() == at::kByte && bytes.dim() == 1 &&
                 bytes.is_contiguous(),
             "resize_normalize: the crops must be a flat uint8 buffer");
  PETS_CHECK(size > 0 && tile > 0, "resize_normalize: size and tile must be positive");
  const auto n = static_cast<std::int64_t>(slots.size());
  at::Tensor out =
      at::empty({n, 3, size, size}, bytes.options().dtype(dtype), at::MemoryFormat::ChannelsLast);
  if (n == 0) return out;
  const std::int64_t total = bytes.numel();
  std::vector<int> heights, widths;
  int widest = 0;
  check_slots(slots, total, "resize_normalize", "the buffer");
  for (const CropSlot& s : slots) {
    heights.push_back(s.height);
    widths.push_back(s.width);
    widest = std::max(widest, s.width);
  }
  const std::int64_t row_bytes = static_cast<std::int64_t>(widest) * 3;  // L

  // Pass 1 reads every row as row_bytes bytes from its start, past the end of narrower rows.
  // So that the last rows of the buffer do not run past its end, a crop's rows are read from
  // `shift_bytes` (a multiple of 3) before their start, which moves its pixels right by
  // shift_bytes / 3 columns within the row_bytes. With non-overlapping packed slots, or crops of
  // whole images stored one after another (ResidentImages), that always fits (the other crops'
  // bytes are at least one row of the widest); where it does not (slots that overlap), the buffer
  // is padded instead. The shift moves no result: pass 2 gathers each crop's columns from where
  // the shift put them.
  std::vector<std::int64_t> shift_bytes(slots.size(), 0);
  bool pad = false;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const CropSlot& s = slots[i];
    const std::int64_t last_row =
        s.offset + static_cast<std::int64_t>(s.height - 1) * row_stride(s);
    const std::int64_t over = std::max<std::int64_t>(0, last_row + row_bytes - total);
    shift_bytes[i] = (over + 2) / 3 * 3;
    pad |= shift_bytes[i] > s.offset;
  }
  if (pad) std::fill(shift_bytes.begin(), shift_bytes.end(), 0);

  const AxisPlan ys = plan_axis(heights, size, tile);
  const AxisPlan xs = plan_axis(widths, size, tile);
  // One int64 buffer: the row and column gather indices (64-bit: a buffer of held images can
  // pass 2 GiB), then both axes' weights as float, two to a word.
  const std::int64_t n_rows = n * ys.tiles * ys.window, n_cols = n * xs.tiles * xs.window;
  const std::int64_t n_wy = n_rows * tile, n_wx = n_cols * tile;
  const std::int64_t weight_words = (n_wy + n_wx + 1) / 2;
  at::Tensor plan = at::empty({n_rows + n_cols + weight_words},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(bytes.is_cuda()));
  std::int64_t* rows_index = plan.data_ptr<std::int64_t>();
  std::int64_t* cols_index = rows_index + n_rows;
  auto* weights = reinterpret_cast<float*>(cols_index + n_cols);
  std::fill(weights, weights + 2 * weight_words, 0.0f);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const CropSlot& s = slots[i];
    const std::int64_t base = s.offset - shift_bytes[i];
    for (int t = 0; t < ys.tiles; ++t)
      for (int r = 0; r < ys.window; ++r) {
        const int y = std::min(ys.start[i * ys.tiles + t] + r, s.height - 1);
        *rows_index++ = base + y * row_stride(s);
      }
    const std::int64_t column0 = static_cast<std::int64_t>(i) * widest + shift_bytes[i] / 3;
    for (int t = 0; t < xs.tiles; ++t)
      for (int r = 0; r < xs.window; ++r) {
        const int x = std::min(xs.start[i * xs.tiles + t] + r, s.width - 1);
        *cols_index++ = column0 + x;
      }
  }
  fill_weights(ys, size, tile, weights);
  fill_weights(xs, size, tile, weights + n_wy);

  const at::Tensor on_device =
      bytes.is_cuda() ? plan.to(bytes.device(), at::kLong, /*non_blocking=*/true) : plan;
  const at::Tensor all_weights =
      on_device.narrow(0, n_rows + n_cols, weight_words).view(at::kFloat);
  const at::Tensor wy = all_weights.narrow(0, 0, n_wy).view({n * ys.tiles, tile, ys.window});
  const at::Tensor wx = all_weights.narrow(0, n_wy, n_wx).view({n * xs.tiles, tile, xs.window});
  const at::Tensor source = pad ? at::constant_pad_nd(bytes, {0, row_bytes}) : bytes;
  // Pass 1, down the rows: each tile's window of rows (an overlapping view of the bytes, one row
  // per start), scaled per channel on the way to float, then weighted.
  const at::Tensor rows =
      source.unfold(0, row_bytes, 1).index_select(0, on_device.narrow(0, 0, n_rows));
  const at::Tensor scaled = rows.view({n * ys.tiles, ys.window, widest, 3}).mul(scale.view({3}));
  const at::Tensor down = at::bmm(wy, scaled.view({n * ys.tiles, ys.window, row_bytes}));
  // Pass 2, along the rows: the columns made rows ([n * widest, size * 3]), the same again.
  const at::Tensor columns = down.view({n, ys.tiles * tile, widest, 3})
                                 .narrow(1, 0, size)
                                 .permute({0, 2, 1, 3})
                                 .contiguous()
                                 .view({n * widest, size * 3});
  const at::Tensor across = at::bmm(wx, columns.index_select(0, on_device.narrow(0, n_rows, n_cols))
                                            .view({n * xs.tiles, xs.window, size * 3}));
  // [n, x, y, c] back to [n, c, y, x] channels-last (memory n, y, x, c), shifted and rounded to
  // the output dtype in one write.
  const at::Tensor result = across.view({n, xs.tiles * tile, size, 3}).narrow(1, 0, size);
  at::Tensor out_xyc = out.permute({0, 3, 2, 1});
  at::sub_out(out_xyc, result, shift.view({3}));
  return out;
}

at::Tensor resize_normalize_per_crop(const at::Tensor& bytes, const std::vector<CropSlot>& slots,
                                     int size, const at::Tensor& scale, const at::Tensor& shift,
                                     c10::ScalarType dtype) {
  namespace F = torch::nn::functional;
  const auto n = static_cast<std::int64_t>(slots.size());
  const auto resize = F::InterpolateFuncOptions()
                          .size(std::vector<std::int64_t>{size, size})
                          .mode(torch::kBilinear)
                          .align_corners(false)
                          .antialias(true);
  at::Tensor out = at::empty({n, 3, size, size}, bytes.options().dtype(at::kFloat),
                             at::MemoryFormat::ChannelsLast);
  // One conversion for the whole batch; the filter then runs on floats (its CUDA kernel takes no
  // uint8). Each crop is a view, its HWC bytes seen as a channels-last [1, 3, h, w]. The CUDA
  // kernel reads any strides; LibTorch 1.13's CPU kernel took about twice as long on such a view
  // as on a contiguous copy (device_input_bench, loaded machine), so on the CPU we make one.
  const at::Tensor values = bytes.to(at::kFloat);
  const bool copy_crops = values.is_cpu();
  for (std::int64_t i = 0; i < n; ++i) {
    const CropSlot& s = slots[static_cast<std::size_t>(i)];
    at::Tensor crop = values.narrow(0, s.offset, static_cast<std::int64_t>(s.height) * s.width * 3)
                          .view({1, s.height, s.width, 3})
                          .permute({0, 3, 1, 2});
    if (copy_crops) crop = crop.contiguous();
    out.narrow(0, i, 1).copy_(F::interpolate(crop, resize));
  }
  // (v / 255 - mean) / std as the CPU path computes it: v * (1 / (255 std)) - mean / std.
  out.mul_(scale).sub_(shift);
  if (dtype != at::kFloat) out = out.to(dtype);  // keeps channels-last
  return out;
}

}  // namespace pets::train
