// The HDF5 layer under the store (pets/data/h5.hpp), on real files in a scratch folder: attributes
// and rows written and read back, and errors that name the file and the object.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data_test_util.hpp"
#include "pets/data/h5.hpp"
#include "pets/util/error.hpp"

using namespace pets::data;
using pets::data::testing::ScratchDir;

namespace {

H5Id create_file(const std::string& path) {
  silence_hdf5_errors();
  H5Id f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  EXPECT_TRUE(f.valid()) << path;
  return f;
}

H5Id open_file(const std::string& path) {
  H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(f.valid()) << path;
  return f;
}

/// The message of the pets::Error that `call` throws, without the file:line and rank that
/// PETS_ERROR adds ("" and a failure when it throws none).
template <typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const pets::Error& e) {
    const std::string what = e.what();
    return what.substr(0, what.rfind(" ("));
  }
  ADD_FAILURE() << "no pets::Error thrown";
  return "";
}

H5Id chunked_rows(hsize_t rows) {
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  const hsize_t chunk = rows < 1 ? 1 : rows;
  EXPECT_GE(H5Pset_chunk(dcpl.get(), 1, &chunk), 0);
  EXPECT_GE(H5Pset_fletcher32(dcpl.get()), 0);
  return dcpl;
}

}  // namespace

TEST(H5, AttributesRoundTrip) {
  ScratchDir dir("h5_attributes");
  const std::string path = dir / "a.h5";
  {
    H5Id f = create_file(path);
    h5::write_string_attribute(f.get(), "names", {"abyssinian", "", "beagle"}, false);
    h5::write_string_attribute(f.get(), "tool", {"pets_preprocess 1.2"}, true);
    const std::uint64_t seed = 0xfedcba9876543210ull;
    const double fraction = 0.8125;
    const std::int32_t side = -7;
    h5::write_scalar_attribute(f.get(), "seed", H5T_STD_U64LE, h5::native_type<std::uint64_t>(),
                               &seed);
    h5::write_scalar_attribute(f.get(), "fraction", H5T_IEEE_F64LE, h5::native_type<double>(),
                               &fraction);
    h5::write_scalar_attribute(f.get(), "side", H5T_STD_I32LE, h5::native_type<std::int32_t>(),
                               &side);
    f.close();
  }
  H5Id f = open_file(path);
  EXPECT_EQ(h5::read_string_attribute(f.get(), "names"),
            (std::vector<std::string>{"abyssinian", "", "beagle"}));
  EXPECT_EQ(h5::read_string_attribute(f.get(), "tool"),
            std::vector<std::string>{"pets_preprocess 1.2"});
  EXPECT_EQ(h5::read_scalar_attribute<std::uint64_t>(f.get(), "seed"), 0xfedcba9876543210ull);
  EXPECT_EQ(h5::read_scalar_attribute<double>(f.get(), "fraction"), 0.8125);
  EXPECT_EQ(h5::read_scalar_attribute<std::int32_t>(f.get(), "side"), -7);
  // HDF5 converts on read: the same int32 as int64.
  EXPECT_EQ(h5::read_scalar_attribute<std::int64_t>(f.get(), "side"), -7);
  H5Id a = h5::open_attribute(f.get(), "names");
  EXPECT_EQ(h5::extent(a.get()), std::vector<hsize_t>{3});
  EXPECT_EQ(h5::extent_text(h5::extent(a.get())), "[3]");
}

