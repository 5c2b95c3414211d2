#include "pets/train/run/startup.hpp"

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/run/run_data.hpp"

namespace pets::train {

using data::SplitKind;

StartupFacts startup_facts(const TrainOptions& options, const comm::MpiComm& mpi,
                           const Backend& backend, const RunData& data, int threads) {
  StartupFacts f;
  f.ranks = mpi.size();
  f.hosts = comm::count_hosts(mpi.get());
  f.device = backend.device_text();
  f.threads = threads;
  f.precision = options.mixed_precision;
  f.bn_mode = options.bn_mode;
  f.unfreeze = options.unfreeze;
  f.unfreeze_epoch = options.unfreeze_epoch;
  f.backbone_lr_ratio = options.backbone_lr_ratio;
  f.device_input = backend.device_input();
  f.resident_bytes = data.input->resident_bytes();
  f.data = options.data;
  f.store_id = data.loader->store().store_id();
  f.train_images = data.loader->store().split(SplitKind::kTrain).size();
  f.eval_images = data.loader->store().split(SplitKind::kEval).size();
  f.steps_per_epoch = data.loader->steps_per_epoch(SplitKind::kTrain);
  f.epochs = options.epochs;
  f.out = options.out;
  return f;
}

RunProgress::Shape progress_shape(const TrainOptions& options, int world, const RunData& data,
                                  bool evaluate_once) {
  RunProgress::Shape s;
  s.epochs = options.epochs;
  s.steps = data.loader->steps_per_epoch(SplitKind::kTrain);
  s.train_step_images = options.batch_size * world;
  s.eval_steps = data.loader->steps_per_epoch(SplitKind::kEval);
  s.eval_step_images = options.eval_batch_size * world;
  s.eval_images = data.loader->store().split(SplitKind::kEval).size();
  s.evaluate_once = evaluate_once;
  return s;
}

}  // namespace pets::train
