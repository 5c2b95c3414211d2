#include "pets/model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace pets::model {
namespace {

// ordered: tensors() keeps the order of the header.
using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct DTypeEntry {
  DType dtype;
  const char* name;
  std::size_t size;
};
constexpr DTypeEntry kDTypes[] = {{DType::F64, "F64", 8}, {DType::F32, "F32", 4},
                                  {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
                                  {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
                                  {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
                                  {DType::U8, "U8", 1},   {DType::BOOL, "BOOL", 1}};

bool dtype_from_name(const std::string& name, DType* out) {
  for (const auto& e : kDTypes) {
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void fail(const std::string& label, const std::string& what) {
  throw UsageError(label + ": " + what);
}

}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  return "?";
}

std::size_t dtype_size(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open safetensors file: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<std::size_t>(std::max<std::streamoff>(size, 0)));
  if (!bytes.empty() && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error(path + ": cannot read safetensors file");
  return parse(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& label) {
  SafetensorsFile file;
  file.path_ = label;
  const uint64_t size = bytes.size();
  if (size < 8)
    fail(label, "not a safetensors file: " + std::to_string(size) +
                    " bytes, shorter than the "
                    "8-byte header length");
  const uint64_t header_len = read_le64(bytes.data());
  // A safetensors header starts with '{' right after its length. A length past the end with no
  // '{' there is another kind of file (an image, a pickled .pt), not a damaged safetensors one.
  if ((header_len > size - 8 || header_len > kMaxHeaderBytes) && (size == 8 || bytes[8] != '{'))
    fail(label,
         "not a safetensors file (it does not start with a JSON header and its length; "
         "--pretrained takes the .safetensors weights timm publishes)");
  if (header_len > size - 8)
    fail(label, "header length " + std::to_string(header_len) + " at byte 0 exceeds the file (" +
                    std::to_string(size) + " bytes)");
  if (header_len > kMaxHeaderBytes)
    fail(label, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len < 2) fail(label, "header of " + std::to_string(header_len) + " bytes is not JSON");

  const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  // nlohmann keeps the last of duplicate keys silently; a parser callback sees every top-level key.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len, on_event);
  } catch (const json::exception& e) {
    fail(label, std::string("header (bytes 8..") + std::to_string(8 + header_len) +
                    ") is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) fail(label, "duplicate key '" + duplicate + "' in header");
  if (!header.is_object()) fail(label, "header is not a JSON object");

  const uint64_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& entry = it.value();
    if (key == "__metadata__") {
      if (!entry.is_object()) fail(label, "'__metadata__' is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          fail(label, "'__metadata__' value of '" + m.key() + "' is not a string");
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!entry.is_object()) fail(label, where + ": entry is not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) fail(label, where + ": missing or non-string dtype");
    if (sh == entry.end() || !sh->is_array()) fail(label, where + ": missing or non-array shape");
    if (off == entry.end() || !off->is_array() || off->size() != 2)
      fail(label, where + ": data_offsets must be [begin, end]");
    TensorInfo info;
    info.name = key;
    if (!dtype_from_name(dt->get<std::string>(), &info.dtype))
      fail(label, where + ": unknown dtype '" + dt->get<std::string>() + "'");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) fail(label, where + ": shape holds a non-integer or negative");
      const uint64_t dim = d.get<uint64_t>();
      // Also bounds each dimension alone: after a zero dimension numel stays 0, and a dimension
      // above INT64_MAX would turn negative in TensorInfo::shape.
      if (dim > (uint64_t{1} << 62) || (dim != 0 && numel > (uint64_t{1} << 62) / dim))
        fail(label, where + ": shape overflows");
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const json& o : *off)
      if (!o.is_number_unsigned())
        fail(label, where + ": data_offsets must be non-negative integers");
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.begin > info.end)
      fail(label, where + ": data_offsets [" + std::to_string(info.begin) + ", " +
                      std::to_string(info.end) + "] are reversed");
    if (info.end > data_size)
      fail(label, where + ": data_offsets end " + std::to_string(info.end) +
                      " is past the end of the data section (" + std::to_string(data_size) +
                      " bytes, file offset " + std::to_string(8 + header_len + info.end) + ")");
    const uint64_t expected = numel * dtype_size(info.dtype);
    if (info.end - info.begin != expected)
      fail(label, where + ": data_offsets span " + std::to_string(info.end - info.begin) +
                      " bytes, but " + dtype_name(info.dtype) + " of this shape needs " +
                      std::to_string(expected));
    file.tensors_.push_back(std::move(info));
  }

  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : file.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      fail(label, "tensor '" + by_offset[i]->name + "' (bytes from " +
                      std::to_string(by_offset[i]->begin) + ") overlaps tensor '" +
                      by_offset[i - 1]->name + "' (bytes to " +
                      std::to_string(by_offset[i - 1]->end) + ")");
  }

  file.data_start_ = 8 + header_len;
  file.bytes_ = std::move(bytes);
  return file;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& SafetensorsFile::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail(path_, "no tensor '" + name + "'");
  return *t;
}

const uint8_t* SafetensorsFile::data(const TensorInfo& info) const {
  return bytes_.data() + data_start_ + info.begin;
}

std::string safetensors_bytes(const std::vector<RawTensor>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& label) {
  // ordered_json keeps the tensors in the order given, as the Python writer does.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second)
      PETS_ERROR(label + ": duplicate tensor name '" + t.name + "'");
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    PETS_CHECK(t.bytes.size() == static_cast<std::size_t>(numel) * dtype_size(t.dtype),
               label + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                   " bytes, its shape needs " + std::to_string(numel * dtype_size(t.dtype)));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned, as safetensors does

  std::string out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  out += text;
  for (const auto& t : tensors)
    out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, safetensors_bytes(tensors, metadata, path));
}

}  // namespace pets::model
