// The mutator of fuzz_store, two kinds of mutation:
//
// Through the HDF5 library, as tests/data/make_bad_store.cpp damages a store, so that the
// input stays a well-formed HDF5 file whose *contents* break the store's schema: one or a few
// edits to a copy of the file in memory (HDF5's core driver): an object's or attribute's bytes
// mutated by libFuzzer (LLVMFuzzerMutate, so comparisons the schema checks make steer it), a
// dataset or attribute given other dimensions, rank or type, an object or attribute deleted, a
// dataset replaced by a group or a link. The result is copied into a fresh file (H5Ocopy) in
// the store's checksummed format, so inputs do not grow with the holes edits leave.
//
// On the file's raw bytes, as a disk or a copy damages a store: bits flipped, bytes
// overwritten, the file cut short, aimed at the superblock, at HDF5's structures (object
// headers, chunk indexes, heaps: found by their signatures) or anywhere (mostly chunk data).
// In the store's format every such byte is covered by a checksum, so HDF5 must refuse it
// before parsing it (HDF5 1.10 parses unchecksummed metadata without checks enough: a
// use-after-free in H5O__attr_exists within seconds of byte-level fuzzing of the old format).
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pets/data/h5.hpp"
#include "pets/data/store_schema.hpp"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace {

using pets::data::H5Id;
using Rng = std::minstd_rand;

// Values read and rewritten whole stay small; a larger dataset is resized or retyped only.
constexpr std::size_t kMaxEditBytes = 1 << 16;

std::uint64_t pick(Rng& rng, std::uint64_t n) {
  return n == 0 ? 0 : std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
}

struct Objects {
  std::vector<std::string> datasets, groups, links;  // paths from the root, without '/'
};

herr_t collect_link(hid_t root, const char* name, const H5L_info_t* info, void* data) {
  auto* objs = static_cast<Objects*>(data);
  objs->links.emplace_back(name);
  if (info->type != H5L_TYPE_HARD) return 0;
  H5Id obj(H5Oopen(root, name, H5P_DEFAULT));
  if (!obj.valid()) return 0;
  const H5I_type_t t = H5Iget_type(obj.get());
  if (t == H5I_DATASET) objs->datasets.emplace_back(name);
  if (t == H5I_GROUP) objs->groups.emplace_back(name);
  return 0;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

/// True when a value of `type` holds pointers (variable-length data, references): its bytes
/// must never be written back mutated.
bool has_pointers(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_STRING:
      return H5Tis_variable_str(type) != 0;
    case H5T_VLEN:
    case H5T_REFERENCE:
      return true;
    case H5T_COMPOUND:
      for (int i = 0; i < H5Tget_nmembers(type); ++i) {
        H5Id m(H5Tget_member_type(type, static_cast<unsigned>(i)));
        if (has_pointers(m.get())) return true;
      }
      return false;
    case H5T_ARRAY: {
      H5Id base(H5Tget_super(type));
      return has_pointers(base.get());
    }
    default:
      return false;
  }
}

/// A type for a retyped dataset or attribute: the integer and float types the schema does
/// and does not accept (either byte order), strings fixed and variable, a (name, reason) row.
H5Id random_type(Rng& rng) {
  static const hid_t* const kNumeric[] = {
      &H5T_STD_I8LE,   &H5T_STD_U8LE,   &H5T_STD_I16LE, &H5T_STD_U16LE, &H5T_STD_I32LE,
      &H5T_STD_U32LE,  &H5T_STD_I64LE,  &H5T_STD_U64LE, &H5T_STD_I32BE, &H5T_STD_U64BE,
      &H5T_IEEE_F32LE, &H5T_IEEE_F64LE, &H5T_IEEE_F64BE};
  const std::uint64_t n = std::size(kNumeric);
  const std::uint64_t k = pick(rng, n + 3);
  if (k < n) return H5Id(H5Tcopy(*kNumeric[k]));
  H5Id s(H5Tcopy(H5T_C_S1));
  if (k == n) {
    H5Tset_size(s.get(), 1 + pick(rng, 40));
    return s;
  }
  if (k == n + 1) {
    H5Tset_size(s.get(), H5T_VARIABLE);
    return s;
  }
  H5Tset_size(s.get(), 1 + pick(rng, 24));
  H5Id row(H5Tcreate(H5T_COMPOUND, 2 * H5Tget_size(s.get())));
  H5Tinsert(row.get(), pets::data::store::kRowName, 0, s.get());
  H5Tinsert(row.get(), pets::data::store::kRowReason, H5Tget_size(s.get()), s.get());
  return row;
}

