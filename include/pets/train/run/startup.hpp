#pragma once
/// \file
/// A run's start-up line and the shape of its progress (run_report.hpp), from the run's parts:
/// the ranks and hosts, the backend's device and precision, the data's splits and steps.

#include "pets/train/options/options.hpp"
#include "pets/train/report/run_report.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets::train {

class Backend;
struct RunData;

/// What the start-up line shows of the run of `options` on `mpi` with `backend`, `data` and
/// `threads` CPU threads per rank. Collective over `mpi` (the hosts are counted over the ranks).
StartupFacts startup_facts(const TrainOptions& options, const comm::MpiComm& mpi,
                           const Backend& backend, const RunData& data, int threads);

/// The progress shape of the run of `options` on `world` ranks with `data`; `evaluate_once`:
/// later evaluations reuse the first one's features.
RunProgress::Shape progress_shape(const TrainOptions& options, int world, const RunData& data,
                                  bool evaluate_once);

}  // namespace pets::train
