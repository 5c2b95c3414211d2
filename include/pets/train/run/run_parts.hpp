#pragma once
/// \file
/// The parts of a run on one rank, made and wired together once before its first epoch: the
/// backend, the data, the model, the step and its heads, the BatchNorm sync, the stop agreement,
/// the evaluator, the folded backbone, the progress line and the step dump, and where the run
/// starts. The trainer (trainer.cpp) runs the epochs on them.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/train/options/debug_switches.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/report/run_report.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/run/run_data.hpp"
#include "pets/train/run/run_start.hpp"
#include "pets/train/run/step_dump.hpp"
#include "pets/train/run/stop_signal.hpp"
#include "pets/train/state/exported_model.hpp"
#include "pets/train/step/batchnorm_sync.hpp"
#include "pets/train/step/evaluation.hpp"
#include "pets/train/step/step_hooks.hpp"
#include "pets/train/step/train_step.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets {
class RankLog;
}

namespace pets::train {

class RunSession;
class TensorBoardLog;

struct RunParts {
  /// Makes every part (collective): the backend for the options, the data on its device, the
  /// model, one head per --max-lr value each with its schedule, and, when `session` resumes, the
  /// state of its latest checkpoint (resume_run; `board` learns its step count). On a GPU, the
  /// training steps' and the evaluation's shapes are warmed up before it returns. Notices and the
  /// start-up text go to `log`.
  RunParts(const TrainOptions& options, const comm::MpiComm& mpi, const DebugSwitches& switches,
           RunSession& session, TensorBoardLog& board, RankLog& log);
  ~RunParts();
  RunParts(const RunParts&) = delete;
  RunParts& operator=(const RunParts&) = delete;

  /// Head `head`'s tensors as an export writes them (the model's fc for head 0).
  ExportedHead exported_head(int head) const;
  /// The data's class names, in label order.
  const std::vector<std::string>& labels() const;

  std::unique_ptr<Backend> backend;
  std::unique_ptr<RunData> data;  ///< the loader, its batches on the device, the labels
  model::ResNet50d model{nullptr};
  std::unique_ptr<SwitchHooks> hooks;  // before step, whose hooks refer to it
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<BatchNormSync> batchnorm;
  std::unique_ptr<StopAgreement> stop;
  std::unique_ptr<Evaluator> evaluator;
  /// --bn-mode eval: the backbone never changes, so it runs folded (BatchNorm folded into the
  /// convolutions), and the evaluator keeps the evaluation features. PETS_UNFOLDED keeps the
  /// plain path (no fold, no cache), to compare against.
  std::unique_ptr<model::FoldedBackbone> folded;
  std::unique_ptr<RunProgress> progress;  ///< the progress line and the run's time left
  std::unique_ptr<StepDump> dump;         ///< PETS_DUMP_STEPS
  ResumePoint start;  ///< where the run starts: epoch 0, or a checkpoint's point (resume_run)

 private:
  /// On a GPU, the training steps' forward and the evaluation's, once for each batch size, before
  /// the first epoch (Backend::warm_up).
  void warm_up(const TrainOptions& options, const DebugSwitches& switches);
};

}  // namespace pets::train
