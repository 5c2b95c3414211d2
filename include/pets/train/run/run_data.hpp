#pragma once
/// \file
/// A run's images on one rank: the loader of --data (this rank's share, the batch sizes and the
/// seed of the options, the input path the backend chose), its batches with their images on the
/// backend's device, and the class names.

#include <memory>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"
#include "pets/train/options/resume_check.hpp"

namespace pets {
class RankLog;
}
namespace pets::comm {
class MpiComm;
}
namespace pets::data {
class Loader;
}

namespace pets::train {

class Backend;
class InputPipeline;

struct RunData {
  /// Opens --data. Throws pets::UsageError on every rank when the store cannot be read or has no
  /// training or no evaluation images (collective); warnings about classes missing from a split
  /// go to `log`. The loader's worker threads come from the `cores` this rank owns
  /// (pets::loader_workers: one on the CPU, the cores the step leaves idle on a GPU).
  RunData(const TrainOptions& options, const comm::MpiComm& mpi, const Backend& backend, int cores,
          RankLog& log);
  ~RunData();
  RunData(const RunData&) = delete;
  RunData& operator=(const RunData&) = delete;

  /// Makes `input` from the loader (make_input_pipeline) on `backend`'s device, on the path
  /// --input `input_choice` takes there, with --resident `resident`: once the model is on the
  /// device, whose free memory decides whether the store's images are held there. Collective.
  void start_input(Backend& backend, InputChoice input_choice, ResidentChoice resident);

  std::unique_ptr<data::Loader> loader;
  std::unique_ptr<InputPipeline> input;  ///< null until start_input
  std::vector<std::string> labels;       ///< the store's class names, in the head's order

  /// The run of `options` on `world` ranks with these data, as resume compares it with a
  /// checkpoint's.
  RunShape shape(const TrainOptions& options, int world) const;
};

}  // namespace pets::train
