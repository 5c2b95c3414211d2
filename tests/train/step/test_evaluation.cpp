// Evaluation under mpiexec -n 2: every rank's batches counted once and summed over the ranks,
// empty batches skipped; with the cache, a later evaluation reads no batch and runs no backbone,
// yet follows a changed head (the cache holds features, not predictions).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/step/evaluation.hpp"

namespace {

using pets::data::Batch;
using pets::train::BatchSource;
using pets::train::EvalCounts;
using pets::train::Evaluator;

/// A 1x1 "image" per item whose channels are (v, 1 - v, 0) and a label.
Batch batch_of(const std::vector<std::pair<float, int64_t>>& items) {
  Batch b;
  b.n = static_cast<int64_t>(items.size());
  b.h = b.w = 1;
  for (const auto& [v, label] : items) {
    b.pixels.insert(b.pixels.end(), {v, 1.0f - v, 0.0f});
    b.labels.push_back(label);
  }
  return b;
}

/// This rank's evaluation batches: rank 0 has 3 of 4 right (under the head below), and an empty
/// batch; rank 1 has 1 of 2 right.
std::vector<Batch> rank_batches(int rank) {
  if (rank == 0)
    return {batch_of({{0.9f, 0}, {0.2f, 1}}), Batch{}, batch_of({{0.7f, 0}, {0.8f, 1}})};
  return {batch_of({{0.1f, 1}, {0.6f, 1}})};
}

class EvaluationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mpi_.size(), 2) << "run under mpiexec -n 2";
    head_ = torch::nn::Linear(3, 2);
    torch::NoGradGuard no_grad;
    // Class 0 when channel 0 is the larger, class 1 otherwise.
    head_->weight.copy_(torch::tensor({{1.0f, 0.0f, 0.0f}, {0.0f, 1.0f, 0.0f}}));
    head_->bias.zero_();
  }

  /// Runs `evaluator` over this rank's batches, counting what it reads; `interrupt` as
  /// Evaluator::run's.
  std::optional<EvalCounts> run_or_interrupt(Evaluator& evaluator,
                                             const Evaluator::Interrupt& interrupt) {
    const std::vector<Batch> batches = rank_batches(mpi_.rank());
    std::size_t next = 0;
    const BatchSource source{[&] {
                               ++starts_;
                               next = 0;
                             },
                             [&]() -> std::optional<Batch> {
                               if (next == batches.size()) return std::nullopt;
                               return batches[next++];
                             }};
    return evaluator.run(
        source,
        [&](Batch& b) {
          features_ += b.n;
          return pets::train::batch_images(b, torch::kCPU).flatten(1).clone();
        },
        [&](const torch::Tensor& f) { return head_(f); }, interrupt);
  }

  /// A whole evaluation, which must not be interrupted.
  EvalCounts run(Evaluator& evaluator) {
    const std::optional<EvalCounts> counts = run_or_interrupt(evaluator, {});
    if (!counts) throw std::runtime_error("an evaluation without interrupt returned nothing");
    return *counts;
  }

  pets::comm::MpiComm mpi_;
  pets::comm::MpiCommunicator comm_{mpi_};
  torch::nn::Linear head_{nullptr};
  int starts_ = 0;
  int64_t features_ = 0;
};

TEST_F(EvaluationTest, CountsEveryRanksImagesOnce) {
  Evaluator evaluator(comm_, false);
  const EvalCounts counts = run(evaluator);
  EXPECT_EQ(counts.correct, 4);
  EXPECT_EQ(counts.evaluated, 6);
  EXPECT_EQ(features_, mpi_.rank() == 0 ? 4 : 2);  // the empty batch never reaches the backbone
  EXPECT_FALSE(evaluator.cached());
  // Without the cache every evaluation reads its batches again.
  const EvalCounts again = run(evaluator);
  EXPECT_EQ(again.correct, 4);
  EXPECT_EQ(starts_, 2);
  EXPECT_EQ(features_, mpi_.rank() == 0 ? 8 : 4);
}

