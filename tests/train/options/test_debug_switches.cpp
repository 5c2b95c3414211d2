// The test-only switches: read in one place from the environment, the fault specification's
// syntax, what inject_fault does at and away from its (rank, step).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <map>

#include "pets/train/options/debug_switches.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::DebugSwitches;

DebugSwitches from(const std::map<std::string, std::string>& env) {
  return DebugSwitches::from([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(DebugSwitches, OffUnlessSet) {
  const DebugSwitches none = from({});
  EXPECT_FALSE(none.inject_fault);
  EXPECT_FALSE(none.unfolded);
  EXPECT_FALSE(none.verify_ranks);
  EXPECT_FALSE(none.default_malloc);
  EXPECT_FALSE(none.native_batchnorm);
  EXPECT_FALSE(none.native_conv);
  EXPECT_FALSE(none.no_warm_up);
  // Set to anything, even empty: on.
  const DebugSwitches all = from({{"PETS_UNFOLDED", ""},
                                  {"PETS_VERIFY_RANKS", "1"},
                                  {"PETS_DEFAULT_MALLOC", "0"},
                                  {"PETS_NATIVE_BATCHNORM", ""},
                                  {"PETS_NATIVE_CONV", "yes"},
                                  {"PETS_NO_WARM_UP", "1"},
                                  {"PETS_INJECT_FAULT", "throw:1:2"}});
  EXPECT_TRUE(all.unfolded);
  EXPECT_TRUE(all.verify_ranks);
  EXPECT_TRUE(all.default_malloc);
  EXPECT_TRUE(all.native_batchnorm);
  EXPECT_TRUE(all.native_conv);
  EXPECT_TRUE(all.no_warm_up);
  ASSERT_TRUE(all.inject_fault);
  EXPECT_EQ(all.inject_fault->kind, "throw");
  EXPECT_EQ(all.inject_fault->rank, 1);
  EXPECT_EQ(all.inject_fault->step, 2);
}

TEST(DebugSwitches, WritePauseSyntax) {
  EXPECT_FALSE(from({}).pause_write);
  const DebugSwitches on = from({{"PETS_PAUSE_WRITE", "model.safetensors:2.5"}});
  ASSERT_TRUE(on.pause_write);
  EXPECT_EQ(on.pause_write->file_name, "model.safetensors");
  EXPECT_DOUBLE_EQ(on.pause_write->seconds, 2.5);
  for (const char* bad : {"", "model.safetensors", ":3", "a/b:3", "x:-1", "x:3s", "x:"})
    EXPECT_FALSE(pets::train::parse_write_pause(bad)) << bad;
}

TEST(DebugSwitches, EvalPauseSeconds) {
  EXPECT_EQ(from({}).pause_eval_seconds, 0.0);
  EXPECT_EQ(from({{"PETS_PAUSE_EVAL", "2.5"}}).pause_eval_seconds, 2.5);
  for (const char* bad : {"", "x", "-1", "2s"})
    EXPECT_EQ(from({{"PETS_PAUSE_EVAL", bad}}).pause_eval_seconds, 0.0) << bad;
}

TEST(DebugSwitches, StepPauseSyntax) {
  EXPECT_FALSE(from({}).pause_step);
  const DebugSwitches on = from({{"PETS_PAUSE_STEP", "23:60"}});
  ASSERT_TRUE(on.pause_step);
  EXPECT_EQ(on.pause_step->step, 23);
  EXPECT_DOUBLE_EQ(on.pause_step->seconds, 60.0);
  for (const char* bad : {"", "23", ":3", "-1:3", "2:-1", "2:3s", "x:3", "2:"})
    EXPECT_FALSE(pets::train::parse_step_pause(bad)) << bad;
}

TEST(DebugSwitches, StepDumpSyntax) {
  EXPECT_FALSE(from({}).dump_steps);
  const DebugSwitches on = from({{"PETS_DUMP_STEPS", "/tmp/a:b/dump:10"}});
  ASSERT_TRUE(on.dump_steps);
  EXPECT_EQ(on.dump_steps->dir, "/tmp/a:b/dump");
  EXPECT_EQ(on.dump_steps->steps, 10);
  for (const char* bad : {"", "dir", "dir:", ":3", "dir:0", "dir:-1", "dir:3x", "dir:x"})
    EXPECT_FALSE(pets::train::parse_step_dump(bad)) << bad;
}

TEST(DebugSwitches, FaultSpecSyntax) {
  const auto spec = pets::train::parse_fault_spec("sigkill:0:123456789012");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, "sigkill");
  EXPECT_EQ(spec->rank, 0);
  EXPECT_EQ(spec->step, 123456789012);
  EXPECT_TRUE(pets::train::parse_fault_spec("exit0:3:0"));
  // Malformed: ignored, as the run would be without the variable.
  for (const char* bad : {"", "throw", "throw:1", "throw:x:2", "THROW:1:2", ":1:2", "throw;1;2"})
    EXPECT_FALSE(pets::train::parse_fault_spec(bad)) << bad;
  EXPECT_FALSE(from({{"PETS_INJECT_FAULT", "nonsense"}}).inject_fault);
}

TEST(DebugSwitches, InjectFaultOnlyAtItsRankAndStep) {
  const auto thrower = pets::train::parse_fault_spec("throw:1:2");
  EXPECT_FALSE(pets::train::inject_fault(std::nullopt, 1, 2));
  EXPECT_FALSE(pets::train::inject_fault(thrower, 0, 2));
  EXPECT_FALSE(pets::train::inject_fault(thrower, 1, 3));
  try {
    pets::train::inject_fault(thrower, 1, 2);
    FAIL() << "no throw";
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault at step 2"), std::string::npos);
  }
  // skew is the caller's to apply; an unknown kind does nothing.
  EXPECT_TRUE(pets::train::inject_fault(pets::train::parse_fault_spec("skew:0:5"), 0, 5));
  EXPECT_FALSE(pets::train::inject_fault(pets::train::parse_fault_spec("skew:0:5"), 0, 4));
  EXPECT_FALSE(pets::train::inject_fault(pets::train::parse_fault_spec("other:0:5"), 0, 5));
}

}  // namespace
