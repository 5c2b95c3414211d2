#include "pets/train/run/run_parts.hpp"

#include <map>
#include <string>

#include "pets/comm/mpi_comm.hpp"
#include "pets/data/loader.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/report/tensorboard.hpp"
#include "pets/train/run/memory_fit.hpp"
#include "pets/train/run/run_session.hpp"
#include "pets/train/run/startup.hpp"
#include "pets/util/log.hpp"
#include "pets/util/memory.hpp"
#include "pets/util/threads.hpp"

namespace pets::train {
namespace {

using data::SplitKind;

/// This rank's batch sizes of `kind` from `loader`: every step's but the last, and the last's.
std::vector<int64_t> step_batch_sizes(const data::Loader& loader, SplitKind kind) {
  std::vector<int64_t> sizes;
  for (const int64_t step : {int64_t{0}, loader.steps_per_epoch(kind) - 1})
    if (step >= 0) sizes.push_back(static_cast<int64_t>(loader.step_indices(kind, 0, step).size()));
  return sizes;
}

}  // namespace

RunParts::RunParts(const TrainOptions& options, const comm::MpiComm& mpi,
                   const DebugSwitches& switches, RunSession& session, TensorBoardLog& board,
                   RankLog& log) {
  backend = make_backend(options, mpi, switches);
  // Before the first tensor: every step's activations then reuse mapped pages (util/memory.hpp).
  if (!switches.default_malloc && !retain_freed_memory())
    log.note("notice: the allocator refused to keep freed memory; steps may run slower");
  const ThreadChoice threads = choose_threads(options.threads, mpi.local_size());
  if (!threads.warning.empty()) log.note("warning: " + threads.warning);
  torch::set_num_threads(threads.threads);
  for (const auto& n : backend->notices()) log.note(n);
  torch::manual_seed(options.seed);
  data = std::make_unique<RunData>(options, mpi, *backend, threads.threads, log);
  model = make_run_model(options, data->loader->num_classes(), *backend, log);
  data->start_input(*backend, options.input, options.resident);
  // Before anything of the training is made: a run that does not fit ends here, on every rank.
  check_memory_fit(options, mpi, *backend, *model, *data->loader, log);
  batchnorm = std::make_unique<BatchNormSync>(*model, mpi, backend->device_comm(),
                                              options.bn_mode == BnMode::kTrain);
  StepSettings settings = backend->step_settings();
  if (options.unfreeze != Unfreeze::kNone)
    settings.backbone =
        BackboneTraining{first_trained_stage(options.unfreeze), options.backbone_lr_ratio};
  hooks = std::make_unique<SwitchHooks>(switches, mpi.rank(), &backend->host_comm());
  settings.hooks = hooks->hooks();
  const int64_t steps = data->loader->steps_per_epoch(SplitKind::kTrain);
  const int64_t train_images = data->loader->store().split(SplitKind::kTrain).size();
  // One head per --max-lr value, each with its own schedule.
  std::vector<OneCycleOptions> schedules;
  for (const double max_lr : options.max_lr)
    schedules.push_back(
        accelerate_onecycle(max_lr, options.epochs, train_images, options.batch_size, mpi.size()));
  step = std::make_unique<TrainStep>(*model, backend->device_comm(), schedules, settings);
  stop = std::make_unique<StopAgreement>(backend->host_comm());
  // Under --bn-mode eval a frozen backbone is folded once and its evaluation features cached; a
  // trained one changes every step, so neither (each evaluation folds its epoch's weights).
  const bool fold =
      options.bn_mode == BnMode::kEval && !switches.unfolded && options.unfreeze == Unfreeze::kNone;
  evaluator = std::make_unique<Evaluator>(backend->host_comm(), fold);
  if (session.resuming())
    start = resume_run(session, data->shape(options, mpi.size()), mpi.size(), steps, *batchnorm,
                       *step, board, log);
  if (fold) {
    model->eval();
    folded = std::make_unique<model::FoldedBackbone>(*model);
  }
  if (switches.dump_steps) {
    dump = std::make_unique<StepDump>(
        *switches.dump_steps, mpi.rank(),
        std::map<std::string, double>{
            {"ranks", mpi.size()},
            {"batch_size", static_cast<double>(options.batch_size)},
            {"epochs", static_cast<double>(options.epochs)},
            {"max_lr", options.max_lr.front()},
            {"seed", static_cast<double>(options.seed)},
            {"train_images", static_cast<double>(train_images)},
            {"steps_per_epoch", static_cast<double>(steps)},
            {"image_size", static_cast<double>(data->loader->options().image_size)},
            {"unfrozen_stages", static_cast<double>(options.unfreeze)},
            {"backbone_lr_ratio", options.backbone_lr_ratio},
            {"unfreeze_epoch", static_cast<double>(options.unfreeze_epoch)}});
  }
  warm_up(options, switches);
  log.note(startup_text(startup_facts(options, mpi, *backend, *data, threads.threads)));
  progress = std::make_unique<RunProgress>(progress_shape(options, mpi.size(), *data, fold));
}

RunParts::~RunParts() = default;

void RunParts::warm_up(const TrainOptions& options, const DebugSwitches& switches) {
  if (!backend->warms_up()) return;
  const int64_t size = data->loader->options().image_size;
  model->train(options.bn_mode == BnMode::kTrain);
  backend->fitting(kBatchSizeKey, options.batch_size, [&] {
    backend->warm_up(*model, folded.get(), step_batch_sizes(*data->loader, SplitKind::kTrain),
                     size);
  });
  // The evaluation's shapes through the backbone it runs (evaluate_epoch): the run's fold, else a
  // fold of the current statistics (each evaluation folds its epoch's afresh), unless
  // PETS_UNFOLDED.
  model->eval();
  std::unique_ptr<model::FoldedBackbone> fold;
  if (!folded && !switches.unfolded) fold = std::make_unique<model::FoldedBackbone>(*model);
  backend->fitting(kEvalBatchSizeKey, options.eval_batch_size, [&] {
    backend->warm_up(*model, folded ? folded.get() : fold.get(),
                     step_batch_sizes(*data->loader, SplitKind::kEval), size);
  });
}

ExportedHead RunParts::exported_head(int head) const {
  return {step->head_weight(head), step->head_bias(head)};
}

const std::vector<std::string>& RunParts::labels() const {
  return data->loader->store().label_names();
}

}  // namespace pets::train
