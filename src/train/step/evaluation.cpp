#include "pets/train/step/evaluation.hpp"

#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

Evaluator::Evaluator(comm::Communicator& comm, bool cache_features)
    : comm_(comm), cache_features_(cache_features) {}

std::vector<int64_t> EvalCounts::class_correct() const {
  std::vector<int64_t> out(classes);
  for (int64_t c = 0; c < classes; ++c) out[c] = confusion[c * classes + c];
  return out;
}

std::vector<int64_t> EvalCounts::class_evaluated() const {
  std::vector<int64_t> out(classes, 0);
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t p = 0; p < classes; ++p) out[c] += confusion[c * classes + p];
  return out;
}

std::optional<EvalCounts> Evaluator::run(const BatchSource& source, const Features& features,
                                         const Head& head, const Interrupt& interrupt) {
  std::optional<std::vector<EvalCounts>> counts = run(source, features, {head}, 0, interrupt);
  if (!counts) return std::nullopt;
  return counts->front();
}

std::optional<std::vector<EvalCounts>> Evaluator::run(const BatchSource& source,
                                                      const Features& features,
                                                      const std::vector<Head>& heads,
                                                      int64_t classes, const Interrupt& interrupt) {
  const auto interrupted = [&] { return interrupt && interrupt(); };
  torch::NoGradGuard no_grad;
  // The heads' predictions (one row per head) and the labels stay on the features' device and are
  // read once at the end, in one tensor: no batch waits for the device, so on a GPU the host
  // queues the next batch while one runs.
  std::vector<torch::Tensor> predictions, labels;
  const auto count = [&](const torch::Tensor& f, const torch::Tensor& batch_labels) {
    std::vector<torch::Tensor> rows;
    for (const Head& head : heads) rows.push_back(head(f).argmax(1));
    predictions.push_back(torch::stack(rows));
    labels.push_back(batch_labels.to(torch::kLong).unsqueeze(0));
  };
  if (cache_) {
    for (const CachedBatch& b : *cache_) count(b.features, b.labels);
  } else {
    std::vector<CachedBatch> fresh;
    source.start();
    for (;;) {
      if (interrupted()) return std::nullopt;
      std::optional<data::Batch> batch = source.next();
      if (!batch) break;
      if (batch->n == 0) continue;
      torch::Tensor f = features(*batch);
      // clone: on the CPU the labels would otherwise alias the batch's memory.
      CachedBatch b{f, batch_labels(*batch, f.device()).clone()};
      count(b.features, b.labels);
      if (cache_features_) fresh.push_back(std::move(b));
    }
    if (cache_features_) cache_ = std::move(fresh);
  }
  // Per head: correct, evaluated, then the confusion matrix (classes x classes).
  const std::size_t stride = 2 + static_cast<std::size_t>(classes * classes);
  std::vector<int64_t> sums(heads.size() * stride, 0);
  if (!labels.empty()) {
    // Row 0 the labels, row 1 + k head k's predictions.
    const torch::Tensor read = torch::cat({torch::cat(labels, 1), torch::cat(predictions, 1)})
                                   .to(torch::kCPU)
                                   .contiguous();
    const int64_t n = read.size(1);
    const int64_t* t = read.data_ptr<int64_t>();
    for (std::size_t k = 0; k < heads.size(); ++k) {
      const int64_t* p = t + static_cast<int64_t>(k + 1) * n;
      int64_t* head = &sums[k * stride];
      for (int64_t i = 0; i < n; ++i) {
        head[0] += p[i] == t[i] ? 1 : 0;
        if (classes > 0) {
          PETS_CHECK(t[i] >= 0 && t[i] < classes && p[i] >= 0 && p[i] < classes,
                     "evaluation: a label or prediction outside the " + std::to_string(classes) +
                         " classes");
          ++head[2 + t[i] * classes + p[i]];
        }
      }
      head[1] = n;
    }
  }
  comm_.allreduce_counters(sums);
  std::vector<EvalCounts> out(heads.size());
  for (std::size_t k = 0; k < heads.size(); ++k) {
    const int64_t* head = &sums[k * stride];
    out[k].correct = head[0];
    out[k].evaluated = head[1];
    out[k].classes = classes;
    out[k].confusion.assign(head + 2, head + stride);
  }
  return out;
}

}  // namespace pets::train
