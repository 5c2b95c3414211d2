#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "data_test_util.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/h5.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/loader.hpp"
#include "pets/data/mapped_chunks.hpp"
#include "pets/data/preprocess.hpp"
#include "pets/data/rng.hpp"
#include "pets/testdata/synth.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "store_damage.hpp"

using namespace pets::data;
using namespace pets::testdata;
using pets::data::testing::ScratchDir;
namespace fs = std::filesystem;
namespace schema = pets::data::store;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pets::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO ERROR";
}
}  // namespace

TEST(Preprocess, EveryQuirkFileStoredOrSkippedWithTheRightReason) {
  ScratchDir dir("quirks");
  SynthOptions so;
  so.out_dir = dir / "images";
  so.per_class = 1;
  so.quirks = true;
  ASSERT_EQ(write_synthetic_dataset(so), 37 + 16);
  PreprocessOptions po;
  po.images_dir = so.out_dir;
  po.out = dir / "pets.h5";
  const PreprocessSummary sum = run_preprocess(po, MPI_COMM_WORLD);
  EXPECT_EQ(sum.stored, 37 + 9);
  EXPECT_TRUE(contains(sum.line(), "layout names (auto); 46 stored, 5 skipped: ")) << sum.line();
  EXPECT_TRUE(contains(sum.line(), "; 1 not read (1 without an image extension); ")) << sum.line();

  const Store store(po.out);
  EXPECT_EQ(store.label_names(), pet_breeds());
  std::map<std::string, std::array<std::int32_t, 3>> stored;
  for (SplitKind k : {SplitKind::kTrain, SplitKind::kEval}) {
    const SplitIndex& s = store.split(k);
    for (std::int64_t i = 0; i < s.size(); ++i) stored[s.names[i]] = s.shapes[i];
  }
  EXPECT_EQ(static_cast<std::int64_t>(stored.size()), sum.stored);
  std::map<std::string, std::string> skipped(store.skipped().begin(), store.skipped().end());
  std::map<std::string, std::string> warned(store.warnings().begin(), store.warnings().end());
  for (const QuirkFile& q : quirk_files()) {
    if (q.stored) {
      EXPECT_TRUE(stored.count(q.name)) << q.name << " should be stored: " << skipped[q.name];
      if (!q.reason.empty()) {
        EXPECT_TRUE(contains(warned[q.name], q.reason)) << q.name;
      }
    } else if (q.reason.empty()) {
      EXPECT_FALSE(skipped.count(q.name)) << q.name << " should be counted, not named";
    } else {
      ASSERT_TRUE(skipped.count(q.name)) << q.name << " should be skipped";
      EXPECT_TRUE(contains(skipped[q.name], q.reason)) << q.name << ": " << skipped[q.name];
    }
  }
  EXPECT_EQ(skipped.size(), 5u);
  const auto big = stored.at("newfoundland_1012.jpg");
  EXPECT_EQ(big[0], 384);  // 3000 x 4000 fitted to --max-side 512
  EXPECT_EQ(big[1], 512);
  const auto tiny = stored.at("pomeranian_1013.jpg");
  EXPECT_EQ(tiny[0], 5);
  EXPECT_EQ(tiny[1], 7);
  EXPECT_FALSE(stored.count("Sphynx_1014.jpg")) << "sub-folders are not searched";
  EXPECT_EQ(store.seed(), 42u);
  EXPECT_DOUBLE_EQ(store.train_fraction(), 0.8);
  EXPECT_TRUE(contains(store.tool_version(), "pets_preprocess"));
  // The split permutes the 49 candidate files (46 stored + chihuahua, havanese, pug): 39 train
  // slots, floor(49 * 0.8), of which the three skipped files hold three.
  EXPECT_EQ(store.split(SplitKind::kTrain).size(), 36);
  EXPECT_EQ(store.split(SplitKind::kEval).size(), 10);

  // The stored pixels are the decoded file.
  const SplitIndex& tr = store.split(SplitKind::kTrain);
  Decoder d;
  DecodeOptions dopt;
  dopt.max_side = 512;
  const DecodeResult ref = d.decode_file(fs::path(so.out_dir) / tr.names[0], dopt);
  ASSERT_TRUE(ref.ok);
  EXPECT_EQ(store.read_image(SplitKind::kTrain, 0).pixels, ref.image.pixels);
  EXPECT_EQ(store.label_names()[tr.labels[0]], *label_from_filename(tr.names[0]));
  // Nothing but the store is left in the folder (no temporary file).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Preprocess, DecompressionBombsSkippedWithReasonsTheRestStored) {
  ScratchDir dir("bombs");
  SynthOptions so;
  so.out_dir = dir / "images";
  so.classes = 2;
  so.per_class = 4;
  ASSERT_EQ(write_synthetic_dataset(so), 8);
  const std::string huge = pet_breeds()[0] + "_9001.jpg";
  const std::string scans = pet_breeds()[1] + "_9002.jpg";
  auto write = [&](const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream(fs::path(so.out_dir) / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  };
  write(huge, pets::data::testing::jpeg_claiming_size(65500, 65500));
  write(scans, pets::data::testing::jpeg_with_scans(600));
  PreprocessOptions po;
  po.images_dir = so.out_dir;
  po.out = dir / "pets.h5";
  // Both bombs draw evaluation slots: at 0.8 (8 train, 2 eval slots) they would leave no
  // evaluation image, which is refused.
  po.train_fraction = 0.5;
  const PreprocessSummary sum = run_preprocess(po, MPI_COMM_WORLD);
  EXPECT_EQ(sum.stored, 8);
  EXPECT_TRUE(contains(sum.line(), "8 stored, 2 skipped: ")) << sum.line();
  const Store store(po.out);
  std::map<std::string, std::string> skipped(store.skipped().begin(), store.skipped().end());
  EXPECT_EQ(skipped.size(), 2u);
  EXPECT_TRUE(contains(skipped[huge], "pixel limit (65500x65500")) << huge << ": " << skipped[huge];
  EXPECT_TRUE(contains(skipped[scans], "scan limit")) << scans << ": " << skipped[scans];
  EXPECT_EQ(store.split(SplitKind::kTrain).size() + store.split(SplitKind::kEval).size(), 8);
}

TEST(Preprocess, FailedRunsLeaveNoFileAtOut) {
  ScratchDir dir("fail");
  fs::create_directories(dir / "empty");
  { std::ofstream(dir / "empty/readme.txt") << "x"; }
  PreprocessOptions po;
  po.images_dir = dir / "empty";
  po.out = dir / "out.h5";
  EXPECT_TRUE(
      contains(usage_error_of([&] { run_preprocess(po, MPI_COMM_WORLD); }), "no usable image"));
  po.images_dir = dir / "missing";
  EXPECT_TRUE(
      contains(usage_error_of([&] { run_preprocess(po, MPI_COMM_WORLD); }), "is not a folder"));
  po.images_dir = dir / "empty";
  po.out = dir / "no_such_dir/out.h5";
  EXPECT_TRUE(
      contains(usage_error_of([&] { run_preprocess(po, MPI_COMM_WORLD); }), "does not exist"));
  po.out = dir / "out.h5";
  po.train_fraction = 1.5;
  EXPECT_TRUE(
      contains(usage_error_of([&] { run_preprocess(po, MPI_COMM_WORLD); }), "train-fraction"));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 0) << "a failed run left a file";
  EXPECT_FALSE(fs::exists(po.out));
}

