#include "pets/data/h5.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace pets::data {

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

void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (!out->empty()) *out += "; ";
  char major[128] = {0};
  char minor[128] = {0};
  H5Eget_msg(err->maj_num, nullptr, major, sizeof(major));
  H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor));
  *out += std::string(err->func_name ? err->func_name : "?") + ": " + major + ": " + minor;
  if (err->desc && *err->desc) *out += " (" + std::string(err->desc) + ")";
  return 0;
}

herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* data) {
  if (n != 0) return 0;
  auto* out = static_cast<std::string*>(data);
  char minor[128] = {0};
  H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor));
  const std::string desc = err->desc ? err->desc : "";
  *out = *minor == '\0' ? desc
         : desc.empty() ? std::string(minor)
                        : std::string(minor) + " (" + desc + ")";
  return 0;
}

herr_t find_checksum(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<h5::Failure*>(data);
  const std::string desc = err->desc ? err->desc : "";
  // The outermost frame that names a checksum: its words say which one.
  if (desc.find("checksum") != std::string::npos) {
    out->cause = desc;
    out->checksum = true;
  }
  return 0;
}
}  // namespace

std::string hdf5_root_cause() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? std::string("unknown HDF5 error") : text;
}

std::string hdf5_error_stack() {
  std::string text;
  // Walking upward starts at the innermost frame (the root cause) and ends at the API call.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? std::string("no HDF5 error stack") : text;
}

void throw_h5_error(const char* call, const char* file, int line) {
  throw_error(std::string(call) + " failed: " + hdf5_error_stack(), file, line);
}

namespace h5 {

std::mutex& library_mutex() {
  static std::mutex m;
  return m;
}

Failure last_failure() {
  Failure failure;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_checksum, &failure);
  if (!failure.checksum) {
    failure.cause = hdf5_root_cause();
  } else {
    H5Eclear2(H5E_DEFAULT);
  }
  return failure;
}

std::vector<hsize_t> extent(hid_t dataset_or_attribute) {
  const bool attr = H5Iget_type(dataset_or_attribute) == H5I_ATTR;
  H5Id space(attr ? H5Aget_space(dataset_or_attribute) : H5Dget_space(dataset_or_attribute));
  if (!space.valid()) return {};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string extent_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

H5Id fixed_string_type(std::size_t len) {
  H5Id t(PETS_H5_CHECK(H5Tcopy(H5T_C_S1)));
  PETS_H5_CHECK(H5Tset_size(t.get(), std::max<std::size_t>(len, 1)));
  PETS_H5_CHECK(H5Tset_strpad(t.get(), H5T_STR_NULLPAD));
  return t;
}

std::vector<std::string> unpack_fixed_strings(const char* data, std::size_t n, std::size_t len,
                                              std::size_t stride) {
  std::vector<std::string> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const char* s = data + i * stride;
    std::size_t l = 0;
    while (l < len && s[l] != '\0') ++l;
    out[i].assign(s, l);
  }
  return out;
}

