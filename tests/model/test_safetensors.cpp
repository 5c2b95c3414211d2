// safetensors: round trips for every dtype we load, and one clear error for each way a file can
// lie or a checkpoint can disagree with the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pets/model/state_dict.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::model::SafetensorsFile;

std::vector<uint8_t> make_file(const std::string& header, std::size_t data_bytes,
                               uint64_t claimed_length = UINT64_MAX) {
  const uint64_t length = claimed_length == UINT64_MAX ? header.size() : claimed_length;
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(length >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(bytes, "test.safetensors");
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const std::string what = error_of(bytes);
  EXPECT_NE(what.find(needle), std::string::npos)
      << "expected '" << needle << "', got '" << what << "'";
  EXPECT_NE(what.find("test.safetensors"), std::string::npos) << what;
}

const std::string kOne = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(Safetensors, ValidMinimalFileParses) {
  const auto file = SafetensorsFile::parse(make_file(kOne, 8), "ok");
  ASSERT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.at("a").numel(), 2);
}

TEST(Safetensors, ShorterThanLengthField) { expect_error({1, 2, 3}, "shorter than the 8-byte"); }

TEST(Safetensors, HeaderLengthLargerThanFile) {
  expect_error(make_file(kOne, 8, 10000), "header length 10000 at byte 0 exceeds the file");
}

// Another kind of file (here a JPEG's first bytes) is named as such, not by the length its
// first 8 bytes would be.
TEST(Safetensors, AnotherKindOfFileIsNotASafetensorsFile) {
  const std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0, 1};
  expect_error(jpeg, "test.safetensors: not a safetensors file");
  EXPECT_EQ(error_of(jpeg).find("header length"), std::string::npos) << error_of(jpeg);
  expect_error(std::vector<uint8_t>(8, 0xFF), "not a safetensors file");
}

TEST(Safetensors, HugeHeaderLength) {
  expect_error(make_file(kOne, 8, uint64_t{1} << 63), "exceeds the file");
}

TEST(Safetensors, HeaderNotJson) { expect_error(make_file("{not json", 0), "is not valid JSON"); }

TEST(Safetensors, HeaderNotObject) { expect_error(make_file("[1,2,3]", 0), "not a JSON object"); }

TEST(Safetensors, OffsetsPastTheEnd) {
  expect_error(make_file(kOne, 4), "tensor 'a': data_offsets end 8 is past the end");
}

TEST(Safetensors, OverlappingRanges) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_error(make_file(h, 12), "overlaps tensor");
}

TEST(Safetensors, ReversedOffsets) {
  expect_error(make_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
               "reversed");
}

TEST(Safetensors, SpanDisagreesWithShape) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               "span 8 bytes, but F32 of this shape needs 12");
}

TEST(Safetensors, UnknownDtype) {
  expect_error(make_file(R"({"a":{"dtype":"F8_Q","shape":[1],"data_offsets":[0,1]}})", 1),
               "unknown dtype 'F8_Q'");
}

TEST(Safetensors, NegativeDimension) {
  expect_error(make_file(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
               "non-integer or negative");
}

TEST(Safetensors, DuplicateKeys) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_error(make_file(h, 2), "duplicate key 'a'");
}

TEST(Safetensors, NonUtf8Key) {
  const std::string h = "{\"\xff\xfe\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_error(make_file(h, 1), "is not valid JSON");
}

TEST(Safetensors, MissingFileNamesPath) {
  try {
    SafetensorsFile::open("/nonexistent/x.safetensors");
    FAIL();
  } catch (const pets::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.safetensors"), std::string::npos);
  }
}

class SafetensorsDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(SafetensorsDisk, RoundTripEveryDtype) {
  pets::model::NamedTensors in = {{"f32", torch::randn({3, 4})},
                                  {"f16", torch::randn({5}).to(torch::kHalf)},
                                  {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
                                  {"i64", torch::arange(7, torch::kInt64)},
                                  {"f64", torch::randn({1}, torch::kFloat64)},
                                  {"scalar", torch::tensor(3.5f).reshape({})}};
  pets::model::write_tensors(path("rt.safetensors"), in, {{"format", "pt"}});
  const auto file = SafetensorsFile::open(path("rt.safetensors"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const auto out = pets::model::read_tensors(path("rt.safetensors"));
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.scalar_type(), in[i].second.scalar_type()) << in[i].first;
    EXPECT_TRUE(torch::equal(out[i].second, in[i].second)) << in[i].first;
  }
  // Data section starts 8-byte aligned, as the reference writer leaves it.
  std::ifstream raw(path("rt.safetensors"), std::ios::binary);
  uint64_t header_len = 0;
  raw.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_FALSE(fs::exists(pets::atomic_temp_path(path("rt.safetensors"))));
}

TEST_F(SafetensorsDisk, WriteIntoMissingFolderFailsWithoutLeavingFiles) {
  EXPECT_THROW(pets::model::write_tensors(path("no/such/x.safetensors"), {{"a", torch::ones({1})}}),
               pets::Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

struct TinyImpl : torch::nn::Module {
  explicit TinyImpl(int64_t classes) {
    body = register_module("body", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
    fc = register_module("fc", torch::nn::Linear(3, classes));
  }
  torch::nn::Linear body{nullptr}, fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Tiny);

std::string load_error(torch::nn::Module& m, const std::string& file) {
  try {
    pets::model::load_state_dict(m, file);
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST_F(SafetensorsDisk, LoadConvertsHalfToModelDtype) {
  Tiny source(2), target(2);
  auto sd = pets::model::state_dict(*source);
  for (auto& [name, t] : sd)
    if (t.is_floating_point()) t = t.to(torch::kHalf);
  pets::model::write_tensors(path("half.safetensors"), sd);
  const auto report = pets::model::load_state_dict(*target, path("half.safetensors"));
  EXPECT_TRUE(report.skipped.empty());
  EXPECT_EQ(target->body->weight.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(target->body->weight,
                           source->body->weight.to(torch::kHalf).to(torch::kFloat32)));
}

TEST_F(SafetensorsDisk, LoadRefusesMissingKeyWithoutChangingAnything) {
  Tiny source(2), target(2);
  auto sd = pets::model::state_dict(*source);
  sd.erase(std::remove_if(sd.begin(), sd.end(),
                          [](const auto& p) { return p.first == "bn.running_var"; }),
           sd.end());
  pets::model::write_tensors(path("m.safetensors"), sd);
  const auto before = target->body->weight.clone();
  EXPECT_NE(load_error(*target, path("m.safetensors")).find("missing key 'bn.running_var'"),
            std::string::npos);
  EXPECT_TRUE(torch::equal(before, target->body->weight));
}

TEST_F(SafetensorsDisk, LoadRefusesUnexpectedKey) {
  Tiny source(2), target(2);
  auto sd = pets::model::state_dict(*source);
  sd.emplace_back("extra.weight", torch::ones({1}));
  pets::model::write_tensors(path("u.safetensors"), sd);
  EXPECT_NE(load_error(*target, path("u.safetensors")).find("unexpected key 'extra.weight'"),
            std::string::npos);
}

TEST_F(SafetensorsDisk, LoadRefusesBackboneShapeMismatch) {
  Tiny source(2), target(2);
  auto sd = pets::model::state_dict(*source);
  for (auto& [name, t] : sd)
    if (name == "body.weight") t = torch::ones({3, 5});
  pets::model::write_tensors(path("s.safetensors"), sd);
  const std::string what = load_error(*target, path("s.safetensors"));
  EXPECT_NE(what.find("shape mismatch for 'body.weight': file has [3, 5], model has [3, 4]"),
            std::string::npos)
      << what;
}

TEST_F(SafetensorsDisk, LoadRefusesUnconvertibleDtype) {
  Tiny source(2), target(2);
  auto sd = pets::model::state_dict(*source);
  for (auto& [name, t] : sd)
    if (name == "body.bias") t = torch::zeros({3}, torch::kInt64);
  pets::model::write_tensors(path("d.safetensors"), sd);
  const std::string what = load_error(*target, path("d.safetensors"));
  EXPECT_NE(what.find("cannot convert 'body.bias' from I64"), std::string::npos) << what;
}

TEST_F(SafetensorsDisk, HeadOfOtherClassCountIsSkippedAndKeptFresh) {
  Tiny source(1000), target(37);
  pets::model::write_tensors(path("h.safetensors"), pets::model::state_dict(*source));
  const auto fresh = target->fc->weight.clone();
  const auto report = pets::model::load_state_dict(*target, path("h.safetensors"));
  EXPECT_EQ(report.skipped, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_TRUE(torch::equal(fresh, target->fc->weight));
  EXPECT_TRUE(torch::equal(source->body->weight, target->body->weight));
  EXPECT_EQ(pets::model::load_report_text(report),
            "loaded 7 tensors from " + path("h.safetensors") +
                ": the backbone; fc skipped (fc.weight is [1000, 3] there, [37, 3] here: another "
                "class count), so the head starts fresh");
}

// What a load of the same class count says: every tensor, fc included.
TEST_F(SafetensorsDisk, AWholeLoadIsReportedWithTheHead) {
  Tiny source(37), target(37);
  pets::model::write_tensors(path("w.safetensors"), pets::model::state_dict(*source));
  const auto report = pets::model::load_state_dict(*target, path("w.safetensors"));
  EXPECT_EQ(pets::model::load_report_text(report),
            "loaded 9 tensors from " + path("w.safetensors") +
                ": the backbone and fc (its shapes are this model's: its classes)");
}

}  // namespace