// pets_preprocess writes `<out>.tmp.<host>.<pid>` and, at its start, removes the temporary files
// in --out's folder whose writer is gone (this host, no such process), as pets_train does; those of
// a running process or of another host stay.
TEST(Preprocess, TemporaryFilesOfEndedWritersAreRemovedAtStart) {
  ScratchDir dir("stale");
  SynthOptions so;
  so.out_dir = dir / "images";
  so.classes = 2;
  so.per_class = 3;
  ASSERT_EQ(write_synthetic_dataset(so), 6);
  PreprocessOptions po;
  po.images_dir = so.out_dir;
  po.out = dir / "pets.h5";
  const std::optional<pets::TempFileName> ours =
      pets::parse_temp_name(fs::path(pets::atomic_temp_path(po.out)).filename().string());
  ASSERT_TRUE(ours.has_value());
  EXPECT_EQ(ours->target, "pets.h5");
  EXPECT_EQ(ours->pid, static_cast<long>(getpid()));
  long pid_max = 0;  // a pid above the kernel's largest: no process has it
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  ASSERT_GT(pid_max, 0);
  const long child = pid_max + 1;
  const std::string prefix = po.out + ".tmp.";
  const std::string ended = prefix + ours->host + "." + std::to_string(child);
  const std::string running = prefix + ours->host + "." + std::to_string(getppid());
  const std::string elsewhere = prefix + "other-host." + std::to_string(child);
  // This process's own name: the run writes that file and renames it to --out.
  const std::string own = pets::atomic_temp_path(po.out);
  for (const std::string& p : {ended, running, elsewhere, own}) std::ofstream(p) << "partial";
  const PreprocessSummary sum = run_preprocess(po, MPI_COMM_WORLD);
  EXPECT_EQ(sum.stored, 6);
  EXPECT_FALSE(fs::exists(own)) << "not the temporary file the run wrote";
  EXPECT_FALSE(fs::exists(ended));
  EXPECT_TRUE(fs::exists(running));
  EXPECT_TRUE(fs::exists(elsewhere));
  EXPECT_EQ(sum.removed_temps, std::vector<std::string>{ended});
  EXPECT_EQ(sum.kept_temps.size(), 2u);
  EXPECT_TRUE(Store(po.out).split(SplitKind::kTrain).size() > 0);
}

