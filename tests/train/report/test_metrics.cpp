// The forms an epoch's metrics are shown in: the tutorial's stdout line, rank 0's summary (which
// must not look like it), metrics.jsonl, and the arithmetic behind them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "pets/train/report/metrics.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::train::EpochMetrics;
using pets::train::EpochPosition;

EpochMetrics sample() {
  EpochPosition p;
  p.step = 10;
  p.loss_sum = 558.0;
  p.images = 200;
  p.seconds = 8.0;
  p.wait_seconds = 0.2;
  p.comm_bytes = 10 * 606528;
  p.comm_seconds = 0.4;
  EpochMetrics m = pets::train::training_metrics(3, p, 1.5e-3);
  pets::train::set_evaluation(m, 35, 40, 0.5);
  m.upload_share = 0.0125;
  return m;
}

TEST(Metrics, TrainingAndEvaluationArithmetic) {
  const EpochMetrics m = sample();
  EXPECT_EQ(m.epoch, 3);
  EXPECT_DOUBLE_EQ(m.train_loss, 2.79);
  EXPECT_DOUBLE_EQ(m.train_images_per_s, 25.0);
  EXPECT_DOUBLE_EQ(m.loader_wait_share, 0.025);
  EXPECT_EQ(m.bytes_per_step, 606528);  // the mean over the epoch's steps
  EXPECT_DOUBLE_EQ(m.comm_share, 0.05);
  EXPECT_DOUBLE_EQ(m.lr, 1.5e-3);
  EXPECT_DOUBLE_EQ(m.accuracy, 87.5);
  EXPECT_EQ(m.correct, 35);
  EXPECT_EQ(m.evaluated, 40);
  EXPECT_DOUBLE_EQ(m.eval_images_per_s, 80.0);
  // Nothing trained or evaluated: zeros, not NaN.
  EpochMetrics empty = pets::train::training_metrics(0, EpochPosition{}, 0.0);
  pets::train::set_evaluation(empty, 0, 0, 1.0);
  EXPECT_EQ(empty.train_loss, 0.0);
  EXPECT_EQ(empty.train_images_per_s, 0.0);
  EXPECT_EQ(empty.accuracy, 0.0);
}

TEST(Metrics, ResultLineIsTheTutorials) {
  EXPECT_EQ(pets::train::result_line(sample()), "epoch 3: 87.50");
}

TEST(Metrics, SummaryDoesNotLookLikeAResult) {
  const std::string summary = pets::train::summary_line(sample());
  EXPECT_EQ(summary,
            "[epoch 3] loss 2.7900, train 25.0 img/s (8.0s, loader wait 2%), eval 80.0 img/s");
  // What `grep '^epoch [0-9]*:'` over a log of both streams must not find.
  EXPECT_FALSE(std::regex_search(summary, std::regex("^epoch")));
}

TEST(Metrics, RunSummaryNamesFinalAndBestEpochAndTheModel) {
  EpochMetrics a = sample();  // 200 images in 8 s, 87.5 %
  a.epoch = 0;
  EpochMetrics b = sample();
  b.epoch = 1;
  b.train_seconds = 2.0;  // 100 images in 2 s
  b.train_images_per_s = 50.0;
  pets::train::set_evaluation(b, 36, 40, 0.5);  // 90 %, the best
  EpochMetrics c = b;
  c.epoch = 2;  // as good as epoch 1: the first of them is the best
  pets::train::set_evaluation(c, 34, 40, 0.5);
  c.accuracy = b.accuracy;
  EpochMetrics d = a;
  d.epoch = 3;
  pets::train::set_evaluation(d, 30, 40, 0.5);  // 75 %, the final
  EXPECT_EQ(pets::train::run_summary_line({a, b, c, d}, 61.25, "runs/x/model.safetensors"),
            "[run] 4 epochs, final accuracy 75.00 %, best 90.00 % at epoch 1; 61.2 s wall, "
            "30.0 train img/s; model runs/x/model.safetensors");
  EXPECT_FALSE(
      std::regex_search(pets::train::run_summary_line({a}, 1.0, ""), std::regex("^epoch")));
  EXPECT_EQ(pets::train::run_summary_line({}, 1.0, ""), "[run] no epoch finished");
  EXPECT_EQ(pets::train::run_summary_line({a}, 1.0, "m").substr(0, 26),
            "[run] 1 epoch, final accur");
}

