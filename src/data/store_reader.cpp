#include "pets/data/store_reader.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "pets/data/mapped_chunks.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

const char* split_name(SplitKind kind) {
  return kind == SplitKind::kTrain ? store::kTrainGroup : store::kEvalGroup;
}

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError("invalid image store " + path + ": " + what);
}

/// How to get a good store again, for every refusal that is not the user's mistake.
constexpr const char* kRerun = "rerun pets_preprocess to write it again";

/// The cause given for a checksum that does not match: `what` the checksum said.
std::string damaged(const std::string& what) {
  return "the file is damaged (" + what + "); " + kRerun;
}

/// The cause of the failed HDF5 call, from its error stack (then cleared): a checksum that
/// does not match says the file's bytes changed since pets_preprocess wrote them.
std::string h5_cause() {
  const h5::Failure failure = h5::last_failure();
  return failure.checksum ? damaged(failure.cause) : failure.cause;
}

/// The version byte of the HDF5 superblock of `path` (HDF5 looks for its signature at 0, 512,
/// 1024, 2048 ...), read before HDF5 parses anything; -1 when there is none.
int superblock_version(const std::string& path) {
  static constexpr char kSignature[] = "\x89HDF\r\n\x1a\n";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return -1;
  int version = -1;
  for (long at = 0; version < 0; at = at == 0 ? 512 : at * 2) {
    unsigned char head[9];
    if (std::fseek(f, at, SEEK_SET) != 0 || std::fread(head, 1, 9, f) != 9) break;
    if (std::memcmp(head, kSignature, 8) == 0) version = head[8];
  }
  std::fclose(f);
  return version;
}

/// Refuses a dataset without the Fletcher32 checksum of its chunks: its data could change
/// unnoticed. pets_preprocess writes every dataset with it (store::set_checksummed_chunks).
void require_checksum(const std::string& path, hid_t dataset, const std::string& what) {
  H5Id dcpl(H5Dget_create_plist(dataset));
  unsigned flags = 0;
  std::size_t values = 0;
  if (!dcpl.valid() || H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, &flags, &values,
                                            nullptr, 0, nullptr, nullptr) < 0) {
    H5Eclear2(H5E_DEFAULT);
    bad(path, what + " has no Fletcher32 checksum, so damage to it would go unnoticed; " + kRerun);
  }
}

/// Refuses a dataset or attribute whose data cannot be in the file, before anything is
/// allocated for it: a damaged 10 KB store may claim 2^40 images (chunked datasets with no
/// chunks written read as fill values). Unfiltered data must fit in the file; filtered data
/// may decode to 1032 times the file's size (deflate's largest ratio).
void check_fits(const std::string& path, hid_t obj, bool attr, const std::string& what) {
  H5Id type(attr ? H5Aget_type(obj) : H5Dget_type(obj));
  std::uint64_t bytes = type.valid() ? H5Tget_size(type.get()) : 0;
  bool overflow = false;
  for (const hsize_t d : h5::extent(obj))
    overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
  H5Id file(H5Iget_file_id(obj));
  hsize_t file_bytes = 0;
  if (!file.valid() || H5Fget_filesize(file.get(), &file_bytes) < 0)
    bad(path, "cannot get the file's size: " + hdf5_root_cause());
  std::uint64_t limit = file_bytes;
  if (!attr) {
    H5Id dcpl(H5Dget_create_plist(obj));
    const int filters = H5Pget_nfilters(dcpl.get());
    for (int i = 0; i < filters; ++i) {
      unsigned flags = 0;
      std::size_t values = 0;
      if (H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &values, nullptr, 0, nullptr,
                         nullptr) != H5Z_FILTER_FLETCHER32)
        limit = file_bytes * 1032;  // a checksum adds bytes; only compression may shrink them
    }
  }
  if (overflow || bytes > limit)
    bad(path, what + " claims " + (overflow ? std::string("over 2^64") : std::to_string(bytes)) +
                  " bytes of data, more than the " + std::to_string(file_bytes) +
                  "-byte file can hold (damaged)");
}

