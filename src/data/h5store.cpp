#include "pets/data/h5store.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <type_traits>

#include "pets/data/checks.hpp"
#include "pets/util/error.hpp"

namespace pets::data {

namespace {
/// The HDF5 library of a parallel build is not thread-safe: one lock for every call.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.release();
  }
  return *this;
}

hid_t H5Id::release() {
  const hid_t id = id_;
  id_ = -1;
  return id;
}

namespace {
herr_t close_id(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      return H5Fclose(id);
    case H5I_GROUP:
      return H5Gclose(id);
    case H5I_DATASET:
      return H5Dclose(id);
    case H5I_DATASPACE:
      return H5Sclose(id);
    case H5I_DATATYPE:
      return H5Tclose(id);
    case H5I_GENPROP_LST:
      return H5Pclose(id);
    case H5I_ATTR:
      return H5Aclose(id);
    default:
      return H5Idec_ref(id) < 0 ? -1 : 0;
  }
}
}  // namespace

void H5Id::reset() {
  if (id_ >= 0) {
    if (close_id(id_) < 0) H5Eclear2(H5E_DEFAULT);
    id_ = -1;
  }
}

void H5Id::close() {
  if (id_ < 0) return;
  const hid_t id = release();
  if (close_id(id) < 0) PETS_ERROR("closing an HDF5 object failed: " + hdf5_error_stack());
}

const char* split_name(SplitKind kind) {
  return kind == SplitKind::kTrain ? store::kTrainGroup : store::kEvalGroup;
}

std::string new_store_id() {
  std::random_device bits;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", static_cast<unsigned>(bits()),
                static_cast<unsigned>(bits()), static_cast<unsigned>(bits()),
                static_cast<unsigned>(bits()));
  return text;
}

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError("invalid image store " + path + ": " + what);
}

/// How to get a good store again, for every refusal that is not the user's mistake.
constexpr const char* kRerun = "rerun pets_preprocess to write it again";

herr_t innermost_cause(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::pair<std::string, bool>*>(data);
  const std::string desc = err->desc ? err->desc : "";
  if (n == 0) out->first = desc;
  // HDF5 1.10's words for changed bytes: "incorrect metadata checksum after all read
  // attempts" (superblock, object headers, chunk indexes), "data error detected by Fletcher32
  // checksum" (a chunk's data).
  if (desc.find("checksum") != std::string::npos) {
    out->first = desc;
    out->second = true;
  }
  return 0;
}

/// The cause given for a checksum that does not match: `what` the checksum said.
std::string damaged(const std::string& what) {
  return "the file is damaged (" + what + "); " + kRerun;
}

/// The cause of the failed HDF5 call, from its error stack (then cleared): a checksum that
/// does not match says the file's bytes changed since pets_preprocess wrote them.
std::string h5_cause() {
  std::pair<std::string, bool> cause{"", false};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cause, &cause);
  if (!cause.second) return hdf5_root_cause();
  H5Eclear2(H5E_DEFAULT);
  return damaged(cause.first);
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

