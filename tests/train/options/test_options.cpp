#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pets/train/options/options.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace {

using pets::train::Action;
using pets::train::ParseResult;
using pets::train::TrainOptions;

ParseResult parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"pets_train"};
  argv.insert(argv.end(), args.begin(), args.end());
  return pets::train::parse_train_options(static_cast<int>(argv.size()), argv.data());
}

/// The UsageError message of parsing `args`; fails the test if parsing succeeds.
std::string usage_error(std::initializer_list<const char*> args) {
  try {
    parse(args);
  } catch (const pets::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UsageError: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no error";
  return {};
}

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "pets_options_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TrainOptions, DefaultsAreTheTutorials) {
  const ParseResult r = parse({"--data", "pets.h5"});
  EXPECT_EQ(r.action, Action::kTrain);
  const TrainOptions& o = r.options;
  EXPECT_EQ(o.data, "pets.h5");
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.eval_batch_size, 128);
  EXPECT_EQ(o.image_size, 224);
  EXPECT_EQ(o.max_lr, std::vector<double>{3e-2});
  EXPECT_EQ(o.mixed_precision, pets::train::MixedPrecision::kNo);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_EQ(o.pretrained, "");
  EXPECT_EQ(o.bn_mode, pets::train::BnMode::kTrain);
  EXPECT_EQ(o.unfreeze, pets::train::Unfreeze::kNone);
  EXPECT_EQ(o.backbone_lr_ratio, 0.1);
  EXPECT_EQ(o.unfreeze_epoch, 0);
  EXPECT_EQ(pets::train::first_trained_stage(o.unfreeze), 5);  // no stage trains
  EXPECT_EQ(o.device, pets::train::DeviceChoice::kAuto);
  EXPECT_EQ(o.input, pets::train::InputChoice::kAuto);
  EXPECT_EQ(o.resident, pets::train::ResidentChoice::kAuto);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.loader_threads, 0);
  EXPECT_FALSE(o.deterministic);
  EXPECT_EQ(o.out, "runs/pets");
  EXPECT_EQ(o.resume, pets::train::ResumeMode::kNo);
  EXPECT_FALSE(o.overwrite);
  EXPECT_FALSE(o.keep_best);
  EXPECT_EQ(o.keep_checkpoints, 0);
}

TEST(TrainOptions, EveryOptionIsRead) {
  const TrainOptions o = parse({"--data=d.h5",
                                "--epochs",
                                "2",
                                "--batch-size",
                                "8",
                                "--eval-batch-size",
                                "16",
                                "--image-size",
                                "112",
                                "--max-lr",
                                "1e-3",
                                "--mixed-precision",
                                "bf16",
                                "--seed",
                                "18446744073709551615",
                                "--pretrained",
                                "m.safetensors",
                                "--bn-mode",
                                "eval",
                                "--unfreeze",
                                "layer3",
                                "--backbone-lr-ratio",
                                "0.5",
                                "--unfreeze-epoch",
                                "1",
                                "--device",
                                "cpu",
                                "--input",
                                "device",
                                "--resident",
                                "on",
                                "--threads",
                                "3",
                                "--loader-threads",
                                "6",
                                "--deterministic",
                                "--out",
                                "runs/x",
                                "--resume"})
                             .options;
  EXPECT_EQ(o.data, "d.h5");
  EXPECT_EQ(o.epochs, 2);
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.eval_batch_size, 16);
  EXPECT_EQ(o.image_size, 112);
  EXPECT_EQ(o.max_lr, std::vector<double>{1e-3});
  EXPECT_EQ(o.mixed_precision, pets::train::MixedPrecision::kBf16);
  EXPECT_EQ(o.seed, 18446744073709551615ull);
  EXPECT_EQ(o.pretrained, "m.safetensors");
  EXPECT_EQ(o.bn_mode, pets::train::BnMode::kEval);
  EXPECT_EQ(o.unfreeze, pets::train::Unfreeze::kLayer3);
  EXPECT_EQ(o.backbone_lr_ratio, 0.5);
  EXPECT_EQ(o.unfreeze_epoch, 1);
  EXPECT_EQ(o.device, pets::train::DeviceChoice::kCpu);
  EXPECT_EQ(o.input, pets::train::InputChoice::kDevice);
  EXPECT_EQ(o.resident, pets::train::ResidentChoice::kOn);
  EXPECT_EQ(o.threads, 3);
  EXPECT_EQ(o.loader_threads, 6);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(o.out, "runs/x");
  EXPECT_EQ(o.resume, pets::train::ResumeMode::kYes);
}

