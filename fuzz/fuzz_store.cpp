// libFuzzer target: the schema validation of pets::data::Store (opening a pets_preprocess HDF5
// file), seeded with a small valid store that the fuzzer mutates through HDF5 itself
// (store_mutator.cpp: every input is a well-formed HDF5 file with damaged contents). A bad file
// must end in pets::UsageError; an accepted one must hold only images inside their pixel
// dataset with labels in range, and its first image of each split must read back. HDF5 itself
// is not instrumented: a fault inside it still shows as a crash, without ASan's detail.
#include <cstdint>

#include "fuzz_util.hpp"
#include "pets/data/store_reader.hpp"
#include "pets/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Store opens by path (H5Fis_hdf5, then H5Fopen with the default driver), so the input goes
  // through a file rather than HDF5's in-memory image: the code path pets_train takes.
  static const pets::fuzz::ScratchFile scratch("fuzz_store");
  const std::string& path = scratch.write(data, size);
  try {
    const pets::data::Store store(path);
    FUZZ_CHECK(!store.label_names().empty());
    for (const auto kind : {pets::data::SplitKind::kTrain, pets::data::SplitKind::kEval}) {
      const pets::data::SplitIndex& s = store.split(kind);
      const auto n = static_cast<std::size_t>(s.size());
      FUZZ_CHECK(s.offsets.size() == n && s.shapes.size() == n && s.names.size() == n);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& sh = s.shapes[i];
        FUZZ_CHECK(sh[0] > 0 && sh[1] > 0 && sh[2] == 3);
        const std::uint64_t bytes = static_cast<std::uint64_t>(sh[0]) * sh[1] * 3;
        FUZZ_CHECK(s.offsets[i] <= s.pixel_bytes && bytes <= s.pixel_bytes - s.offsets[i]);
        FUZZ_CHECK(s.labels[i] >= 0 &&
                   static_cast<std::size_t>(s.labels[i]) < store.label_names().size());
      }
      // Only small images: a mutated shape may claim a large one that lies inside a large
      // pixels dataset, which is valid but slow to read for every input.
      if (n > 0 && static_cast<std::uint64_t>(s.shapes[0][0]) * s.shapes[0][1] <= (1u << 16)) {
        try {
          const pets::data::Image img = store.read_image(kind, 0);
          FUZZ_CHECK(img.pixels.size() == static_cast<std::size_t>(img.height) * img.width * 3);
        } catch (const pets::UsageError&) {
          // Damaged pixel data is reported when read, as the loader does.
        }
      }
    }
  } catch (const pets::UsageError&) {
    // The documented outcome for a damaged store; any other exception escapes and aborts.
  }
  return 0;
}
