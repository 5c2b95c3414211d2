#pragma once
/// \file
/// An epoch's evaluation on the run's parts: every head counted over the held-out images in one
/// pass of the backbone, and each head's figures of the epoch (its training and evaluation
/// figures together), from which the epoch's metrics are made (set_heads).

#include <cstdint>
#include <optional>
#include <vector>

#include "pets/train/options/debug_switches.hpp"
#include "pets/train/report/metrics.hpp"
#include "pets/train/step/evaluation.hpp"

namespace pets {
class RankLog;
}

namespace pets::train {

class TrainStep;
struct RunParts;

/// Counts every head of `parts.step` over the held-out images at the end of `epoch`, with the
/// model in eval mode and its backbone folded from the current statistics (or the run's fold;
/// PETS_UNFOLDED: unfolded). The ranks agree on a stop before every batch (collective); nothing
/// when they agreed to stop. `rank` and `switches`: the test switches' pause in the evaluation.
std::optional<std::vector<EvalCounts>> evaluate_heads(RunParts& parts,
                                                      const DebugSwitches& switches, int rank,
                                                      int64_t epoch, RankLog& log);

/// Head `head`'s figures of an epoch trained to `position` (its loss sum there, its last lr in
/// `step`) with `max_lr`, and evaluated as `counts`.
HeadMetrics head_figures(const TrainStep& step, int head, double max_lr,
                         const EpochPosition& position, const EvalCounts& counts);

}  // namespace pets::train