namespace {
/// The pixels dataset of a split as H5Dread gives it (HDF5's pipeline, its own Fletcher32 check):
/// the reference the direct reads from the mapped file are compared with.
std::vector<std::uint8_t> hdf5_pixels(const std::string& path, SplitKind kind) {
  silence_hdf5_errors();
  H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  H5Id d(H5Dopen2(f.get(), schema::dataset_path(split_name(kind), schema::kPixels).c_str(),
                  H5P_DEFAULT));
  H5Id space(H5Dget_space(d.get()));
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  std::vector<std::uint8_t> bytes(n);
  EXPECT_GE(H5Dread(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
  return bytes;
}

/// Image i of a split, cut from hdf5_pixels.
Image image_of(const Store& store, const std::vector<std::uint8_t>& pixels, SplitKind kind,
               std::int64_t i) {
  const SplitIndex& s = store.split(kind);
  Image img;
  img.height = s.shapes[i][0];
  img.width = s.shapes[i][1];
  const auto at = pixels.begin() + static_cast<std::ptrdiff_t>(s.offsets[i]);
  img.pixels.assign(at, at + static_cast<std::ptrdiff_t>(img.height) * img.width * 3);
  return img;
}

/// Replaces `dataset` of the open file by a copy of its values with the filters `set_filters`
/// applies (after H5Pset_chunk of `chunk` elements).
void rewrite_filtered(hid_t f, const std::string& dataset, hsize_t chunk,
                      const std::function<void(hid_t)>& set_filters) {
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t sp = H5Dget_space(d);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(sp, &n, nullptr);
  std::vector<std::uint8_t> bytes(n);
  H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  H5Dclose(d);
  H5Ldelete(f, dataset.c_str(), H5P_DEFAULT);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  set_filters(dcpl);
  d = H5Dcreate2(f, dataset.c_str(), H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}
}  // namespace

class BadStore : public ::testing::Test {
 protected:
  void SetUp() override {
    pets::data::testing::make_store(dir_ / "images", good_, 3, 3, MPI_COMM_WORLD, 64);
  }
  std::string copy(const std::string& name) {
    const std::string p = dir_ / name;
    fs::copy_file(good_, p);
    return p;
  }
  /// Opens a copy read-write and lets `edit` damage it.
  std::string edited(const std::string& name, const std::function<void(hid_t)>& edit) {
    const std::string p = copy(name);
    silence_hdf5_errors();
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0);
    edit(f);
    H5Fclose(f);
    return p;
  }
  ScratchDir dir_{"badstore"};
  std::string good_ = dir_ / "good.h5";
};

TEST_F(BadStore, GoodStoreOpens) {
  const Store s(good_);
  EXPECT_EQ(s.label_names().size(), 3u);
  EXPECT_EQ(s.split(SplitKind::kTrain).size() + s.split(SplitKind::kEval).size(), 9);
}

TEST_F(BadStore, TruncatedOrNotHdf5GivesAClearError) {
  const std::string cut = copy("cut.h5");
  fs::resize_file(cut, fs::file_size(cut) / 2);
  std::string msg = usage_error_of([&] { Store s(cut); });
  EXPECT_TRUE(contains(msg, cut)) << msg;
  EXPECT_TRUE(contains(msg, "cannot open image store") || contains(msg, "invalid image store"))
      << msg;
  const std::string junk = dir_ / "junk.h5";
  { std::ofstream(junk) << "this is not HDF5"; }
  msg = usage_error_of([&] { Store s(junk); });
  EXPECT_TRUE(contains(msg, junk) && contains(msg, "not an HDF5 file")) << msg;
  msg = usage_error_of([&] {
    LoaderOptions o;
    o.path = dir_ / "absent.h5";
    o.batch_size = o.eval_batch_size = 4;
    Loader l(o);
  });
  EXPECT_TRUE(contains(msg, "absent.h5")) << msg;
}

TEST_F(BadStore, WrongSchemaNamesTheProblem) {
  auto expect = [&](const std::string& path, const std::string& what) {
    const std::string msg = usage_error_of([&] { Store s(path); });
    EXPECT_TRUE(contains(msg, path) && contains(msg, what)) << "want '" << what << "' in: " << msg;
  };
  const std::string version = schema::kSchemaVersion.name;
  const std::string train_labels = schema::dataset_path(schema::kTrainGroup, schema::kLabels);
  const std::string eval_names = schema::dataset_path(schema::kEvalGroup, schema::kNames);
  expect(edited("newer.h5",
                [](hid_t f) {
                  hid_t a = H5Aopen(f, schema::kSchemaVersion.name, H5P_DEFAULT);
                  const int v = schema::kVersion + 1;
                  H5Awrite(a, H5T_NATIVE_INT, &v);
                  H5Aclose(a);
                }),
         version + " is " + std::to_string(schema::kVersion + 1));
  expect(edited("noversion.h5", [](hid_t f) { H5Adelete(f, schema::kSchemaVersion.name); }),
         "'" + version + "' is missing");
  expect(edited("noeval.h5", [](hid_t f) { H5Ldelete(f, schema::kEvalGroup, H5P_DEFAULT); }),
         std::string("group /") + schema::kEvalGroup + " is missing");
  expect(edited("floatlabels.h5",
                [&](hid_t f) {
                  H5Ldelete(f, train_labels.c_str(), H5P_DEFAULT);
                  const hsize_t n = 7;
                  hid_t sp = H5Screate_simple(1, &n, nullptr);
                  hid_t d = H5Dcreate2(f, train_labels.c_str(), H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT);
                  H5Dclose(d);
                  H5Sclose(sp);
                }),
         "/" + train_labels + " has the wrong type");
  expect(edited("badlabel.h5",
                [&](hid_t f) {
                  hid_t d = H5Dopen2(f, train_labels.c_str(), H5P_DEFAULT);
                  hid_t sp = H5Dget_space(d);
                  const hsize_t start = 0, count = 1;
                  H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
                  hid_t mem = H5Screate_simple(1, &count, nullptr);
                  const int bad = 99;
                  H5Dwrite(d, H5T_NATIVE_INT, mem, sp, H5P_DEFAULT, &bad);
                  H5Sclose(mem);
                  H5Sclose(sp);
                  H5Dclose(d);
                }),
         "has label 99");
  expect(edited("shortnames.h5",
                [&](hid_t f) {
                  H5Ldelete(f, eval_names.c_str(), H5P_DEFAULT);
                  hid_t t = H5Tcopy(H5T_C_S1);
                  H5Tset_size(t, 8);
                  const hsize_t n = 1;
                  hid_t sp = H5Screate_simple(1, &n, nullptr);
                  hid_t d = H5Dcreate2(f, eval_names.c_str(), t, sp, H5P_DEFAULT, H5P_DEFAULT,
                                       H5P_DEFAULT);
                  H5Dclose(d);
                  H5Sclose(sp);
                  H5Tclose(t);
                }),
         "disagree on the image count");
}

TEST_F(BadStore, LoaderBatchesOneRank) {
  LoaderOptions o;
  o.path = good_;
  o.batch_size = 4;
  o.eval_batch_size = 2;
  o.image_size = 32;
  o.workers = 3;
  o.prefetch = 2;
  Loader loader(o);
  const std::int64_t n = loader.store().split(SplitKind::kTrain).size();
  ASSERT_EQ(n, 7);  // floor(9 * 0.8)
  EXPECT_EQ(loader.steps_per_epoch(SplitKind::kTrain), 2);
  auto run = [&](std::int64_t epoch) {
    std::vector<Batch> out;
    loader.start_epoch(SplitKind::kTrain, epoch);
    while (auto b = loader.next()) out.push_back(std::move(*b));
    return out;
  };
  const std::vector<Batch> e0 = run(0);
  ASSERT_EQ(e0.size(), 2u);
  EXPECT_EQ(e0[0].n, 4);
  EXPECT_EQ(e0[1].n, 3);  // last batch partial
  EXPECT_EQ(e0[1].pixels.size(), 3u * 3 * 32 * 32);
  std::multiset<std::int64_t> seen;
  for (const Batch& b : e0)
    for (std::int64_t i = 0; i < b.n; ++i) {
      seen.insert(b.indices[i]);
      EXPECT_EQ(b.labels[i], loader.store().split(SplitKind::kTrain).labels[b.indices[i]]);
    }
  EXPECT_EQ(seen, (std::multiset<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  for (float v : e0[0].pixels) ASSERT_TRUE(v > -2.2f && v < 2.7f) << v;
  // Same (seed, epoch): identical batches, whatever thread built them; another epoch differs.
  const std::vector<Batch> again = run(0);
  EXPECT_EQ(again[0].indices, e0[0].indices);
  EXPECT_EQ(again[1].pixels, e0[1].pixels);
  const std::vector<Batch> e1 = run(1);
  EXPECT_NE(e1[0].pixels, e0[0].pixels);
  // Eval: store order, deterministic, no augmentation.
  loader.start_epoch(SplitKind::kEval, 0);
  const auto ev = loader.next();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->n, 2);
  EXPECT_EQ(ev->indices, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(loader.make_batch(SplitKind::kEval, 5, 0).pixels, ev->pixels);
  // Stopping mid-epoch and starting again is clean.
  loader.start_epoch(SplitKind::kTrain, 0);
  EXPECT_TRUE(loader.next().has_value());
  loader.start_epoch(SplitKind::kTrain, 2);
  EXPECT_TRUE(loader.next().has_value());
}

namespace {
/// The datasets of a store, as paths from the root.
std::vector<std::string> store_datasets() {
  std::vector<std::string> out{schema::kSkippedTable, schema::kWarningsTable};
  for (const char* g : {schema::kTrainGroup, schema::kEvalGroup})
    for (const schema::Field* f :
         {&schema::kPixels, &schema::kOffsets, &schema::kShapes, &schema::kLabels, &schema::kNames})
      out.push_back(schema::dataset_path(g, *f));
  return out;
}
}  // namespace

TEST_F(BadStore, WrittenInTheChecksummedFormat) {
  silence_hdf5_errors();
  H5Id f(H5Fopen(good_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(f.valid());
  H5F_info2_t info;
  ASSERT_GE(H5Fget_info2(f.get(), &info), 0);
  EXPECT_GE(info.super.version, 2u) << "superblock without a checksum";
  std::vector<std::string> objects = store_datasets();
  objects.insert(objects.end(), {"/", schema::kTrainGroup, schema::kEvalGroup});
  for (const std::string& name : objects) {
    H5O_info_t oi;
    ASSERT_GE(H5Oget_info_by_name2(f.get(), name.c_str(), &oi, H5O_INFO_HDR, H5P_DEFAULT), 0)
        << name;
    EXPECT_EQ(oi.hdr.version, 2u) << name << ": object header without a checksum";
  }
  for (const std::string& name : store_datasets()) {
    H5Id d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT));
    H5Id dcpl(H5Dget_create_plist(d.get()));
    EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CHUNKED) << name;
    unsigned flags = 0;
    std::size_t n = 0;
    EXPECT_GE(H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, &flags, &n, nullptr, 0,
                                   nullptr, nullptr),
              0)
        << name << " has no Fletcher32 checksum";
    H5Eclear2(H5E_DEFAULT);
  }
}

TEST_F(BadStore, ChangedBytesAreRefusedWithHdf5sChecksumError) {
  using namespace pets::data::testing;
  const std::string labels = schema::dataset_path(schema::kTrainGroup, schema::kLabels);
  const std::string pixels = schema::dataset_path(schema::kTrainGroup, schema::kPixels);
  const auto flipped = [&](const std::string& name,
                           const std::function<std::uint64_t(const std::string&)>& where) {
    const std::string p = copy(name);
    flip_byte(p, where(p));
    return p;
  };
  const auto expect = [](const std::string& p, const std::vector<std::string>& parts) {
    ::testing::internal::CaptureStderr();
    const std::string msg = usage_error_of([&] { Store s(p); });
    const std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(printed.empty()) << "HDF5 printed: " << printed;
    EXPECT_TRUE(contains(msg, p)) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& part : parts) EXPECT_TRUE(contains(msg, part)) << part << ": " << msg;
  };
  const std::string metadata = "the file is damaged (incorrect metadata checksum";
  const std::string rerun = "rerun pets_preprocess";
  expect(flipped("superblock.h5", [](const std::string&) { return kSuperblockByte; }),
         {"cannot open image store", metadata, rerun});
  expect(flipped("root.h5", [](const std::string& p) { return header_byte(p, "/"); }),
         {metadata, rerun});
  expect(flipped("labels.h5", [&](const std::string& p) { return header_byte(p, labels); }),
         {"/" + labels + ": " + metadata, rerun});
  // Pixels are checked when read, as the loader reads them: the image named. The store's chunks
  // are read directly from the mapped file, their sums checked by our code (Store::read_crop).
  const std::string p =
      flipped("pixels.h5", [&](const std::string& p) { return chunk_byte(p, pixels); });
  const Store s(p);
  const std::string name = s.split(SplitKind::kTrain).names[0];
  ::testing::internal::CaptureStderr();
  const std::string msg = usage_error_of([&] { s.read_image(SplitKind::kTrain, 0); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  for (const std::string& part :
       {p, "image 0 (" + name + ") of /" + pixels,
        std::string("(data error detected by Fletcher32 checksum)"), rerun})
    EXPECT_TRUE(contains(msg, part)) << part << ": " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  const ReadStats stats = s.read_stats();
  EXPECT_EQ(stats.damaged_chunks, 1) << "not refused by the direct read's own check";
  EXPECT_EQ(stats.lock_held_seconds, 0.0) << "read through HDF5";
  // Refused again on the next read (a damaged chunk is never marked as checked).
  EXPECT_TRUE(contains(usage_error_of([&] { s.read_image(SplitKind::kTrain, 0); }), "Fletcher32"));
  EXPECT_EQ(s.read_stats().damaged_chunks, 2);
}

// A changed byte of a pixel chunk is refused in the same words whether the chunk is read directly
// (Fletcher32 alone: our check) or through HDF5 (another filter beside it: HDF5's check), and a
// changed byte of the stored sum itself is refused too.
TEST_F(BadStore, DamagedPixelsAreRefusedAlikeByBothReadPaths) {
  using namespace pets::data::testing;
  const std::string pixels = schema::dataset_path(schema::kTrainGroup, schema::kPixels);
  const auto damaged = [&](const std::string& name, bool shuffle, bool in_sum) {
    const std::string p = edited(name, [&](hid_t f) {
      rewrite_filtered(f, pixels, 4096, [&](hid_t dcpl) {
        if (shuffle) H5Pset_shuffle(dcpl);
        H5Pset_fletcher32(dcpl);
      });
    });
    // The first chunk holds image 0's first bytes: a byte of its data, or of its sum.
    const std::uint64_t middle = chunk_byte(p, pixels);  // address + stored size / 2
    flip_byte(p, in_sum ? middle + (4096 + 4) / 2 - 1 : middle);
    return p;
  };
  const auto refusal = [](const std::string& p) {
    const Store s(p);
    std::string msg = usage_error_of([&] { s.read_image(SplitKind::kTrain, 0); });
    const ReadStats stats = s.read_stats();
    if (const auto at = msg.find(p); at != std::string::npos) msg.replace(at, p.size(), "STORE");
    return std::make_pair(msg, stats);
  };
  const auto [direct, direct_stats] = refusal(damaged("direct.h5", false, false));
  const auto [hdf5, hdf5_stats] = refusal(damaged("shuffled.h5", true, false));
  EXPECT_TRUE(contains(direct, "(data error detected by Fletcher32 checksum)")) << direct;
  EXPECT_EQ(direct, hdf5);
  EXPECT_EQ(direct_stats.damaged_chunks, 1);
  EXPECT_EQ(hdf5_stats.damaged_chunks, 0);
  const auto [sum, sum_stats] = refusal(damaged("sum.h5", false, true));
  EXPECT_EQ(sum, direct);
  EXPECT_EQ(sum_stats.damaged_chunks, 1);
}

TEST_F(BadStore, PreviousSchemaVersionIsRefusedWithRerun) {
  const std::string v1 = dir_ / "v1.h5";
  pets::data::testing::write_version1_store(good_, v1);
  std::string msg = usage_error_of([&] { Store s(v1); });
  EXPECT_TRUE(contains(msg, v1) && contains(msg, "superblock version 0") &&
              contains(msg, "rerun pets_preprocess"))
      << msg;
  // The checksummed format with the old number: refused by the number.
  const std::string renumbered = edited("v1_number.h5", [](hid_t f) {
    hid_t a = H5Aopen(f, schema::kSchemaVersion.name, H5P_DEFAULT);
    const int v = schema::kVersion - 1;
    H5Awrite(a, H5T_NATIVE_INT, &v);
    H5Aclose(a);
  });
  msg = usage_error_of([&] { Store s(renumbered); });
  EXPECT_TRUE(contains(msg, std::string(schema::kSchemaVersion.name) + " is " +
                                std::to_string(schema::kVersion - 1)) &&
              contains(msg, "rerun pets_preprocess"))
      << msg;
}

TEST_F(BadStore, DatasetWithoutChecksumIsRefused) {
  const std::string labels = schema::dataset_path(schema::kEvalGroup, schema::kLabels);
  const std::string p = edited("plain_labels.h5", [&](hid_t f) {
    hid_t d = H5Dopen2(f, labels.c_str(), H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    std::vector<std::int32_t> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
    H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Ldelete(f, labels.c_str(), H5P_DEFAULT);
    const hsize_t n = v.size();
    H5Sclose(sp);
    sp = H5Screate_simple(1, &n, nullptr);  // contiguous: no filters
    d = H5Dcreate2(f, labels.c_str(), H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Sclose(sp);
  });
  const std::string msg = usage_error_of([&] { Store s(p); });
  EXPECT_TRUE(contains(msg, p) && contains(msg, "/" + labels + " has no Fletcher32 checksum"))
      << msg;
}

// The loader's fixed-seed results are those of the whole-image transforms: each batch is, bit for
// bit, transform_train (train) or transform_eval (eval) of Store::read_image with the image's own
// stream (augment_seed), although the loader reads only the crop box's rows.
TEST_F(BadStore, LoaderEqualsWholeImageTransformsBitwise) {
  LoaderOptions o;
  o.path = good_;
  o.batch_size = 3;
  o.eval_batch_size = 2;
  o.image_size = 40;
  o.seed = 7;
  o.world = 2;
  o.rank = 1;
  o.workers = 2;
  // The whole images as HDF5 reads them, before the loader's threads start (HDF5 is not
  // thread-safe; they read from the mapped file and take its lock only on their first read).
  const std::vector<std::uint8_t> hdf5[2] = {hdf5_pixels(good_, SplitKind::kTrain),
                                             hdf5_pixels(good_, SplitKind::kEval)};
  Loader loader(o);
  const Store& store = loader.store();
  const std::size_t per_image = 3 * 40 * 40;
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval})
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(kind, epoch);
      std::int64_t images = 0;
      while (auto b = loader.next()) {
        const std::int64_t batch = kind == SplitKind::kTrain ? o.batch_size : o.eval_batch_size;
        for (std::int64_t i = 0; i < b->n; ++i) {
          const Image img =
              image_of(store, hdf5[kind == SplitKind::kTrain ? 0 : 1], kind, b->indices[i]);
          std::vector<float> want(per_image);
          if (kind == SplitKind::kTrain) {
            Rng rng(augment_seed(o.seed, o.rank, epoch, b->step * batch + i));
            transform_train(img, rng, 40, want.data());
          } else {
            transform_eval(img, 40, want.data());
          }
          ASSERT_TRUE(std::equal(want.begin(), want.end(), b->pixels.begin() + i * per_image))
              << split_name(kind) << " epoch " << epoch << " step " << b->step << " image " << i;
          ++images;
        }
      }
      EXPECT_GT(images, 0);
    }
  // The loader read every image from the mapped file, outside the HDF5 lock.
  const ReadStats stats = store.read_stats();
  EXPECT_GT(stats.direct_reads, 0);
  EXPECT_EQ(stats.direct_reads, stats.reads);
  EXPECT_GT(stats.verified_chunks, 0);
  EXPECT_EQ(stats.lock_held_seconds, 0.0);
}

TEST_F(BadStore, ReadCropIsTheBoxOfReadImage) {
  const Store store(good_);
  const ReadStats before = store.read_stats();
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
    const std::vector<std::uint8_t> hdf5 = hdf5_pixels(good_, kind);
    for (std::int64_t i = 0; i < store.split(kind).size(); ++i) {
      const Image img = store.read_image(kind, i);
      ASSERT_EQ(img.pixels, image_of(store, hdf5, kind, i).pixels) << split_name(kind) << i;
      const int h = img.height, w = img.width;
      for (const CropBox box : {CropBox{0, 0, h, w}, CropBox{1, 2, h - 3, w - 5},
                                CropBox{h / 2, w / 3, h - h / 2, 1}, CropBox{h - 1, 0, 1, w}}) {
        std::vector<std::uint8_t> got(static_cast<std::size_t>(box.height) * box.width * 3, 0);
        store.read_crop(kind, i, box, got.data());
        for (int y = 0; y < box.height; ++y)
          ASSERT_TRUE(std::equal(
              got.begin() + static_cast<std::ptrdiff_t>(y) * box.width * 3,
              got.begin() + static_cast<std::ptrdiff_t>(y + 1) * box.width * 3,
              img.pixels.begin() + (static_cast<std::ptrdiff_t>(box.top + y) * w + box.left) * 3))
              << split_name(kind) << " image " << i << " row " << y;
      }
      std::uint8_t byte = 0;
      EXPECT_THROW(store.read_crop(kind, i, CropBox{h, 0, 1, 1}, &byte), pets::Error);
      EXPECT_THROW(store.read_crop(kind, i, CropBox{0, w - 1, 1, 2}, &byte), pets::Error);
    }
  }
  const ReadStats after = store.read_stats();
  EXPECT_EQ(after.reads - before.reads, 9 * 5);  // 9 images, one read_image and 4 crops each
  EXPECT_GT(after.bytes, before.bytes);
  // The store's pixel chunks carry only the Fletcher32 checksum (schema 2): every read copies from
  // the mapped file, each split's one 1 MiB chunk checked once.
  EXPECT_EQ(after.direct_reads - before.direct_reads, 9 * 5);
  EXPECT_EQ(after.verified_chunks, 2);
  EXPECT_EQ(after.damaged_chunks, 0);
  EXPECT_EQ(after.lock_held_seconds, 0.0);
}

// Pixel chunks with Fletcher32 alone (here in 4 KiB chunks, so that images span chunks) are read
// directly from the mapped file, each chunk's sum checked once; with another filter beside it
// (shuffling) they go through HDF5 under its lock. Both give the bytes HDF5 reads.
TEST_F(BadStore, ChecksummedPixelsAreReadDirectlyOtherFiltersThroughHdf5) {
  const std::string train_pixels = schema::dataset_path(schema::kTrainGroup, schema::kPixels);
  const auto with = [&](const std::string& name, bool shuffle) {
    return edited(name, [&](hid_t f) {
      rewrite_filtered(f, train_pixels, 4096, [&](hid_t dcpl) {
        if (shuffle) H5Pset_shuffle(dcpl);
        H5Pset_fletcher32(dcpl);
      });
    });
  };
  const std::string small = with("fletcher.h5", false), shuffled = with("shuffled.h5", true);
  const std::vector<std::uint8_t> hdf5 = hdf5_pixels(good_, SplitKind::kTrain);
  EXPECT_EQ(hdf5_pixels(small, SplitKind::kTrain), hdf5);
  const Store plain(good_), checked(small), other(shuffled);
  const std::int64_t n = plain.split(SplitKind::kTrain).size();
  for (std::int64_t i = 0; i < n; ++i) {
    const Image img = image_of(plain, hdf5, SplitKind::kTrain, i);
    EXPECT_EQ(plain.read_image(SplitKind::kTrain, i).pixels, img.pixels) << "image " << i;
    EXPECT_EQ(checked.read_image(SplitKind::kTrain, i).pixels, img.pixels) << "image " << i;
    EXPECT_EQ(other.read_image(SplitKind::kTrain, i).pixels, img.pixels) << "image " << i;
    const CropBox box{img.height / 4, img.width / 5, img.height / 2, img.width / 2};
    std::vector<std::uint8_t> a(static_cast<std::size_t>(box.height) * box.width * 3), b(a.size()),
        c(a.size());
    plain.read_crop(SplitKind::kTrain, i, box, a.data());
    checked.read_crop(SplitKind::kTrain, i, box, b.data());
    other.read_crop(SplitKind::kTrain, i, box, c.data());
    for (int y = 0; y < box.height; ++y)
      ASSERT_TRUE(
          std::equal(a.begin() + static_cast<std::ptrdiff_t>(y) * box.width * 3,
                     a.begin() + static_cast<std::ptrdiff_t>(y + 1) * box.width * 3,
                     img.pixels.begin() +
                         (static_cast<std::ptrdiff_t>(box.top + y) * img.width + box.left) * 3))
          << "image " << i << " row " << y;
    EXPECT_EQ(a, b) << "image " << i;
    EXPECT_EQ(a, c) << "image " << i;
  }
  const ReadStats direct = checked.read_stats();
  EXPECT_EQ(direct.reads, 2 * n);
  EXPECT_EQ(direct.direct_reads, 2 * n);
  // Every chunk of the split is checked once, however often it is read.
  EXPECT_EQ(
      direct.verified_chunks,
      static_cast<std::int64_t>((checked.split(SplitKind::kTrain).pixel_bytes + 4095) / 4096));
  EXPECT_EQ(direct.lock_held_seconds, 0.0);
  const ReadStats through = other.read_stats();
  EXPECT_EQ(through.reads, 2 * n);
  EXPECT_EQ(through.direct_reads, 0);
  EXPECT_EQ(through.verified_chunks, 0);
  EXPECT_GT(through.lock_held_seconds, 0.0);
  EXPECT_EQ(plain.read_stats().direct_reads, 2 * n);
}

// Threads that read the same chunks for the first time at once check them side by side (each
// chunk at least once, a race checking it twice is harmless) and all get HDF5's bytes.
TEST_F(BadStore, ThreadsCheckingTheSameChunksAtOnceReadHdf5sBytes) {
  const std::string train_pixels = schema::dataset_path(schema::kTrainGroup, schema::kPixels);
  const std::string small = edited("fletcher.h5", [&](hid_t f) {
    rewrite_filtered(f, train_pixels, 512, [](hid_t dcpl) { H5Pset_fletcher32(dcpl); });
  });
  const std::vector<std::uint8_t> hdf5 = hdf5_pixels(small, SplitKind::kTrain);
  for (int round = 0; round < 5; ++round) {
    const Store store(small);
    const std::int64_t n = store.split(SplitKind::kTrain).size();
    std::vector<std::vector<Image>> got(4);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < got.size(); ++t)
      threads.emplace_back([&, t] {
        for (std::int64_t i = 0; i < n; ++i)
          got[t].push_back(store.read_image(SplitKind::kTrain, i));
      });
    for (std::thread& t : threads) t.join();
    for (std::size_t t = 0; t < got.size(); ++t)
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[t][static_cast<std::size_t>(i)].pixels,
                  image_of(store, hdf5, SplitKind::kTrain, i).pixels)
            << "thread " << t << " image " << i;
    const ReadStats stats = store.read_stats();
    EXPECT_EQ(stats.direct_reads, 4 * n);
    // Each thread checks a chunk at most once: after its own check it sees the chunk's bit.
    const auto chunks =
        static_cast<std::int64_t>((store.split(SplitKind::kTrain).pixel_bytes + 511) / 512);
    EXPECT_GE(stats.verified_chunks, chunks);
    EXPECT_LE(stats.verified_chunks, 4 * chunks);
    EXPECT_EQ(stats.damaged_chunks, 0);
  }
}

