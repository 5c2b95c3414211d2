#pragma once
/// \file
/// pets_predict: classifies image files with a model pets_train exported (exported_model.hpp),
/// each image made into the model's input exactly as evaluation makes it (decoded, scaled down
/// to the store's max_side, data::transform_eval), under MPI with the images split among the
/// ranks and rank 0 printing every result in input order.

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pets/train/options/options.hpp"
#include "pets/train/state/exported_model.hpp"

namespace pets::comm {
class MpiComm;
}

namespace pets::train {

/// Everything pets_predict can be told; the member initialisers are the defaults --help shows.
struct PredictOptions {
  std::string model;                ///< an exported model.safetensors or best.safetensors
  std::vector<std::string> inputs;  ///< image files and folders of images, in order
  int top_k = 1;                    ///< classes printed per image, most probable first
  int batch_size = 32;              ///< images per rank per forward pass
  int threads = 0;                  ///< CPU threads per rank; 0: the cores of the affinity mask
  DeviceChoice device = DeviceChoice::kAuto;
};

/// The result of parsing pets_predict's command line.
struct PredictParse {
  bool help = false;  ///< --help: print `help_text` and exit 0
  PredictOptions options;
  std::string help_text;
};

/// Parses `argv[1..argc)` (no abbreviated options). Throws pets::UsageError naming the option:
/// an unknown or repeated option, a bad value, no --model or no image (unless --help).
PredictParse parse_predict_options(int argc, const char* const* argv);

/// The image files `inputs` stand for, in order: a file as itself (decoded by its content,
/// whatever its name), a folder as its files with an image extension (data::has_image_extension),
/// sorted by name, without its subfolders. Throws pets::UsageError naming the path for one that
/// does not exist or is neither a file nor a folder, and for a folder without such files.
std::vector<std::string> list_images(const std::vector<std::string>& inputs);

/// One image's result.
struct Prediction {
  std::vector<std::pair<int64_t, float>> top;  ///< (class, probability), most probable first
  std::string error;                           ///< why the image could not be read; top empty
};

/// An exported model, loaded and ready to classify.
class Predictor {
 public:
  /// Reads `model_path` (pets::UsageError naming it: not a safetensors file, a checkpoint, no
  /// label names, preprocessing this build does not make, tensors that do not fit) onto `device`.
  Predictor(const std::string& model_path, c10::Device device);
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  const ModelCard& card() const { return card_; }

  /// The top `top_k` classes of each file, in order: the readable ones in one forward pass.
  std::vector<Prediction> predict(const std::vector<std::string>& files, int top_k);

 private:
  struct State;
  ModelCard card_;
  c10::Device device_;
  std::unique_ptr<State> state_;
};

/// The line pets_predict prints for an image: `FILE  CLASS  PROBABILITY` and for every further
/// class of `p.top` `  CLASS  PROBABILITY` (probability with 4 decimals).
std::string prediction_line(const std::string& file, const Prediction& p,
                            const std::vector<std::string>& labels);

/// pets_predict's run (collective over `mpi`): batch j of the image list goes to rank j %
/// size, so every batch holds the same images whatever the number of ranks; rank 0 prints the
/// results in input order (stdout) and a warning for every image that could not be read
/// (stderr). Returns 0; throws pets::UsageError on every rank for bad input, and at the end when
/// an image could not be read.
int run_prediction(const PredictOptions& options, const comm::MpiComm& mpi);

}  // namespace pets::train
