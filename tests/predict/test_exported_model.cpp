// The exported model's metadata (label names, preprocessing, the epoch of best.safetensors) read
// back from a real file, the refusals of a model pets_predict cannot use, the best epoch that
// --keep-best keeps, and pets_predict's options and image lists.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pets/model/safetensors.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/predict/predict.hpp"
#include "pets/train/report/metrics.hpp"
#include "pets/train/run/run_folder.hpp"
#include "pets/train/state/exported_model.hpp"
#include "pets/util/error.hpp"

namespace {

namespace fs = std::filesystem;
using pets::train::ModelCard;

class ExportedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pets_export_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void touch(const std::string& name) const { std::ofstream(path(name)) << "x"; }

  /// A file of one tensor and `metadata`.
  std::string write(const std::string& name, const std::map<std::string, std::string>& metadata) {
    pets::model::write_tensors(path(name), {{"fc.bias", torch::zeros({2})}}, metadata);
    return path(name);
  }

  /// What model_metadata writes for `card`, read back from a file.
  ModelCard round_trip(const ModelCard& card) {
    const std::string file = write("m.safetensors", pets::train::model_metadata(card));
    return pets::train::read_model_card(pets::model::SafetensorsFile::open(file));
  }

  /// The message read_model_card refuses `metadata` with ("" when it accepts it).
  std::string refusal(const std::map<std::string, std::string>& metadata) {
    const std::string file = write("bad.safetensors", metadata);
    try {
      pets::train::read_model_card(pets::model::SafetensorsFile::open(file));
    } catch (const pets::UsageError& e) {
      return e.what();
    }
    return "";
  }

  static ModelCard card() {
    ModelCard c;
    c.labels = {"Abyssinian", "american_bulldog", "breed \"3\""};
    c.preprocessing.max_side = 512;
    return c;
  }

  fs::path dir_;
};

TEST_F(ExportedModelTest, MetadataNamesTheLabelsAndThePreprocessing) {
  const auto m = pets::train::model_metadata(card());
  EXPECT_EQ(m.at("format"), "pt");
  EXPECT_EQ(m.at("arch"), "resnet50d");
  EXPECT_EQ(m.at("num_classes"), "3");
  EXPECT_EQ(nlohmann::json::parse(m.at("label_names")),
            nlohmann::json({"Abyssinian", "american_bulldog", "breed \"3\""}));
  EXPECT_EQ(m.at("input_size"), "[3, 224, 224]");
  EXPECT_EQ(m.at("interpolation"), "bilinear");
  EXPECT_EQ(m.at("crop_pct"), "1.0");
  EXPECT_EQ(m.at("crop_mode"), "squash");
  // ImageNet's statistics as they are written, not float noise (0.48500001430511475).
  EXPECT_EQ(m.at("mean"), "[0.485, 0.456, 0.406]");
  EXPECT_EQ(m.at("std"), "[0.229, 0.224, 0.225]");
  EXPECT_EQ(m.at("max_side"), "512");
  EXPECT_EQ(m.count("epoch"), 0u);
}

TEST_F(ExportedModelTest, CardReadsBackExactly) {
  ModelCard written = card();
  pets::train::EpochMetrics best;
  best.epoch = 3;
  pets::train::set_evaluation(best, 35, 40, 1.0);
  written.epoch = best;
  const ModelCard read = round_trip(written);
  EXPECT_EQ(read.labels, written.labels);
  EXPECT_EQ(read.preprocessing.image_size, 224);
  EXPECT_EQ(read.preprocessing.max_side, 512);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(read.preprocessing.mean[c], pets::data::kMean[c]);  // bit for bit
    EXPECT_EQ(read.preprocessing.std[c], pets::data::kStd[c]);
  }
  ASSERT_TRUE(read.epoch.has_value());
  EXPECT_EQ(read.epoch->epoch, 3);
  EXPECT_EQ(read.epoch->accuracy, 87.5);
  EXPECT_EQ(read.epoch->correct, 35);
  EXPECT_EQ(read.epoch->evaluated, 40);
}

