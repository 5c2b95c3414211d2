#include "pets/train/run/run_data.hpp"

#include <filesystem>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/threads.hpp"

namespace pets::train {

using data::SplitKind;

RunData::RunData(const TrainOptions& options, const comm::MpiComm& mpi, const Backend& backend,
                 int cores, RankLog& log) {
  data::LoaderOptions lo;
  lo.path = options.data;
  lo.rank = mpi.rank();
  lo.world = mpi.size();
  lo.batch_size = options.batch_size;
  lo.eval_batch_size = options.eval_batch_size;
  lo.image_size = options.image_size;
  lo.seed = options.seed;
  lo.workers = options.loader_threads > 0 ? options.loader_threads
                                          : loader_workers(backend.device().is_cuda(), cores);
  lo.prefetch = 3;
  backend.configure_loader(lo);
  loader = agree_on_usage([&] { return std::make_unique<data::Loader>(lo); });
  labels = loader->store().label_names();
  agree_on_usage([&] {
    if (loader->steps_per_epoch(SplitKind::kTrain) == 0)
      throw UsageError(options.data + ": no training images");
    if (loader->steps_per_epoch(SplitKind::kEval) == 0)
      throw UsageError(options.data + ": no evaluation images");
  });
  for (const std::string& w :
       data::class_coverage_warnings(labels, loader->store().split(SplitKind::kTrain).labels,
                                     loader->store().split(SplitKind::kEval).labels,
                                     data::split_note(loader->store().split_made())))
    log.note("warning: " + options.data + ": " + w);
}

RunData::~RunData() = default;

void RunData::start_input(Backend& backend, InputChoice input_choice, ResidentChoice resident) {
  input =
      make_input_pipeline(*loader, backend.device(), input_choice, resident, backend.host_comm());
}

RunShape RunData::shape(const TrainOptions& options, int world) const {
  return {RunConfig::of(options, labels),
          world,
          loader->steps_per_epoch(SplitKind::kTrain),
          {loader->store().store_id(),
           std::filesystem::absolute(options.data).lexically_normal().string()}};
}

}  // namespace pets::train