// --resume alone must find a checkpoint; --resume=auto (or `--resume auto`) is for jobs that
// requeue themselves; --overwrite starts over. A config file written when --resume was a flag
// (`resume = true|false`) still reads.
TEST(TrainOptions, ResumeAndOverwrite) {
  using pets::train::ResumeMode;
  EXPECT_EQ(parse({"--data", "d", "--resume", "--out", "x"}).options.resume, ResumeMode::kYes);
  EXPECT_EQ(parse({"--data", "d", "--resume=auto"}).options.resume, ResumeMode::kAuto);
  EXPECT_EQ(parse({"--data", "d", "--resume", "auto"}).options.resume, ResumeMode::kAuto);
  EXPECT_EQ(parse({"--data", "d", "--resume=no"}).options.resume, ResumeMode::kNo);
  EXPECT_MENTIONS(usage_error({"--data", "d", "--resume=maybe"}),
                  "--resume must be yes (also given alone), no or auto, got 'maybe'");
  EXPECT_TRUE(parse({"--data", "d", "--overwrite"}).options.overwrite);
  EXPECT_TRUE(parse({"--data", "d", "--keep-best"}).options.keep_best);
  EXPECT_EQ(parse({"--data", "d", "--keep-checkpoints", "2"}).options.keep_checkpoints, 2);
  EXPECT_MENTIONS(usage_error({"--data", "d", "--keep-checkpoints", "-1"}),
                  "--keep-checkpoints must be 0 (automatic) or positive, got -1");
  for (const char* resume : {"--resume", "--resume=auto"})
    EXPECT_MENTIONS(usage_error({"--data", "d", "--overwrite", resume}),
                    "--overwrite starts a new run and --resume continues one");
  const std::string path = temp_path("old_flag.cfg");
  write_file(path, "data = d.h5\nresume = true\n");
  EXPECT_EQ(parse({"--config", path.c_str()}).options.resume, ResumeMode::kYes);
  write_file(path, "data = d.h5\nresume = false\noverwrite = true\n");
  const TrainOptions o = parse({"--config", path.c_str()}).options;
  EXPECT_EQ(o.resume, ResumeMode::kNo);
  EXPECT_TRUE(o.overwrite);
  std::remove(path.c_str());
}

TEST(TrainOptions, HelpListsEveryOptionWithItsDefault) {
  const ParseResult r = parse({"--help"});  // no --data needed
  EXPECT_EQ(r.action, Action::kHelp);
  for (const char* name : {"--data",
                           "--epochs",
                           "--batch-size",
                           "--eval-batch-size",
                           "--image-size",
                           "--max-lr",
                           "--mixed-precision",
                           "--seed",
                           "--pretrained",
                           "--bn-mode",
                           "--unfreeze",
                           "--backbone-lr-ratio",
                           "--unfreeze-epoch",
                           "--device",
                           "--input",
                           "--threads",
                           "--loader-threads",
                           "--deterministic",
                           "--out",
                           "--resume",
                           "--overwrite",
                           "--keep-best",
                           "--keep-checkpoints",
                           "--config",
                           "--write-config",
                           "--help"})
    EXPECT_MENTIONS(r.help, name);
  for (const char* def : {"(=5)", "(=64)", "(=128)", "(=3e-2)", "(=no)", "(=42)", "(=train)",
                          "(=auto)", "(=0)", "(=runs/pets)"})
    EXPECT_MENTIONS(r.help, def);
}

TEST(TrainOptions, UnknownOption) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--bogus"}), "--bogus");
}

// --max-lr A,B,C: a sweep, read back exactly from its text (a config file, a checkpoint's record).
TEST(TrainOptions, MaxLrList) {
  const TrainOptions o = parse({"--data", "d.h5", "--max-lr", "1e-3,0.03,2.5e-1"}).options;
  EXPECT_EQ(o.max_lr, (std::vector<double>{1e-3, 0.03, 0.25}));
  EXPECT_EQ(pets::train::recorded_option_values(o).at("max-lr"), "1e-3,3e-2,0.25");
  EXPECT_EQ(pets::train::parse_max_lr(pets::train::max_lr_text(o.max_lr)), o.max_lr);
  EXPECT_MENTIONS(pets::train::format_config(o), "\nmax-lr = 1e-3,3e-2,0.25\n");
}