std::vector<hsize_t> dims_of(hid_t dataset_or_attr, bool attr) {
  H5Id space(attr ? H5Aget_space(dataset_or_attr) : H5Dget_space(dataset_or_attr));
  if (!space.valid()) return {};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string dims_text(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

/// Refuses a dataset or attribute whose data cannot be in the file, before anything is
/// allocated for it: a damaged 10 KB store may claim 2^40 images (chunked datasets with no
/// chunks written read as fill values). Unfiltered data must fit in the file; filtered data
/// may decode to 1032 times the file's size (deflate's largest ratio).
void check_fits(const std::string& path, hid_t obj, bool attr, const std::string& what) {
  H5Id type(attr ? H5Aget_type(obj) : H5Dget_type(obj));
  std::uint64_t bytes = type.valid() ? H5Tget_size(type.get()) : 0;
  bool overflow = false;
  for (const hsize_t d : dims_of(obj, attr))
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
  const std::vector<hsize_t> dims = dims_of(obj, attr);
  if (dims.size() > 1)
    bad(path, what + " has rank " + std::to_string(dims.size()) + ", expected 1");
  check_fits(path, obj, attr, what);
  const std::size_t n = dims.empty() ? 1 : dims[0];
  const std::size_t len = H5Tget_size(type.get());
  std::vector<char> buf(n * len + 1, 0);
  const herr_t rc = attr ? H5Aread(obj, type.get(), buf.data())
                         : H5Dread(obj, type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  if (rc < 0) bad(path, "cannot read " + what + ": " + h5_cause());
  std::vector<std::string> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const char* s = buf.data() + i * len;
    std::size_t l = 0;
    while (l < len && s[l] != '\0') ++l;
    out[i].assign(s, l);
  }
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
  const std::vector<hsize_t> dims = dims_of(a.get(), true);
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
  dims = dims_of(d.get(), false);
  if (static_cast<int>(dims.size()) != rank)
    bad(path, "dataset " + what + " has shape " + dims_text(dims) + ", expected rank " +
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
  const std::vector<hsize_t> dims = dims_of(d.get(), false);
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
  for (hsize_t i = 0; i < dims[0]; ++i) {
    std::string f[2];
    for (int m = 0; m < 2; ++m) {
      const char* s = buf.data() + i * row + off[m];
      std::size_t l = 0;
      while (l < len[m] && s[l] != '\0') ++l;
      f[m].assign(s, l);
    }
    rows.emplace_back(f[0], f[1]);
  }
  return rows;
}

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  std::lock_guard<std::mutex> lock(h5_mutex());
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
  file_ = H5Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid()) throw UsageError("cannot open image store " + path + ": " + h5_cause());
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
  if (H5Aexists(f, store::kStoreId.name) > 0) {
    H5Id a = open_attr(path, f, store::kStoreId.name);
    const std::vector<std::string> v =
        read_strings(path, a.get(), true, std::string("attribute ") + store::kStoreId.name);
    if (!v.empty()) store_id_ = v[0];
  }
  for (SplitKind kind : {SplitKind::kTrain, SplitKind::kEval}) {
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
    SplitIndex& s = kind == SplitKind::kTrain ? train_ : eval_;
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
      bad(path, "dataset " + where(store::kShapes) + " has shape " + dims_text(dsh) +
                    ", expected [n, " + std::to_string(store::kShapes.columns) + "]");
    const hsize_t n = dlab[0];
    if (doff[0] != n || dsh[0] != n || dnam[0] != n)
      bad(path, "/" + g + " datasets disagree on the image count: " + store::kLabels.name + " " +
                    dims_text(dlab) + ", " + store::kOffsets.name + " " + dims_text(doff) + ", " +
                    store::kShapes.name + " " + dims_text(dsh) + ", " + store::kNames.name + " " +
                    dims_text(dnam));
    require_checksum(path, pixels.get(), where(store::kPixels));
    require_checksum(path, offsets.get(), where(store::kOffsets));
    require_checksum(path, shapes.get(), where(store::kShapes));
    require_checksum(path, labels.get(), where(store::kLabels));
    require_checksum(path, names.get(), where(store::kNames));
    s.pixel_bytes = dp[0];
    s.offsets = read_all<std::uint64_t>(
        path, offsets.get(), store::memory_type(store::kOffsets.type), n, where(store::kOffsets));
    std::vector<std::int32_t> flat =
        read_all<std::int32_t>(path, shapes.get(), store::memory_type(store::kShapes.type),
                               n * store::kShapes.columns, where(store::kShapes));
    s.labels = read_all<std::int32_t>(path, labels.get(), store::memory_type(store::kLabels.type),
                                      n, where(store::kLabels));
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
      if (s.labels[i] < 0 || s.labels[i] >= static_cast<std::int32_t>(label_names_.size()))
        bad(path, at + " has label " + std::to_string(s.labels[i]) + ", outside [0, " +
                      std::to_string(label_names_.size()) + ")");
      s.shapes[i] = {h, w, c};
    }
    (kind == SplitKind::kTrain ? train_pixels_ : eval_pixels_) = std::move(pixels);
  }
  skipped_ = read_table(path, f, store::kSkippedTable);
  warnings_ = read_table(path, f, store::kWarningsTable);
}

Store::~Store() {
  std::lock_guard<std::mutex> lock(h5_mutex());
  train_pixels_.reset();
  eval_pixels_.reset();
  file_.reset();
}