/// Reads a fixed-length string dataset or attribute into strings.
std::vector<std::string> read_strings(const std::string& path, hid_t obj, bool attr,
                                      const std::string& what) {
  H5Id type(attr ? H5Aget_type(obj) : H5Dget_type(obj));
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING ||
      H5Tis_variable_str(type.get()) != 0)
    bad(path, what + " is not a fixed-length string array");
  const std::vector<hsize_t> dims = h5::extent(obj);
  if (dims.size() > 1)
    bad(path, what + " has rank " + std::to_string(dims.size()) + ", expected 1");
  check_fits(path, obj, attr, what);
  std::vector<std::string> out;
  if (!h5::read_fixed_strings(obj, out)) bad(path, "cannot read " + what + ": " + h5_cause());
  return out;
}

H5Id open_attr(const std::string& path, hid_t file, const char* name) {
  const htri_t exists = H5Aexists(file, name);
  if (exists < 0) bad(path, std::string("cannot look up attribute '") + name + "': " + h5_cause());
  if (exists == 0) bad(path, std::string("root attribute '") + name + "' is missing");
  H5Id a(H5Aopen(file, name, H5P_DEFAULT));
  if (!a.valid()) bad(path, std::string("cannot open attribute '") + name + "': " + h5_cause());
  return a;
}

/// Reads a scalar numeric root attribute of the schema.
template <typename T>
T read_scalar_attr(const std::string& path, hid_t file, const store::Field& field) {
  static_assert(std::is_arithmetic_v<T>);
  const char* name = field.name;
  H5Id a = open_attr(path, file, name);
  H5Id type(H5Aget_type(a.get()));
  if (H5Tget_class(type.get()) != field.type.type_class)
    bad(path, std::string("attribute '") + name + "' has the wrong type class");
  const std::vector<hsize_t> dims = h5::extent(a.get());
  if (!(dims.empty() || (dims.size() == 1 && dims[0] == 1)))
    bad(path, std::string("attribute '") + name + "' is not a scalar");
  T value{};
  if (H5Aread(a.get(), store::memory_type(field.type), &value) < 0)
    bad(path, std::string("cannot read attribute '") + name + "': " + h5_cause());
  return value;
}

/// Opens a split's dataset and checks its type class, element size (0: any), signedness
/// (integers) and rank against the schema. The sign matters: HDF5 converts on read, so int8
/// pixels read as uint8 would silently clip every negative value to 0.
H5Id open_dataset(const std::string& path, hid_t group, const std::string& gname,
                  const store::Field& field, std::vector<hsize_t>& dims) {
  const char* name = field.name;
  const H5T_class_t cls = field.type.type_class;
  const std::size_t size = field.type.size;
  const H5T_sign_t sign = field.type.sign;
  const int rank = field.rank;
  const std::string what = "/" + gname + "/" + name;
  const htri_t exists = H5Lexists(group, name, H5P_DEFAULT);
  if (exists < 0) bad(path, "cannot look up dataset " + what + ": " + h5_cause());
  if (exists == 0) bad(path, "dataset " + what + " is missing");
  H5Id d(H5Dopen2(group, name, H5P_DEFAULT));
  if (!d.valid()) bad(path, "cannot open dataset " + what + ": " + h5_cause());
  H5Id type(H5Dget_type(d.get()));
  if (H5Tget_class(type.get()) != cls || (size != 0 && H5Tget_size(type.get()) != size) ||
      (cls == H5T_INTEGER && H5Tget_sign(type.get()) != sign))
    bad(path,
        "dataset " + what + " has the wrong type (expected " +
            (cls == H5T_INTEGER ? std::string(sign == H5T_SGN_NONE ? "unsigned " : "signed ") +
                                      std::to_string(size * 8) + "-bit integer"
                                : std::string("string")) +
            ")");
  dims = h5::extent(d.get());
  if (static_cast<int>(dims.size()) != rank)
    bad(path, "dataset " + what + " has shape " + h5::extent_text(dims) + ", expected rank " +
                  std::to_string(rank));
  check_fits(path, d.get(), false, "dataset " + what);
  return d;
}

