// The checkpoint files' names: each parser takes back exactly the names its maker writes, and
// refuses every other name (a temporary of one, another number format, a name cut short).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "pets/train/state/checkpoint_names.hpp"

namespace {

using pets::train::ShardKey;

TEST(CheckpointNames, AShardNameGivesBackItsKey) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  for (const ShardKey& key : {ShardKey{10, 1, 4, 2}, ShardKey{0, 0, 0, 0}, ShardKey{7, 3, 120, 15},
                              ShardKey{big, big, big, std::numeric_limits<int>::max()}}) {
    const std::string name = pets::train::shard_file_name(key);
    const std::optional<ShardKey> parsed = pets::train::parse_shard_file_name(name);
    ASSERT_TRUE(parsed) << name;
    EXPECT_EQ(*parsed, key) << name;
    EXPECT_EQ(pets::train::shard_file_name(*parsed), name);
  }
  EXPECT_EQ(pets::train::shard_file_name({10, 1, 4, 2}),
            "ckpt-10.epoch-1.step-4.rank-2.safetensors");
}

TEST(CheckpointNames, OtherNamesAreNoShards) {
  for (const char* name : {
           "ckpt-10.safetensors",                                // a checkpoint
           "ckpt-10.epoch-1.step-4.rank-2.safetensors.tmp.9",    // a temporary of a shard
           "ckpt-10.epoch-1.step-4.rank-2.safetensors.tmp.h.9",  // ... with its host
           "ckpt-10.epoch-1.step-4.rank-2.safetensors.bak",
           "xckpt-10.epoch-1.step-4.rank-2.safetensors",
           "ckpt-10.epoch-1.step-4.rank-2",
           "ckpt-10.epoch-1.step-4.safetensors",
           "ckpt-10.step-4.epoch-1.rank-2.safetensors",
           "ckpt-.epoch-1.step-4.rank-2.safetensors",
           "ckpt-10.epoch-.step-4.rank-2.safetensors",
           "ckpt-010.epoch-1.step-4.rank-2.safetensors",  // leading zeros
           "ckpt-10.epoch-01.step-4.rank-2.safetensors",
           "ckpt-10.epoch-1.step-4.rank-00.safetensors",
           "ckpt--10.epoch-1.step-4.rank-2.safetensors",  // signs
           "ckpt-+10.epoch-1.step-4.rank-2.safetensors",
           "ckpt-10.epoch-1.step-4.rank--2.safetensors",
           "ckpt-1x.epoch-1.step-4.rank-2.safetensors",
           "ckpt-10.epoch-1.step-4.rank- 2.safetensors",
           // Out of range: one past int64 for the index, past int for the rank.
           "ckpt-9223372036854775808.epoch-1.step-4.rank-2.safetensors",
           "ckpt-99999999999999999999.epoch-1.step-4.rank-2.safetensors",
           "ckpt-10.epoch-1.step-4.rank-2147483648.safetensors",
           "",
       })
    EXPECT_FALSE(pets::train::parse_shard_file_name(name)) << name;
}

TEST(CheckpointNames, ACheckpointNameGivesBackItsIndex) {
  for (const int64_t index : {int64_t{0}, int64_t{40}, std::numeric_limits<int64_t>::max()}) {
    const std::string name = pets::train::checkpoint_file_name(index);
    EXPECT_EQ(pets::train::parse_checkpoint_file_name(name), index) << name;
  }
  EXPECT_EQ(pets::train::checkpoint_file_name(40), "ckpt-40.safetensors");
  for (const char* name : {"ckpt-10.epoch-1.step-4.rank-2.safetensors", "ckpt-10.safetensors.tmp.9",
                           "ckpt-.safetensors", "ckpt-010.safetensors", "ckpt--1.safetensors",
                           "ckpt-10", "ckpt-10.safetensors ", "latest",
                           "ckpt-9223372036854775808.safetensors", "model.safetensors"})
    EXPECT_FALSE(pets::train::parse_checkpoint_file_name(name)) << name;
}

}  // namespace
