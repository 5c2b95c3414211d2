// libFuzzer target: the --config file parser of pets_train (parse_train_options with
// `--config FILE`). A bad file must end in pets::UsageError; an accepted one must survive the
// round trip pets_train offers (--write-config, then --config) with the same options.
#include <cstdint>

#include "fuzz_util.hpp"
#include "pets/train/options/options.hpp"
#include "pets/util/error.hpp"

namespace {

bool same(const pets::train::TrainOptions& a, const pets::train::TrainOptions& b) {
  return a.data == b.data && a.epochs == b.epochs && a.batch_size == b.batch_size &&
         a.eval_batch_size == b.eval_batch_size && a.max_lr == b.max_lr &&
         a.mixed_precision == b.mixed_precision && a.seed == b.seed &&
         a.pretrained == b.pretrained && a.bn_mode == b.bn_mode && a.device == b.device &&
         a.threads == b.threads && a.out == b.out && a.resume == b.resume &&
         a.overwrite == b.overwrite;
}

pets::train::ParseResult parse_config(const std::string& path) {
  const char* argv[] = {"pets_train", "--config", path.c_str()};
  return pets::train::parse_train_options(3, argv);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const pets::fuzz::ScratchFile scratch("fuzz_config");
  pets::train::ParseResult first;
  try {
    first = parse_config(scratch.write(data, size));
  } catch (const pets::UsageError&) {
    return 0;  // the documented outcome for a bad file; any other exception escapes and aborts
  }
  FUZZ_CHECK(first.action == pets::train::Action::kTrain);
  // --data may come from the checkpoint only when the file asks to resume.
  FUZZ_CHECK(!first.options.data.empty() || first.options.resume != pets::train::ResumeMode::kNo);
  std::string text;
  try {
    text = pets::train::format_config(first.options);
  } catch (const pets::UsageError&) {
    // A value --write-config refuses to write ('#' or a line break); the config parser cannot
    // produce one, so reaching this is a finding.
    FUZZ_CHECK(!"format_config refused options parsed from a config file");
  }
  const std::string& path =
      scratch.write(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  pets::train::ParseResult second;
  try {
    second = parse_config(path);
  } catch (const pets::UsageError& e) {
    std::fprintf(stderr, "re-reading the written config failed: %s\n", e.what());
    FUZZ_CHECK(!"a written config file does not read back");
  }
  FUZZ_CHECK(same(first.options, second.options));
  return 0;
}