TEST(Metrics, JsonLinesRoundTripWithEveryKey) {
  const EpochMetrics m = sample();
  const std::string text = pets::train::metrics_jsonl({m, m});
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"accuracy", "bytes_per_step", "comm_share", "correct",
                                      "epoch", "eval_images_per_s", "eval_seconds", "evaluated",
                                      "loader_wait_share", "lr", "max_lr", "train_images_per_s",
                                      "train_loss", "train_seconds", "upload_share"}));
  const EpochMetrics back = j.get<EpochMetrics>();
  EXPECT_EQ(nlohmann::json(back).dump(), j.dump());
  // A line written before upload_share, bytes_per_step and comm_share were recorded reads, with 0
  // there (comm_share: not measured).
  nlohmann::json old = j;
  for (const char* key : {"upload_share", "bytes_per_step", "comm_share"}) old.erase(key);
  EXPECT_EQ(old.get<EpochMetrics>().upload_share, 0.0);
  EXPECT_EQ(old.get<EpochMetrics>().bytes_per_step, 0);
  EXPECT_TRUE(std::isnan(old.get<EpochMetrics>().comm_share));
  // Not measured (on GPUs): written as null, read back as such.
  EpochMetrics unmeasured = m;
  unmeasured.comm_share = std::numeric_limits<double>::quiet_NaN();
  const nlohmann::json with_null = unmeasured;
  EXPECT_TRUE(with_null.at("comm_share").is_null());
  EXPECT_TRUE(std::isnan(with_null.get<EpochMetrics>().comm_share));
  old.erase("lr");
  EXPECT_THROW(old.get<EpochMetrics>(), nlohmann::json::exception);
  EXPECT_EQ(back.accuracy, m.accuracy);
  EXPECT_EQ(back.train_loss, m.train_loss);
  EXPECT_EQ(back.upload_share, 0.0125);

  EpochPosition p;
  p.step = 4;
  p.loss_sum = 1.25;
  p.images = 32;
  p.seconds = 3.5;
  p.wait_seconds = 0.125;
  p.comm_bytes = 4 * 606528;
  p.comm_seconds = 0.25;
  const EpochPosition q = nlohmann::json(p).get<EpochPosition>();
  EXPECT_EQ(q.comm_bytes, 4 * 606528);
  EXPECT_EQ(q.comm_seconds, 0.25);
  // A position written before the traffic was counted reads with none.
  nlohmann::json earlier = p;
  earlier.erase("comm_bytes");
  earlier.erase("comm_seconds");
  EXPECT_EQ(earlier.get<EpochPosition>().comm_bytes, 0);
  EXPECT_EQ(q.step, 4);
  EXPECT_EQ(q.loss_sum, 1.25);
  EXPECT_EQ(q.images, 32);
  EXPECT_EQ(q.seconds, 3.5);
  EXPECT_EQ(q.wait_seconds, 0.125);
}

}  // namespace

namespace {

using pets::train::HeadMetrics;

HeadMetrics head(double max_lr, double loss, int64_t correct, std::vector<int64_t> class_correct) {
  HeadMetrics h;
  h.max_lr = max_lr;
  h.lr = max_lr / 25;
  h.train_loss = loss;
  h.correct = correct;
  h.evaluated = 40;
  h.accuracy = pets::train::percent(correct, 40);
  h.class_correct = std::move(class_correct);
  h.class_evaluated = {10, 10, 10, 10};
  return h;
}

/// A sweep's epoch: head 1 and head 2 equally best (35 of 40), head 0 behind.
EpochMetrics sweep_epoch() {
  EpochMetrics m = sample();
  pets::train::set_heads(m,
                         {head(1e-3, 1.5, 30, {10, 10, 5, 5}), head(3e-2, 0.5, 35, {10, 9, 8, 8}),
                          head(0.1, 0.25, 35, {10, 10, 10, 5})});
  return m;
}

}  // namespace