template <typename T>
std::vector<T> read_all(const std::string& path, hid_t d, hid_t mem_type, std::size_t count,
                        const std::string& what) {
  std::vector<T> v(count);
  if (count > 0 && H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    bad(path, "cannot read " + what + ": " + h5_cause());
  return v;
}

std::vector<NameReason> read_table(const std::string& path, hid_t file, const char* name) {
  std::vector<NameReason> rows;
  const htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  if (exists < 0) bad(path, std::string("cannot look up table /") + name + ": " + h5_cause());
  if (exists == 0) bad(path, std::string("table /") + name + " is missing");
  H5Id d(H5Dopen2(file, name, H5P_DEFAULT));
  if (!d.valid()) bad(path, std::string("cannot open table /") + name + ": " + h5_cause());
  H5Id type(H5Dget_type(d.get()));
  if (!d.valid() || H5Tget_class(type.get()) != H5T_COMPOUND || H5Tget_nmembers(type.get()) != 2)
    bad(path, std::string("table /") + name + " is not a (name, reason) compound dataset");
  const std::vector<hsize_t> dims = h5::extent(d.get());
  if (dims.size() != 1) bad(path, std::string("table /") + name + " is not one-dimensional");
  check_fits(path, d.get(), false, std::string("table /") + name);
  require_checksum(path, d.get(), std::string("table /") + name);
  const std::size_t row = H5Tget_size(type.get());
  std::vector<char> buf(dims[0] * row + 1, 0);
  if (dims[0] > 0 && H5Dread(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    bad(path, std::string("cannot read /") + name + ": " + h5_cause());
  std::size_t off[2], len[2];
  for (unsigned m = 0; m < 2; ++m) {
    off[m] = H5Tget_member_offset(type.get(), m);
    H5Id mt(H5Tget_member_type(type.get(), m));
    if (H5Tget_class(mt.get()) != H5T_STRING || H5Tis_variable_str(mt.get()) != 0)
      bad(path, std::string("table /") + name + " members are not fixed-length strings");
    len[m] = H5Tget_size(mt.get());
  }
  const auto n = static_cast<std::size_t>(dims[0]);
  const std::vector<std::string> names =
      h5::unpack_fixed_strings(buf.data() + off[0], n, len[0], row);
  const std::vector<std::string> reasons =
      h5::unpack_fixed_strings(buf.data() + off[1], n, len[1], row);
  for (std::size_t i = 0; i < n; ++i) rows.emplace_back(names[i], reasons[i]);
  return rows;
}

/// Opens the store file read-only, refusing a file that is not HDF5 or is written in HDF5's
/// format without checksums.
H5Id open_store_file(const std::string& path) {
  silence_hdf5_errors();
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 == 0) {
    H5Eclear2(H5E_DEFAULT);
    throw UsageError("cannot open image store " + path + ": not an HDF5 file (no HDF5 signature)");
  }
  if (is_hdf5 < 0) throw UsageError("cannot open image store " + path + ": " + hdf5_root_cause());
  // Before HDF5 parses any metadata: HDF5 1.10 trusts unchecksummed metadata (superblock
  // versions 0 and 1, version-1 object headers), and damaged bytes there can crash it.
  const int superblock = superblock_version(path);
  if (superblock < store::kMinSuperblockVersion)
    bad(path, "written in HDF5's format without checksums (superblock version " +
                  std::to_string(superblock) + "), as pets_preprocess wrote " +
                  store::kSchemaVersion.name + " 1 and earlier; " + kRerun);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw UsageError("cannot open image store " + path + ": " + h5_cause());
  return file;
}

/// Reads and checks the index of one split group; `pixels_out` receives its pixels dataset.
SplitIndex read_split(const std::string& path, hid_t f, SplitKind kind, std::size_t label_count,
                      H5Id& pixels_out) {
  const std::string g = split_name(kind);
  const htri_t exists = H5Lexists(f, g.c_str(), H5P_DEFAULT);
  if (exists < 0) bad(path, "cannot look up group /" + g + ": " + h5_cause());
  if (exists == 0) bad(path, "group /" + g + " is missing");
  H5Id group(H5Gopen2(f, g.c_str(), H5P_DEFAULT));
  if (!group.valid()) {
    const std::string cause = h5_cause();
    bad(path,
        "/" + g + (cause.find(kRerun) != std::string::npos ? ": " + cause : " is not a group"));
  }
  SplitIndex s;
  const auto where = [&](const store::Field& field) {
    return "/" + store::dataset_path(g.c_str(), field);
  };
  std::vector<hsize_t> dp, doff, dsh, dlab, dnam;
  H5Id pixels = open_dataset(path, group.get(), g, store::kPixels, dp);
  H5Id offsets = open_dataset(path, group.get(), g, store::kOffsets, doff);
  H5Id shapes = open_dataset(path, group.get(), g, store::kShapes, dsh);
  H5Id labels = open_dataset(path, group.get(), g, store::kLabels, dlab);
  H5Id names = open_dataset(path, group.get(), g, store::kNames, dnam);
  if (dsh[1] != store::kShapes.columns)
    bad(path, "dataset " + where(store::kShapes) + " has shape " + h5::extent_text(dsh) +
                  ", expected [n, " + std::to_string(store::kShapes.columns) + "]");
  const hsize_t n = dlab[0];
  if (doff[0] != n || dsh[0] != n || dnam[0] != n)
    bad(path, "/" + g + " datasets disagree on the image count: " + store::kLabels.name + " " +
                  h5::extent_text(dlab) + ", " + store::kOffsets.name + " " +
                  h5::extent_text(doff) + ", " + store::kShapes.name + " " + h5::extent_text(dsh) +
                  ", " + store::kNames.name + " " + h5::extent_text(dnam));
  require_checksum(path, pixels.get(), where(store::kPixels));
  require_checksum(path, offsets.get(), where(store::kOffsets));
  require_checksum(path, shapes.get(), where(store::kShapes));
  require_checksum(path, labels.get(), where(store::kLabels));
  require_checksum(path, names.get(), where(store::kNames));
  s.pixel_bytes = dp[0];
  s.offsets = read_all<std::uint64_t>(path, offsets.get(), store::memory_type(store::kOffsets.type),
                                      n, where(store::kOffsets));
  std::vector<std::int32_t> flat =
      read_all<std::int32_t>(path, shapes.get(), store::memory_type(store::kShapes.type),
                             n * store::kShapes.columns, where(store::kShapes));
  s.labels = read_all<std::int32_t>(path, labels.get(), store::memory_type(store::kLabels.type), n,
                                    where(store::kLabels));
  s.names = read_strings(path, names.get(), false, where(store::kNames));
  s.shapes.resize(n);
  for (hsize_t i = 0; i < n; ++i) {
    const std::int32_t h = flat[i * 3], w = flat[i * 3 + 1], c = flat[i * 3 + 2];
    const std::string at = "/" + g + " image " + std::to_string(i);
    if (h <= 0 || w <= 0 || c != 3)
      bad(path, at + " has shape (" + std::to_string(h) + ", " + std::to_string(w) + ", " +
                    std::to_string(c) + "), expected (h > 0, w > 0, 3)");
    const std::uint64_t bytes = static_cast<std::uint64_t>(h) * w * 3;
    if (s.offsets[i] > s.pixel_bytes || bytes > s.pixel_bytes - s.offsets[i])
      bad(path, at + " lies outside " + where(store::kPixels) + " (offset " +
                    std::to_string(s.offsets[i]) + ", " + std::to_string(bytes) +
                    " bytes, dataset holds " + std::to_string(s.pixel_bytes) + ")");
    if (s.labels[i] < 0 || s.labels[i] >= static_cast<std::int32_t>(label_count))
      bad(path, at + " has label " + std::to_string(s.labels[i]) + ", outside [0, " +
                    std::to_string(label_count) + ")");
    s.shapes[i] = {h, w, c};
  }
  pixels_out = std::move(pixels);
  return s;
}

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  std::lock_guard<std::mutex> lock(h5::library_mutex());
  file_ = open_store_file(path);
  const hid_t f = file_.get();
  const auto version = read_scalar_attr<std::int32_t>(path, f, store::kSchemaVersion);
  if (version != store::kVersion)
    bad(path, std::string(store::kSchemaVersion.name) + " is " + std::to_string(version) +
                  ", this program reads " + std::to_string(store::kVersion) +
                  (version < store::kVersion ? std::string("; ") + kRerun : std::string()));
  {
    H5Id a = open_attr(path, f, store::kLabelNames.name);
    label_names_ =
        read_strings(path, a.get(), true, std::string("attribute ") + store::kLabelNames.name);
  }
  if (label_names_.empty()) bad(path, std::string(store::kLabelNames.name) + " is empty");
  seed_ = read_scalar_attr<std::uint64_t>(path, f, store::kSeed);
  train_fraction_ = read_scalar_attr<double>(path, f, store::kTrainFraction);
  max_side_ = read_scalar_attr<std::int32_t>(path, f, store::kMaxSide);
  if (max_side_ < 0) bad(path, std::string(store::kMaxSide.name) + " is negative");
  {
    const std::string what = std::string("attribute ") + store::kToolVersion.name;
    H5Id a = open_attr(path, f, store::kToolVersion.name);
    const std::vector<std::string> v = read_strings(path, a.get(), true, what);
    if (v.empty()) bad(path, what + " is empty");
    tool_version_ = v[0];
  }
  // Attributes later stores have and earlier ones lack: "" when absent.
  const auto optional_string = [&](const store::Field& field) {
    if (H5Aexists(f, field.name) <= 0) return std::string();
    H5Id a = open_attr(path, f, field.name);
    const std::vector<std::string> v =
        read_strings(path, a.get(), true, std::string("attribute ") + field.name);
    return v.empty() ? std::string() : v[0];
  };
  store_id_ = optional_string(store::kStoreId);
  layout_ = optional_string(store::kLayout);
  split_made_ = optional_string(store::kSplit);
  train_ = read_split(path, f, SplitKind::kTrain, label_names_.size(), train_pixels_);
  eval_ = read_split(path, f, SplitKind::kEval, label_names_.size(), eval_pixels_);
  skipped_ = read_table(path, f, store::kSkippedTable);
  warnings_ = read_table(path, f, store::kWarningsTable);
}

Store::~Store() {
  std::lock_guard<std::mutex> lock(h5::library_mutex());
  train_pixels_.reset();
  eval_pixels_.reset();
  file_.reset();
}

const MappedChunks* Store::direct_reads(SplitKind kind) const {
  const int which = kind == SplitKind::kTrain ? 0 : 1;
  std::call_once(direct_once_[which], [&] {
    std::lock_guard<std::mutex> lock(h5::library_mutex());
    // Any failure leaves the split to HDF5's reads.
    direct_[which] = MappedChunks::open(
        file_.get(), (kind == SplitKind::kTrain ? train_pixels_ : eval_pixels_).get(),
        split(kind).pixel_bytes, verified_chunks_, damaged_chunks_);
    H5Eclear2(H5E_DEFAULT);
  });
  return direct_[which].get();
}

namespace {
/// The calling thread's CPU time: what a read costs, whatever else runs on the machine.
std::int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}
}  // namespace

