// BatchNorm statistics across ranks (mpiexec -n 2): averaged before evaluation, each rank's own
// kept for a mid-epoch checkpoint and restored to each rank; and PETS_VERIFY_RANKS's digest check.
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

// An earlier pets_train's mid-epoch checkpoint holds every rank's buffers as rows: each row
// restores that rank's model.
TEST_F(BatchNormSyncTest, AnEarlierCheckpointsRowsRestoreEachRank) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  const torch::Tensor all = torch::stack({pets::train::rank_buffer_row(*model_of_rank(0)),
                                          pets::train::rank_buffer_row(*model_of_rank(1))});
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::equal(all[r], buffers(*model_of_rank(r)))) << "row " << r;
    torch::nn::Sequential other = model_of_rank(1 - r);
    pets::train::scatter_rank_buffers(*other, all, r);
    EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(r))));
  }
  torch::nn::Sequential wider(torch::nn::BatchNorm2d(5), torch::nn::BatchNorm2d(2));
  EXPECT_THROW(pets::train::scatter_rank_buffers(*wider, torch::zeros({2, 22}, torch::kFloat64), 0),
               pets::Error);
  EXPECT_THROW(pets::train::scatter_rank_buffers(*m, all, 2), pets::Error);
  // Through restore(), as a resumed run reads such a checkpoint on every rank.
  pets::train::BatchNormSync sync(*m, mpi_, comm_, /*train_mode=*/true);
  pets::train::TrainingState earlier;
  earlier.world_size = 2;
  earlier.position.step = 3;
  for (const auto& b : model_of_rank(0)->named_buffers(true))
    earlier.model.emplace_back(b.key(), b.value());
  earlier.rank_buffers = all;
  torch::nn::Sequential other = model_of_rank(1 - mpi_.rank());
  pets::train::BatchNormSync restored(*other, mpi_, comm_, true);
  restored.restore(earlier, "ckpt");
  EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(mpi_.rank()))));
}

TEST_F(BatchNormSyncTest, SavesAndRestoresItsOwnState) {
  torch::nn::Sequential m = model_of_rank(mpi_.rank());
  pets::train::BatchNormSync sync(*m, mpi_, comm_, /*train_mode=*/true);
  ASSERT_TRUE(sync.varies_per_rank());
  // Mid-epoch: this rank's buffers by name, and the mark that every other rank keeps its own
  // (no collective: rank 1 saves without rank 0).
  pets::train::TrainingState mid;
  mid.world_size = 2;
  mid.position.step = 3;
  sync.save(mid);
  ASSERT_EQ(mid.model.size(), 6u);  // running mean, var and count of both
  EXPECT_EQ(mid.model[0].first, "0.running_mean");
  EXPECT_TRUE(mid.rank_shards);
  ASSERT_EQ(mid.per_rank.size(), 6u);  // what the shard holds: every buffer
  EXPECT_EQ(mid.per_rank[0], "0.running_mean");
  EXPECT_FALSE(mid.rank_buffers.defined());
  // At an epoch's end (after synchronise) the buffers alone; in eval mode never shards.
  pets::train::TrainingState end;
  end.world_size = 2;
  sync.save(end);
  EXPECT_FALSE(end.rank_shards);
  EXPECT_TRUE(end.per_rank.empty());
  pets::train::BatchNormSync eval_sync(*m, mpi_, comm_, false);
  EXPECT_FALSE(eval_sync.varies_per_rank());
  pets::train::TrainingState eval_mid;
  eval_mid.position.step = 3;
  eval_sync.save(eval_mid);
  EXPECT_FALSE(eval_mid.rank_shards);
  // Restored into a model of the other rank: rank 0 from the checkpoint (rank 0's buffers, as
  // every rank reads them), rank 1 from its own shard: each rank's own statistics again.
  torch::nn::Sequential other = model_of_rank(1 - mpi_.rank());
  pets::train::BatchNormSync restored(*other, mpi_, comm_, true);
  pets::train::TrainingState saved = mid;
  for (auto& [name, t] : saved.model) {
    t = t.clone();
    MPI_Bcast(t.data_ptr(), static_cast<int>(t.nbytes()), MPI_BYTE, 0, mpi_.get());
  }
  pets::train::TrainingState own;  // what TrainingState::read_shard gives rank 1
  for (const auto& [name, t] : mid.model) own.model.emplace_back(name, t.clone());
  if (mpi_.rank() != 0) {
    EXPECT_THROW(restored.restore(saved, "ckpt"), pets::Error);  // no shard given
  }
  restored.restore(saved, "ckpt", &own);
  EXPECT_TRUE(torch::equal(buffers(*other), buffers(*model_of_rank(mpi_.rank()))));
  // A checkpoint of another rank count, a missing buffer: refused, naming the file.
  pets::train::TrainingState three = saved;
  three.world_size = 3;
  EXPECT_THROW(restored.restore(three, "ckpt", &own), pets::UsageError);
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
