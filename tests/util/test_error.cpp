#include <gtest/gtest.h>

#include "pets/util/error.hpp"

TEST(Error, MessageNamesFileLineAndRank) {
  try {
    PETS_ERROR("bad thing");
    FAIL() << "no throw";
  } catch (const pets::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad thing"), std::string::npos);
    EXPECT_NE(what.find("test_error.cpp:7"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
  }
}

TEST(Error, CheckPassesAndFails) {
  EXPECT_NO_THROW(PETS_CHECK(1 + 1 == 2, "math"));
  EXPECT_THROW(PETS_CHECK(1 + 1 == 3, "math"), pets::Error);
}