TEST(TrainOptions, BadMaxLrLists) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", ""}), "--max-lr '': no value");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,1e-2"}), "1e-2 is given twice");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "0.01,1e-2"}), "1e-2 is given twice");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,abc"}), "'abc' is not a number");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,"}), "an empty value");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,,3e-2"}), "an empty value");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,0"}), "must be positive, got 0");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2,-3"}), "must be positive");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "1e-2, 3e-2"}),
                  "' 3e-2' is not a number");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "inf"}), "must be positive, got inf");
}

TEST(TrainOptions, StrayPositionalArgument) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "stray"}), "positional");
}

TEST(TrainOptions, BadValues) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "abc"}), "--max-lr");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "nan"}), "--max-lr");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--max-lr", "-1"}), "--max-lr");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs", "2.5"}), "--epochs");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs", "99999999999"}), "--epochs");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--seed", "-1"}), "--seed");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--seed", "12x"}), "--seed");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--threads", "-2"}), "--threads");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--loader-threads", "-1"}), "--loader-threads");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs"}), "--epochs");  // value missing
  EXPECT_MENTIONS(usage_error({"--data", ""}), "--data");
}

// Boost 1.74 builds these messages by substituting until no placeholder is left, which never
// ends when the value holds its own placeholder (found by fuzz/fuzz_config.cpp): a hang here.
TEST(TrainOptions, PlaceholdersInValuesAreQuoted) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--batch-size", "%value%"}), "('%value%')");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--x%canonical_option%"}), "'--x%canonical_option%'");
  const std::string path = temp_path("placeholder.cfg");
  write_file(path, "epochs = %value%\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "('%value%')");
  write_file(path, "x%canonical_option% = 1\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "x%canonical_option%");
  std::remove(path.c_str());
}

TEST(TrainOptions, ZeroAndNegativeCounts) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs", "0"}), "--epochs must be positive");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs=-3"}), "--epochs must be positive");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs", "-3"}), "--epochs");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--batch-size", "0"}), "--batch-size");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--batch-size", "-64"}), "--batch-size");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--eval-batch-size", "0"}), "--eval-batch-size");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--image-size", "31"}),
                  "--image-size must be at least 32");
}

TEST(TrainOptions, RepeatedOption) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epochs", "2", "--epochs", "3"}), "--epochs");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--resume", "--resume"}), "--resume");
  EXPECT_MENTIONS(usage_error({"--data", "a", "--data", "b"}), "--data");
}

TEST(TrainOptions, MissingData) {
  EXPECT_MENTIONS(usage_error({}), "--data");
  EXPECT_MENTIONS(usage_error({"--epochs", "2"}), "--data");
  // --resume takes it from the checkpoint (options_to_run).
  EXPECT_EQ(parse({"--resume", "--out", "x"}).options.data, "");
  EXPECT_EQ(parse({"--resume=auto"}).action, Action::kTrain);
}

// Boost's guessing would take `--epoch` for --epochs and `--over` for --overwrite.
TEST(TrainOptions, AbbreviationsAreUnknownOptions) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--epoch", "3"}), "unrecognised option '--epoch'");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--over"}), "unrecognised option '--over'");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--res"}), "unrecognised option '--res'");
  const std::string path = temp_path("abbrev.cfg");
  write_file(path, "epoch = 3\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "epoch");
  std::remove(path.c_str());
}

// What was set (command line or --config) and what is a default: a resumed run takes the
// latter from its checkpoint.
TEST(TrainOptions, GivenOptionsAreKnown) {
  const std::string path = temp_path("given.cfg");
  write_file(path, "seed = 42\n");
  const ParseResult r = parse({"--data", "d", "--epochs", "5", "--config", path.c_str()});
  std::remove(path.c_str());
  EXPECT_EQ(r.given, (std::vector<std::string>{"data", "epochs", "seed"}));
  EXPECT_TRUE(parse({"--resume"}).given == std::vector<std::string>{"resume"});
}