TEST_F(ExportedModelTest, ExportedModuleHoldsItsStateDictTheHeadGivenAndTheCard) {
  torch::nn::Module module;
  const auto body = module.register_module("body", torch::nn::Linear(2, 4));
  const auto fc = module.register_module("fc", torch::nn::Linear(4, 3));
  const pets::train::ExportedHead head{torch::full({3, 4}, 0.5), torch::full({3}, -1.0)};
  const torch::Tensor kept = fc->weight.clone();
  pets::train::write_exported_model(path("model.safetensors"), module, head, card());
  const auto file = pets::model::SafetensorsFile::open(path("model.safetensors"));
  EXPECT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.at("fc.weight").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(pets::train::read_model_card(file).labels, card().labels);
  EXPECT_TRUE(torch::equal(pets::model::to_tensor(file, file.at("fc.weight")), head.weight));
  EXPECT_TRUE(torch::equal(pets::model::to_tensor(file, file.at("fc.bias")), head.bias));
  EXPECT_TRUE(torch::equal(pets::model::to_tensor(file, file.at("body.weight")), body->weight));
  EXPECT_TRUE(torch::equal(fc->weight, kept));  // the model itself is not changed
  // A head of another shape, or a model without fc, is refused and writes nothing.
  EXPECT_THROW(pets::train::write_exported_model(path("wrong.safetensors"), module,
                                                 {torch::zeros({2, 4}), torch::zeros({2})}, card()),
               pets::Error);
  EXPECT_THROW(pets::train::write_exported_model(path("wrong.safetensors"), *body, head, card()),
               pets::Error);
  EXPECT_FALSE(std::filesystem::exists(path("wrong.safetensors")));
}

TEST_F(ExportedModelTest, RefusesWhatItCannotUse) {
  auto good = pets::train::model_metadata(card());
  EXPECT_EQ(refusal(good), "");
  // A model exported before the metadata: say so and how to export it again.
  const std::string old = refusal({{"format", "pt"}, {"arch", "resnet50d"}, {"num_classes", "3"}});
  EXPECT_NE(old.find(path("bad.safetensors")), std::string::npos) << old;
  EXPECT_NE(old.find("exported by an older pets_train"), std::string::npos) << old;
  EXPECT_NE(old.find("--resume"), std::string::npos) << old;
  EXPECT_NE(refusal({{"pets_state", "{}"}}).find("is a pets_train checkpoint"), std::string::npos);
  const auto changed = [&](const std::string& key, const std::string& value) {
    auto m = good;
    if (value.empty())
      m.erase(key);
    else
      m[key] = value;
    return refusal(m);
  };
  EXPECT_NE(changed("label_names", "[\"a\", 3]").find("metadata 'label_names'"), std::string::npos);
  EXPECT_NE(changed("label_names", "not json").find("is not JSON"), std::string::npos);
  EXPECT_NE(changed("num_classes", "4").find("label_names has 3 names"), std::string::npos);
  EXPECT_NE(changed("mean", "[0.5, 0.5]").find("metadata 'mean'"), std::string::npos);
  EXPECT_NE(changed("std", "[0.2, 0, 0.2]").find("metadata 'std'"), std::string::npos);
  EXPECT_NE(changed("input_size", "[3, 224, 200]").find("metadata 'input_size'"),
            std::string::npos);
  EXPECT_NE(changed("crop_mode", "center").find("metadata 'crop_mode' is 'center'"),
            std::string::npos);
  EXPECT_NE(changed("max_side", "").find("metadata 'max_side' is missing"), std::string::npos);
  EXPECT_NE(changed("max_side", "-1").find("metadata 'max_side'"), std::string::npos);
  EXPECT_NE(changed("arch", "resnet50").find("metadata 'arch'"), std::string::npos);
}

TEST_F(ExportedModelTest, BestModelIsPartOfTheRun) {
  // So that --overwrite removes it with the run's other files, and a folder holding only it
  // holds a run.
  touch("best.safetensors");
  touch("best.safetensors.tmp.123");
  const auto files = pets::train::find_run_files(dir_.string());
  EXPECT_EQ(files.results, (std::vector<std::string>{"best.safetensors"}));
  EXPECT_EQ(files.temporaries, (std::vector<std::string>{"best.safetensors.tmp.123"}));
  EXPECT_TRUE(files.holds_run());
}