// Our Fletcher32 is HDF5's, bit for bit: on chunks its filter wrote of odd and even lengths, below
// and above one 360-word block, of random bytes (many chunks of them), all 0xff (sums that fold to
// 0xffff) and all 0, and on the store's own pixel chunks; the raw chunk (H5Dread_chunk) is the
// data, then the sum as a little-endian uint32.
TEST_F(BadStore, Fletcher32IsHdf5s) {
  const auto check_chunks = [](hid_t d, hsize_t chunk, hsize_t n, const std::string& what) {
    for (hsize_t at = 0; at < n; at += chunk) {
      hsize_t stored = 0;
      ASSERT_GE(H5Dget_chunk_storage_size(d, &at, &stored), 0) << what;
      ASSERT_EQ(stored, chunk + 4) << what;
      std::vector<std::uint8_t> raw(stored);
      std::uint32_t mask = 1;
      ASSERT_GE(H5Dread_chunk(d, H5P_DEFAULT, &at, &mask, raw.data()), 0) << what;
      ASSERT_EQ(mask, 0u) << what;
      const std::uint32_t sum = raw[chunk] | raw[chunk + 1] << 8 | raw[chunk + 2] << 16 |
                                static_cast<std::uint32_t>(raw[chunk + 3]) << 24;
      EXPECT_EQ(fletcher32(raw.data(), chunk), sum) << what << " chunk at " << at;
      EXPECT_TRUE(fletcher32_matches(raw.data(), chunk)) << what << " chunk at " << at;
      // HDF5 before 1.6.3 stored the sum with the bytes of each 16-bit half swapped: accepted.
      std::swap(raw[chunk], raw[chunk + 1]);
      std::swap(raw[chunk + 2], raw[chunk + 3]);
      EXPECT_TRUE(fletcher32_matches(raw.data(), chunk)) << what << " swapped";
      std::swap(raw[chunk], raw[chunk + 1]);
      raw[chunk / 2] ^= 0x10;
      EXPECT_FALSE(fletcher32_matches(raw.data(), chunk)) << what << " changed data";
    }
  };
  const std::string p = dir_ / "fletcher.h5";
  silence_hdf5_errors();
  {
    H5Id f(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    std::mt19937 gen(5);
    int k = 0;
    for (const hsize_t chunk : {1, 2, 3, 7, 719, 720, 721, 722, 4096, 4099, 100001})
      for (const int fill : {-1, 0xff, 0}) {
        // Random 4 KiB chunks, 1024 of them: a fold that leaves 0x10000 or more (needing the
        // final one) comes about once in 300 blocks.
        const hsize_t n = chunk * (chunk == 4096 && fill < 0 ? 1024 : 3);
        std::vector<std::uint8_t> bytes(n);
        for (auto& b : bytes) b = static_cast<std::uint8_t>(fill < 0 ? gen() : fill);
        H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
        H5Pset_chunk(dcpl.get(), 1, &chunk);
        H5Pset_fletcher32(dcpl.get());
        H5Id sp(H5Screate_simple(1, &n, nullptr));
        const std::string name = "d" + std::to_string(k++);
        H5Id d(H5Dcreate2(f.get(), name.c_str(), H5T_STD_U8LE, sp.get(), H5P_DEFAULT, dcpl.get(),
                          H5P_DEFAULT));
        ASSERT_GE(H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
                  0);
        check_chunks(d.get(), chunk, n, name + " (chunk " + std::to_string(chunk) + ")");
      }
  }
  H5Id f(H5Fopen(good_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
    const std::string name = schema::dataset_path(split_name(kind), schema::kPixels);
    H5Id d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT));
    H5Id dcpl(H5Dget_create_plist(d.get()));
    hsize_t chunk = 0, n = 0;
    H5Pget_chunk(dcpl.get(), 1, &chunk);
    H5Id space(H5Dget_space(d.get()));
    H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    check_chunks(d.get(), chunk, n, name);
  }
}