TEST(TrainOptions, RecordedValuesReadBackAsTheSameOptions) {
  TrainOptions o = parse({"--data", "d.h5", "--epochs", "3", "--max-lr", "0.1", "--seed",
                          "18446744073709551615", "--bn-mode", "eval", "--threads", "2",
                          "--pretrained", "w.safetensors", "--out", "o", "--resume"})
                       .options;
  const auto values = pets::train::recorded_option_values(o);
  EXPECT_EQ(values.count("out") + values.count("resume") + values.count("overwrite"), 0u);
  EXPECT_EQ(values.at("max-lr"), "0.1");
  const TrainOptions back = pets::train::options_from_values(values, "ckpt");
  EXPECT_EQ(pets::train::recorded_option_values(back), values);
  EXPECT_EQ(back.out, TrainOptions{}.out);
  EXPECT_EQ(back.resume, pets::train::ResumeMode::kNo);
  EXPECT_EQ(pets::train::run_setting_keys(),
            (std::vector<std::string>{"epochs", "batch-size", "image-size", "max-lr",
                                      "mixed-precision", "seed", "pretrained", "bn-mode",
                                      "unfreeze", "backbone-lr-ratio", "unfreeze-epoch"}));
  EXPECT_EQ(
      [] {
        try {
          pets::train::options_from_values({{"epochs", "0"}}, "out/ckpt-4.safetensors");
        } catch (const pets::UsageError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "out/ckpt-4.safetensors: --epochs must be positive, got 0");
}

TEST(TrainOptions, WriteConfigRefusesWhatItMustNotReplace) {
  const std::string existing = temp_path("existing.cfg");
  const std::string data = temp_path("store.h5");
  write_file(existing, "mine");
  write_file(data, "store");
  EXPECT_EQ(usage_error({"--write-config", existing.c_str()}),
            "--write-config " + existing +
                ": the file exists; replace it with --overwrite, or name another file");
  EXPECT_EQ(parse({"--write-config", existing.c_str(), "--overwrite"}).action,
            Action::kWriteConfig);
  EXPECT_EQ(usage_error({"--data", data.c_str(), "--write-config", data.c_str(), "--overwrite"}),
            "--write-config " + data + ": it is the --data file of this run; name another file");
  // --overwrite asks to replace the file; with --resume it is no contradiction here.
  EXPECT_EQ(parse({"--write-config", existing.c_str(), "--overwrite", "--resume"}).action,
            Action::kWriteConfig);
  TrainOptions o;
  o.overwrite = true;
  pets::train::write_config_file(o, existing);
  std::ifstream in(existing);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_MENTIONS(text.str(), "\noverwrite = false\n");
  // A config file says what its relative paths are relative to.
  EXPECT_MENTIONS(text.str(), "Relative paths are taken from the folder pets_train runs in");
  std::remove(existing.c_str());
  std::remove(data.c_str());
}

TEST(TrainOptions, BadEnumValues) {
  EXPECT_MENTIONS(usage_error({"--data", "d", "--mixed-precision", "fp8"}), "--mixed-precision");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--mixed-precision", "fp8"}), "no, bf16, fp16");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--bn-mode", "frozen"}), "--bn-mode");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--device", "tpu"}), "--device");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--input", "gpu"}), "auto, cpu, device");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--resident", "yes"}), "--resident");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--resident", "yes"}), "auto, on, off");
}