TEST(Metrics, ASweepReportsItsBestHeadTheFirstOfEquals) {
  const EpochMetrics m = sweep_epoch();
  EXPECT_EQ(m.head, 1);
  EXPECT_DOUBLE_EQ(m.accuracy, 87.5);
  EXPECT_EQ(m.correct, 35);
  EXPECT_EQ(m.train_loss, 0.5);  // the reported head's, not the first's
  EXPECT_EQ(m.lr, 3e-2 / 25);
  EXPECT_EQ(m.class_correct, (std::vector<int64_t>{10, 9, 8, 8}));
  EXPECT_EQ(pets::train::result_line(m), "epoch 3: 87.50");
  EXPECT_EQ(pets::train::head_line(m, 0),
            "[epoch 3] head 0 max-lr 1e-3: loss 1.5000, accuracy 75.00 %");
  EXPECT_EQ(pets::train::head_line(m, 1),
            "[epoch 3] head 1 max-lr 3e-2: loss 0.5000, accuracy 87.50 % (best)");
  EXPECT_EQ(pets::train::head_line(m, 2),
            "[epoch 3] head 2 max-lr 0.1: loss 0.2500, accuracy 87.50 %");
}

TEST(Metrics, WorstClassesAreTheLowestAccuraciesFirstOfEquals) {
  // 50 %, 100 %, 40 %, 50 %, no image, 100 %.
  const std::vector<int64_t> correct{5, 10, 4, 5, 0, 3}, evaluated{10, 10, 10, 10, 0, 3};
  EXPECT_EQ(pets::train::worst_classes(correct, evaluated, 3), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(pets::train::worst_classes(correct, evaluated, 9), (std::vector<int>{2, 0, 3, 1, 5}));
  EXPECT_TRUE(pets::train::worst_classes({}, {}, 3).empty());
}

TEST(Metrics, RunSummaryNamesTheChosenHeadAndTheWorstClasses) {
  EpochMetrics first = sweep_epoch();
  first.epoch = 0;
  EpochMetrics last = sample();
  pets::train::set_heads(last,
                         {head(1e-3, 1.0, 36, {10, 10, 10, 6}), head(3e-2, 0.5, 20, {5, 5, 5, 5}),
                          head(0.1, 0.25, 36, {10, 10, 9, 7})});
  last.epoch = 1;
  EXPECT_EQ(pets::train::run_summary_line({first, last}, 10.0, "m", {"a", "b", "c", "d"}),
            "[run] 2 epochs, final accuracy 90.00 % (head 0 of 3, max-lr 1e-3; worst: d 60.00 %, "
            "a 100.00 %, b 100.00 %), best 90.00 % at epoch 1 (head 0); 10.0 s wall, 25.0 train "
            "img/s; model m");
  // One head: the worst classes alone; without names, the classes' numbers.
  EpochMetrics single = sample();
  single.class_correct = {1, 2};
  single.class_evaluated = {2, 2};
  EXPECT_EQ(pets::train::run_summary_line({single}, 1.0, "m").substr(0, 80),
            "[run] 1 epoch, final accuracy 87.50 % (worst: class 0 50.00 %, class 1 100.00 %)");
}

TEST(Metrics, ASweepsLinesCarryEveryHeadAndThePerClassAccuracies) {
  const EpochMetrics m = sweep_epoch();
  const std::string text = pets::train::metrics_jsonl({m}, {"a", "b", "c", "d"});
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("head"), 1);
  ASSERT_EQ(j.at("heads").size(), 3U);
  EXPECT_EQ(j.at("heads")[2].at("max_lr"), 0.1);
  EXPECT_EQ(j.at("heads")[2].at("class_accuracy").at("d"), 50.0);
  EXPECT_EQ(j.at("class_accuracy").at("b"), 90.0);  // the reported head's
  EXPECT_EQ(j.at("class_correct"), (std::vector<int64_t>{10, 9, 8, 8}));
  // A class without held-out images has no accuracy: null, not 0.
  EpochMetrics unseen = m;
  unseen.class_correct = {1, 0};
  unseen.class_evaluated = {2, 0};
  unseen.heads.clear();
  const nlohmann::json u = nlohmann::json::parse(pets::train::metrics_jsonl({unseen}, {"a", "b"}));
  EXPECT_EQ(u.at("class_accuracy").at("a"), 50.0);
  EXPECT_TRUE(u.at("class_accuracy").at("b").is_null());
  // Read back (a checkpoint's history): every head, the per-class counts.
  const EpochMetrics back = j.get<EpochMetrics>();
  EXPECT_EQ(back.head, 1);
  ASSERT_EQ(back.heads.size(), 3U);
  EXPECT_EQ(back.heads[0].class_correct, (std::vector<int64_t>{10, 10, 5, 5}));
  EXPECT_EQ(nlohmann::json(back).dump(), nlohmann::json(m).dump());
  // One head writes neither "head" nor "heads"; no counts per class, no class keys.
  const nlohmann::json single =
      nlohmann::json::parse(pets::train::metrics_jsonl({sample()}, {"a"}));
  EXPECT_FALSE(single.contains("heads") || single.contains("head") ||
               single.contains("class_accuracy") || single.contains("class_correct"));
}

