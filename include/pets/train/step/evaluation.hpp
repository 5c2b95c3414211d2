#pragma once
/// \file
/// Evaluation: every held-out image counted exactly once across ranks (the loader shards without
/// padding), correct and total summed over the ranks. When the backbone never changes
/// (--bn-mode eval) the first evaluation's features are kept and later ones only run the head.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "pets/data/loader.hpp"

namespace pets::comm {
class Communicator;
}

namespace pets::train {

/// Correct predictions and images evaluated, over all ranks, and where the errors are.
struct EvalCounts {
  int64_t correct = 0;
  int64_t evaluated = 0;
  int64_t classes = 0;  ///< the confusion matrix's side; 0: not counted per class
  /// Images by true class (row) and predicted class (column), row-major, classes x classes.
  std::vector<int64_t> confusion;

  /// Per class: its images predicted right (the diagonal), and evaluated (the row's sum).
  std::vector<int64_t> class_correct() const;
  std::vector<int64_t> class_evaluated() const;
};

/// Where an evaluation's batches come from: `start` begins a pass, `next` gives its batches in
/// order, then nothing (data::Loader's start_epoch and next).
struct BatchSource {
  std::function<void()> start;
  std::function<std::optional<data::Batch>()> next;
};

class Evaluator {
 public:
  /// Pooled features of a batch (data::Batch -> [n, d], on the head's device).
  using Features = std::function<at::Tensor(data::Batch&)>;
  /// The classifier: features -> logits.
  using Head = std::function<at::Tensor(const at::Tensor&)>;

  /// `comm` sums the counts (host counters). `cache_features`: keep the first run's features
  /// and labels and count every later run from them, without reading a batch (valid only while
  /// the features cannot change).
  Evaluator(comm::Communicator& comm, bool cache_features);

  /// Asked before each read from the source (each batch and the end); true abandons the pass.
  /// It may be collective only where every rank reads the same number of batches (as from
  /// data::Loader, whose evaluation steps are the same on every rank).
  using Interrupt = std::function<bool()>;

  /// Counts `head`'s right predictions (argmax) over this rank's batches, then sums the counts
  /// over the ranks (collective). Empty batches are skipped. Nothing when `interrupt` abandoned
  /// the pass: no counts summed, no features cached.
  std::optional<EvalCounts> run(const BatchSource& source, const Features& features,
                                const Head& head, const Interrupt& interrupt = {});

  /// The same for several heads over one pass of the features (a sweep), each also counted per
  /// class of `classes` (labels and predictions 0 .. classes-1) into its confusion matrix. One
  /// collective sums every head's counts.
  std::optional<std::vector<EvalCounts>> run(const BatchSource& source, const Features& features,
                                             const std::vector<Head>& heads, int64_t classes,
                                             const Interrupt& interrupt = {});

  /// True once features are cached (the next run reads no batch).
  bool cached() const { return cache_.has_value(); }

 private:
  struct CachedBatch {
    at::Tensor features, labels;
  };
  comm::Communicator& comm_;
  bool cache_features_;
  std::optional<std::vector<CachedBatch>> cache_;
};

}  // namespace pets::train