// LoaderOutput::kCrops: the boxes the CPU path resizes (same streams), their bytes packed in batch
// order into the buffer the allocator gave, and no float pixels.
TEST_F(BadStore, LoaderCropsAreTheCpuPathsBoxes) {
  LoaderOptions o;
  o.path = good_;
  o.batch_size = 4;
  o.eval_batch_size = 4;
  o.image_size = 32;
  o.output = LoaderOutput::kCrops;
  int allocations = 0;
  o.allocate_staging = [&allocations](std::size_t bytes) {
    ++allocations;
    auto owner = std::make_shared<std::vector<std::uint8_t>>(bytes + 16, 0xEE);
    return StagingBuffer{owner->data() + 16, owner};  // not at the start: offsets are relative
  };
  Loader loader(o);
  const Store& store = loader.store();
  loader.start_epoch(SplitKind::kTrain, 3);
  std::int64_t batches = 0;
  while (auto b = loader.next()) {
    ++batches;
    EXPECT_TRUE(b->pixels.empty());
    ASSERT_EQ(b->boxes.size(), static_cast<std::size_t>(b->n));
    ASSERT_NE(b->crops.data, nullptr);
    std::int64_t offset = 0;
    for (std::int64_t i = 0; i < b->n; ++i) {
      const Image img = store.read_image(SplitKind::kTrain, b->indices[i]);
      Rng rng(augment_seed(o.seed, o.rank, 3, b->step * o.batch_size + i));
      const CropBox want = random_resized_crop_box(img.height, img.width, rng);
      const CropBox& box = b->boxes[i];
      EXPECT_TRUE(box.top == want.top && box.left == want.left && box.height == want.height &&
                  box.width == want.width)
          << "image " << i;
      ASSERT_EQ(b->crop_offsets[i], offset);
      for (int y = 0; y < box.height; ++y)
        ASSERT_TRUE(
            std::equal(b->crops.data + offset + static_cast<std::ptrdiff_t>(y) * box.width * 3,
                       b->crops.data + offset + static_cast<std::ptrdiff_t>(y + 1) * box.width * 3,
                       img.pixels.begin() +
                           (static_cast<std::ptrdiff_t>(box.top + y) * img.width + box.left) * 3));
      offset += static_cast<std::int64_t>(box.height) * box.width * 3;
    }
    EXPECT_EQ(b->crop_bytes, offset);
  }
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(allocations, 2);
  // Eval crops are whole images.
  loader.start_epoch(SplitKind::kEval, 0);
  const auto ev = loader.next();
  ASSERT_TRUE(ev.has_value());
  const Image first = store.read_image(SplitKind::kEval, ev->indices[0]);
  EXPECT_EQ(ev->boxes[0].height, first.height);
  EXPECT_EQ(ev->boxes[0].width, first.width);
  EXPECT_TRUE(std::equal(first.pixels.begin(), first.pixels.end(), ev->crops.data));
}