bool read_fixed_strings(hid_t dataset_or_attribute, std::vector<std::string>& out) {
  const bool attr = H5Iget_type(dataset_or_attribute) == H5I_ATTR;
  H5Id type(attr ? H5Aget_type(dataset_or_attribute) : H5Dget_type(dataset_or_attribute));
  if (!type.valid()) return false;
  const std::vector<hsize_t> dims = extent(dataset_or_attribute);
  std::size_t n = 1;
  for (const hsize_t d : dims) n *= static_cast<std::size_t>(d);
  const std::size_t len = H5Tget_size(type.get());
  std::vector<char> buf(n * len + 1, 0);
  const herr_t rc =
      attr ? H5Aread(dataset_or_attribute, type.get(), buf.data())
           : H5Dread(dataset_or_attribute, type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  if (rc < 0) return false;
  out = unpack_fixed_strings(buf.data(), n, len, len);
  return true;
}

std::string object_text(hid_t obj) {
  std::string file(static_cast<std::size_t>(std::max<ssize_t>(H5Fget_name(obj, nullptr, 0), 0)),
                   '\0');
  if (!file.empty()) H5Fget_name(obj, file.data(), file.size() + 1);
  std::string path(static_cast<std::size_t>(std::max<ssize_t>(H5Iget_name(obj, nullptr, 0), 0)),
                   '\0');
  if (!path.empty()) H5Iget_name(obj, path.data(), path.size() + 1);
  H5Eclear2(H5E_DEFAULT);
  return (file.empty() ? std::string("(unnamed HDF5 file)") : file) + ":" +
         (path.empty() ? std::string("/") : path);
}

namespace {
/// "<file>:/group/name" for `name` below `parent`.
std::string child_text(hid_t parent, const std::string& name) {
  std::string text = object_text(parent);
  if (text.back() != '/') text += '/';
  return text + name;
}
}  // namespace

H5Id open_dataset(hid_t parent, const std::string& name) {
  // One link at a time: HDF5 1.10's H5Lexists fails, rather than saying no, when a group on the
  // way is missing.
  htri_t exists = 1;
  for (std::size_t end = name.find('/'); exists > 0; end = name.find('/', end + 1)) {
    exists = H5Lexists(parent, name.substr(0, end).c_str(), H5P_DEFAULT);
    if (end == std::string::npos) break;
  }
  if (exists == 0) {
    H5Eclear2(H5E_DEFAULT);
    PETS_ERROR("HDF5 dataset " + child_text(parent, name) + " does not exist");
  }
  H5Id d(exists < 0 ? -1 : H5Dopen2(parent, name.c_str(), H5P_DEFAULT));
  if (!d.valid())
    PETS_ERROR("cannot open HDF5 dataset " + child_text(parent, name) + ": " + hdf5_root_cause());
  return d;
}

H5Id open_attribute(hid_t obj, const std::string& name) {
  const htri_t exists = H5Aexists(obj, name.c_str());
  if (exists == 0) {
    H5Eclear2(H5E_DEFAULT);
    PETS_ERROR("HDF5 attribute '" + name + "' of " + object_text(obj) + " does not exist");
  }
  H5Id a(exists < 0 ? -1 : H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  if (!a.valid())
    PETS_ERROR("cannot open HDF5 attribute '" + name + "' of " + object_text(obj) + ": " +
               hdf5_root_cause());
  return a;
}

std::vector<std::string> read_string_attribute(hid_t obj, const std::string& name) {
  H5Id a = open_attribute(obj, name);
  H5Id type(H5Aget_type(a.get()));
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING ||
      H5Tis_variable_str(type.get()) != 0) {
    H5Eclear2(H5E_DEFAULT);
    PETS_ERROR("HDF5 attribute '" + name + "' of " + object_text(obj) +
               " is not of fixed-length strings");
  }
  std::vector<std::string> values;
  if (!read_fixed_strings(a.get(), values))
    PETS_ERROR("cannot read HDF5 attribute '" + name + "' of " + object_text(obj) + ": " +
               hdf5_root_cause());
  return values;
}

template <typename T>
T read_scalar_attribute(hid_t obj, const std::string& name) {
  H5Id a = open_attribute(obj, name);
  const std::vector<hsize_t> dims = extent(a.get());
  if (!(dims.empty() || (dims.size() == 1 && dims[0] == 1)))
    PETS_ERROR("HDF5 attribute '" + name + "' of " + object_text(obj) + " is not a scalar");
  T value{};
  if (H5Aread(a.get(), native_type<T>(), &value) < 0)
    PETS_ERROR("cannot read HDF5 attribute '" + name + "' of " + object_text(obj) + ": " +
               hdf5_root_cause());
  return value;
}

template std::uint8_t read_scalar_attribute<std::uint8_t>(hid_t, const std::string&);
template std::int32_t read_scalar_attribute<std::int32_t>(hid_t, const std::string&);
template std::uint32_t read_scalar_attribute<std::uint32_t>(hid_t, const std::string&);
template std::int64_t read_scalar_attribute<std::int64_t>(hid_t, const std::string&);
template std::uint64_t read_scalar_attribute<std::uint64_t>(hid_t, const std::string&);
template double read_scalar_attribute<double>(hid_t, const std::string&);

void write_string_attribute(hid_t obj, const char* name, const std::vector<std::string>& values,
                            bool scalar) {
  std::size_t len = 1;
  for (const auto& v : values) len = std::max(len, v.size());
  H5Id type = fixed_string_type(len);
  const hsize_t n = values.size();
  H5Id space(PETS_H5_CHECK(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr)));
  H5Id attr(
      PETS_H5_CHECK(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  std::vector<char> buf(values.size() * len, '\0');
  for (std::size_t i = 0; i < values.size(); ++i)
    std::memcpy(buf.data() + i * len, values[i].data(), values[i].size());
  PETS_H5_CHECK(H5Awrite(attr.get(), type.get(), buf.data()));
}

void write_scalar_attribute(hid_t obj, const char* name, hid_t file_type, hid_t mem_type,
                            const void* value) {
  H5Id space(PETS_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Id attr(PETS_H5_CHECK(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  PETS_H5_CHECK(H5Awrite(attr.get(), mem_type, value));
}

void write_slab(hid_t dataset, hid_t mem_type, hid_t dxpl, const std::vector<hsize_t>& dims,
                hsize_t first, hsize_t rows, const void* data) {
  if (dims[0] == 0) return;  // every rank sees the same global size: all skip together
  H5Id space(PETS_H5_CHECK(H5Dget_space(dataset)));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = first;
  count[0] = rows;
  std::vector<hsize_t> mem_dims = count;
  mem_dims[0] = std::max<hsize_t>(rows, 1);
  H5Id mem(
      PETS_H5_CHECK(H5Screate_simple(static_cast<int>(mem_dims.size()), mem_dims.data(), nullptr)));
  if (rows == 0) {
    PETS_H5_CHECK(H5Sselect_none(space.get()));
    PETS_H5_CHECK(H5Sselect_none(mem.get()));
  } else {
    PETS_H5_CHECK(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr));
  }
  PETS_H5_CHECK(H5Dwrite(dataset, mem_type, mem.get(), space.get(), dxpl, data));
}

void write_rows(hid_t parent, const char* name, hid_t file_type, hid_t mem_type, hid_t dcpl,
                hid_t dxpl, const std::vector<hsize_t>& dims, hsize_t first, hsize_t rows,
                const void* data) {
  std::vector<hsize_t> max_dims = dims;
  max_dims[0] = H5S_UNLIMITED;  // chunked: HDF5 then allows an empty first dimension
  H5Id space(
      PETS_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data())));
  H5Id dset(PETS_H5_CHECK(
      H5Dcreate2(parent, name, file_type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  write_slab(dset.get(), mem_type, dxpl, dims, first, rows, data);
}

}  // namespace h5
}  // namespace pets::data
