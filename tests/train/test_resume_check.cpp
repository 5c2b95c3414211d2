// Resume's compatibility check, a pure function of the saving run and the resuming one: what it
// accepts (an end-of-epoch checkpoint at any rank count) and what it refuses, each with the
// message a user reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pets/train/resume_check.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::RunConfig;
using pets::train::RunShape;

RunShape run(int64_t world = 2, int64_t steps = 10) {
  pets::train::TrainOptions o;
  o.epochs = 4;
  o.batch_size = 8;
  o.max_lr = 0.03;
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
  current.config.epochs = 9;  // also differs: the labels are named first
  EXPECT_EQ(refusal(run(), false, current),
            "out/ckpt-40.safetensors: its 3 class labels differ from the 4 labels of pets.h5");
  current = run();
  current.config.labels[1] = "basset";  // same count, other names
  EXPECT_NE(refusal(run(), false, current).find("labels differ"), std::string::npos);
}

TEST(ResumeCheck, EachSettingIsNamedWithBothValues) {
  struct Case {
    void (*change)(RunConfig&);
    std::string message;
  };
  const Case cases[] = {
      {[](RunConfig& c) { c.epochs = 5; }, "epochs = 4, this run has 5"},
      {[](RunConfig& c) { c.batch_size = 16; }, "batch_size = 8, this run has 16"},
      {[](RunConfig& c) { c.max_lr = 0.01; }, "max_lr = 0.03, this run has 0.01"},
      {[](RunConfig& c) { c.seed = 7; }, "seed = 42, this run has 7"},
      {[](RunConfig& c) { c.bn_mode = "eval"; }, R"(bn_mode = "train", this run has "eval")"},
      {[](RunConfig& c) { c.mixed_precision = "bf16"; },
       R"(mixed_precision = "no", this run has "bf16")"},
  };
  for (const Case& c : cases) {
    RunShape current = run();
    c.change(current.config);
    EXPECT_EQ(refusal(run(), false, current),
              "out/ckpt-40.safetensors: was written with " + c.message);
  }
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

TEST(ResumeCheck, ConfigJsonRoundTripsAndKeepsItsKeys) {
  const RunConfig c = run().config;
  const nlohmann::json j = c;
  EXPECT_EQ(j.dump(),
            R"({"batch_size":8,"bn_mode":"train","epochs":4,"labels":["abyssinian","beagle",)"
            R"("boxer"],"max_lr":0.03,"mixed_precision":"no","seed":42})");
  const RunConfig back = nlohmann::json::parse(j.dump()).get<RunConfig>();
  RunShape a = run(), b = run();
  b.config = back;
  EXPECT_EQ(refusal(a, true, b), "");
  EXPECT_EQ(back.max_lr, c.max_lr);
  EXPECT_EQ(back.labels, c.labels);
  EXPECT_THROW(nlohmann::json::parse(R"({"epochs":4})").get<RunConfig>(),
               nlohmann::json::exception);
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
