#include "pets/train/run/step_dump.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pets/data/loader.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  PETS_CHECK(out.good(), "PETS_DUMP_STEPS: cannot write " + path);
}

at::Tensor host_copy(const at::Tensor& t) { return t.detach().to(torch::kCPU).clone(); }

/// The backbone's parameters that this step trains (--unfreeze): those that require gradients.
std::vector<torch::OrderedDict<std::string, at::Tensor>::Item> trained_backbone(
    const model::ResNet50dImpl& model) {
  std::vector<torch::OrderedDict<std::string, at::Tensor>::Item> out;
  for (const auto& p : model.named_parameters(true))
    if (p.value().requires_grad() && p.key().rfind("fc.", 0) != 0) out.push_back(p);
  return out;
}

}  // namespace

StepDump::StepDump(StepDumpSpec spec, int rank, const std::map<std::string, double>& run)
    : spec_(std::move(spec)), rank_(rank) {
  std::filesystem::create_directories(spec_.dir);
  if (rank_ == 0) write_json(spec_.dir + "/run.json", nlohmann::json(run));
}

void StepDump::before(std::int64_t step, const model::ResNet50dImpl& model, data::Batch& batch,
                      const at::Tensor& images, const std::vector<std::string>& names) {
  step_ = step;
  if (step == 0 && rank_ == 0)
    model::write_tensors(spec_.dir + "/initial.safetensors", model::state_dict(model));
  kept_.clear();
  kept_["images"] = images.defined() ? host_copy(images).to(torch::kFloat32).contiguous()
                                     : batch_images(batch, torch::kCPU).contiguous();
  kept_["labels"] = torch::tensor(batch.labels, torch::kInt64);
  kept_["fc.weight.before"] = host_copy(model.fc->weight);
  kept_["fc.bias.before"] = host_copy(model.fc->bias);
  for (const auto& p : trained_backbone(model)) kept_[p.key() + ".before"] = host_copy(p.value());
  crops_ = nlohmann::json::object();
  for (std::size_t i = 0; i < batch.indices.size(); ++i) {
    const data::CropBox& b = batch.boxes[i];
    crops_["names"].push_back(names.at(static_cast<std::size_t>(batch.indices[i])));
    crops_["boxes"].push_back({b.top, b.left, b.height, b.width});
  }
}

void StepDump::after(const model::ResNet50dImpl& model, const StepResult& result, double beta1) {
  const std::string stem =
      spec_.dir + "/step-" + std::to_string(step_) + "-rank-" + std::to_string(rank_);
  model::NamedTensors out(kept_.begin(), kept_.end());
  out.emplace_back("fc.weight.grad", host_copy(model.fc->weight.grad()));
  out.emplace_back("fc.bias.grad", host_copy(model.fc->bias.grad()));
  out.emplace_back("fc.weight.after", host_copy(model.fc->weight));
  out.emplace_back("fc.bias.after", host_copy(model.fc->bias));
  for (const auto& p : trained_backbone(model)) {
    out.emplace_back(p.key() + ".grad", host_copy(p.value().grad()));
    out.emplace_back(p.key() + ".after", host_copy(p.value()));
  }
  if (result.backbone_lr > 0)
    out.emplace_back("lr_backbone", torch::tensor({result.backbone_lr}, torch::kFloat64));
  out.emplace_back("loss_sum", torch::tensor({result.loss_sum}, torch::kFloat64));
  out.emplace_back("images_total",
                   torch::tensor({static_cast<double>(result.images)}, torch::kFloat64));
  out.emplace_back("lr", torch::tensor({result.lr}, torch::kFloat64));
  out.emplace_back("beta1", torch::tensor({beta1}, torch::kFloat64));
  for (const auto& b : model.named_buffers(true)) out.emplace_back(b.key(), host_copy(b.value()));
  model::write_tensors(stem + ".safetensors", out);
  write_json(stem + ".json", crops_);
}

}  // namespace pets::train