namespace {
/// The number of chunks of a one-dimensional chunked dataset.
std::int64_t chunks_of(const std::string& path, const std::string& dataset) {
  H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  H5Id d(H5Dopen2(f.get(), dataset.c_str(), H5P_DEFAULT));
  H5Id dcpl(H5Dget_create_plist(d.get()));
  H5Id space(H5Dget_space(d.get()));
  hsize_t chunk = 0, n = 0;
  EXPECT_EQ(H5Pget_chunk(dcpl.get(), 1, &chunk), 1);
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  return chunk > 0 ? static_cast<std::int64_t>((n + chunk - 1) / chunk) : -1;
}
}  // namespace

// The loader's background check (LoaderOptions::verify_ahead) checks every chunk of the training
// pixels and of this rank's share of the evaluation pixels before any read needs it, so the
// epochs' reads check none themselves; their batches are bitwise those of a loader without it.
TEST_F(BadStore, LoaderChecksTheChunksAheadOfItsReads) {
  const std::string train_pixels = schema::dataset_path(schema::kTrainGroup, schema::kPixels);
  const std::string small = edited("fletcher.h5", [&](hid_t f) {
    rewrite_filtered(f, train_pixels, 4096, [](hid_t dcpl) { H5Pset_fletcher32(dcpl); });
  });
  const auto epochs = [](LoaderOptions o) {
    Loader loader(o);
    loader.finish_verifying();
    const ReadStats ahead = loader.store().read_stats();
    std::vector<Batch> out;
    for (const SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
      loader.start_epoch(kind, 1);
      while (auto b = loader.next()) out.push_back(std::move(*b));
    }
    return std::make_tuple(ahead, loader.store().read_stats(), std::move(out));
  };
  LoaderOptions o;
  o.path = small;
  o.batch_size = 3;
  o.eval_batch_size = 1;
  o.image_size = 32;
  o.output = LoaderOutput::kCrops;
  const auto [ahead, after, batches] = epochs(o);
  const std::int64_t train_chunks = chunks_of(small, train_pixels);
  const std::int64_t eval_chunks =
      chunks_of(small, schema::dataset_path(schema::kEvalGroup, schema::kPixels));
  EXPECT_GT(train_chunks, 10);
  EXPECT_GT(eval_chunks, 0);
  EXPECT_EQ(ahead.verified_ahead, train_chunks + eval_chunks);
  EXPECT_EQ(ahead.verified_chunks, ahead.verified_ahead);
  EXPECT_EQ(ahead.reads, 0);
  EXPECT_EQ(after.verified_chunks, ahead.verified_chunks) << "a read checked a chunk itself";
  EXPECT_EQ(after.damaged_chunks, 0);
  EXPECT_GT(after.direct_reads, 0);
  o.verify_ahead = false;
  const auto [none, plain_after, plain] = epochs(o);
  EXPECT_EQ(none.verified_chunks, 0);
  EXPECT_EQ(plain_after.verified_ahead, 0);
  EXPECT_EQ(plain_after.verified_chunks, train_chunks + eval_chunks);
  ASSERT_EQ(batches.size(), plain.size());
  for (std::size_t k = 0; k < plain.size(); ++k) {
    ASSERT_EQ(batches[k].crop_bytes, plain[k].crop_bytes);
    EXPECT_TRUE(std::equal(batches[k].crops.data, batches[k].crops.data + batches[k].crop_bytes,
                           plain[k].crops.data))
        << "batch " << k;
  }
}