// --resident and --input are parsed each on its own: whether `on` goes with the path --input
// takes is the input pipeline's rule (resident_path_refusal), which the run checks once it knows
// its device, before any data are read (tests/train/run/test_backend.cpp,
// tests/train/input/test_input_paths.sh).
// --unfreeze's stages from the last to all of them, and what is refused with it: an unknown
// stage, a ratio that is not positive, an unfreeze epoch the run never reaches, and a sweep
// (whose heads share one backbone).
TEST(TrainOptions, UnfreezeStagesAndTheirRefusals) {
  using pets::train::Unfreeze;
  const std::pair<const char*, Unfreeze> stages[] = {
      {"none", Unfreeze::kNone},     {"layer4", Unfreeze::kLayer4}, {"layer3", Unfreeze::kLayer3},
      {"layer2", Unfreeze::kLayer2}, {"layer1", Unfreeze::kLayer1}, {"all", Unfreeze::kAll}};
  int first = 5;
  for (const auto& [text, value] : stages) {
    const TrainOptions o = parse({"--data", "d", "--unfreeze", text}).options;
    EXPECT_EQ(o.unfreeze, value) << text;
    EXPECT_EQ(pets::train::to_string(o.unfreeze), text);
    EXPECT_EQ(pets::train::first_trained_stage(o.unfreeze), first--) << text;
  }
  EXPECT_MENTIONS(usage_error({"--data", "d", "--unfreeze", "layer5"}),
                  "--unfreeze must be one of");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--unfreeze", "stem"}), "'stem'");
  for (const char* ratio : {"0", "-0.1", "nan", "inf"})
    EXPECT_MENTIONS(usage_error({"--data", "d", "--backbone-lr-ratio", ratio}),
                    "--backbone-lr-ratio must be a positive number");
  EXPECT_EQ(
      usage_error({"--data", "d", "--epochs", "3", "--unfreeze", "all", "--unfreeze-epoch", "3"}),
      "--unfreeze-epoch must be at least 0 and below --epochs (3), got 3");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--unfreeze-epoch", "-1"}), "--unfreeze-epoch");
  EXPECT_EQ(parse({"--data", "d", "--epochs", "3", "--unfreeze", "all", "--unfreeze-epoch", "2"})
                .options.unfreeze_epoch,
            2);
  EXPECT_MENTIONS(usage_error({"--data", "d", "--unfreeze", "layer4", "--max-lr", "1e-3,3e-2"}),
                  "--unfreeze layer4 trains the backbone, which a sweep's heads (--max-lr "
                  "1e-3,3e-2) share");
  EXPECT_EQ(parse({"--data", "d", "--max-lr", "1e-3,3e-2"}).options.max_lr.size(), 2u);
}

TEST(TrainOptions, ResidentAndInputAreParsedEachOnItsOwn) {
  const TrainOptions cpu_on = parse({"--data", "d", "--input", "cpu", "--resident", "on"}).options;
  EXPECT_EQ(cpu_on.input, pets::train::InputChoice::kCpu);
  EXPECT_EQ(cpu_on.resident, pets::train::ResidentChoice::kOn);
  EXPECT_EQ(parse({"--data", "d", "--input", "cpu", "--resident", "off"}).options.resident,
            pets::train::ResidentChoice::kOff);
  EXPECT_EQ(parse({"--data", "d", "--input", "auto", "--resident", "on"}).options.resident,
            pets::train::ResidentChoice::kOn);
}

TEST(TrainOptions, ConfigFileRoundTripAndCommandLineWins) {
  const std::string path = temp_path("roundtrip.cfg");
  TrainOptions written =
      parse({"--data", "d.h5", "--epochs", "3", "--max-lr", "0.1", "--mixed-precision", "bf16",
             "--seed", "7", "--resume", "--out", "runs/a b"})
          .options;
  pets::train::write_config_file(written, path);
  const TrainOptions read = parse({"--config", path.c_str()}).options;
  EXPECT_EQ(read.data, "d.h5");
  EXPECT_EQ(read.epochs, 3);
  EXPECT_EQ(read.max_lr, std::vector<double>{0.1});
  EXPECT_EQ(read.mixed_precision, pets::train::MixedPrecision::kBf16);
  EXPECT_EQ(read.seed, 7u);
  EXPECT_EQ(read.resume, pets::train::ResumeMode::kYes);
  EXPECT_EQ(read.out, "runs/a b");
  EXPECT_EQ(read.batch_size, 64);
  EXPECT_EQ(read.config, path);
  // Re-formatting what was read gives the same file: nothing lost or changed on the way.
  EXPECT_EQ(pets::train::format_config(read), pets::train::format_config(written));

  const TrainOptions over =
      parse({"--config", path.c_str(), "--epochs", "9", "--data", "other.h5"}).options;
  EXPECT_EQ(over.epochs, 9);  // command line beats the file
  EXPECT_EQ(over.data, "other.h5");
  EXPECT_EQ(over.max_lr, std::vector<double>{0.1});  // the file beats the default
  std::remove(path.c_str());
}