TEST(H5, RowsWrittenAndReadBack) {
  ScratchDir dir("h5_rows");
  const std::string path = dir / "r.h5";
  const std::vector<std::int32_t> shapes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  {
    H5Id f = create_file(path);
    H5Id g(H5Gcreate2(f.get(), "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    const hsize_t chunk[2] = {2, 3};
    ASSERT_GE(H5Pset_chunk(dcpl.get(), 2, chunk), 0);
    h5::write_rows(g.get(), "shapes", H5T_STD_I32LE, h5::native_type<std::int32_t>(), dcpl.get(),
                   H5P_DEFAULT, {4, 3}, 0, 4, shapes.data());
    H5Id type = h5::fixed_string_type(6);
    const char names[3 * 6 + 1] = "a\0\0\0\0\0bbbbbbcc\0\0\0\0";
    H5Id name_dcpl = chunked_rows(3);
    h5::write_rows(g.get(), "names", type.get(), type.get(), name_dcpl.get(), H5P_DEFAULT, {3}, 0,
                   3, names);
    // An empty dataset: no rows, nothing written.
    H5Id empty_dcpl = chunked_rows(1);
    h5::write_rows(g.get(), "empty", H5T_STD_U64LE, h5::native_type<std::uint64_t>(),
                   empty_dcpl.get(), H5P_DEFAULT, {0}, 0, 0, nullptr);
    f.close();
  }
  H5Id f = open_file(path);
  H5Id d = h5::open_dataset(f.get(), "train/shapes");
  EXPECT_EQ(h5::extent(d.get()), (std::vector<hsize_t>{4, 3}));
  std::vector<std::int32_t> back(12);
  ASSERT_GE(H5Dread(d.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
  EXPECT_EQ(back, shapes);
  H5Id n = h5::open_dataset(f.get(), "train/names");
  std::vector<std::string> names;
  ASSERT_TRUE(h5::read_fixed_strings(n.get(), names));
  EXPECT_EQ(names, (std::vector<std::string>{"a", "bbbbbb", "cc"}));
  EXPECT_EQ(h5::extent(h5::open_dataset(f.get(), "train/empty").get()), std::vector<hsize_t>{0});
}

TEST(H5, MissingObjectsAreNamedWithTheirFile) {
  ScratchDir dir("h5_missing");
  const std::string path = dir / "m.h5";
  {
    H5Id f = create_file(path);
    H5Id g(H5Gcreate2(f.get(), "eval", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const std::int32_t v = 3;
    h5::write_scalar_attribute(f.get(), "count", H5T_STD_I32LE, h5::native_type<std::int32_t>(),
                               &v);
    f.close();
  }
  H5Id f = open_file(path);
  H5Id g(H5Gopen2(f.get(), "eval", H5P_DEFAULT));
  EXPECT_EQ(error_of([&] { h5::open_dataset(g.get(), "labels"); }),
            "HDF5 dataset " + path + ":/eval/labels does not exist");
  EXPECT_EQ(error_of([&] { h5::open_dataset(f.get(), "train/labels"); }),
            "HDF5 dataset " + path + ":/train/labels does not exist");
  EXPECT_EQ(error_of([&] { h5::open_dataset(f.get(), "eval/pixels/x"); }),
            "HDF5 dataset " + path + ":/eval/pixels/x does not exist");
  EXPECT_EQ(error_of([&] { h5::read_scalar_attribute<std::int32_t>(f.get(), "version"); }),
            "HDF5 attribute 'version' of " + path + ":/ does not exist");
  EXPECT_EQ(error_of([&] { h5::read_string_attribute(f.get(), "count"); }),
            "HDF5 attribute 'count' of " + path + ":/ is not of fixed-length strings");
  // Each error left HDF5's error stack empty for the next call.
  EXPECT_EQ(H5Eget_num(H5E_DEFAULT), 0);
}

TEST(H5, FailureNamesTheInnermostCause) {
  silence_hdf5_errors();
  ScratchDir dir("h5_failure");
  EXPECT_LT(H5Fopen((dir / "absent.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), 0);
  const h5::Failure failure = h5::last_failure();
  EXPECT_FALSE(failure.checksum);
  EXPECT_FALSE(failure.cause.empty());
  EXPECT_NE(failure.cause, "unknown HDF5 error");
  EXPECT_EQ(H5Eget_num(H5E_DEFAULT), 0);
  // With nothing on the stack.
  EXPECT_EQ(h5::last_failure().cause, "unknown HDF5 error");
}

TEST(H5, UnpackCutsEachStringAtItsFirstNul) {
  const char rows[] =
      "ab\0xyz"
      "cdefgh"
      "\0\0\0\0\0\0";
  EXPECT_EQ(h5::unpack_fixed_strings(rows, 3, 6, 6),
            (std::vector<std::string>{"ab", "cdefgh", ""}));
  // A member of a compound row: 2 bytes at offset 1 of 6-byte rows.
  EXPECT_EQ(h5::unpack_fixed_strings(rows + 1, 2, 2, 6), (std::vector<std::string>{"b", "de"}));
}

TEST(H5, IdClosesOnceAndMoves) {
  silence_hdf5_errors();
  H5Id a(H5Screate(H5S_SCALAR));
  ASSERT_TRUE(a.valid());
  const hid_t raw = a.get();
  H5Id b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  EXPECT_GT(H5Iis_valid(raw), 0);
  b.close();
  EXPECT_FALSE(b.valid());
  EXPECT_LE(H5Iis_valid(raw), 0);
  H5Eclear2(H5E_DEFAULT);
  b.close();  // empty: nothing to close, no error
  EXPECT_FALSE(H5Id(-1).valid());
}
