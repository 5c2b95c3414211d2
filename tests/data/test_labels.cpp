#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "pets/data/labels.hpp"
#include "pets/data/layout.hpp"
#include "pets/data/preprocess.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/util/error.hpp"

using namespace pets::data;
using namespace pets::testdata;

TEST(Labels, ExtractsGroupOneOfThePythonPattern) {
  EXPECT_EQ(label_from_filename("great_pyrenees_12.jpg").value(), "great_pyrenees");
  EXPECT_EQ(label_from_filename("Abyssinian_1.jpg").value(), "Abyssinian");
  EXPECT_EQ(label_from_filename("american_pit_bull_terrier_190.jpg").value(),
            "american_pit_bull_terrier");
  // (.*) is greedy: digits inside the name stay in the label.
  EXPECT_EQ(label_from_filename("a_1_2.jpg").value(), "a_1");
  EXPECT_EQ(label_from_filename("cat2_7.jpg").value(), "cat2");
  EXPECT_EQ(label_from_filename("_5.jpg").value(), "");
}

TEST(Labels, RejectsNamesThatDoNotMatch) {
  EXPECT_FALSE(label_from_filename("samoyed.jpg"));    // no number
  EXPECT_FALSE(label_from_filename("samoyed_.jpg"));   // empty number
  EXPECT_FALSE(label_from_filename("samoyed12.jpg"));  // no underscore
  EXPECT_FALSE(label_from_filename("samoyed_1a.jpg"));
  EXPECT_FALSE(label_from_filename("Persian_3.mat"));
  EXPECT_FALSE(label_from_filename("Persian_3.jpg.bak"));
  EXPECT_FALSE(label_from_filename("Persian_3.jp2"));
  EXPECT_FALSE(label_from_filename("Persian_3.heic"));
}

TEST(Labels, ImageExtensionsInAnyLetterCase) {
  for (const char* name : {"x.jpg", "x.JPG", "x.Jpeg", "x.jpeg", "x.png", "x.PNG", "x.gif", "x.GiF",
                           "x.webp", "x.WEBP", "x.bmp", "x.ppm", "x.Pgm", "x.tif", "x.TIFF"})
    EXPECT_TRUE(has_image_extension(name)) << name;
  for (const char* name : {"jpg", ".jpg", ".webp", "x.jpg.bak", "x.mat", "x.heic", "x.jp2", "x.pbm",
                           "xjpg", "x.tiff~"})
    EXPECT_FALSE(has_image_extension(name)) << name;
  EXPECT_EQ(label_from_filename("sphynx_7.webp").value(), "sphynx");
  EXPECT_EQ(label_from_filename("Persian_3.JPG").value(), "Persian");
  EXPECT_EQ(label_from_filename("Persian_3.jpeg").value(), "Persian");
  EXPECT_EQ(label_from_filename("Maine Coon_12.PNG").value(), "Maine Coon");
  EXPECT_EQ(label_from_filename("Émile_1.gif").value(), "Émile");
}

TEST(Layout, NamesAndUtf8) {
  EXPECT_EQ(parse_layout("auto"), Layout::kAuto);
  EXPECT_EQ(parse_layout("split"), Layout::kSplit);
  EXPECT_STREQ(layout_name(parse_layout("folders")), "folders");
  EXPECT_THROW(parse_layout("Folders"), pets::UsageError);
  EXPECT_TRUE(is_utf8("Maine Coon"));
  EXPECT_TRUE(is_utf8("Émile ñ 猫 🐈"));
  EXPECT_FALSE(is_utf8("x\xffy"));
  EXPECT_FALSE(is_utf8("\xc3"));              // cut short
  EXPECT_FALSE(is_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Labels, SortedOrderIsPythonSorted) {
  // Python: sorted({"beagle", "Bengal", "Abyssinian", "american_bulldog", "Sphynx",
  // "basset_hound", "beagle"}) -> upper case first (byte order).
  const std::vector<std::string> got = sorted_labels(
      {"beagle", "Bengal", "Abyssinian", "american_bulldog", "Sphynx", "basset_hound", "beagle"});
  const std::vector<std::string> want = {"Abyssinian",       "Bengal",       "Sphynx",
                                         "american_bulldog", "basset_hound", "beagle"};
  EXPECT_EQ(got, want);
  EXPECT_EQ(label_id(got, "Sphynx"), 2);
  EXPECT_THROW(label_id(got, "unicorn"), pets::Error);
}

TEST(Labels, BreedListHasTheRealNamesAndCasing) {
  const auto& b = pet_breeds();
  ASSERT_EQ(b.size(), 37u);
  EXPECT_EQ(sorted_labels(b), b);
  EXPECT_EQ(std::count_if(b.begin(), b.end(), [](const std::string& s) { return s[0] < 'a'; }), 12);
  EXPECT_EQ(b[4], "British_Shorthair");
  EXPECT_EQ(b[13], "american_pit_bull_terrier");
  EXPECT_EQ(b[36], "yorkshire_terrier");
}

TEST(Split, DeterministicDisjointAndComplete) {
  const Split a = split_indices(101, 42, 0.8);
  const Split b = split_indices(101, 42, 0.8);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_EQ(a.train.size(), 80u);  // floor(101 * 0.8), as int() in Python
  EXPECT_EQ(a.eval.size(), 21u);
  std::set<std::int64_t> all(a.train.begin(), a.train.end());
  for (auto e : a.eval) EXPECT_TRUE(all.insert(e).second) << "index in both parts: " << e;
  EXPECT_EQ(all.size(), 101u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 100);
  EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end()));
  const Split c = split_indices(101, 43, 0.8);
  EXPECT_NE(a.eval, c.eval) << "the seed must matter";
}

