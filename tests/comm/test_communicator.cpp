#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>
#include <vector>

#include "pets/comm/communicator.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"

namespace {

using pets::comm::MpiComm;
using pets::comm::MpiCommunicator;

/// The bytes of `t` on every rank, compared with rank 0's: true iff bitwise identical everywhere.
bool identical_on_all_ranks(const MpiComm& comm, const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  std::vector<char> mine(static_cast<const char*>(c.data_ptr()),
                         static_cast<const char*>(c.data_ptr()) + c.nbytes());
  std::vector<char> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_BYTE, 0, comm.get());
  int same = mine == root ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm.get());
  return all == 1;
}

class Communicator : public ::testing::Test {
 protected:
  MpiComm mpi_;
  MpiCommunicator comm_{mpi_};
  int rank() const { return mpi_.rank(); }
  int size() const { return mpi_.size(); }
};

TEST_F(Communicator, AllreduceSumFloat) {
  torch::Tensor t = torch::arange(10, torch::kFloat) * (rank() + 1);
  comm_.allreduce_sum(t);
  const double factor = size() * (size() + 1) / 2.0;  // sum of rank+1
  EXPECT_TRUE(torch::equal(t, torch::arange(10, torch::kFloat) * factor)) << t;
  EXPECT_EQ(t.scalar_type(), torch::kFloat);
}

TEST_F(Communicator, AllreduceAverageDouble) {
  torch::Tensor t = torch::full({3, 4}, rank() + 0.25, torch::kDouble);
  comm_.allreduce_average(t);
  const double mean_rank = (size() - 1) / 2.0;
  EXPECT_TRUE(torch::allclose(t, torch::full({3, 4}, mean_rank + 0.25, torch::kDouble), 0, 1e-15))
      << t;
}

TEST_F(Communicator, AllreduceAverageFloatIsBitwiseIdenticalOnEveryRank) {
  torch::manual_seed(1000 + rank());  // different values per rank
  torch::Tensor t = torch::randn({1000}, torch::kFloat);
  EXPECT_FALSE(identical_on_all_ranks(mpi_, t));  // the check can fail
  comm_.allreduce_average(t);
  EXPECT_TRUE(identical_on_all_ranks(mpi_, t));
  torch::Tensor expected = torch::zeros({1000}, torch::kFloat);
  for (int r = 0; r < size(); ++r) {
    torch::manual_seed(1000 + r);
    expected += torch::randn({1000}, torch::kFloat);
  }
  EXPECT_TRUE(torch::allclose(t, expected / size(), 1e-6, 1e-6));
}

TEST_F(Communicator, AllreduceNonContiguousWritesThroughTheView) {
  torch::Tensor base = torch::arange(12, torch::kFloat).reshape({3, 4});
  torch::Tensor view = base.t();  // non-contiguous, shares base's storage
  ASSERT_FALSE(view.is_contiguous());
  comm_.allreduce_sum(view);
  EXPECT_TRUE(torch::equal(base, torch::arange(12, torch::kFloat).reshape({3, 4}) * size()));
}

TEST_F(Communicator, AllreduceReducedPrecisionAndIntegers) {
  torch::Tensor half = torch::full({5}, 1.5, torch::kHalf);
  torch::Tensor bf16 = torch::full({5}, 2.0, torch::kBFloat16);
  torch::Tensor longs = torch::full({5}, (int64_t{1} << 40) + rank(), torch::kLong);
  comm_.allreduce_sum(half);
  comm_.allreduce_average(bf16);
  comm_.allreduce_sum(longs);
  EXPECT_EQ(half.scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(half, torch::full({5}, 1.5 * size(), torch::kHalf)));
  EXPECT_TRUE(torch::equal(bf16, torch::full({5}, 2.0, torch::kBFloat16)));
  const int64_t expected = size() * (int64_t{1} << 40) + size() * (size() - 1) / 2;
  EXPECT_TRUE(torch::equal(longs, torch::full({5}, expected, torch::kLong)));
}

TEST_F(Communicator, AllreduceOfAParameterThatRequiresGrad) {
  torch::Tensor p = torch::ones({4}, torch::kFloat).set_requires_grad(true);
  comm_.allreduce_sum(p);
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(torch::equal(p.detach(), torch::full({4}, static_cast<float>(size()))));
}