/// An extent near `d`: 0, 1, one off, doubled or huge.
hsize_t random_extent(Rng& rng, hsize_t d) {
  switch (pick(rng, 6)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return d + 1;
    case 3:
      return d > 0 ? d - 1 : 0;
    case 4:
      return 2 * d + 1;
    default:
      return hsize_t{1} << (20 + pick(rng, 43));  // 2^20 .. 2^62
  }
}

/// New dimensions near `dims`: one extent changed, or the rank changed by one.
std::vector<hsize_t> random_dims(Rng& rng, std::vector<hsize_t> dims) {
  const std::uint64_t what = pick(rng, dims.empty() ? 2 : 8);
  if (what == 0 && dims.size() < 3) {
    dims.insert(dims.begin() + static_cast<long>(pick(rng, dims.size() + 1)), 1 + pick(rng, 4));
  } else if (what == 1 && !dims.empty()) {
    dims.erase(dims.begin() + static_cast<long>(pick(rng, dims.size())));
  } else if (!dims.empty()) {
    hsize_t& d = dims[pick(rng, dims.size())];
    d = random_extent(rng, d);
  }
  return dims;
}

std::size_t points(const std::vector<hsize_t>& dims) {
  std::size_t n = 1;
  for (const hsize_t d : dims) n = d != 0 && n > kMaxEditBytes / d ? kMaxEditBytes + 1 : n * d;
  return n;
}

std::vector<hsize_t> dims_of(hid_t space) {
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

H5Id make_space(const std::vector<hsize_t>& dims, bool unlimited) {
  if (dims.empty()) return H5Id(H5Screate(H5S_SCALAR));
  std::vector<hsize_t> max(dims.size(), H5S_UNLIMITED);
  return H5Id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(),
                               unlimited ? max.data() : nullptr));
}

/// The raw bytes of a dataset or attribute in its own type; empty when it is too large, or
/// holds pointers.
std::vector<std::uint8_t> read_raw(hid_t obj, bool attr, hid_t type, hid_t space) {
  const std::size_t n = points(dims_of(space)), size = H5Tget_size(type);
  if (has_pointers(type) || n > kMaxEditBytes || n * size > kMaxEditBytes) return {};
  std::vector<std::uint8_t> buf(n * size);
  if (buf.empty()) return buf;
  const herr_t rc = attr ? H5Aread(obj, type, buf.data())
                         : H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  if (rc < 0) buf.clear();
  return buf;
}

/// Writes `bytes` (cut or zero-padded to fit) into a new dataset or attribute of `type`.
/// Variable-length strings get "x" each: their bytes are pointers.
void write_raw(hid_t obj, bool attr, hid_t type, std::size_t n, std::vector<std::uint8_t> bytes) {
  if (n == 0 || n > kMaxEditBytes) return;
  std::vector<const char*> strings;
  const void* buf = nullptr;
  if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) {
    strings.assign(n, "x");
    buf = strings.data();
  } else if (has_pointers(type)) {
    return;
  } else {
    bytes.resize(n * H5Tget_size(type), 0);
    buf = bytes.data();
  }
  if (attr)
    H5Awrite(obj, type, buf);
  else
    H5Dwrite(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
}

