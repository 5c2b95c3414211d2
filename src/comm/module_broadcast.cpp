#include <torch/nn/module.h>

#include "pets/comm/communicator.hpp"
#include "pets/util/digest.hpp"
#include "pets/util/error.hpp"

namespace pets::comm {

namespace {

/// Parameters then buffers, each under its dotted name: the order all ranks share.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    tensors.emplace_back("param:" + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    tensors.emplace_back("buffer:" + item.key(), item.value());
  return tensors;
}

/// The name, then the dtype (by name, stable across LibTorch versions) and shape of a defined
/// tensor, or -1 for an undefined one.
void add_layout(Digest& h, const std::string& name, const at::Tensor& t) {
  h.add_string(name);
  if (!t.defined()) {
    h.add_int(-1);
    return;
  }
  h.add_string(c10::toString(t.scalar_type()));
  h.add_int(t.dim());
  for (const std::int64_t d : t.sizes()) h.add_int(d);
}

}  // namespace

void add_tensor_to_digest(Digest& digest, const std::string& name, const at::Tensor& tensor) {
  add_layout(digest, name, tensor);
  if (!tensor.defined()) return;
  const at::Tensor bytes = tensor.detach().cpu().contiguous();
  digest.add(bytes.data_ptr(), bytes.nbytes());
}

std::uint64_t module_digest(const torch::nn::Module& module) {
  Digest h;
  for (const auto& [name, tensor] : module_tensors(module)) add_tensor_to_digest(h, name, tensor);
  return h.value();
}

std::uint64_t tensors_digest(const std::vector<at::Tensor>& tensors) {
  Digest h;
  for (const at::Tensor& tensor : tensors) add_tensor_to_digest(h, "", tensor);
  return h.value();
}

void broadcast_module(Communicator& comm, torch::nn::Module& module, int root) {
  const auto tensors = module_tensors(module);
  Digest layout;
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