Image Store::read_image(SplitKind kind, std::int64_t i) const {
  const SplitIndex& s = split(kind);
  PETS_CHECK(i >= 0 && i < s.size(), "image index out of range");
  const auto& shape = s.shapes[static_cast<std::size_t>(i)];
  Image img;
  img.height = shape[0];
  img.width = shape[1];
  img.pixels.resize(static_cast<std::size_t>(shape[0]) * shape[1] * 3);
  read_crop(kind, i, CropBox{0, 0, shape[0], shape[1]}, img.pixels.data());
  return img;
}

void Store::read_crop(SplitKind kind, std::int64_t i, const CropBox& box, std::uint8_t* dst) const {
  const SplitIndex& s = split(kind);
  PETS_CHECK(i >= 0 && i < s.size(), "image index out of range");
  const auto& shape = s.shapes[static_cast<std::size_t>(i)];
  PETS_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                 box.top + box.height <= shape[0] && box.left + box.width <= shape[1],
             "read_crop: crop box outside image " + std::to_string(i) + " (" +
                 std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + ")");
  // The box's rows as one strided selection of the flat HWC bytes: `height` blocks of
  // width * 3 bytes, one stored row apart.
  const hsize_t row = static_cast<hsize_t>(shape[1]) * 3;
  const hsize_t start = s.offsets[static_cast<std::size_t>(i)] +
                        static_cast<hsize_t>(box.top) * row + static_cast<hsize_t>(box.left) * 3;
  const hsize_t count = static_cast<hsize_t>(box.height);
  const hsize_t block = static_cast<hsize_t>(box.width) * 3;
  const hsize_t total = count * block;
  const auto refused = [&](const std::string& cause) {
    return UsageError("cannot read image " + std::to_string(i) + " (" +
                      s.names[static_cast<std::size_t>(i)] + ") of /" +
                      store::dataset_path(split_name(kind), store::kPixels) + " in " + path_ +
                      ": " + cause);
  };
  if (const MappedChunks* direct = direct_reads(kind); direct != nullptr) {
    const MappedChunks::Copied copied = direct->copy(start, row, count, block, dst);
    if (copied == MappedChunks::Copied::kDamaged) throw refused(damaged(kFletcher32Error));
    if (copied == MappedChunks::Copied::kDone) {
      reads_.fetch_add(1, std::memory_order_relaxed);
      direct_reads_.fetch_add(1, std::memory_order_relaxed);
      read_bytes_.fetch_add(static_cast<std::int64_t>(total), std::memory_order_relaxed);
      return;
    }
  }
  const auto wait_start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(h5::library_mutex());
  const auto held_start = std::chrono::steady_clock::now();
  const std::int64_t cpu_start = thread_cpu_ns();
  const hid_t d = (kind == SplitKind::kTrain ? train_pixels_ : eval_pixels_).get();
  H5Id file_space(PETS_H5_CHECK(H5Dget_space(d)));
  PETS_H5_CHECK(
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, &row, &count, &block));
  H5Id mem_space(PETS_H5_CHECK(H5Screate_simple(1, &total, nullptr)));
  if (H5Dread(d, store::memory_type(store::kPixels.type), mem_space.get(), file_space.get(),
              H5P_DEFAULT, dst) < 0)
    throw refused(h5_cause());
  const auto end = std::chrono::steady_clock::now();
  const auto ns = [](auto a, auto b) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
  };
  reads_.fetch_add(1, std::memory_order_relaxed);
  read_bytes_.fetch_add(static_cast<std::int64_t>(total), std::memory_order_relaxed);
  lock_wait_ns_.fetch_add(ns(wait_start, held_start), std::memory_order_relaxed);
  lock_held_ns_.fetch_add(ns(held_start, end), std::memory_order_relaxed);
  lock_cpu_ns_.fetch_add(thread_cpu_ns() - cpu_start, std::memory_order_relaxed);
}

