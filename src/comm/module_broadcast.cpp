#include <torch/nn/module.h>

#include "pets/comm/communicator.hpp"
#include "pets/util/error.hpp"

namespace pets::comm {

namespace {

class Fnv1a {
 public:
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      hash_ ^= p[i];
      hash_ *= 0x100000001b3ULL;
    }
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }  // NUL separates fields
  void add_int(std::int64_t v) { add(&v, sizeof v); }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

/// Parameters then buffers, each under its dotted name: the order all ranks share.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    tensors.emplace_back("param:" + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    tensors.emplace_back("buffer:" + item.key(), item.value());
  return tensors;
}

void add_layout(Fnv1a& h, const std::string& name, const at::Tensor& t) {
  h.add(name);
  if (!t.defined()) {
    h.add_int(-1);
    return;
  }
  h.add_int(static_cast<std::int64_t>(t.scalar_type()));
  h.add_int(t.dim());
  for (const std::int64_t d : t.sizes()) h.add_int(d);
}

/// The layout, then the values of a defined tensor.
void add_tensor(Fnv1a& h, const std::string& name, const at::Tensor& t) {
  add_layout(h, name, t);
  if (!t.defined()) return;
  const at::Tensor bytes = t.detach().cpu().contiguous();
  h.add(bytes.data_ptr(), bytes.nbytes());
}

}  // namespace

std::uint64_t module_digest(const torch::nn::Module& module) {
  Fnv1a h;
  for (const auto& [name, tensor] : module_tensors(module)) add_tensor(h, name, tensor);
  return h.value();
}

std::uint64_t tensors_digest(const std::vector<at::Tensor>& tensors) {
  Fnv1a h;
  for (const at::Tensor& tensor : tensors) add_tensor(h, "", tensor);
  return h.value();
}

void broadcast_module(Communicator& comm, torch::nn::Module& module, int root) {
  const auto tensors = module_tensors(module);
  Fnv1a layout;
  for (const auto& [name, tensor] : tensors) add_layout(layout, name, tensor);

  // Agree on the layout before moving any payload, so that a mismatch makes every rank throw
  // instead of pairing different tensors (or hanging in a collective one rank never enters).
  at::Tensor root_layout =
      at::full({1}, static_cast<std::int64_t>(layout.value()), at::TensorOptions(at::kLong));
  comm.broadcast(root_layout, root);
  const bool same = root_layout.item<std::int64_t>() == static_cast<std::int64_t>(layout.value());
  const std::int64_t mismatched = comm.sum_counter(same ? 0 : 1);
  if (mismatched != 0) {
    PETS_ERROR("broadcast_module: " + std::to_string(mismatched) + " of " +
               std::to_string(comm.size()) + " ranks hold a module whose parameter/buffer names, " +
               "shapes or dtypes differ from rank " + std::to_string(root) + "'s" +
               (same ? "" : " (this one does)"));
  }
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) continue;
    at::Tensor target = tensor;  // shares storage with the module's tensor
    comm.broadcast(target, root);
  }
}

}  // namespace pets::comm
