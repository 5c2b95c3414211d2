// Runs under mpiexec -n 2.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "data_test_util.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/loader.hpp"
#include "pets/data/preprocess.hpp"
#include "pets/testdata/synth.hpp"

using namespace pets::data;
using namespace pets::testdata;
namespace fs = std::filesystem;

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// One folder for the whole executable: made by rank 0, shared path on every rank.
const std::string& shared_dir() {
  static std::string dir = [] {
    long long pid = world_rank() == 0 ? static_cast<long long>(getpid()) : 0;
    MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    const std::string d =
        std::string(PETS_BINARY_DIR) + "/tests/data/scratch/mpi_" + std::to_string(pid);
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      SynthOptions so;
      so.out_dir = d + "/images";
      so.classes = 6;
      so.per_class = 5;
      so.quirks = true;
      write_synthetic_dataset(so);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

std::vector<std::int64_t> allgather_indices(const std::vector<std::int64_t>& mine) {
  const int size = world_size();
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(size), displs(size);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::vector<std::int64_t> all(total);
  MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T,
                 MPI_COMM_WORLD);
  return all;
}
}  // namespace

TEST(PreprocessMpi, TwoRanksWriteTheSameStoreAsOne) {
  ASSERT_EQ(world_size(), 2);
  const std::string d = shared_dir();
  PreprocessOptions po;
  po.images_dir = d + "/images";
  po.out = d + "/np2.h5";
  const PreprocessSummary s2 = run_preprocess(po, MPI_COMM_WORLD);
  if (world_rank() == 0) {
    po.out = d + "/np1.h5";
    const PreprocessSummary s1 = run_preprocess(po, MPI_COMM_SELF);
    EXPECT_EQ(s1.line(), s2.line());
    const Store a(d + "/np1.h5"), b(d + "/np2.h5");
    EXPECT_EQ(a.label_names(), b.label_names());
    EXPECT_EQ(a.skipped(), b.skipped());
    EXPECT_EQ(a.warnings(), b.warnings());
    // Each file an identity of its own, however alike the contents (a checkpoint records it).
    for (const Store* st : {&a, &b}) {
      EXPECT_EQ(st->store_id().size(), 32u) << st->store_id();
      EXPECT_EQ(st->store_id().find_first_not_of("0123456789abcdef"), std::string::npos);
    }
    EXPECT_NE(a.store_id(), b.store_id());
    for (SplitKind k : {SplitKind::kTrain, SplitKind::kEval}) {
      const SplitIndex &x = a.split(k), &y = b.split(k);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(x.names, y.names);
      EXPECT_EQ(x.labels, y.labels);
      EXPECT_EQ(x.offsets, y.offsets);
      EXPECT_EQ(x.shapes, y.shapes);
      for (std::int64_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(a.read_image(k, i).pixels, b.read_image(k, i).pixels)
            << split_name(k) << " " << i;
    }
    // Disjoint split covering every stored image.
    std::set<std::string> names(a.split(SplitKind::kTrain).names.begin(),
                                a.split(SplitKind::kTrain).names.end());
    for (const auto& n : a.split(SplitKind::kEval).names) EXPECT_TRUE(names.insert(n).second) << n;
    EXPECT_EQ(static_cast<std::int64_t>(names.size()), s1.stored);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

namespace {
/// Every part of two stores is equal (rank 0 only).
void expect_same_store(const std::string& path_a, const std::string& path_b) {
  const Store a(path_a), b(path_b);
  EXPECT_EQ(a.label_names(), b.label_names());
  EXPECT_EQ(a.skipped(), b.skipped());
  EXPECT_EQ(a.warnings(), b.warnings());
  for (SplitKind k : {SplitKind::kTrain, SplitKind::kEval}) {
    const SplitIndex &x = a.split(k), &y = b.split(k);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(x.names, y.names);
    EXPECT_EQ(x.labels, y.labels);
    EXPECT_EQ(x.offsets, y.offsets);
    EXPECT_EQ(x.shapes, y.shapes);
    EXPECT_EQ(x.pixel_bytes, y.pixel_bytes);
    for (std::int64_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(a.read_image(k, i).pixels, b.read_image(k, i).pixels) << split_name(k) << " " << i;
  }
}
}  // namespace

TEST(PreprocessMpi, ManySmallRoundsWriteTheSameStoreAsOne) {
  const std::string d = shared_dir();
  PreprocessOptions po;
  po.images_dir = d + "/images";
  po.max_side = 64;
  po.out = d + "/one_round.h5";
  const PreprocessSummary one = run_preprocess(po, MPI_COMM_WORLD);
  po.max_memory = 64 * 64 * 3 * 2;  // two images per rank and round
  po.out = d + "/small_rounds.h5";
  const PreprocessSummary many = run_preprocess(po, MPI_COMM_WORLD);
  EXPECT_EQ(one.rounds, 1);
  EXPECT_GE(many.rounds, 10);
  EXPECT_EQ(one.line(), many.line());
  if (world_rank() == 0) expect_same_store(d + "/one_round.h5", d + "/small_rounds.h5");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PreprocessMpi, LabelsComeFromStoredImagesOnly) {
  const std::string d = shared_dir();
  PreprocessOptions po;
  po.images_dir = d + "/images";
  po.max_side = 64;
  po.out = d + "/labels.h5";
  const PreprocessSummary s = run_preprocess(po, MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const Store store(po.out);
    std::set<std::string> stored_labels;
    std::vector<int> images_of(store.label_names().size(), 0);
    for (SplitKind k : {SplitKind::kTrain, SplitKind::kEval}) {
      const SplitIndex& x = store.split(k);
      for (std::int64_t i = 0; i < x.size(); ++i) {
        stored_labels.insert(*label_from_filename(x.names[static_cast<std::size_t>(i)]));
        ++images_of[static_cast<std::size_t>(x.labels[static_cast<std::size_t>(i)])];
      }
    }
    // The quirk files chihuahua_1006 (truncated), havanese_1007 (empty) and pug_1008 (corrupt)
    // are the only files of their breeds: they must not make classes.
    EXPECT_EQ(store.label_names(),
              std::vector<std::string>(stored_labels.begin(), stored_labels.end()));
    for (std::size_t l = 0; l < images_of.size(); ++l)
      EXPECT_GT(images_of[l], 0) << "class without images: " << store.label_names()[l];
    EXPECT_EQ(s.labels, static_cast<std::int64_t>(stored_labels.size()));
    // One-image classes sit on one side of the split: named in the summary's warnings.
    ASSERT_FALSE(s.class_warnings.empty());
    EXPECT_NE(s.class_warnings[0].find("not stratified"), std::string::npos) << s.class_warnings[0];
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Training batches as Accelerate's prepared DataLoader (even_batches): every rank takes a full
// batch at every step, the positions past the end of the epoch's order wrapping round to its
// first images; evaluation uses every image exactly once.
TEST(LoaderMpi, EvenTrainingBatchesAndEveryEvaluationImageOnce) {
  const std::string d = shared_dir();
  const std::string store = d + "/loader.h5";
  PreprocessOptions po;
  po.images_dir = d + "/images";
  po.out = store;
  po.max_side = 64;
  run_preprocess(po, MPI_COMM_WORLD);
  const std::int64_t world = world_size();
  ASSERT_GT(world, 1);
  LoaderOptions o;
  o.path = store;
  o.rank = world_rank();
  o.world = world_size();
  // A training batch whose global step does not divide the split, so that the last step wraps.
  const std::int64_t n_train = Store(store).split(SplitKind::kTrain).size();
  o.batch_size = n_train % (4 * world) != 0 ? 4 : 3;
  ASSERT_NE(n_train % (o.batch_size * world), 0);
  o.eval_batch_size = 3;
  o.image_size = 24;
  Loader loader(o);
  for (SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
    const std::int64_t n = loader.store().split(kind).size();
    const std::int64_t batch = kind == SplitKind::kTrain ? o.batch_size : o.eval_batch_size;
    std::vector<std::vector<std::int64_t>> orders;
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::int64_t> mine;
      std::int64_t steps = 0;
      loader.start_epoch(kind, epoch);
      while (auto b = loader.next()) {
        ++steps;
        if (kind == SplitKind::kTrain)
          EXPECT_EQ(b->n, batch) << "step " << b->step;
        else
          EXPECT_LE(b->n, batch);
        mine.insert(mine.end(), b->indices.begin(), b->indices.end());
      }
      // Same step count on every rank (collective training steps stay matched).
      long long s = steps, smax = 0, smin = 0;
      MPI_Allreduce(&s, &smax, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&s, &smin, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
      EXPECT_EQ(smax, smin);
      EXPECT_EQ(steps, loader.steps_per_epoch(kind));
      EXPECT_EQ(steps, (n + batch * world - 1) / (batch * world));
      const std::vector<std::int64_t> all = allgather_indices(mine);  // rank by rank
      std::vector<std::int64_t> first_n;
      if (kind == SplitKind::kTrain) {
        // The global order: step by step, rank by rank within a step.
        ASSERT_EQ(static_cast<std::int64_t>(all.size()), steps * world * batch);
        std::vector<std::int64_t> global;
        for (std::int64_t step = 0; step < steps; ++step)
          for (std::int64_t r = 0; r < world; ++r) {
            const auto at = all.begin() + (r * steps + step) * batch;
            global.insert(global.end(), at, at + batch);
          }
        ASSERT_GT(static_cast<std::int64_t>(global.size()), n);
        for (std::size_t p = static_cast<std::size_t>(n); p < global.size(); ++p)
          EXPECT_EQ(global[p], global[p - n]) << "epoch " << epoch << " position " << p;
        first_n.assign(global.begin(), global.begin() + n);
      } else {
        first_n = all;
      }
      orders.push_back(first_n);
      std::sort(first_n.begin(), first_n.end());
      std::vector<std::int64_t> want(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) want[i] = i;
      EXPECT_EQ(first_n, want) << split_name(kind) << " epoch " << epoch;
    }
    if (kind == SplitKind::kTrain)
      EXPECT_NE(orders[0], orders[1]) << "epoch must reshuffle";
    else
      EXPECT_EQ(orders[0], orders[1]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(d);
}
