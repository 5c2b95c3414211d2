#include "pets/model/state_dict.hpp"

#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace pets::model {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

torch::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return torch::kFloat64;
    case DType::F32:
      return torch::kFloat32;
    case DType::F16:
      return torch::kFloat16;
    case DType::BF16:
      return torch::kBFloat16;
    case DType::I64:
      return torch::kInt64;
    case DType::I32:
      return torch::kInt32;
    case DType::I16:
      return torch::kInt16;
    case DType::I8:
      return torch::kInt8;
    case DType::U8:
      return torch::kUInt8;
    case DType::BOOL:
      return torch::kBool;
  }
  PETS_ERROR("unknown dtype");
}

DType from_scalar_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat64:
      return DType::F64;
    case torch::kFloat32:
      return DType::F32;
    case torch::kFloat16:
      return DType::F16;
    case torch::kBFloat16:
      return DType::BF16;
    case torch::kInt64:
      return DType::I64;
    case torch::kInt32:
      return DType::I32;
    case torch::kInt16:
      return DType::I16;
    case torch::kInt8:
      return DType::I8;
    case torch::kUInt8:
      return DType::U8;
    case torch::kBool:
      return DType::BOOL;
    default:
      PETS_ERROR(std::string("no safetensors dtype for ") + c10::toString(type));
  }
}

bool convertible(torch::ScalarType from, torch::ScalarType to) {
  const bool from_float = c10::isFloatingType(from);
  const bool to_float = c10::isFloatingType(to);
  if (from_float != to_float) return false;
  return from != torch::kBool || to == torch::kBool;
}

std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream s;
  s << shape;
  return s.str();
}

}  // namespace

torch::Tensor to_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  torch::Tensor t =
      torch::empty(info.shape, torch::TensorOptions().dtype(to_scalar_type(info.dtype)));
  std::memcpy(t.data_ptr(), file.data(info), info.end - info.begin);
  return t;
}

NamedTensors read_tensors(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  NamedTensors out;
  for (const auto& info : file.tensors()) out.emplace_back(info.name, to_tensor(file, info));
  return out;
}

std::string tensors_bytes(const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& label) {
  std::vector<RawTensor> raw;
  raw.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    RawTensor r;
    r.name = name;
    r.dtype = from_scalar_type(t.scalar_type());
    r.shape.assign(t.sizes().begin(), t.sizes().end());
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    r.bytes.assign(p, p + t.numel() * t.element_size());
    raw.push_back(std::move(r));
  }
  return safetensors_bytes(raw, metadata, label);
}

void write_tensors(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, tensors_bytes(tensors, metadata, path));
}

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) out.emplace_back(b.key(), b.value());
  return out;
}

LoadReport load_state_dict(torch::nn::Module& module, const std::string& path,
                           const LoadOptions& options) {
  return load_state_dict(module, SafetensorsFile::open(path), options);
}

LoadReport load_state_dict(torch::nn::Module& module, const SafetensorsFile& file,
                           const LoadOptions& options) {
  const std::string& path = file.path();
  if (file.metadata().count(kTrainingStateMetadataKey) != 0) {
    const std::string folder = std::filesystem::path(path).parent_path().string();
    throw UsageError(path + " is a pets_train checkpoint, not model weights: continue its run " +
                     "with --resume --out " + (folder.empty() ? "." : folder) +
                     ", or start from the model.safetensors a finished run writes there");
  }
  const NamedTensors targets = state_dict(module);
  LoadReport report;
  report.path = path;
  report.head = options.resizable_head.substr(0, options.resizable_head.find_last_not_of('.') + 1);
  std::set<std::string> wanted;
  std::vector<std::pair<const TensorInfo*, torch::Tensor>> plan;
  auto fail = [&](const std::string& what) { throw UsageError(path + ": " + what); };

  auto in_head = [&](const std::string& name) {
    return !options.resizable_head.empty() && name.rfind(options.resizable_head, 0) == 0;
  };
  bool head_mismatch = false;
  for (const auto& [name, target] : targets) {
    const TensorInfo* info = file.find(name);
    if (info != nullptr && in_head(name) && c10::IntArrayRef(info->shape) != target.sizes() &&
        !head_mismatch) {
      head_mismatch = true;
      report.skip_reason = name + " is " + shape_text(info->shape) + " there, " +
                           shape_text(target.sizes()) + " here";
    }
  }
  for (const auto& [name, target] : targets) {
    wanted.insert(name);
    const TensorInfo* info = file.find(name);
    if (info == nullptr)
      fail("missing key '" + name + "' (shape " + shape_text(target.sizes()) + ")");
    if (head_mismatch && in_head(name)) {
      report.skipped.push_back(name);
      continue;
    }
    if (c10::IntArrayRef(info->shape) != target.sizes())
      fail("shape mismatch for '" + name + "': file has " + shape_text(info->shape) +
           ", model has " + shape_text(target.sizes()));
    if (!convertible(to_scalar_type(info->dtype), target.scalar_type()))
      fail("cannot convert '" + name + "' from " + dtype_name(info->dtype) + " to " +
           c10::toString(target.scalar_type()));
    plan.emplace_back(info, target);
  }
  for (const auto& info : file.tensors())
    if (wanted.count(info.name) == 0) fail("unexpected key '" + info.name + "'");

  torch::NoGradGuard no_grad;
  for (const auto& [info, target] : plan) {
    target.copy_(to_tensor(file, *info));
    report.loaded.push_back(info->name);
  }
  return report;
}

std::string load_report_text(const LoadReport& r) {
  std::string text = "loaded " + std::to_string(r.loaded.size()) + " tensors from " + r.path;
  if (r.skipped.empty())
    return text + ": the backbone and " + r.head + " (its shapes are this model's: its classes)";
  return text + ": the backbone; " + r.head + " skipped (" + r.skip_reason +
         ": another class count), so the head starts fresh";
}

}  // namespace pets::model