namespace {
#if defined(__SSE2__)
/// The sums of `groups` * 8 big-endian 16-bit words from `data`, as HDF5's loop would add them
/// to zero sums: s1 = sum of w[i], s2 = sum of (m - i) * w[i] for m = 8 * groups, modulo 2^32
/// (as HDF5's own uint32 sums). Eight lanes each keep a sum of their words (a) and a sum of
/// those running sums (b); word 8k + l then counts 8 * (groups - k) - l times in s2.
void fletcher_groups(const std::uint8_t* data, std::size_t groups, std::uint32_t& s1,
                     std::uint32_t& s2) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a_lo = zero, a_hi = zero, b_lo = zero, b_hi = zero;
  for (std::size_t k = 0; k < groups; ++k) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * k));
    v = _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));  // big-endian words
    a_lo = _mm_add_epi32(a_lo, _mm_unpacklo_epi16(v, zero));
    a_hi = _mm_add_epi32(a_hi, _mm_unpackhi_epi16(v, zero));
    b_lo = _mm_add_epi32(b_lo, a_lo);
    b_hi = _mm_add_epi32(b_hi, a_hi);
  }
  alignas(16) std::uint32_t a[8], b[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(a), a_lo);
  _mm_store_si128(reinterpret_cast<__m128i*>(a + 4), a_hi);
  _mm_store_si128(reinterpret_cast<__m128i*>(b), b_lo);
  _mm_store_si128(reinterpret_cast<__m128i*>(b + 4), b_hi);
  std::uint32_t sa = 0, sb = 0, la = 0;
  for (std::uint32_t l = 0; l < 8; ++l) {
    sa += a[l];
    sb += b[l];
    la += l * a[l];
  }
  s1 = sa;
  s2 = 8 * sb - la;
}
#endif
}  // namespace