TEST(TrainOptions, ConfigFileIsCommentedAndKeepsEmptyOptionsOut) {
  const std::string text = pets::train::format_config(TrainOptions{});
  EXPECT_MENTIONS(text, "# data = \n");        // required but unset: commented out
  EXPECT_MENTIONS(text, "# pretrained = \n");  // empty default
  EXPECT_MENTIONS(text, "\nepochs = 5\n");
  EXPECT_MENTIONS(text, "\nmax-lr = 3e-2\n");  // as typed, and read back exactly (below)
  EXPECT_MENTIONS(text, "\nresume = no\n");
  EXPECT_MENTIONS(text, "\noverwrite = false\n");
  EXPECT_EQ(text.find("config ="), std::string::npos);
}

TEST(TrainOptions, EveryDefaultIsTheStructsInHelpAndConfig) {
  // The defaults printed are TrainOptions' own, as a user types them: parsing them back from
  // the config file gives the struct's values exactly.
  const TrainOptions d;
  const std::string path = temp_path("defaults.cfg");
  write_file(path, pets::train::format_config(d));
  const TrainOptions read = parse({"--config", path.c_str(), "--data", "d.h5"}).options;
  std::remove(path.c_str());
  EXPECT_EQ(read.max_lr, d.max_lr);  // bit for bit, not DOUBLE_EQ
  EXPECT_EQ(read.epochs, d.epochs);
  EXPECT_EQ(read.threads, d.threads);
  EXPECT_EQ(read.out, d.out);
  const std::string text = pets::train::format_config(d);
  EXPECT_MENTIONS(text, "(default 5)\nepochs = 5\n");
  EXPECT_MENTIONS(text, "(default 3e-2)\nmax-lr = 3e-2\n");
  EXPECT_MENTIONS(text, "(default runs/pets)\nout = runs/pets\n");
  // A value other than the default: the comment still names the default.
  TrainOptions other;
  other.max_lr = {0.1};
  EXPECT_MENTIONS(pets::train::format_config(other), "(default 3e-2)\nmax-lr = 0.1\n");
  const std::string help = parse({"--help"}).help;
  EXPECT_MENTIONS(help, "--max-lr arg (=3e-2)");
  EXPECT_MENTIONS(help, "--out DIR (=runs/pets)");
  EXPECT_EQ(help.find("0.0299"), std::string::npos) << help;
}

TEST(FormatNumber, ShortestTextThatReadsBackExactly) {
  using pets::format_number;
  EXPECT_EQ(format_number(0.8), "0.8");  // not 0.80000000000000004
  EXPECT_EQ(format_number(3e-2), "3e-2");
  EXPECT_EQ(format_number(1e-4), "1e-4");
  EXPECT_EQ(format_number(0.1), "0.1");
  EXPECT_EQ(format_number(0.25), "0.25");
  EXPECT_EQ(format_number(512), "512");
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(-0.05), "-5e-2");
  EXPECT_EQ(format_number(2.5e20), "2.5e20");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");  // only as long as it must be
  for (const double v : {0.8, 3e-2, 1.0 / 3.0, 2.0 / 3.0 * 1e-7, 1e300, 5e-324, 123456789.125}) {
    const std::string text = format_number(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;  // stod refuses denormals
  }
}

TEST(ByteSizeText, MiBBelowOneGiBAndGiBFromIt) {
  using pets::byte_size_text;
  constexpr std::int64_t kMiB = std::int64_t{1} << 20, kGiB = std::int64_t{1} << 30;
  EXPECT_EQ(byte_size_text(0), "0.00 MiB");
  EXPECT_EQ(byte_size_text(kMiB * 3 / 2), "1.50 MiB");
  EXPECT_EQ(byte_size_text(512 * kMiB), "512.00 MiB");
  EXPECT_EQ(byte_size_text(kGiB - kMiB), "1023.00 MiB");
  EXPECT_EQ(byte_size_text(kGiB - 1), "1024.00 MiB");  // still below: rounded, not switched
  EXPECT_EQ(byte_size_text(kGiB), "1.00 GiB");
  EXPECT_EQ(byte_size_text(kGiB + kGiB / 2), "1.50 GiB");
  EXPECT_EQ(byte_size_text(140 * kGiB + kGiB / 4), "140.25 GiB");
}