std::int64_t Store::verify_ahead(SplitKind kind, const std::vector<std::int64_t>& images,
                                 const std::atomic<bool>& stop) const {
  const MappedChunks* direct = direct_reads(kind);
  if (direct == nullptr) return 0;
  const SplitIndex& s = split(kind);
  std::int64_t checked = 0;
  for (const std::int64_t i : images) {
    PETS_CHECK(i >= 0 && i < s.size(), "verify_ahead: image index out of range");
    const auto& shape = s.shapes[static_cast<std::size_t>(i)];
    const std::uint64_t bytes = static_cast<std::uint64_t>(shape[0]) * shape[1] * 3;
    const std::int64_t first = direct->verify(s.offsets[static_cast<std::size_t>(i)], bytes, stop);
    checked += first;
    verified_ahead_.fetch_add(first, std::memory_order_relaxed);
  }
  return checked;
}

ReadStats Store::read_stats() const {
  ReadStats r;
  r.reads = reads_.load(std::memory_order_relaxed);
  r.direct_reads = direct_reads_.load(std::memory_order_relaxed);
  r.verified_chunks = verified_chunks_.load(std::memory_order_relaxed);
  r.verified_ahead = verified_ahead_.load(std::memory_order_relaxed);
  r.damaged_chunks = damaged_chunks_.load(std::memory_order_relaxed);
  r.bytes = read_bytes_.load(std::memory_order_relaxed);
  r.lock_held_seconds = static_cast<double>(lock_held_ns_.load(std::memory_order_relaxed)) * 1e-9;
  r.lock_wait_seconds = static_cast<double>(lock_wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  r.lock_cpu_seconds = static_cast<double>(lock_cpu_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return r;
}

}  // namespace pets::data