TEST(BestEpoch, IsTheFirstOfTheHighestAccuracy) {
  std::vector<pets::train::EpochMetrics> epochs(4);
  const double accuracies[] = {50.0, 75.0, 75.0, 60.0};
  for (int i = 0; i < 4; ++i) {
    epochs[i].epoch = i;
    epochs[i].accuracy = accuracies[i];
  }
  EXPECT_EQ(pets::train::best_epoch(epochs), &epochs[1]);
  EXPECT_EQ(pets::train::best_epoch({}), nullptr);
  // The [run] line reports the same epoch.
  EXPECT_NE(pets::train::run_summary_line(epochs, 1.0, "m").find("best 75.00 % at epoch 1;"),
            std::string::npos);
}

std::string parse_error(std::vector<const char*> args) {
  args.insert(args.begin(), "pets_predict");
  try {
    pets::train::parse_predict_options(static_cast<int>(args.size()), args.data());
  } catch (const pets::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(PredictOptions, ParsesAndRefuses) {
  const char* argv[] = {"pets_predict", "--model", "m.safetensors", "a.jpg", "--top-k", "3", "dir",
                        "--device",     "cpu"};
  const auto parsed = pets::train::parse_predict_options(9, argv);
  EXPECT_FALSE(parsed.help);
  EXPECT_EQ(parsed.options.model, "m.safetensors");
  EXPECT_EQ(parsed.options.inputs, (std::vector<std::string>{"a.jpg", "dir"}));
  EXPECT_EQ(parsed.options.top_k, 3);
  EXPECT_EQ(parsed.options.batch_size, 32);
  EXPECT_EQ(parsed.options.device, pets::train::DeviceChoice::kCpu);
  EXPECT_NE(parse_error({"a.jpg"}).find("'--model' is required"), std::string::npos);
  EXPECT_NE(parse_error({"--model", "m"}).find("no image given"), std::string::npos);
  // No abbreviations: --mod is not --model, --top is not --top-k.
  EXPECT_NE(parse_error({"--mod", "m", "a.jpg"}).find("unrecognised"), std::string::npos)
      << parse_error({"--mod", "m", "a.jpg"});
  EXPECT_NE(parse_error({"--model", "m", "--top", "2", "a.jpg"}), "");
  EXPECT_NE(parse_error({"--model", "m", "--top-k", "0", "a.jpg"}).find("--top-k must be positive"),
            std::string::npos);
  EXPECT_NE(parse_error({"--model", "m", "--device", "gpu", "a.jpg"}).find("--device must be"),
            std::string::npos);
  EXPECT_NE(parse_error({"--model", "m", "--model", "n", "a.jpg"}), "");
  const char* help[] = {"pets_predict", "--help"};
  EXPECT_TRUE(pets::train::parse_predict_options(2, help).help);
}

TEST_F(ExportedModelTest, ImageListsKeepInputOrderAndSortFolders) {
  fs::create_directories(dir_ / "images" / "sub");
  for (const char* name : {"b_2.jpg", "a_1.PNG", "c.JpEg", "d.gif", "notes.txt", "sub/x_1.jpg"})
    touch(std::string("images/") + name);
  touch("single.bin");
  const std::string images = path("images");
  const auto files = pets::train::list_images({path("single.bin"), images});
  EXPECT_EQ(files,
            (std::vector<std::string>{path("single.bin"), images + "/a_1.PNG", images + "/b_2.jpg",
                                      images + "/c.JpEg", images + "/d.gif"}));
  const auto error = [&](const std::string& input) {
    try {
      pets::train::list_images({input});
    } catch (const pets::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(path("nope")).find("no file or folder '" + path("nope") + "'"),
            std::string::npos);
  fs::create_directories(dir_ / "empty");
  EXPECT_NE(error(path("empty")).find("holds no image file"), std::string::npos);
}

}  // namespace