TEST(Split, PinnedForSeed42) {
  // Regression pin: the split is part of the file format's meaning (rank count plays no part).
  const Split s = split_indices(10, 42, 0.7);
  ASSERT_EQ(s.eval.size(), 3u);
  EXPECT_EQ(s.eval, (std::vector<std::int64_t>{2, 4, 9}));
  EXPECT_EQ(s.train, (std::vector<std::int64_t>{0, 1, 3, 5, 6, 7, 8}));
}

TEST(Split, EdgeFractions) {
  EXPECT_EQ(split_indices(5, 1, 1.0).eval.size(), 0u);
  EXPECT_EQ(split_indices(5, 1, 0.0).train.size(), 0u);
  EXPECT_THROW(split_indices(5, 1, 1.5), pets::Error);
}

TEST(StratifiedSplit, EveryClassOfTwoOrMoreOnBothSidesAtItsFraction) {
  // Classes interleaved as a sorted folder listing would not be: 0 has 1 image, 1 has 2, 2 has 3,
  // 3 has 10, 4 has 40.
  std::vector<std::int32_t> labels;
  for (const auto& [c, n] :
       std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 10}, {4, 40}})
    for (int k = 0; k < n; ++k) labels.push_back(c);
  std::reverse(labels.begin(), labels.end());
  std::swap(labels[3], labels[50]);
  const Split a = stratified_split_indices(labels, 42, 0.8);
  EXPECT_EQ(a.train, stratified_split_indices(labels, 42, 0.8).train) << "seeded";
  EXPECT_NE(a.eval, stratified_split_indices(labels, 43, 0.8).eval) << "the seed must matter";
  EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end()));
  EXPECT_TRUE(std::is_sorted(a.eval.begin(), a.eval.end()));
  std::set<std::int64_t> all(a.train.begin(), a.train.end());
  for (auto e : a.eval) EXPECT_TRUE(all.insert(e).second) << "index in both parts: " << e;
  EXPECT_EQ(all.size(), labels.size());
  std::vector<int> train(5, 0), eval(5, 0);
  for (auto i : a.train) ++train[static_cast<std::size_t>(labels[static_cast<std::size_t>(i)])];
  for (auto i : a.eval) ++eval[static_cast<std::size_t>(labels[static_cast<std::size_t>(i)])];
  // floor(n * 0.8) to training, held to [1, n - 1]; a single image trains.
  EXPECT_EQ(train, (std::vector<int>{1, 1, 2, 8, 32}));
  EXPECT_EQ(eval, (std::vector<int>{0, 1, 1, 2, 8}));
  // A small fraction still trains on one image of each class, and keeps one back.
  const Split small = stratified_split_indices(labels, 42, 0.05);
  std::vector<int> small_train(5, 0);
  for (auto i : small.train)
    ++small_train[static_cast<std::size_t>(labels[static_cast<std::size_t>(i)])];
  EXPECT_EQ(small_train, (std::vector<int>{1, 1, 1, 1, 2}));
}