TEST(TrainOptions, WriteConfigNeedsNoData) {
  const ParseResult r = parse({"--write-config", "x.cfg", "--epochs", "4"});
  EXPECT_EQ(r.action, Action::kWriteConfig);
  EXPECT_EQ(r.options.write_config, "x.cfg");
  EXPECT_EQ(r.options.epochs, 4);
}

TEST(TrainOptions, WriteConfigIsAtomic) {
  const std::string path = temp_path("atomic.cfg");
  write_file(path, "old");
  pets::train::write_config_file(TrainOptions{}, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), pets::train::format_config(TrainOptions{}));
  // No temporary file is left beside it.
  EXPECT_NE(access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), 0);
  EXPECT_THROW(pets::train::write_config_file(TrainOptions{}, "/nonexistent-dir/x.cfg"),
               pets::Error);
  std::remove(path.c_str());
}

TEST(TrainOptions, ConfigFileErrors) {
  const std::string path = temp_path("bad.cfg");
  write_file(path, "epochs = 3\nbogus-key = 1\n");
  const std::string unknown = usage_error({"--data", "d", "--config", path.c_str()});
  EXPECT_MENTIONS(unknown, "bogus-key");
  EXPECT_MENTIONS(unknown, path);

  write_file(path, "config = other.cfg\n");  // not settable from a file
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "config");

  write_file(path, "epochs = 0\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "--epochs");

  write_file(path, "max-lr = abc\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "max-lr");

  write_file(path, "epochs = 2\nepochs = 3\n");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", path.c_str()}), "epochs");
  std::remove(path.c_str());

  EXPECT_MENTIONS(usage_error({"--data", "d", "--config", "/nonexistent/x.cfg"}),
                  "/nonexistent/x.cfg");
}

TEST(TrainOptions, ProgressModeAndInterval) {
  const TrainOptions defaults = parse({"--data", "d"}).options;
  EXPECT_EQ(defaults.progress, pets::ProgressMode::kAuto);
  EXPECT_EQ(defaults.progress_interval, 30.0);
  const TrainOptions o =
      parse({"--data", "d", "--progress", "lines", "--progress-interval", "2.5"}).options;
  EXPECT_EQ(o.progress, pets::ProgressMode::kLines);
  EXPECT_EQ(o.progress_interval, 2.5);
  EXPECT_EQ(parse({"--data", "d", "--progress", "none"}).options.progress,
            pets::ProgressMode::kNone);
  EXPECT_EQ(parse({"--data", "d", "--progress", "bar"}).options.progress, pets::ProgressMode::kBar);
  EXPECT_EQ(parse({"--data", "d", "--progress-interval", "0"}).options.progress_interval, 0.0);
  EXPECT_EQ(usage_error({"--data", "d", "--progress", "fancy"}),
            "--progress must be one of auto, bar, lines, none, got 'fancy'");
  EXPECT_MENTIONS(usage_error({"--data", "d", "--progress-interval", "-1"}),
                  "--progress-interval must be 0 or a positive number of seconds");
  const std::string help = pets::train::train_options_help();
  EXPECT_MENTIONS(help, "--progress arg (=auto)");
  EXPECT_MENTIONS(help, "--progress-interval arg (=30)");
  const std::string config = pets::train::format_config(o);
  EXPECT_MENTIONS(config, "\nprogress = lines\n");
  EXPECT_MENTIONS(config, "\nprogress-interval = 2.5\n");
}

TEST(TrainOptions, TensorBoardFolder) {
  EXPECT_EQ(parse({"--data", "d"}).options.tensorboard, "");
  const TrainOptions o = parse({"--data", "d", "--tensorboard", "runs/tb"}).options;
  EXPECT_EQ(o.tensorboard, "runs/tb");
  EXPECT_EQ(usage_error({"--data", "d", "--tensorboard", ""}), "--tensorboard must name a folder");
  EXPECT_MENTIONS(pets::train::train_options_help(), "--tensorboard DIR");
  // Written to and read from a config file as the other options are; commented out when unset.
  EXPECT_MENTIONS(pets::train::format_config(TrainOptions{}), "\n# tensorboard = \n");
  const std::string config = pets::train::format_config(o);
  EXPECT_MENTIONS(config, "\ntensorboard = runs/tb\n");
  const std::string path = temp_path("tb.cfg");
  write_file(path, config);
  EXPECT_EQ(parse({"--config", path.c_str()}).options.tensorboard, "runs/tb");
  EXPECT_EQ(parse({"--config", path.c_str(), "--tensorboard", "other"}).options.tensorboard,
            "other");
  std::remove(path.c_str());
}

TEST(TrainOptions, ConfigNamingAFolderIsOneClearError) {
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(usage_error({"--data", "d", "--config", folder.c_str()}),
            "--config: '" + folder + "' is a folder, not a file");
}

TEST(TrainOptions, ConfigStartingWithAByteOrderMarkIsRead) {
  const std::string path = temp_path("bom.cfg");
  write_file(path,
             "\xEF\xBB\xBF"
             "epochs = 3\r\ndata = d.h5\r\n");
  const TrainOptions o = parse({"--config", path.c_str()}).options;
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.data, "d.h5");
  // Only at the start of the file: elsewhere it is part of a key, and refused as one.
  write_file(path,
             "epochs = 3\n\xEF\xBB\xBF"
             "data = d.h5\n");
  EXPECT_MENTIONS(usage_error({"--config", path.c_str()}), "unrecognised option");
  std::remove(path.c_str());
}

