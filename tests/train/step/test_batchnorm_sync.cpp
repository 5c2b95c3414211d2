// BatchNorm statistics across ranks (mpiexec -n 2): averaged before evaluation, every rank's kept
// for a mid-epoch checkpoint and restored to each rank; and PETS_VERIFY_RANKS's digest check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/train/state/training_state.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/step/verify_ranks.hpp"
#include "pets/util/error.hpp"

namespace {

/// Two BatchNorms (4 and 2 channels) whose statistics say which rank filled them.
torch::nn::Sequential model_of_rank(int rank) {
  torch::nn::Sequential m(torch::nn::BatchNorm2d(4), torch::nn::BatchNorm2d(2));
  torch::NoGradGuard no_grad;
  for (auto& b : m->named_buffers(true)) {
    torch::Tensor t = b.value();
    if (t.is_floating_point())
      t.copy_(torch::arange(t.numel(), torch::kFloat32).view_as(t) + 100.0 * rank);
    else
      t.fill_(10 * rank + 3);
  }
  return m;
}

/// The model's buffers, flattened in order, as float64.
torch::Tensor buffers(const torch::nn::Module& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& b : m.named_buffers(true))
    flat.push_back(b.value().flatten().to(torch::kFloat64));
  return torch::cat(flat);
}

class BatchNormSyncTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(mpi_.size(), 2) << "run under mpiexec -n 2"; }
  pets::comm::MpiComm mpi_;
  pets::comm::MpiCommunicator comm_{mpi_};
};

TEST_F(BatchNormSyncTest, AveragesStatisticsAndTakesRankZerosCounters) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  pets::train::sync_batchnorm(*m, comm_);
  for (const auto& b : m->named_buffers(true)) {
    const torch::Tensor t = b.value();
    if (t.is_floating_point())  // (x + 0) and (x + 100) average to x + 50
      EXPECT_TRUE(torch::equal(t, torch::arange(t.numel(), torch::kFloat32).view_as(t) + 50.0))
          << b.key();
    else
      EXPECT_EQ(t.item<int64_t>(), 3) << b.key();
  }
}

TEST_F(BatchNormSyncTest, EveryRanksBuffersGatheredAndRestored) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  const torch::Tensor all = pets::train::gather_rank_buffers(*m, mpi_);
  ASSERT_EQ(all.sizes(), (std::vector<int64_t>{2, buffers(*m).numel()}));
  if (mpi_.rank() == 0) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(torch::equal(all[r], buffers(*model_of_rank(r)))) << "row " << r;
      // Each row restores that rank's model into a model of another rank.
      torch::nn::Sequential other = model_of_rank(1 - r);
      pets::train::scatter_rank_buffers(*other, all, r);
      EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(r))));
    }
  }
  torch::nn::Sequential wider(torch::nn::BatchNorm2d(5), torch::nn::BatchNorm2d(2));
  EXPECT_THROW(pets::train::scatter_rank_buffers(*wider, torch::zeros({2, 22}, torch::kFloat64), 0),
               pets::Error);
  EXPECT_THROW(pets::train::scatter_rank_buffers(*m, all, 2), pets::Error);
}

