#include "pets/train/step/evaluation.hpp"

#include <torch/torch.h>

#include "pets/comm/communicator.hpp"
#include "pets/train/input/batch_tensors.hpp"

namespace pets::train {

Evaluator::Evaluator(comm::Communicator& comm, bool cache_features)
    : comm_(comm), cache_features_(cache_features) {}

std::optional<EvalCounts> Evaluator::run(const BatchSource& source, const Features& features,
                                         const Head& head, const Interrupt& interrupt) {
  const auto interrupted = [&] { return interrupt && interrupt(); };
  int64_t counts[2] = {0, 0};  // correct, evaluated
  torch::NoGradGuard no_grad;
  // The correct predictions are summed on the features' device and read once at the end: no
  // batch waits for the device, so on a GPU the host queues the next batch while one runs.
  torch::Tensor correct;
  const auto count = [&](const torch::Tensor& f, const torch::Tensor& labels) {
    const torch::Tensor batch_correct = head(f).argmax(1).eq(labels).sum();
    correct = correct.defined() ? correct + batch_correct : batch_correct;
    counts[1] += labels.size(0);
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
  if (correct.defined()) counts[0] = correct.item<int64_t>();
  comm_.allreduce_counters(counts, 2);
  return EvalCounts{counts[0], counts[1]};
}

}  // namespace pets::train
