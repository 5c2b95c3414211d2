// libFuzzer target: pets::model::SafetensorsFile::parse, the reader of --pretrained weights and
// of checkpoints. Bad bytes must end in pets::UsageError; an accepted file must keep every
// promise the reader's callers rely on (each tensor's bytes inside the data section, sized
// by dtype and shape, no two overlapping).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz_util.hpp"
#include "pets/model/safetensors.hpp"
#include "pets/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using pets::model::SafetensorsFile;
  try {
    const SafetensorsFile file =
        SafetensorsFile::parse(std::vector<std::uint8_t>(data, data + size), "fuzz.safetensors");
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& t : file.tensors()) {
      FUZZ_CHECK(t.begin <= t.end);
      std::uint64_t numel = 1;
      for (const std::int64_t d : t.shape) {
        FUZZ_CHECK(d >= 0);
        numel *= static_cast<std::uint64_t>(d);
      }
      FUZZ_CHECK(static_cast<std::uint64_t>(t.numel()) == numel);
      FUZZ_CHECK(t.end - t.begin == numel * pets::model::dtype_size(t.dtype));
      FUZZ_CHECK(file.find(t.name) != nullptr);
      // Reading every byte lets ASan catch a span past the end of the file's buffer.
      const std::uint8_t* p = file.data(t);
      std::uint8_t sum = 0;
      for (std::uint64_t i = 0; i < t.end - t.begin; ++i) sum ^= p[i];
      volatile std::uint8_t sink = sum;
      (void)sink;
      spans.emplace_back(t.begin, t.end);
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      FUZZ_CHECK(spans[i].first >= spans[i - 1].second);
  } catch (const pets::UsageError&) {
    // The documented outcome for a malformed file; any other exception escapes and aborts.
  }
  return 0;
}
