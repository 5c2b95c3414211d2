// pets_preprocess --list: the CSV reader (list_file.hpp) on files written here.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data_test_util.hpp"
#include "pets/data/list_file.hpp"
#include "pets/util/error.hpp"

using namespace pets::data;
using pets::data::testing::ScratchDir;

namespace {

/// Writes `text` as the list file of `dir` and reads it.
TreeListing read_list(const ScratchDir& dir, const std::string& text) {
  std::ofstream(dir / "list.csv", std::ios::binary) << text;
  return list_csv(dir / "list.csv");
}

/// The message list_csv refuses `text` with ("" when it reads it).
std::string refusal(const std::string& text) {
  ScratchDir dir("list_file");
  try {
    read_list(dir, text);
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ListFile, QuotedFieldsCrlfBomAndUtf8) {
  ScratchDir dir("list_file");
  const TreeListing l = read_list(dir,
                                  "\xEF\xBB\xBFlabel,path\r\n"
                                  "Maine Coon,\"b/beach, \"\"2024\"\".png\"\r\n"
                                  "\r\n"
                                  "\xC3\x89mile,/abs/a.JPG\r\n"
                                  "cat,\"with\nline end.jpg\"\r\n");
  EXPECT_EQ(l.layout, Layout::kList);
  ASSERT_EQ(l.candidates.size(), 3u);
  // In path order, each with its label and no split (no split column).
  EXPECT_EQ(l.candidates[0].path, "/abs/a.JPG");
  EXPECT_EQ(l.candidates[0].label, "\xC3\x89mile");
  EXPECT_EQ(l.candidates[1].path, "b/beach, \"2024\".png");
  EXPECT_EQ(l.candidates[1].label, "Maine Coon");
  EXPECT_EQ(l.candidates[2].path, "with\nline end.jpg");
  for (const TreeCandidate& c : l.candidates) EXPECT_EQ(c.split, 0) << c.path;
  EXPECT_TRUE(l.skips.empty());
}

TEST(ListFile, ASplitColumnIsKept) {
  ScratchDir dir("list_file");
  const TreeListing l = read_list(dir,
                                  "path,split,label\nx.jpg,eval,cat\ny.jpg,train,cat\n"
                                  "z.jpg,train,dog");  // no line end at the end
  ASSERT_EQ(l.candidates.size(), 3u);
  EXPECT_EQ(l.candidates[0].split, 'e');
  EXPECT_EQ(l.candidates[1].split, 't');
  EXPECT_EQ(l.candidates[2].split, 't');
  EXPECT_EQ(l.candidates[2].label, "dog");
}

TEST(ListFile, RefusedWithTheLine) {
  const auto refused = [](const std::string& text, const std::string& part) {
    const std::string m = refusal(text);
    EXPECT_NE(m.find(part), std::string::npos) << "for:\n" << text << "\ngot: " << m;
  };
  refused("", "the file is empty");
  refused("path,label\n", "no image is listed below the header");
  refused("file,label\na.jpg,cat\n", "line 1: 'file' is not a column this list can have");
  refused("path,path,label\n", "line 1: the column 'path' is named twice");
  refused("path\na.jpg\n", "line 1: the header has no 'path' or no 'label'");
  refused("path,label\na.jpg,cat\nb.jpg\n", "line 3: 1 field, the header names 2");
  refused("path,label\na.jpg,cat,extra\n", "line 2: 3 fields, the header names 2");
  refused("path,label\n\"a.jpg,cat\n", "line 2: a quoted field is not closed");
  refused("path,label\n\"a\".jpg,cat\n", "line 2: text after a closing quote");
  refused("path,label\na\"b.jpg,cat\n", "line 2: a quote inside an unquoted field");
  refused("path,label\n,cat\n", "line 2: the path is empty");
  refused("path,label\na.jpg,\n", "line 2: the label is empty");
  refused("path,label\na.jpg,\xFF\n", "line 2: the label is not UTF-8");
  refused("path,label,split\na.jpg,cat,val\n", "line 2: the split is 'val', not train or eval");
  refused("path,label\na.jpg,cat\n\"multi\nline.jpg\",dog\na.jpg,dog\n",
          "line 5: a.jpg is listed again (first on line 2)");
  refused("path,label,split\na.jpg,cat,train\nb.jpg,dog,eval\n",
          "1 class is in the eval split only, with no training image: dog");
  EXPECT_EQ(refusal("path,label\na.jpg,cat\n"), "");
  try {
    list_csv("/nonexistent/list.csv");
    ADD_FAILURE() << "a missing list was read";
  } catch (const pets::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be read"), std::string::npos) << e.what();
  }
}