std::uint32_t fletcher32(const std::uint8_t* data, std::size_t bytes) {
  // Within a block of 360 words neither sum can pass 2^32 (sum1 < 2^16 + 360 * 2^16 after a fold),
  // and sums modulo 2^32 add up the same in any grouping: so the sums are HDF5's exactly,
  // including which of 0 and 0xffff a fold leaves.
  std::uint32_t sum1 = 0, sum2 = 0;
  const auto fold = [](std::uint32_t v) { return (v & 0xffffu) + (v >> 16); };
  for (std::size_t words = bytes / 2; words > 0;) {
    const std::size_t block = std::min<std::size_t>(words, 360);
    words -= block;
    std::size_t rest = block;
#if defined(__SSE2__)
    if (const std::size_t groups = block / 8; groups > 0) {
      std::uint32_t s1 = 0, s2 = 0;
      fletcher_groups(data, groups, s1, s2);
      sum2 += static_cast<std::uint32_t>(8 * groups) * sum1 + s2;
      sum1 += s1;
      data += 16 * groups;
      rest -= 8 * groups;
    }
#endif
    for (const std::uint8_t* end = data + 2 * rest; data != end; data += 2) {
      sum1 += (static_cast<std::uint32_t>(data[0]) << 8) | data[1];
      sum2 += sum1;
    }
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  if (bytes % 2 != 0) {
    sum1 += static_cast<std::uint32_t>(data[0]) << 8;
    sum2 += sum1;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  return (fold(sum2) << 16) | fold(sum1);
}

bool fletcher32_matches(const std::uint8_t* chunk, std::size_t data_bytes) {
  const std::uint8_t* s = chunk + data_bytes;
  const std::uint32_t stored =
      static_cast<std::uint32_t>(s[0]) | static_cast<std::uint32_t>(s[1]) << 8 |
      static_cast<std::uint32_t>(s[2]) << 16 | static_cast<std::uint32_t>(s[3]) << 24;
  const std::uint32_t sum = fletcher32(chunk, data_bytes);
  const std::uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
  return stored == sum || stored == swapped;
}

namespace {
/// What HDF5 1.10 says when a chunk's Fletcher32 sum is wrong (H5Zfletcher32.c), so that the
/// direct reads refuse a damaged chunk in the same words as the reads through HDF5.
constexpr const char* kFletcher32Error = "data error detected by Fletcher32 checksum";
}  // namespace

/// The file mapped read-only and the file address of every pixel chunk of one split (chunk k
/// holds dataset bytes [k * chunk, (k + 1) * chunk), followed in the file by its 4-byte
/// Fletcher32 sum); kNoChunk where HDF5 gave none inside the file or the chunk is not stored as
/// that filter alone writes it (the read then goes through HDF5, which reports any fault).
struct Store::DirectReads {
  static constexpr std::uint64_t kNoChunk = ~std::uint64_t{0};
  enum class Copied { kDone, kNotPlaced, kDamaged };
  const std::uint8_t* map = nullptr;
  std::size_t map_bytes = 0;
  std::uint64_t chunk = 0;
  std::vector<std::uint64_t> address;
  /// One bit per chunk: its sum was checked and is right. Two threads may check the same chunk
  /// at once: both find the same answer.
  std::unique_ptr<std::atomic<std::uint64_t>[]> verified;
  std::atomic<std::int64_t>* verified_count = nullptr;
  std::atomic<std::int64_t>* damaged_count = nullptr;

  DirectReads() = default;
  DirectReads(const DirectReads&) = delete;
  DirectReads& operator=(const DirectReads&) = delete;
  ~DirectReads() {
    if (map != nullptr) munmap(const_cast<std::uint8_t*>(map), map_bytes);
  }

  /// Whether chunk k's sum was checked and found right.
  bool is_checked(std::uint64_t k) const {
    return (verified[k / 64].load(std::memory_order_acquire) & (std::uint64_t{1} << (k % 64))) != 0;
  }

  /// Checks chunk k's sum now and remembers a right one; false when it is wrong. Threads that
  /// check the same chunk at once count it once: `first` (when given) says whether this one did.
  bool check(std::uint64_t k, bool* first = nullptr) const {
    if (!fletcher32_matches(map + address[k], static_cast<std::size_t>(chunk))) return false;
    const std::uint64_t bit = std::uint64_t{1} << (k % 64);
    const bool counted = (verified[k / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) == 0;
    if (counted) verified_count->fetch_add(1, std::memory_order_relaxed);
    if (first != nullptr) *first = counted;
    return true;
  }

  /// Whether chunk k's sum is right, checking it on its first use in this process.
  bool checked(std::uint64_t k) const {
    if (is_checked(k) || check(k)) return true;
    damaged_count->fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  /// Copies `count` blocks of `block` bytes, `stride` apart from dataset byte `start`; on
  /// kNotPlaced or kDamaged dst is partly written.
  Copied copy(std::uint64_t start, std::uint64_t stride, std::uint64_t count, std::uint64_t block,
              std::uint8_t* dst) const {
    // A box's rows mostly lie in the chunk of the row before: that chunk is looked up once.
    std::uint64_t good = kNoChunk;
    for (std::uint64_t r = 0; r < count; ++r) {
      std::uint64_t pos = start + r * stride;
      for (std::uint64_t left = block; left > 0;) {
        const std::uint64_t k = pos / chunk, within = pos - k * chunk;
        if (k != good) {
          if (k >= address.size() || address[k] == kNoChunk) return Copied::kNotPlaced;
          if (!checked(k)) return Copied::kDamaged;
          good = k;
        }
        const std::uint64_t n = std::min(left, chunk - within);
        std::memcpy(dst, map + address[k] + within, n);
        dst += n;
        pos += n;
        left -= n;
      }
    }
    return Copied::kDone;
  }
};

const Store::DirectReads* Store::direct_reads(SplitKind kind) const {
  const int which = kind == SplitKind::kTrain ? 0 : 1;
  std::call_once(direct_once_[which], [&] {
    std::lock_guard<std::mutex> lock(h5_mutex());
    // Any failure below leaves the split to HDF5's reads.
    direct_[which] = [&]() -> std::unique_ptr<DirectReads> {
      const hid_t d = (kind == SplitKind::kTrain ? train_pixels_ : eval_pixels_).get();
      H5Id dcpl(H5Dget_create_plist(d));
      H5Id type(H5Dget_type(d));
      hsize_t chunk = 0;
      unsigned flags = 0;
      std::size_t values = 0;
      // Only the Fletcher32 filter, whose stored chunk is the data and its sum: any other filter
      // (compression, shuffling) must go through HDF5's pipeline. One-byte elements: dataset
      // offsets are byte offsets.
      if (!dcpl.valid() || !type.valid() || H5Tget_size(type.get()) != 1 ||
          H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_chunk(dcpl.get(), 1, &chunk) != 1 ||
          chunk == 0 || H5Pget_nfilters(dcpl.get()) != 1 ||
          H5Pget_filter2(dcpl.get(), 0, &flags, &values, nullptr, 0, nullptr, nullptr) !=
              H5Z_FILTER_FLETCHER32)
        return nullptr;
      // HDF5's own descriptor (the sec2 driver's int): the very file it validated.
      H5Id fapl(H5Fget_access_plist(file_.get()));
      void* handle = nullptr;
      if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2 ||
          H5Fget_vfd_handle(file_.get(), fapl.get(), &handle) < 0 || handle == nullptr)
        return nullptr;
      const int fd = *static_cast<int*>(handle);
      struct stat st {};
      if (fstat(fd, &st) != 0 || st.st_size <= 0) return nullptr;
      const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
      auto direct = std::make_unique<DirectReads>();
      direct->chunk = chunk;
      direct->address.assign(
          static_cast<std::size_t>((split(kind).pixel_bytes + chunk - 1) / chunk),
          DirectReads::kNoChunk);
      direct->verified =
          std::make_unique<std::atomic<std::uint64_t>[]>((direct->address.size() + 63) / 64);
      for (std::size_t w = 0; w < (direct->address.size() + 63) / 64; ++w)
        direct->verified[w].store(0, std::memory_order_relaxed);
      direct->verified_count = &verified_chunks_;
      direct->damaged_count = &damaged_chunks_;
      // By coordinate: one index lookup per chunk (by number, HDF5 walks the index each time).
      // A chunk qualifies when the filter was applied (mask 0) and it is stored as the chunk's
      // bytes and the 4-byte sum, inside the file.
      for (std::size_t k = 0; k < direct->address.size(); ++k) {
        const hsize_t offset = static_cast<hsize_t>(k) * chunk;
        hsize_t size = 0;
        haddr_t address = HADDR_UNDEF;
        unsigned mask = ~0u;
        if (H5Dget_chunk_info_by_coord(d, &offset, &mask, &address, &size) >= 0 &&
            address != HADDR_UNDEF && mask == 0 && size == chunk + 4 && address <= file_bytes &&
            size <= file_bytes - address)
          direct->address[k] = address;
      }
      void* map = mmap(nullptr, static_cast<std::size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) return nullptr;
      direct->map = static_cast<const std::uint8_t*>(map);
      direct->map_bytes = static_cast<std::size_t>(file_bytes);
      return direct;
    }();
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
  if (const DirectReads* direct = direct_reads(kind); direct != nullptr) {
    const DirectReads::Copied copied = direct->copy(start, row, count, block, dst);
    if (copied == DirectReads::Copied::kDamaged) throw refused(damaged(kFletcher32Error));
    if (copied == DirectReads::Copied::kDone) {
      reads_.fetch_add(1, std::memory_order_relaxed);
      direct_reads_.fetch_add(1, std::memory_order_relaxed);
      read_bytes_.fetch_add(static_cast<std::int64_t>(total), std::memory_order_relaxed);
      return;
    }
  }
  const auto wait_start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(h5_mutex());
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
  const DirectReads* direct = direct_reads(kind);
  if (direct == nullptr) return 0;
  const SplitIndex& s = split(kind);
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::int64_t checked = 0;
  for (const std::int64_t i : images) {
    PETS_CHECK(i >= 0 && i < s.size(), "verify_ahead: image index out of range");
    const auto& shape = s.shapes[static_cast<std::size_t>(i)];
    const std::uint64_t begin = s.offsets[static_cast<std::size_t>(i)];
    const std::uint64_t bytes = static_cast<std::uint64_t>(shape[0]) * shape[1] * 3;
    if (bytes == 0) continue;
    for (std::uint64_t k = begin / direct->chunk; k <= (begin + bytes - 1) / direct->chunk; ++k) {
      if (stop.load(std::memory_order_relaxed)) return checked;
      if (k >= direct->address.size() || direct->address[k] == DirectReads::kNoChunk ||
          direct->is_checked(k))
        continue;
#if defined(MADV_POPULATE_READ)
      // One call maps the chunk's pages (reading them from disk when not cached) instead of a
      // page fault per 16 pages in the check; if it fails, the check faults them in as before.
      const std::uint64_t from = direct->address[k] / page * page;
      (void)madvise(const_cast<std::uint8_t*>(direct->map) + from,
                    static_cast<std::size_t>(direct->address[k] + direct->chunk + 4 - from),
                    MADV_POPULATE_READ);
#endif
      bool first = false;
      if (direct->check(k, &first) && first) {
        ++checked;
        verified_ahead_.fetch_add(1, std::memory_order_relaxed);
      }
    }
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