TEST(Metrics, ConfusionJsonHoldsEveryHeadsMatrixByTrueClass) {
  EpochMetrics m = sample();
  // Two heads, two classes: head 0 right on 3 of 4, head 1 on all 4. The accuracies and max-lrs
  // are the epoch's figures of each head, not recounted from the matrices.
  HeadMetrics first = head(1e-3, 1.0, 3, {2, 1}), second = head(3e-2, 1.0, 4, {2, 2});
  first.evaluated = second.evaluated = 4;
  first.accuracy = 75.0;
  second.accuracy = 100.0;
  pets::train::set_heads(m, {first, second});
  const nlohmann::json j =
      pets::train::confusion_json(m, {{2, 0, 1, 1}, {2, 0, 0, 2}}, {"cat", "dog"});
  EXPECT_EQ(j.at("epoch"), 3);
  EXPECT_EQ(j.at("chosen"), 1);
  EXPECT_EQ(j.at("labels"), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(j.at("heads").size(), 2U);
  EXPECT_EQ(j.at("heads")[0].at("matrix"), (std::vector<std::vector<int64_t>>{{2, 0}, {1, 1}}));
  EXPECT_EQ(j.at("heads")[0].at("accuracy"), 75.0);
  EXPECT_EQ(j.at("heads")[0].at("max_lr"), 1e-3);
  EXPECT_EQ(j.at("heads")[1].at("accuracy"), 100.0);
  EXPECT_EQ(j.at("heads")[1].at("max_lr"), 3e-2);
  // One head: the epoch's own figures; a matrix for another number of heads is refused.
  EpochMetrics single = sample();
  HeadMetrics only = head(2e-2, 1.0, 3, {2, 1});
  only.accuracy = 75.0;
  pets::train::set_heads(single, {only});
  const nlohmann::json one = pets::train::confusion_json(single, {{2, 0, 1, 1}}, {"cat", "dog"});
  ASSERT_EQ(one.at("heads").size(), 1U);
  EXPECT_EQ(one.at("heads")[0].at("max_lr"), 2e-2);
  EXPECT_EQ(one.at("heads")[0].at("accuracy"), 75.0);
  EXPECT_EQ(one.at("chosen"), 0);
  EXPECT_THROW(pets::train::confusion_json(single, {{2, 0, 1, 1}, {2, 0, 0, 2}}, {"cat", "dog"}),
               pets::Error);
}

TEST(Metrics, OneHeadsFiguresAreTheEpochsWithoutAHeadsList) {
  EpochMetrics m = sample();
  HeadMetrics only = head(2e-2, 0.75, 30, {10, 10, 5, 5});
  pets::train::set_heads(m, {only});
  EXPECT_TRUE(m.heads.empty());
  EXPECT_EQ(m.head, 0);
  EXPECT_EQ(m.max_lr, 2e-2);
  EXPECT_EQ(m.lr, 2e-2 / 25);
  EXPECT_EQ(m.train_loss, 0.75);
  EXPECT_EQ(m.correct, 30);
  EXPECT_EQ(m.evaluated, 40);
  EXPECT_EQ(m.accuracy, 75.0);
  EXPECT_EQ(m.class_correct, (std::vector<int64_t>{10, 10, 5, 5}));
  EXPECT_EQ(m.class_evaluated, (std::vector<int64_t>{10, 10, 10, 10}));
  // max_lr travels through metrics.jsonl and checkpoints; an earlier file without it reads 0.
  nlohmann::json j = m;
  EXPECT_EQ(j.get<EpochMetrics>().max_lr, 2e-2);
  j.erase("max_lr");
  EXPECT_EQ(j.get<EpochMetrics>().max_lr, 0.0);
}
