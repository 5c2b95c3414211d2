// Resume's compatibility check, a pure function of the saving run and the resuming one: what it
// accepts (an end-of-epoch checkpoint at any rank count) and what it refuses, each with the
// message a user reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pets/train/options/resume_check.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::RunConfig;
using pets::train::RunShape;

RunShape run(int64_t world = 2, int64_t steps = 10) {
  pets::train::TrainOptions o;
  o.epochs = 4;
  o.batch_size = 8;
  o.max_lr = {0.03};
  o.seed = 42;
  return {RunConfig::of(o, {"abyssinian", "beagle", "boxer"}),
          world,
          steps,
          {"00112233445566778899aabbccddeeff", "/work/pets.h5"}};
}

/// The message of the UsageError the check throws, or "" when it accepts.
std::string refusal(const RunShape& saved, bool mid_epoch, const RunShape& current) {
  try {
    pets::train::check_resume_compatible("out/ckpt-40.safetensors", saved, mid_epoch, current,
                                         "pets.h5");
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ResumeCheck, TheSameRunResumesAnywhere) {
  EXPECT_EQ(refusal(run(), false, run()), "");
  EXPECT_EQ(refusal(run(), true, run()), "");
}

TEST(ResumeCheck, OtherLabelsAreRefusedFirst) {
  RunShape current = run();
  current.config.labels.push_back("pug");
  current.config.options["epochs"] = "9";  // also differs: the labels are named first
  EXPECT_EQ(refusal(run(), false, current),
            "out/ckpt-40.safetensors: its 3 class labels differ from the 4 labels of pets.h5");
  current = run();
  current.config.labels[1] = "basset";  // same count, other names
  EXPECT_NE(refusal(run(), false, current).find("labels differ"), std::string::npos);
}

TEST(ResumeCheck, EverySettingThatDiffersIsNamedAsAnOptionAtOnce) {
  RunShape current = run();
  current.config.options["epochs"] = "5";
  current.config.options["batch-size"] = "16";
  current.config.options["max-lr"] = "1e-2";
  current.config.options["seed"] = "7";
  current.config.options["bn-mode"] = "eval";
  current.config.options["mixed-precision"] = "bf16";
  current.config.options["pretrained"] = "/w/m.safetensors";
  EXPECT_EQ(refusal(run(), false, current),
            "out/ckpt-40.safetensors: written with other settings: --epochs 4 (this run: 5), "
            "--batch-size 8 (this run: 16), --max-lr 3e-2 (this run: 1e-2), --mixed-precision "
            "no (this run: bf16), --seed 42 (this run: 7), --pretrained (none) (this run: "
            "/w/m.safetensors), --bn-mode train (this run: eval)");
  // How a start runs is not a setting of the run.
  current = run();
  current.config.options["threads"] = "3";
  current.config.options["eval-batch-size"] = "7";
  current.config.options["device"] = "cpu";
  current.config.options["data"] = "/elsewhere/pets.h5";  // the store's id decides
  EXPECT_EQ(refusal(run(), true, current), "");
}

TEST(ResumeCheck, MidEpochNeedsTheSameRankCount) {
  EXPECT_EQ(refusal(run(2, 10), true, run(1, 20)),
            "out/ckpt-40.safetensors: a mid-epoch checkpoint of 2 ranks; resume it with as many "
            "(an end-of-epoch one resumes with any)");
  // At an epoch's end the steps per epoch follow the new rank count.
  EXPECT_EQ(refusal(run(2, 10), false, run(1, 20)), "");
  EXPECT_EQ(refusal(run(2, 10), false, run(4, 5)), "");
}

TEST(ResumeCheck, SameRanksOtherStepsIsAnotherDataSet) {
  EXPECT_EQ(refusal(run(2, 10), false, run(2, 11)),
            "out/ckpt-40.safetensors: written with 10 steps per epoch, this run has 11 (another "
            "data set)");
}

/// The message of check_schedule_resumable's UsageError, or "" when it accepts.
std::string schedule_refusal(int64_t world, int64_t steps_per_update, bool finished = false) {
  try {
    pets::train::check_schedule_resumable("out/ckpt-40.safetensors", world, steps_per_update,
                                          finished);
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

// OneCycle stepped once per rank at every optimiser step (Accelerate's rule) continues at any
// rank count; an earlier pets_train's schedule (once per optimiser step) only where that is the
// same, at one rank, or when the run has nothing left to train.
TEST(ResumeCheck, AnEarlierScheduleContinuesOnlyAtOneRank) {
  EXPECT_EQ(schedule_refusal(1, 1), "");
  EXPECT_EQ(schedule_refusal(2, 2), "");
  EXPECT_EQ(schedule_refusal(3, 3), "");
  EXPECT_EQ(schedule_refusal(2, 1),
            "out/ckpt-40.safetensors: written by an earlier pets_train, whose OneCycle schedule "
            "at 2 ranks took one step per optimiser step; this one takes 2 steps (one per rank, "
            "as Accelerate, over one process's batches), so the learning rates of the run so far "
            "do not continue on its schedule: start over with --overwrite, or finish the run "
            "with the pets_train that wrote it");
  EXPECT_NE(schedule_refusal(3, 1).find("at 3 ranks took one step per optimiser step"),
            std::string::npos);
  EXPECT_EQ(schedule_refusal(2, 1, true), "");
}

/// The message of check_batching_resumable's UsageError, or "" when it accepts: a checkpoint of
/// `saved_world` ranks recording `batching` (and `version`), with or without image-size among
/// its options, resumed at `world` ranks by a pets_train that batches as "accelerate-even-batches".
std::string batching_refusal(int64_t saved_world, const std::string& batching, bool image_size,
                             int64_t world, bool finished = false,
                             const std::string& version = "") {
  std::map<std::string, std::string> options = run().config.options;
  if (!image_size) options.erase("image-size");
  try {
    pets::train::check_batching_resumable("out/ckpt-40.safetensors",
                                          {saved_world, batching, version, &options}, world,
                                          "accelerate-even-batches", finished);
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

// A checkpoint written at several ranks before Accelerate's batching (no batching recorded, no
// image-size among its settings) continues only at one rank, where the batches are the same, or
// when it has nothing left to train; one that records this batching, or has image-size (written
// after the change, before checkpoints recorded it), continues at any rank count.
TEST(ResumeCheck, AnEarlierBatchingContinuesOnlyAtOneRank) {
  ASSERT_EQ(run().config.options.count("image-size"), 1u);
  EXPECT_EQ(batching_refusal(2, "accelerate-even-batches", true, 2), "");
  EXPECT_EQ(batching_refusal(2, "", true, 2), "");
  EXPECT_EQ(batching_refusal(2, "", true, 4), "");
  EXPECT_EQ(batching_refusal(2, "", false, 1), "");
  EXPECT_EQ(batching_refusal(1, "", false, 2), "");
  EXPECT_EQ(batching_refusal(2, "", false, 2, true), "");
  EXPECT_EQ(batching_refusal(2, "", false, 2),
            "out/ckpt-40.safetensors: written at 2 ranks by an earlier pets_train (it records no "
            "--image-size), whose ranks split each step's --batch-size images between them; this "
            "one batches as Accelerate, every rank taking --batch-size images at every step, so "
            "the run would not continue as it started: resume it at one rank (-np 1), where the "
            "batches are the same, or start over with --overwrite");
  EXPECT_NE(batching_refusal(4, "", false, 3).find("written at 4 ranks by an earlier"),
            std::string::npos);
}

// A batching recorded under another name is refused at several ranks, naming both and the
// pets_train that wrote it.
TEST(ResumeCheck, AnotherRecordedBatchingIsNamed) {
  EXPECT_EQ(batching_refusal(2, "some-later-batches", true, 2, false, "0.2.0"),
            "out/ckpt-40.safetensors: written by pets_train 0.2.0, whose ranks made their "
            "training batches as 'some-later-batches'; this one makes them as "
            "'accelerate-even-batches', so the run would not continue on the images it was "
            "training with: resume it at one rank (-np 1), where the batches are the same, or "
            "start over with --overwrite");
  EXPECT_EQ(batching_refusal(2, "some-later-batches", true, 1), "");
  EXPECT_EQ(batching_refusal(2, "some-later-batches", true, 2, true), "");
}

TEST(ResumeCheck, ConfigJsonRoundTripsWithEveryOptionButHowItWasStarted) {
  const RunConfig c = run().config;
  const nlohmann::json j = c;
  EXPECT_EQ(j.at("labels").dump(), R"(["abyssinian","beagle","boxer"])");
  EXPECT_EQ(j.at("options").at("batch-size"), "8");
  EXPECT_EQ(j.at("options").at("max-lr"), "3e-2");
  EXPECT_EQ(j.at("options").at("threads"), "0");
  for (const char* key : {"out", "resume", "overwrite"})
    EXPECT_FALSE(j.at("options").contains(key));
  const RunConfig back = nlohmann::json::parse(j.dump()).get<RunConfig>();
  EXPECT_EQ(back.options, c.options);
  EXPECT_EQ(back.labels, c.labels);
  EXPECT_THROW(nlohmann::json::parse(R"({"epochs":4})").get<RunConfig>(),
               nlohmann::json::exception);
}

// A checkpoint written before the whole configuration was recorded: its six settings, read
// under their option names, still checked.
TEST(ResumeCheck, AnOlderCheckpointsSettingsAreRead) {
  const RunConfig old =
      nlohmann::json::parse(
          R"({"batch_size":8,"bn_mode":"train","epochs":4,"labels":["abyssinian",)"
          R"("beagle","boxer"],"max_lr":0.03,"mixed_precision":"no","seed":42})")
          .get<RunConfig>();
  EXPECT_EQ(old.options.at("max-lr"), "3e-2");
  EXPECT_EQ(old.options.at("batch-size"), "8");
  EXPECT_EQ(old.options.count("pretrained"), 0u);
  RunShape saved = run();
  saved.config = old;
  EXPECT_EQ(refusal(saved, false, run()), "");
  RunShape current = run();
  current.config.options["seed"] = "1";
  EXPECT_EQ(refusal(saved, false, current),
            "out/ckpt-40.safetensors: written with other settings: --seed 42 (this run: 1)");
}

/// The options resume_options gives, or its refusal's message in `error`.
pets::train::TrainOptions resumed(const pets::train::TrainOptions& given_options,
                                  const std::vector<std::string>& given, bool finished,
                                  std::string& error, const RunConfig& saved = run().config) {
  error.clear();
  try {
    return pets::train::resume_options(given_options, given, saved, "out/ckpt-40.safetensors",
                                       finished);
  } catch (const pets::UsageError& e) {
    error = e.what();
  }
  return {};
}

TEST(ResumeOptions, TheRunsOwnOptionsWhereNoneIsGiven) {
  pets::train::TrainOptions saved_options;
  saved_options.data = "/work/pets.h5";
  saved_options.epochs = 4;
  saved_options.batch_size = 8;
  saved_options.mixed_precision = pets::train::MixedPrecision::kBf16;
  saved_options.pretrained = "/w/resnet50d.safetensors";
  saved_options.threads = 2;
  const RunConfig saved = RunConfig::of(saved_options, {"a", "b"});
  pets::train::TrainOptions command_line;  // `--resume --out out`
  command_line.out = "out";
  command_line.resume = pets::train::ResumeMode::kYes;
  std::string error;
  pets::train::TrainOptions o = resumed(command_line, {"resume"}, false, error, saved);
  EXPECT_EQ(error, "");
  EXPECT_EQ(o.data, "/work/pets.h5");
  EXPECT_EQ(o.epochs, 4);
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.mixed_precision, pets::train::MixedPrecision::kBf16);
  EXPECT_EQ(o.pretrained, "/w/resnet50d.safetensors");
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.out, "out");
  EXPECT_EQ(o.resume, pets::train::ResumeMode::kYes);
  // Given: how this start runs (any value) and the run's settings at the run's values.
  command_line.threads = 1;
  command_line.data = "moved/pets.h5";
  command_line.epochs = 4;
  o = resumed(command_line, {"threads", "data", "epochs"}, false, error, saved);
  EXPECT_EQ(error, "");
  EXPECT_EQ(o.threads, 1);
  EXPECT_EQ(o.data, "moved/pets.h5");  // as typed: this start's folder
  EXPECT_EQ(o.batch_size, 8);
}

TEST(ResumeOptions, EveryConflictIsNamedAtOnceAsAnOption) {
  pets::train::TrainOptions command_line;
  command_line.out = "out";
  command_line.epochs = 5;
  command_line.batch_size = 16;
  command_line.seed = 42;  // the run's: no conflict
  std::string error;
  resumed(command_line, {"epochs", "batch-size", "seed"}, false, error);
  EXPECT_EQ(error,
            "--resume: the run in out was started with other settings: --epochs 4 (given: 5), "
            "--batch-size 8 (given: 16); leave these options out to continue it with its own "
            "(its checkpoint out/ckpt-40.safetensors holds them), or start a new run "
            "(--overwrite, or another --out)");
  // A default value given is given: refused too.
  command_line = {};
  command_line.out = "out";
  resumed(command_line, {"batch-size"}, false, error);
  EXPECT_NE(error.find("--batch-size 8 (given: 64)"), std::string::npos) << error;
}

TEST(ResumeOptions, AFinishedRunGivenMoreEpochsSaysHowToTrainOn) {
  pets::train::TrainOptions command_line;
  command_line.out = "out";
  command_line.epochs = 6;
  std::string error;
  resumed(command_line, {"epochs"}, true, error);
  EXPECT_NE(error.find("--epochs 4 (given: 6)"), std::string::npos) << error;
  EXPECT_NE(error.find("A finished run cannot be extended: its OneCycle schedule spanned its 4 "
                       "epochs and has ended. To train on from its model, start a new run from "
                       "it: --pretrained out/model.safetensors --out NEW_DIR"),
            std::string::npos)
      << error;
  resumed(command_line, {"epochs"}, false, error);  // not finished: no such sentence
  EXPECT_EQ(error.find("cannot be extended"), std::string::npos) << error;
}

TEST(ResumeOptions, AnOlderCheckpointNeedsItsData) {
  const RunConfig old =
      nlohmann::json::parse(R"({"batch_size":8,"bn_mode":"train","epochs":4,"labels":[],)"
                            R"("max_lr":0.03,"mixed_precision":"no","seed":42})")
          .get<RunConfig>();
  pets::train::TrainOptions command_line;
  command_line.out = "out";
  std::string error;
  resumed(command_line, {}, false, error, old);
  EXPECT_EQ(error,
            "out/ckpt-40.safetensors does not record its --data (an older pets_train wrote it): "
            "give the run's options again, --data included");
  command_line.data = "pets.h5";
  const pets::train::TrainOptions o = resumed(command_line, {"data"}, false, error, old);
  EXPECT_EQ(error, "");
  EXPECT_EQ(o.epochs, 4);
  EXPECT_EQ(o.batch_size, 8);
}

// Another store with the same labels and steps per epoch (pets_preprocess run again, another
// split or other images): refused, naming the checkpoint, both stores and both ids.
TEST(ResumeCheck, AnotherImageStoreIsRefusedNamingBothFiles) {
  RunShape current = run();
  current.store = {"ffeeddccbbaa99887766554433221100", "/work/other.h5"};
  EXPECT_EQ(refusal(run(), false, current),
            "out/ckpt-40.safetensors was written from the image store /work/pets.h5 (store_id "
            "00112233445566778899aabbccddeeff); --data pets.h5 is another store (store_id "
            "ffeeddccbbaa99887766554433221100; pets_preprocess gives every file it writes a new "
            "id): resume with the store it was written from, or start over with --overwrite");
  // The same store under another path (moved, copied, linked) is the same store.
  current.store = {run().store.id, "/elsewhere/pets.h5"};
  EXPECT_EQ(refusal(run(), true, current), "");
}

TEST(ResumeCheck, AMissingStoreIdIsHandled) {
  RunShape saved = run(), current = run();
  saved.store = {};  // a checkpoint from before store ids
  const std::string old_checkpoint = refusal(saved, false, current);
  EXPECT_NE(old_checkpoint.find("records no image store identity"), std::string::npos)
      << old_checkpoint;
  EXPECT_NE(old_checkpoint.find("--data pets.h5 (store_id 00112233"), std::string::npos)
      << old_checkpoint;
  current.store.id = "";  // a store from before store ids
  const std::string old_store = refusal(run(), false, current);
  EXPECT_NE(old_store.find("--data pets.h5 has no store_id"), std::string::npos) << old_store;
  EXPECT_NE(old_store.find("/work/pets.h5"), std::string::npos) << old_store;
  // Neither has one: nothing to compare; the other checks still apply.
  EXPECT_EQ(refusal(saved, false, current), "");
}

}  // namespace