// A chunk whose sum is wrong is left unchecked by the background check, and the read that needs it
// refuses it with HDF5's words, naming the image; every other chunk is checked ahead. (Evaluation
// images are read whole, so the read of image 0 meets the damaged first chunk.)
TEST_F(BadStore, DamagedChunkFoundAheadIsRefusedOnItsRead) {
  using namespace pets::data::testing;
  const std::string pixels = schema::dataset_path(schema::kEvalGroup, schema::kPixels);
  const std::string p = edited("damaged.h5", [&](hid_t f) {
    rewrite_filtered(f, pixels, 256, [](hid_t dcpl) { H5Pset_fletcher32(dcpl); });
  });
  flip_byte(p, chunk_byte(p, pixels));  // the first chunk: image 0's first bytes
  LoaderOptions o;
  o.path = p;
  o.batch_size = 4;
  o.eval_batch_size = 16;  // every evaluation image in one batch
  o.image_size = 32;
  o.output = LoaderOutput::kCrops;
  Loader loader(o);
  loader.finish_verifying();
  const std::int64_t eval_chunks = chunks_of(p, pixels);
  EXPECT_GT(eval_chunks, 2);
  const ReadStats ahead = loader.store().read_stats();
  EXPECT_EQ(
      ahead.verified_ahead,
      chunks_of(p, schema::dataset_path(schema::kTrainGroup, schema::kPixels)) + eval_chunks - 1);
  EXPECT_EQ(ahead.damaged_chunks, 0);
  loader.start_epoch(SplitKind::kEval, 0);
  const std::string msg = usage_error_of([&] { loader.next(); });
  const std::string name = loader.store().split(SplitKind::kEval).names[0];
  for (const std::string& part :
       {p, "image 0 (" + name + ") of /" + pixels,
        std::string("(data error detected by Fletcher32 checksum)"), std::string("rerun")})
    EXPECT_TRUE(contains(msg, part)) << part << ": " << msg;
  EXPECT_EQ(loader.store().read_stats().damaged_chunks, 1);
}
