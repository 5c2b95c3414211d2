#include "pets/model/resnet50d.hpp"

namespace pets::model {
namespace nn = torch::nn;

namespace {

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

nn::BatchNorm2d bn(int64_t channels) {
  return nn::BatchNorm2d(nn::BatchNorm2dOptions(channels).eps(1e-5).momentum(0.1));
}

nn::Sequential make_layer(int64_t& in_channels, int64_t planes, int64_t blocks, int64_t stride) {
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    layer->push_back(Bottleneck(in_channels, planes, i == 0 ? stride : 1));
    in_channels = planes * 4;
  }
  return layer;
}

}  // namespace

BottleneckImpl::BottleneckImpl(int64_t in_channels, int64_t planes, int64_t stride) {
  const int64_t out_channels = planes * 4;
  conv1 = register_module("conv1", conv(in_channels, planes, 1));
  bn1 = register_module("bn1", bn(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride));
  bn2 = register_module("bn2", bn(planes));
  conv3 = register_module("conv3", conv(planes, out_channels, 1));
  bn3 = register_module("bn3", bn(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample = nn::Sequential();
    if (stride != 1) {
      downsample->push_back(nn::AvgPool2d(
          nn::AvgPool2dOptions(2).stride(stride).ceil_mode(true).count_include_pad(false)));
    } else {
      downsample->push_back(nn::Identity());
    }
    downsample->push_back(conv(in_channels, out_channels, 1));
    downsample->push_back(bn(out_channels));
    register_module("downsample", downsample);
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor shortcut = downsample ? downsample->forward(x) : x;
  x = bn1(conv1(x)).relu_();
  x = bn2(conv2(x)).relu_();
  x = bn3(conv3(x));
  return x.add_(shortcut).relu_();
}

ResNet50dImpl::ResNet50dImpl(int64_t num_classes) : num_classes_(num_classes) {
  TORCH_CHECK(num_classes > 0, "num_classes must be positive, got ", num_classes);
  conv1 = register_module(
      "conv1",
      nn::Sequential(conv(3, 32, 3, 2), bn(32), nn::ReLU(nn::ReLUOptions(true)), conv(32, 32, 3),
                     bn(32), nn::ReLU(nn::ReLUOptions(true)), conv(32, 64, 3)));
  bn1 = register_module("bn1", bn(64));
  int64_t channels = 64;
  layer1 = register_module("layer1", make_layer(channels, 64, 3, 1));
  layer2 = register_module("layer2", make_layer(channels, 128, 4, 2));
  layer3 = register_module("layer3", make_layer(channels, 256, 6, 2));
  layer4 = register_module("layer4", make_layer(channels, 512, 3, 2));
  fc = register_module("fc", nn::Linear(kFeatures, num_classes));
  init_like_timm(*this);
}

torch::Tensor ResNet50dImpl::forward_features(torch::Tensor x) {
  return pool(forward_stages(std::move(x), 0, kStages));
}

torch::Tensor ResNet50dImpl::forward_stages(torch::Tensor x, int begin, int end) {
  PETS_CHECK(0 <= begin && begin <= end && end <= kStages,
             "no backbone stages [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  torch::nn::Sequential* const layers[] = {&layer1, &layer2, &layer3, &layer4};
  for (int stage = begin; stage < end; ++stage) {
    if (stage == 0) {
      x = torch::max_pool2d(bn1(conv1->forward(x)).relu_(), 3, 2, 1);
    } else {
      x = (*layers[stage - 1])->forward(x);
    }
  }
  return x;
}

std::vector<std::pair<std::string, torch::Tensor>> ResNet50dImpl::stage_parameters(int first) {
  PETS_CHECK(0 <= first && first <= kStages, "no backbone stage " + std::to_string(first));
  const char* const prefixes[kStages] = {"", "layer1.", "layer2.", "layer3.", "layer4."};
  const auto in_stage = [&](const std::string& name, int stage) {
    if (stage == 0) return name.rfind("conv1.", 0) == 0 || name.rfind("bn1.", 0) == 0;
    return name.rfind(prefixes[stage], 0) == 0;
  };
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters(true))
    for (int stage = first; stage < kStages; ++stage)
      if (in_stage(p.key(), stage)) out.emplace_back(p.key(), p.value());
  return out;
}

torch::Tensor ResNet50dImpl::forward_head(const torch::Tensor& features) { return fc(features); }

torch::Tensor ResNet50dImpl::forward(torch::Tensor x) {
  return forward_head(forward_features(std::move(x)));
}

void ResNet50dImpl::freeze_backbone() {
  for (auto& p : named_parameters(true)) p.value().set_requires_grad(p.key().rfind("fc.", 0) == 0);
}

void ResNet50dImpl::set_backbone_training(bool on) {
  train(on);
  fc->train(true);
}

void ResNet50dImpl::to_channels_last() {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters(true))
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
}

void init_like_timm(ResNet50dImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& m : model.modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
  for (auto* layer : {&model.layer1, &model.layer2, &model.layer3, &model.layer4})
    for (auto& block : (*layer)->children())
      if (auto* bottleneck = block->as<BottleneckImpl>()) nn::init::zeros_(bottleneck->bn3->weight);
}

}  // namespace pets::model