TEST_F(BatchNormSyncTest, SavesAndRestoresItsOwnState) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  pets::train::BatchNormSync sync(*m, mpi_, comm_, /*train_mode=*/true);
  // Mid-epoch: the buffers by name, and every rank's (on rank 0).
  pets::train::TrainingState mid;
  mid.position.step = 3;
  sync.save(mid);
  ASSERT_EQ(mid.model.size(), 6u);  // running mean, var and count of both
  EXPECT_EQ(mid.model[0].first, "0.running_mean");
  ASSERT_TRUE(mid.rank_buffers.defined());
  // At an epoch's end (after synchronise) the buffers alone.
  pets::train::TrainingState end;
  sync.save(end);
  EXPECT_FALSE(end.rank_buffers.defined());
  // Restored into a model of the other rank: this rank's own statistics again.
  torch::nn::Sequential other = model_of_rank(1 - mpi_.rank());
  pets::train::BatchNormSync restored(*other, mpi_, comm_, true);
  pets::train::TrainingState saved = mid;
  if (mpi_.rank() != 0)  // rank 0's gathered rows, as a resumed run reads them on every rank
    saved.rank_buffers = torch::zeros_like(mid.rank_buffers);
  MPI_Bcast(saved.rank_buffers.data_ptr(), static_cast<int>(saved.rank_buffers.numel()), MPI_DOUBLE,
            0, mpi_.get());
  for (auto& [name, t] : saved.model) t = t.clone();
  restored.restore(saved, "ckpt");
  EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(mpi_.rank()))));
  // A checkpoint of another rank count, a missing buffer: refused, naming the file.
  pets::train::TrainingState three = saved;
  three.rank_buffers = torch::zeros({3, saved.rank_buffers.size(1)}, torch::kFloat64);
  EXPECT_THROW(restored.restore(three, "ckpt"), pets::UsageError);
  pets::train::TrainingState missing = end;
  missing.model.pop_back();
  EXPECT_THROW(restored.restore(missing, "ckpt"), pets::UsageError);
  // synchronise averages in train mode only.
  pets::train::BatchNormSync eval_mode(*other, mpi_, comm_, false);
  eval_mode.synchronise();
  EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(mpi_.rank()))));
  sync.synchronise();
  EXPECT_FALSE(torch::equal(buffers(*m), buffers(*model_of_rank(mpi_.rank()))));
}

// A training step carries every rank's rank_row() (each rank's row of zeros but its own, summed);
// a stop checkpoint saved from those rows holds what the collective gather would have: every
// rank's buffers in registration order, although the row groups them by kind.
TEST_F(BatchNormSyncTest, RowsCarriedByAStepSaveAsTheGatherDoes) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  pets::train::BatchNormSync sync(*m, mpi_, comm_, /*train_mode=*/true);
  ASSERT_TRUE(sync.varies_per_rank());
  const torch::Tensor mine = sync.rank_row();
  ASSERT_EQ(mine.scalar_type(), torch::kFloat64);
  ASSERT_EQ(mine.numel(), buffers(*m).numel());
  torch::Tensor rows = torch::zeros({2, mine.numel()}, torch::kFloat64);
  rows[mpi_.rank()].copy_(mine);
  comm_.allreduce_sum(rows);
  pets::train::TrainingState state;
  state.position.step = 3;
  sync.save_after_step(state, rows);
  const torch::Tensor gathered = pets::train::gather_rank_buffers(*m, mpi_);
  if (mpi_.rank() == 0) {
    ASSERT_TRUE(state.rank_buffers.defined());
    EXPECT_TRUE(torch::equal(state.rank_buffers, gathered));
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(torch::equal(state.rank_buffers[r], buffers(*model_of_rank(r)))) << "row " << r;
  }
  // Rows of another model's length are refused, not misread.
  pets::train::TrainingState other;
  other.position.step = 3;
  EXPECT_THROW(sync.save_after_step(other, torch::zeros({2, mine.numel() + 1}, torch::kFloat64)),
               pets::Error);
}

TEST_F(BatchNormSyncTest, DigestCheckNamesTheRankThatDiffers) {
  EXPECT_NO_THROW(pets::train::check_same_on_all_ranks(comm_, 0xfeedULL, "the model"));
  // The top bit set: an allgather by sum must not mangle it.
  EXPECT_NO_THROW(pets::train::check_same_on_all_ranks(comm_, ~0ULL - 5, "the model"));
  const std::uint64_t digest = mpi_.rank() == 1 ? 2 : 1;
  try {
    pets::train::check_same_on_all_ranks(comm_, digest, "the model");
    FAIL() << "no throw on rank " << mpi_.rank();
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model on rank 1 differ from rank 0's"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