/// Replaces the dataset at `path` by one of `type` and `dims` holding (a prefix of) `bytes`.
/// Chunked with room to grow and the Fletcher32 checksum, as pets_preprocess writes every
/// dataset (a scalar cannot be chunked), so a dataset claiming 2^40 elements costs no space in
/// the file.
void recreate_dataset(hid_t file, const std::string& path, hid_t type,
                      const std::vector<hsize_t>& dims, const std::vector<std::uint8_t>& bytes) {
  if (H5Ldelete(file, path.c_str(), H5P_DEFAULT) < 0) return;
  const std::size_t n = points(dims);
  const bool chunked = !dims.empty();
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (chunked) {
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) chunk[i] = std::clamp<hsize_t>(dims[i], 1, 64);
    pets::data::store::set_checksummed_chunks(dcpl.get(), static_cast<int>(chunk.size()),
                                              chunk.data());
  }
  H5Id space = make_space(dims, chunked);
  H5Id d(H5Dcreate2(file, path.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (d.valid()) write_raw(d.get(), false, type, n, bytes);
}

void recreate_attr(hid_t obj, const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
                   const std::vector<std::uint8_t>& bytes) {
  const std::size_t n = points(dims);
  if (n > 4096 || n * H5Tget_size(type) > 32768) return;  // an attribute lives in the header
  if (H5Adelete(obj, name.c_str()) < 0) return;
  H5Id space = make_space(dims, false);
  H5Id a(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (a.valid()) write_raw(a.get(), true, type, n, bytes);
}

/// Mutates `bytes` with libFuzzer's mutations; keeps the size when `fixed`, else whole
/// elements of `elem` bytes.
void mutate_bytes(std::vector<std::uint8_t>& bytes, std::size_t elem, bool fixed) {
  const std::size_t old = bytes.size();
  bytes.resize(fixed ? old : old * 2 + 16);
  std::size_t n = LLVMFuzzerMutate(bytes.data(), old, bytes.size());
  if (fixed) n = old;
  if (elem > 0) n -= n % elem;
  bytes.resize(n);
}

/// A value to edit, picked at random and opened: a dataset, or an attribute of a dataset, a
/// group or the root; with its type, dataspace and raw bytes.
struct Value {
  std::string owner, name;  ///< the object's path; the attribute's name (or the path again)
  bool attr = false;
  H5Id obj, a, type, space;
  std::vector<std::uint8_t> bytes;
  hid_t target() const { return attr ? a.get() : obj.get(); }
};

bool open_random_value(hid_t file, const std::vector<std::string>& owners, Rng& rng, Value& v) {
  v.owner = owners[pick(rng, owners.size())];
  v.obj = H5Id(H5Oopen(file, v.owner.c_str(), H5P_DEFAULT));
  if (!v.obj.valid()) return false;
  std::vector<std::string> attrs;
  H5Aiterate2(v.obj.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr, &attrs);
  const bool is_dataset = H5Iget_type(v.obj.get()) == H5I_DATASET;
  v.attr = !is_dataset || (!attrs.empty() && pick(rng, 4) == 0);
  if (v.attr && attrs.empty()) return false;
  v.name = v.attr ? attrs[pick(rng, attrs.size())] : v.owner;
  if (v.attr) v.a = H5Id(H5Aopen(v.obj.get(), v.name.c_str(), H5P_DEFAULT));
  v.type = H5Id(v.attr ? H5Aget_type(v.target()) : H5Dget_type(v.target()));
  v.space = H5Id(v.attr ? H5Aget_space(v.target()) : H5Dget_space(v.target()));
  v.bytes = read_raw(v.target(), v.attr, v.type.get(), v.space.get());
  return true;
}

/// Replaces the value by one of `type` and `dims` holding what fits of its bytes.
void recreate_value(hid_t file, Value& v, hid_t type, const std::vector<hsize_t>& dims) {
  if (v.attr) {
    v.a.reset();
    recreate_attr(v.obj.get(), v.name, type, dims, v.bytes);
  } else {
    v.obj.reset();
    recreate_dataset(file, v.owner, type, dims, v.bytes);
  }
}

/// One edit of the open file.
void edit(hid_t file, Rng& rng) {
  Objects objs;
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, collect_link, &objs);
  std::vector<std::string> owners = objs.datasets;
  owners.insert(owners.end(), objs.groups.begin(), objs.groups.end());
  owners.emplace_back(".");
  const std::uint64_t kind = pick(rng, 17);
  if (kind < 9) {
    // The values of a dataset or an attribute (the most useful edit: labels, offsets, shapes,
    // schema_version, label_names ...).
    Value v;
    if (!open_random_value(file, owners, rng, v) || v.bytes.empty()) return;
    const std::size_t elem = H5Tget_size(v.type.get());
    const std::vector<hsize_t> dims = dims_of(v.space.get());
    // A one-dimensional value may change its length too (elements appended or dropped).
    const bool resize = dims.size() == 1 && pick(rng, 3) == 0;
    mutate_bytes(v.bytes, elem, !resize);
    if (!resize) {
      write_raw(v.target(), v.attr, v.type.get(), v.bytes.size() / elem, v.bytes);
      return;
    }
    recreate_value(file, v, v.type.get(), {v.bytes.size() / elem});
  } else if (kind < 13) {
    // Another shape or type for a dataset or an attribute, keeping what bytes fit.
    Value v;
    if (!open_random_value(file, owners, rng, v)) return;
    std::vector<hsize_t> dims = dims_of(v.space.get());
    H5Id new_type(H5Tcopy(v.type.get()));
    if (pick(rng, 2) == 0)
      new_type = random_type(rng);
    else
      dims = random_dims(rng, dims);
    recreate_value(file, v, new_type.get(), dims);
  } else if (kind < 14) {
    // An object or attribute gone.
    if (pick(rng, 2) == 0 && !objs.links.empty()) {
      H5Ldelete(file, objs.links[pick(rng, objs.links.size())].c_str(), H5P_DEFAULT);
    } else {
      const std::string owner = owners[pick(rng, owners.size())];
      std::vector<std::string> attrs;
      H5Aiterate_by_name(file, owner.c_str(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr,
                         &attrs, H5P_DEFAULT);
      if (!attrs.empty())
        H5Adelete_by_name(file, owner.c_str(), attrs[pick(rng, attrs.size())].c_str(), H5P_DEFAULT);
    }
  } else if (kind < 15) {
    // One new length for every dataset of a group (a split's image count): the edit that gets
    // past the check that they agree.
    if (objs.groups.empty()) return;
    const std::string group = objs.groups[pick(rng, objs.groups.size())];
    const hsize_t n = random_extent(rng, 1 + pick(rng, 8));
    for (const std::string& path : objs.datasets) {
      if (path.rfind(group + "/", 0) != 0 || path.find('/', group.size() + 1) != std::string::npos)
        continue;
      H5Id d(H5Dopen2(file, path.c_str(), H5P_DEFAULT));
      H5Id type(H5Dget_type(d.get()));
      H5Id space(H5Dget_space(d.get()));
      std::vector<hsize_t> dims = dims_of(space.get());
      if (dims.empty()) continue;
      dims[0] = n;
      const std::vector<std::uint8_t> bytes = read_raw(d.get(), false, type.get(), space.get());
      d.reset();
      recreate_dataset(file, path, type.get(), dims, bytes);
    }
  } else {
    // A dataset replaced by something else of the same name: a group, a soft link (to another
    // object, or dangling), or a second hard link to another dataset.
    if (objs.datasets.empty()) return;
    const std::string path = objs.datasets[pick(rng, objs.datasets.size())];
    if (H5Ldelete(file, path.c_str(), H5P_DEFAULT) < 0) return;
    const std::uint64_t how = pick(rng, 3);
    const std::string other =
        objs.links.empty() ? "" : "/" + objs.links[pick(rng, objs.links.size())];
    if (how == 0 || other.empty()) {
      H5Id g(H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    } else if (how == 1) {
      H5Lcreate_soft(pick(rng, 2) == 0 ? other.c_str() : "/nowhere", file, path.c_str(),
                     H5P_DEFAULT, H5P_DEFAULT);
    } else {
      H5Lcreate_hard(file, other.c_str(), file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    }
  }
}

herr_t copy_link(hid_t root, const char* name, const H5L_info_t* info, void* data) {
  const hid_t out = *static_cast<hid_t*>(data);
  if (info->type == H5L_TYPE_HARD) {
    H5Ocopy(root, name, out, name, H5P_DEFAULT, H5P_DEFAULT);
  } else if (info->type == H5L_TYPE_SOFT) {
    std::vector<char> target(info->u.val_size + 1, 0);
    if (H5Lget_val(root, name, target.data(), target.size(), H5P_DEFAULT) >= 0)
      H5Lcreate_soft(target.data(), out, name, H5P_DEFAULT, H5P_DEFAULT);
  }
  return 0;
}

herr_t copy_attr(hid_t root, const char* name, const H5A_info_t*, void* data) {
  const hid_t out = *static_cast<hid_t*>(data);
  H5Id a(H5Aopen(root, name, H5P_DEFAULT));
  H5Id type(H5Aget_type(a.get()));
  H5Id space(H5Aget_space(a.get()));
  const std::size_t n = points(dims_of(space.get()));
  if (n > kMaxEditBytes) return 0;
  std::vector<std::uint8_t> buf(std::max<std::size_t>(n * H5Tget_size(type.get()), 1));
  if (H5Aread(a.get(), type.get(), buf.data()) < 0) return 0;
  H5Id b(H5Acreate2(out, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (b.valid()) H5Awrite(b.get(), type.get(), buf.data());
  if (has_pointers(type.get())) H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, buf.data());
  return 0;
}

herr_t read_attr(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  H5Id a(H5Aopen(obj, name, H5P_DEFAULT));
  H5Id type(a.valid() ? H5Aget_type(a.get()) : -1);
  H5Id space(a.valid() ? H5Aget_space(a.get()) : -1);
  if (!type.valid() || !space.valid()) return -1;
  const std::size_t n = points(dims_of(space.get()));
  if (n > kMaxEditBytes || has_pointers(type.get())) return 0;
  std::vector<std::uint8_t> buf(std::max<std::size_t>(n * H5Tget_size(type.get()), 1));
  if (H5Aread(a.get(), type.get(), buf.data()) < 0) *static_cast<bool*>(data) = false;
  return 0;
}

herr_t read_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  bool& ok = *static_cast<bool*>(data);
  H5Id obj(H5Oopen(root, name, H5P_DEFAULT));
  if (!obj.valid() ||
      H5Aiterate2(obj.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, read_attr, &ok) < 0) {
    ok = false;
    return -1;
  }
  if (info->type == H5O_TYPE_DATASET) {
    H5Id type(H5Dget_type(obj.get()));
    H5Id space(H5Dget_space(obj.get()));
    const std::size_t n = points(dims_of(space.get()));
    if (type.valid() && n <= kMaxEditBytes && !has_pointers(type.get())) {
      std::vector<std::uint8_t> buf(std::max<std::size_t>(n * H5Tget_size(type.get()), 1));
      if (H5Dread(obj.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) ok = false;
    }
  }
  return ok ? 0 : -1;
}

/// True when every object, attribute and (small) dataset of the file loads and reads: the
/// HDF5-level edits copy objects with H5Ocopy, which HDF5 1.10.8 crashes in when an object's
/// metadata fails its checksum (a NULL datatype closed on the error path), so inputs damaged
/// by the raw-byte mutations get only raw-byte mutations.
bool loads_cleanly(hid_t file) {
  bool ok = true;
  if (H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_NATIVE, read_object, &ok, H5O_INFO_BASIC) < 0)
    ok = false;
  H5Eclear2(H5E_DEFAULT);
  return ok;
}

/// A file in memory, in the store's format (pets/data/store_schema.hpp).
H5Id memory_fapl() {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_core(fapl.get(), 1 << 16, false);
  pets::data::store::set_store_format(fapl.get());
  return fapl;
}

/// Applies the edits to the file image `data`; returns the new image, or an empty one when the
/// input does not open (it did not come from this mutator) or the result exceeds `max_size`.
std::vector<std::uint8_t> mutate_file(const std::uint8_t* data, std::size_t size,
                                      std::size_t max_size, unsigned seed) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  // Only files in the checksummed format, as Store: HDF5 1.10 crashes on damaged metadata of
  // the older one (the regression inputs of schema version 1), here as anywhere.
  if (size < 9 || std::memcmp(data, "\x89HDF\r\n\x1a\n", 8) != 0 ||
      data[8] < pets::data::store::kMinSuperblockVersion)
    return {};
  Rng rng(seed);
  H5Id fapl = memory_fapl();
  if (H5Pset_file_image(fapl.get(), const_cast<std::uint8_t*>(data), size) < 0) return {};
  H5Id in(H5Fopen("pets_fuzz_store_in", H5F_ACC_RDWR, fapl.get()));
  if (!in.valid() || !loads_cleanly(in.get())) return {};
  const int edits = 1 + static_cast<int>(pick(rng, 3));
  for (int i = 0; i < edits; ++i) edit(in.get(), rng);

  H5Id out_fapl = memory_fapl();
  H5Id out(H5Fcreate("pets_fuzz_store_out", H5F_ACC_TRUNC, H5P_DEFAULT, out_fapl.get()));
  if (!out.valid()) return {};
  hid_t out_id = out.get();
  H5Literate(in.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, copy_link, &out_id);
  H5Aiterate2(in.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, copy_attr, &out_id);
  H5Fflush(out.get(), H5F_SCOPE_GLOBAL);
  const ssize_t bytes = H5Fget_file_image(out.get(), nullptr, 0);
  if (bytes <= 0 || static_cast<std::size_t>(bytes) > max_size) return {};
  std::vector<std::uint8_t> image(static_cast<std::size_t>(bytes));
  if (H5Fget_file_image(out.get(), image.data(), image.size()) != bytes) return {};
  H5Eclear2(H5E_DEFAULT);
  return image;
}

/// Where HDF5's structures begin in a file image: the superblock's signature and the
/// signatures of object headers and their continuation chunks, fixed and extensible array
/// chunk indexes, version-2 B-trees, fractal and local heaps, version-1 B-trees and symbol
/// table nodes, global heap collections.
std::vector<std::size_t> structure_offsets(const std::uint8_t* data, std::size_t size) {
  static const char* const kSignatures[] = {
      "\x89HDF", "OHDR", "OCHK", "FAHD", "FADB", "EAHD", "EAIB", "EASB", "EADB", "BTHD",
      "BTIN",    "BTLF", "FRHP", "FHDB", "FHIB", "HEAP", "TREE", "SNOD", "GCOL"};
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i + 4 <= size; ++i)
    for (const char* sig : kSignatures)
      if (std::memcmp(data + i, sig, 4) == 0) at.push_back(i);
  return at;
}

/// One raw-byte damage of the file image in `bytes`, at the superblock, near a structure's
/// signature, or anywhere: a bit flipped, up to 8 bytes overwritten with edge values or
/// libFuzzer's mutation of a short window, or the file cut there.
void damage_bytes(std::vector<std::uint8_t>& bytes, Rng& rng) {
  if (bytes.empty()) return;
  const std::vector<std::size_t> structures = structure_offsets(bytes.data(), bytes.size());
  std::size_t at = 0;
  switch (pick(rng, 4)) {
    case 0:  // the superblock (48 bytes in versions 2 and 3)
      at = pick(rng, 48);
      break;
    case 1:
    case 2:  // a structure's header and first entries
      at = structures.empty() ? pick(rng, bytes.size())
                              : structures[pick(rng, structures.size())] + pick(rng, 96);
      break;
    default:  // anywhere: mostly chunk data
      at = pick(rng, bytes.size());
  }
  at = std::min(at, bytes.size() - 1);
  switch (pick(rng, 6)) {
    case 0:
    case 1:
      bytes[at] ^= static_cast<std::uint8_t>(1u << pick(rng, 8));
      break;
    case 2: {  // an edge value, little-endian, of 1, 2, 4 or 8 bytes
      const std::uint64_t values[] = {0,     1,          0x7f,         0x80,
                                      0xff,  0xffff,     0x7fffffff,   0xffffffff,
                                      ~0ull, 1ull << 32, bytes.size(), bytes.size() + 1};
      const std::uint64_t v = values[pick(rng, std::size(values))];
      const std::size_t width = std::size_t{1} << pick(rng, 4);
      for (std::size_t i = 0; i < width && at + i < bytes.size(); ++i)
        bytes[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
      break;
    }
    case 3:
    case 4: {  // libFuzzer's mutation of up to 16 bytes, the size kept
      const std::size_t len = std::min<std::size_t>(1 + pick(rng, 16), bytes.size() - at);
      std::vector<std::uint8_t> window(bytes.begin() + static_cast<long>(at),
                                       bytes.begin() + static_cast<long>(at + len));
      mutate_bytes(window, 0, true);
      std::copy(window.begin(), window.end(), bytes.begin() + static_cast<long>(at));
      break;
    }
    default:  // the file cut short
      bytes.resize(std::max<std::size_t>(at, 1));
  }
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned seed) {
  Rng rng(seed);
  // Half of the mutations damage the raw bytes (one to three places), half edit the contents
  // through HDF5; an input that no longer opens in HDF5 (already damaged) gets raw damage.
  if (pick(rng, 2) == 0) {
    // A few tries: an edit can come out too large, or do nothing (deleting what is missing).
    for (unsigned attempt = 0; attempt < 4; ++attempt) {
      const std::vector<std::uint8_t> image = mutate_file(data, size, max_size, seed + attempt);
      if (!image.empty() && (image.size() != size || std::memcmp(image.data(), data, size) != 0)) {
        std::memcpy(data, image.data(), image.size());
        return image.size();
      }
    }
  }
  std::vector<std::uint8_t> bytes(data, data + size);
  const int places = 1 + static_cast<int>(pick(rng, 3));
  for (int i = 0; i < places; ++i) damage_bytes(bytes, rng);
  const std::size_t n = std::min(bytes.size(), max_size);
  std::memcpy(data, bytes.data(), n);
  return n;
}
