#include "pets/train/run/epoch_evaluation.hpp"

#include "pets/data/loader.hpp"
#include "pets/train/input/input_pipeline.hpp"
#include "pets/train/run/run_parts.hpp"
#include "pets/util/log.hpp"

namespace pets::train {

std::optional<std::vector<EvalCounts>> evaluate_heads(RunParts& parts,
                                                      const DebugSwitches& switches, int rank,
                                                      int64_t epoch, RankLog& log) {
  parts.model->eval();
  // Evaluation uses the running statistics, so its backbone can always be folded: under
  // --bn-mode train afresh from this epoch's (synchronised) statistics, a fraction of a second.
  std::unique_ptr<model::FoldedBackbone> epoch_fold;
  if (!parts.folded && !switches.unfolded)
    epoch_fold = std::make_unique<model::FoldedBackbone>(*parts.model);
  const model::FoldedBackbone* backbone = parts.folded ? parts.folded.get() : epoch_fold.get();
  InputPipeline& input = *parts.data->input;
  const BatchSource source{[&] { input.start_epoch(data::SplitKind::kEval, epoch); },
                           [&] { return input.next(); }};
  // A long evaluation would outlast a launcher's kill timeout: the ranks agree on a stop before
  // every batch (every rank reads the same number of batches).
  int64_t reads = 0;
  const auto interrupt = [&] {
    log.progress(parts.progress->evaluating(epoch, reads));
    if (reads++ == 1 && switches.pause_eval_seconds > 0 && rank == 0)
      pause_for_test("in the evaluation", switches.pause_eval_seconds);
    return parts.stop->agree();
  };
  std::vector<Evaluator::Head> heads;
  for (int k = 0; k < parts.step->heads(); ++k)
    heads.push_back([&parts, k](const torch::Tensor& features) {
      return parts.step->forward_head(k, features);
    });
  return parts.backend->fitting(
      kEvalBatchSizeKey, parts.data->loader->options().eval_batch_size, [&] {
        return parts.evaluator->run(
            source,
            [&](data::Batch& batch) {
              return parts.backend->forward()(*parts.model, backbone, input.images(batch));
            },
            heads, parts.data->loader->num_classes(), interrupt);
      });
}

HeadMetrics head_figures(const TrainStep& step, int head, double max_lr,
                         const EpochPosition& position, const EvalCounts& counts) {
  HeadMetrics h;
  h.max_lr = max_lr;
  h.lr = step.last_lr(head);
  const double loss_sum = head == 0 ? position.loss_sum : position.more_loss_sums.at(head - 1);
  h.train_loss = position.images > 0 ? loss_sum / position.images : 0.0;
  h.correct = counts.correct;
  h.evaluated = counts.evaluated;
  h.accuracy = percent(counts.correct, counts.evaluated);
  h.class_correct = counts.class_correct();
  h.class_evaluated = counts.class_evaluated();
  return h;
}

}  // namespace pets::train