TEST_F(Communicator, RejectsWhatItCannotReduce) {
  torch::Tensor ints = torch::ones({3}, torch::kInt);
  EXPECT_THROW(comm_.allreduce_average(ints), pets::Error);
  torch::Tensor undefined;
  EXPECT_THROW(comm_.allreduce_sum(undefined), pets::Error);
  torch::Tensor flags = torch::ones({3}, torch::kBool);
  EXPECT_THROW(comm_.allreduce_sum(flags), pets::Error);
}

TEST_F(Communicator, BroadcastFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    torch::Tensor t = torch::full({2, 3}, 10.0 * rank(), torch::kFloat);
    torch::Tensor h = torch::full({7}, rank() + 0.5, torch::kHalf);
    comm_.broadcast(t, root);
    comm_.broadcast(h, root);
    EXPECT_TRUE(torch::equal(t, torch::full({2, 3}, 10.0 * root, torch::kFloat))) << t;
    EXPECT_TRUE(torch::equal(h, torch::full({7}, root + 0.5, torch::kHalf))) << h;
  }
}

TEST_F(Communicator, BroadcastMismatchThrowsOnEveryRank) {
  // Rank 1 holds a tensor of another size: nobody may wait for a payload that never comes.
  torch::Tensor t = torch::zeros({rank() == 1 ? 5 : 4}, torch::kFloat);
  EXPECT_THROW(comm_.broadcast(t, 0), pets::Error);
  torch::Tensor ok = torch::full({2}, static_cast<float>(rank()));
  comm_.broadcast(ok, 0);  // the communicator is still usable afterwards
  EXPECT_TRUE(torch::equal(ok, torch::zeros({2})));
}

TEST_F(Communicator, CountersSumExactly) {
  std::vector<std::int64_t> counters = {rank(), 1, int64_t{1} << 50, -3};
  comm_.allreduce_counters(counters);
  EXPECT_EQ(counters[0], size() * (size() - 1) / 2);
  EXPECT_EQ(counters[1], size());
  EXPECT_EQ(counters[2], size() * (int64_t{1} << 50));  // beyond float and double exactness
  EXPECT_EQ(counters[3], -3 * size());
  EXPECT_EQ(comm_.sum_counter(rank() + 1), size() * (size() + 1) / 2);
}

TEST_F(Communicator, CountsThePayloadHandedToEachCollective) {
  EXPECT_EQ(comm_.traffic().collectives, 0);
  torch::Tensor doubles = torch::ones({1000}, torch::kFloat64);
  comm_.allreduce_sum(doubles);
  const pets::comm::Traffic after_one = comm_.traffic();
  EXPECT_EQ(after_one.collectives, 1);
  EXPECT_EQ(after_one.bytes, 8000);  // the tensor's bytes, whatever the number of ranks
  EXPECT_GE(after_one.seconds, 0.0);
  torch::Tensor halves = torch::ones({10}, torch::kFloat16);
  comm_.broadcast(halves, 0);
  comm_.sum_counter(1);
  // A collective that throws is counted too (every rank called it).
  torch::Tensor ints = torch::ones({3}, torch::kInt64);
  EXPECT_THROW(comm_.allreduce_average(ints), pets::Error);
  const pets::comm::Traffic since = comm_.traffic().since(after_one);
  EXPECT_EQ(since.collectives, 3);
  EXPECT_EQ(since.bytes, 20 + 8 + 24);
}

// MPI's calls return once the collective is complete, so a rank's seconds include its wait for
// a late rank: the whole collective is timed.
TEST_F(Communicator, MpiTimesTheWholeCollective) {
  EXPECT_TRUE(comm_.times_completion());
  if (size() < 2) GTEST_SKIP() << "needs a second rank to wait for";
  constexpr double kLate = 0.3;
  comm_.barrier();
  const pets::comm::Traffic before = comm_.traffic();
  if (rank() == 1) std::this_thread::sleep_for(std::chrono::duration<double>(kLate));
  torch::Tensor t = torch::ones({4});
  comm_.allreduce_sum(t);
  if (rank() == 0) EXPECT_GE(comm_.traffic().since(before).seconds, 0.8 * kLate);
}

TEST_F(Communicator, BarrierAndIdentity) {
  EXPECT_EQ(comm_.backend(), "mpi");
  EXPECT_EQ(comm_.rank(), rank());
  EXPECT_EQ(comm_.size(), size());
  comm_.barrier();
}

}  // namespace