TEST(TrainOptions, WriteConfigWhereNoFileCanBeIsOneClearError) {
  EXPECT_EQ(usage_error({"--write-config", "/nonexistent-dir/c.cfg"}),
            "--write-config /nonexistent-dir/c.cfg: no folder '/nonexistent-dir'");
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(usage_error({"--write-config", folder.c_str()}),
            "--write-config " + folder + ": '" + folder + "' is a folder, not a file");
}

TEST(TrainOptions, PathsAreCheckedBeforeTheRun) {
  const std::string data = temp_path("data.h5");
  const std::string file = temp_path("a_file");
  write_file(data, "x");
  write_file(file, "x");
  const std::string folder = ::testing::TempDir();
  TrainOptions o;
  o.data = data;
  o.out = temp_path("run");
  EXPECT_NO_THROW(pets::train::check_paths(o));
  EXPECT_NE(access(o.out.c_str(), F_OK), 0) << "the check made --out";
  const auto message = [&o] {
    try {
      pets::train::check_paths(o);
    } catch (const pets::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  o.data = folder;
  EXPECT_EQ(message(), "--data: '" + folder + "' is a folder, not a file");
  o.data = temp_path("missing.h5");
  EXPECT_EQ(message(), "--data: cannot read '" + o.data + "': No such file or directory");
  o.data = data;
  o.pretrained = folder;
  EXPECT_EQ(message(), "--pretrained: '" + folder + "' is a folder, not a file");
  o.pretrained = "";
  o.out = file;
  EXPECT_EQ(message(), "--out " + file + ": '" + file + "' is a file, not a folder");
  o.out = file + "/run";
  EXPECT_EQ(message(), "--out " + file + "/run: '" + file + "' is a file, not a folder");
  o.out = temp_path("run");
  o.tensorboard = temp_path("tb");
  EXPECT_NO_THROW(pets::train::check_paths(o));
  EXPECT_NE(access(o.tensorboard.c_str(), F_OK), 0) << "the check made --tensorboard";
  o.tensorboard = file;
  EXPECT_EQ(message(), "--tensorboard " + file + ": '" + file + "' is a file, not a folder");
  o.tensorboard = file + "/tb";
  EXPECT_EQ(message(), "--tensorboard " + file + "/tb: '" + file + "' is a file, not a folder");
  o.tensorboard = "";
  // A symbolic link to nothing: named as such (mkdir would say only "File exists").
  const std::string link = temp_path("dangling");
  ASSERT_EQ(::symlink("no-such-folder", link.c_str()), 0);
  o.out = link;
  EXPECT_EQ(message(), "--out " + link + ": '" + link +
                           "' is a symbolic link to 'no-such-folder', which does "
                           "not exist");
  o.out = link + "/run";
  EXPECT_EQ(message(), "--out " + link + "/run: '" + link +
                           "' is a symbolic link to 'no-such-folder', which does not exist");
  std::remove(link.c_str());
  std::remove(data.c_str());
  std::remove(file.c_str());
}

}  // namespace