TEST(StratifiedSplit, ClassesAreCutIndependently) {
  // Adding images of one class leaves the other class's split as it was.
  const std::vector<std::int32_t> two = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  std::vector<std::int32_t> more = two;
  more.insert(more.begin(), 4, 0);  // four more of class 0, before the others
  const Split a = stratified_split_indices(two, 7, 0.6), b = stratified_split_indices(more, 7, 0.6);
  std::vector<std::int64_t> a1, b1;
  for (auto i : a.eval)
    if (two[static_cast<std::size_t>(i)] == 1) a1.push_back(i - 5);
  for (auto i : b.eval)
    if (more[static_cast<std::size_t>(i)] == 1) b1.push_back(i - 9);
  EXPECT_EQ(a1, b1);
  EXPECT_EQ(a1.size(), 2u);
}

TEST(StratifiedSplit, ModeNamesAndTheirNotes) {
  EXPECT_EQ(parse_split_mode("random"), SplitMode::kRandom);
  EXPECT_EQ(parse_split_mode("stratified"), SplitMode::kStratified);
  EXPECT_STREQ(split_mode_name(SplitMode::kStratified), "stratified");
  try {
    parse_split_mode("Stratified");
    ADD_FAILURE() << "parse_split_mode accepted 'Stratified'";
  } catch (const pets::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--split-mode must be random or stratified, got "
                                         "'Stratified'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_STREQ(split_note("stratified"), kStratifiedSplitNote);
  EXPECT_STREQ(split_note("given"), kGivenSplitNote);
  EXPECT_STREQ(split_note("random"), kSeededSplitNote);
  EXPECT_STREQ(split_note(""), kSeededSplitNote);  // a store written before the attribute
}

TEST(ClassCoverage, NamesClassesMissingFromEachSplit) {
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  EXPECT_TRUE(class_coverage_warnings(names, {0, 1, 2, 3, 3}, {3, 2, 1, 0}).empty());
  const std::vector<std::string> w = class_coverage_warnings(names, {0, 1, 1}, {0, 2});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rfind("2 classes have no training image: c, d (", 0), 0u) << w[0];
  EXPECT_EQ(w[1].rfind("2 classes have no evaluation image: b, d (", 0), 0u) << w[1];
  EXPECT_NE(w[0].find("not stratified"), std::string::npos);
  const std::vector<std::string> one = class_coverage_warnings(names, {0, 1, 2, 3}, {0, 1, 2});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].rfind("1 class has no evaluation image: d (", 0), 0u) << one[0];
}

TEST(SkipReasons, CountedByKindMostFrequentFirst) {
  EXPECT_EQ(reason_kind("truncated JPEG: Premature end of JPEG file"), "truncated JPEG");
  EXPECT_EQ(reason_kind("over the pixel limit (3x3 = 9 pixels > 0)"), "over the pixel limit");
  EXPECT_EQ(reason_kind("name does not match ^(.*)_\\d+\\.jpg$"),
            "name does not match ^(.*)_\\d+\\.jpg$");
  EXPECT_EQ(reason_kind("empty file"), "empty file");
  const std::vector<NameReason> skipped = {{"a.png", "not a .jpg name"},
                                           {"b_1.jpg", "truncated JPEG: x"},
                                           {"c.JPG", "not a .jpg name"},
                                           {"d_1.jpg", "empty file"}};
  EXPECT_EQ(skip_reasons_text(skipped),
            "4 entries skipped (2 not a .jpg name, 1 empty file, 1 truncated JPEG)");
  EXPECT_EQ(skip_reasons_text({}), "0 entries skipped");
  EXPECT_EQ(skip_reasons_text({{"x", "empty file"}}), "1 entry skipped (1 empty file)");
}

TEST(PreprocessOptionText, ByteSizes) {
  EXPECT_EQ(parse_byte_size("1G", "--max-memory"), std::uint64_t{1} << 30);
  EXPECT_EQ(parse_byte_size("512m", "--max-memory"), std::uint64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("64K", "--max-memory"), std::uint64_t{64} << 10);
  EXPECT_EQ(parse_byte_size("12345", "--max-memory"), 12345u);
  for (const char* bad : {"", "0", "0G", "-1", "1T", "G", "1.5G", "99999999999G", " 1"})
    EXPECT_THROW(parse_byte_size(bad, "--max-memory"), pets::UsageError) << bad;
}
