#include "store_damage.hpp"

#include <hdf5.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "pets/data/h5.hpp"
#include "pets/data/store_schema.hpp"

namespace pets::data::testing {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

H5Id open_file(const std::string& file) {
  H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  check(f.valid(), "cannot open " + file);
  return f;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

/// Copies `name` (a group, recursively, or a dataset without its filters) from `in` to `out`.
void copy_plain(hid_t in, const std::string& name, hid_t out) {
  H5O_info_t info;
  check(H5Oget_info_by_name2(in, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0, name);
  if (info.type == H5O_TYPE_GROUP) {
    H5Id src(H5Gopen2(in, name.c_str(), H5P_DEFAULT));
    H5Id dst(H5Gcreate2(out, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    check(src.valid() && dst.valid(), "cannot copy group " + name);
    std::vector<std::string> names;
    check(H5Literate(src.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names) >= 0,
          name);
    for (const std::string& n : names) copy_plain(src.get(), n, dst.get());
    return;
  }
  H5Id src(H5Dopen2(in, name.c_str(), H5P_DEFAULT));
  H5Id type(H5Dget_type(src.get()));
  H5Id space(H5Dget_space(src.get()));
  hsize_t n = 1;
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.get())));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (hsize_t d : dims) n *= d;
  std::vector<char> buf(n * H5Tget_size(type.get()) + 1);
  if (n > 0)
    check(H5Dread(src.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0, name);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  std::vector<hsize_t> max_dims = dims;
  if (name == store::kPixels.name) {
    const hsize_t chunk = hsize_t{1} << 20;
    H5Pset_chunk(dcpl.get(), 1, &chunk);
    max_dims[0] = H5S_UNLIMITED;
  }
  H5Id out_space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data()));
  H5Id dst(H5Dcreate2(out, name.c_str(), type.get(), out_space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT));
  check(dst.valid(), "cannot create " + name);
  if (n > 0)
    check(H5Dwrite(dst.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0, name);
}

herr_t copy_attr(hid_t in, const char* name, const H5A_info_t*, void* data) {
  const hid_t out = *static_cast<hid_t*>(data);
  H5Id a(H5Aopen(in, name, H5P_DEFAULT));
  H5Id type(H5Aget_type(a.get()));
  H5Id space(H5Aget_space(a.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<char> buf(static_cast<std::size_t>(n) * H5Tget_size(type.get()) + 1);
  check(H5Aread(a.get(), type.get(), buf.data()) >= 0, name);
  H5Id b(H5Acreate2(out, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  check(b.valid() && H5Awrite(b.get(), type.get(), buf.data()) >= 0, name);
  return 0;
}

}  // namespace

std::uint64_t header_byte(const std::string& file, const std::string& object) {
  std::uint64_t addr = 0;
  {
    H5Id f = open_file(file);
    H5O_info_t info;
    check(H5Oget_info_by_name2(f.get(), object.c_str(), &info, H5O_INFO_BASIC | H5O_INFO_HDR,
                               H5P_DEFAULT) >= 0,
          "no object " + object + " in " + file);
    check(info.hdr.version == 2, object + " has an unchecksummed (version 1) object header");
    addr = info.addr;
  }
  // The version-2 prefix: "OHDR", version, flags, [4 times], [2 attribute phase limits], the
  // size of chunk 0 in 1 << (flags & 3) bytes; then chunk 0's messages and its checksum.
  std::FILE* f = std::fopen(file.c_str(), "rb");
  check(f != nullptr, "cannot open " + file);
  unsigned char p[6 + 16 + 4 + 8] = {0};
  const bool read = std::fseek(f, static_cast<long>(addr), SEEK_SET) == 0 &&
                    std::fread(p, 1, sizeof p, f) == sizeof p;
  std::fclose(f);
  check(read && std::string(reinterpret_cast<char*>(p), 4) == "OHDR", object + ": no OHDR");
  const unsigned flags = p[5];
  std::size_t at = 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
  const std::size_t width = std::size_t{1} << (flags & 3);
  std::uint64_t size = 0;
  for (std::size_t i = 0; i < width; ++i) size |= std::uint64_t{p[at + i]} << (8 * i);
  at += width;
  check(size > 0, object + ": empty object header chunk");
  return addr + at + size - 1;  // the last byte of chunk 0's messages, before its checksum
}

std::uint64_t chunk_byte(const std::string& file, const std::string& dataset) {
  H5Id f = open_file(file);
  H5Id d(H5Dopen2(f.get(), dataset.c_str(), H5P_DEFAULT));
  check(d.valid(), "no dataset " + dataset + " in " + file);
  H5Id space(H5Dget_space(d.get()));
  hsize_t offset[1] = {0}, size = 0;
  haddr_t addr = HADDR_UNDEF;
  unsigned mask = 0;
  check(H5Dget_chunk_info(d.get(), space.get(), 0, offset, &mask, &addr, &size) >= 0 &&
            addr != HADDR_UNDEF && size > 8,
        dataset + " has no stored chunk");
  return addr + size / 2;
}

void flip_byte(const std::string& file, std::uint64_t offset) {
  std::FILE* f = std::fopen(file.c_str(), "r+b");
  check(f != nullptr, "cannot open " + file);
  int c = EOF;
  const bool ok =
      std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 && (c = std::fgetc(f)) != EOF &&
      std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 && std::fputc(c ^ 1, f) != EOF;
  check(std::fclose(f) == 0 && ok, "cannot flip byte " + std::to_string(offset) + " of " + file);
}

void write_version1_store(const std::string& good, const std::string& out) {
  H5Id in = open_file(good);
  H5Id f(H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  check(f.valid(), "cannot create " + out);
  hid_t out_id = f.get();
  std::vector<std::string> names;
  check(H5Literate(in.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names) >= 0,
        "cannot list " + good);
  for (const std::string& n : names) copy_plain(in.get(), n, out_id);
  check(H5Aiterate2(in.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, copy_attr, &out_id) >= 0,
        "cannot copy the attributes of " + good);
  H5Id a(H5Aopen(f.get(), store::kSchemaVersion.name, H5P_DEFAULT));
  const std::int32_t one = 1;
  check(H5Awrite(a.get(), H5T_NATIVE_INT32, &one) >= 0, "cannot write schema_version");
  a.close();
  f.close();
}

}  // namespace pets::data::testing