TEST_F(EvaluationTest, CachedFeaturesServeLaterEvaluations) {
  Evaluator evaluator(comm_, true);
  const EvalCounts first = run(evaluator);
  EXPECT_TRUE(evaluator.cached());
  const EvalCounts second = run(evaluator);
  EXPECT_EQ(starts_, 1);
  EXPECT_EQ(features_, mpi_.rank() == 0 ? 4 : 2);
  EXPECT_EQ(second.correct, first.correct);
  EXPECT_EQ(second.evaluated, 6);
  // A head that predicts the other class: every answer flips.
  {
    torch::NoGradGuard no_grad;
    head_->weight.copy_(head_->weight.flip(0));
  }
  const EvalCounts flipped = run(evaluator);
  EXPECT_EQ(flipped.correct, 6 - first.correct);
  EXPECT_EQ(flipped.evaluated, 6);
  EXPECT_EQ(starts_, 1);
}

TEST_F(EvaluationTest, InterruptAbandonsThePassAndCachesNothing) {
  Evaluator evaluator(comm_, true);
  // Asked before every read: true before the second abandons the pass after one batch.
  int asked = 0;
  const auto second_read = [&] { return ++asked == 2; };
  EXPECT_FALSE(run_or_interrupt(evaluator, second_read).has_value());
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(features_, 2);           // one batch of two images reached the backbone, on each rank
  EXPECT_FALSE(evaluator.cached());  // a part of the features is no cache
  // Never interrupted: the next pass reads everything and counts every image once.
  asked = 0;
  const std::optional<EvalCounts> counts = run_or_interrupt(evaluator, [&] { return ++asked < 0; });
  ASSERT_TRUE(counts.has_value());
  EXPECT_EQ(counts->correct, 4);
  EXPECT_EQ(counts->evaluated, 6);
  EXPECT_EQ(asked, mpi_.rank() == 0 ? 4 : 2);  // each batch and the end
  EXPECT_TRUE(evaluator.cached());
}

// Several heads over one pass of the features, each counted per class into its confusion matrix
// (true class by row), summed over the ranks in one collective.
TEST_F(EvaluationTest, EveryHeadCountedPerClassOverOnePass) {
  Evaluator evaluator(comm_, false);
  torch::nn::Linear flipped(3, 2);
  {
    torch::NoGradGuard no_grad;
    flipped->weight.copy_(head_->weight.flip(0));
    flipped->bias.zero_();
  }
  const std::vector<Batch> batches = rank_batches(mpi_.rank());
  std::size_t next = 0;
  const BatchSource source{[&] { next = 0; },
                           [&]() -> std::optional<Batch> {
                             if (next == batches.size()) return std::nullopt;
                             return batches[next++];
                           }};
  const pets::comm::Traffic before = comm_.traffic();
  const std::optional<std::vector<EvalCounts>> counts = evaluator.run(
      source,
      [&](Batch& b) {
        features_ += b.n;
        return pets::train::batch_images(b, torch::kCPU).flatten(1).clone();
      },
      {[&](const torch::Tensor& f) { return head_(f); },
       [&](const torch::Tensor& f) { return flipped(f); }},
      2);
  EXPECT_EQ(comm_.traffic().since(before).collectives, 1);
  ASSERT_TRUE(counts.has_value());
  ASSERT_EQ(counts->size(), 2U);
  EXPECT_EQ(features_, mpi_.rank() == 0 ? 4 : 2);  // one pass for both heads
  const EvalCounts& a = (*counts)[0];
  // Rank 0: class 0 right twice, class 1 once right and once taken for class 0; rank 1: class 1
  // once right, once taken for class 0.
  EXPECT_EQ(a.correct, 4);
  EXPECT_EQ(a.evaluated, 6);
  EXPECT_EQ(a.classes, 2);
  EXPECT_EQ(a.confusion, (std::vector<int64_t>{2, 0, 2, 2}));
  EXPECT_EQ(a.class_correct(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.class_evaluated(), (std::vector<int64_t>{2, 4}));
  const EvalCounts& b = (*counts)[1];  // every answer flipped
  EXPECT_EQ(b.correct, 2);
  EXPECT_EQ(b.confusion, (std::vector<int64_t>{0, 2, 2, 2}));
  EXPECT_EQ(b.class_evaluated(), (std::vector<int64_t>{2, 4}));
}

}  // namespace
