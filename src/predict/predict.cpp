#include "pets/predict/predict.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/data/augment.hpp"
#include "pets/data/decode.hpp"
#include "pets/data/labels.hpp"
#include "pets/data/loader.hpp"
#include "pets/model/folded.hpp"
#include "pets/model/resnet50d.hpp"
#include "pets/model/safetensors.hpp"
#include "pets/model/state_dict.hpp"
#include "pets/train/input/batch_tensors.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/train/step/backbone_forward.hpp"
#include "pets/train/step/train_step.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"
#include "pets/util/log.hpp"
#include "pets/util/threads.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

[[noreturn]] void usage(const std::string& message) { throw UsageError(message); }

po::options_description predict_options() {
  const PredictOptions d;
  po::options_description o("Options");
  o.add_options()("help,h", po::bool_switch(), "print this help and exit")(
      "model", po::value<std::string>()->value_name("FILE"),
      "model.safetensors or best.safetensors written by pets_train (required)")(
      "top-k", po::value<int>()->default_value(d.top_k)->value_name("K"),
      "print the K most probable classes of each image, most probable first")(
      "batch-size", po::value<int>()->default_value(d.batch_size)->value_name("N"),
      "images per rank per forward pass")(
      "threads", po::value<int>()->default_value(d.threads)->value_name("N"),
      "CPU threads per rank; 0: the cores in the rank's affinity mask")(
      "device", po::value<std::string>()->default_value(to_string(d.device)),
      "auto | cpu | cuda (auto: CUDA device local_rank % count when present)");
  return o;
}

std::string help_text() {
  std::ostringstream s;
  s << "Usage: pets_predict --model FILE [options] IMAGE_OR_FOLDER...\n"
       "Classifies images with a model exported by pets_train. Prints one line per image on\n"
       "stdout, in input order: `FILE  CLASS  PROBABILITY` (with --top-k K, K class and\n"
       "probability pairs, most probable first). Each image is made into the model's input as\n"
       "evaluation made it (the preprocessing in the model's metadata). A folder stands for its\n"
       "image files (.jpg .jpeg .png .gif .webp .bmp .ppm .pgm .tif .tiff, any letter case;\n"
       "sorted by name, not its subfolders); a file named on the command line is decoded\n"
       "whatever its name (JPEG, PNG, GIF, WebP, BMP, PGM/PPM; not TIFF). Under mpirun the\n"
       "images are split among the ranks; the output is the same.\n"
       "An image that cannot be read gets a warning on stderr and no line; the others are\n"
       "classified, and the exit status is then 2 (as for bad usage or a bad model).\n\n"
    << predict_options();
  return s.str();
}

int positive(const po::variables_map& vm, const char* name) {
  const int value = vm[name].as<int>();
  if (value <= 0)
    usage("--" + std::string(name) + " must be positive, got " + std::to_string(value));
  return value;
}

}  // namespace

PredictParse parse_predict_options(int argc, const char* const* argv) {
  po::options_description options = predict_options();
  po::options_description hidden;
  hidden.add_options()("inputs", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("inputs", -1);
  po::variables_map vm;
  try {
    po::store(
        po::command_line_parser(argc, argv)
            .options(all)
            .positional(positional)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run(),
        vm);
  } catch (const po::error& e) {
    usage(program_options_message(e) + " (see --help)");
  }
  PredictParse result;
  result.help_text = help_text();
  if (vm["help"].as<bool>()) {
    result.help = true;
    return result;
  }
  PredictOptions& o = result.options;
  if (!vm.count("model") || vm["model"].as<std::string>().empty())
    usage(
        "the option '--model' is required: the model.safetensors of a pets_train run (see --help)");
  o.model = vm["model"].as<std::string>();
  if (vm.count("inputs")) o.inputs = vm["inputs"].as<std::vector<std::string>>();
  if (o.inputs.empty()) usage("no image given: name image files or folders (see --help)");
  o.top_k = positive(vm, "top-k");
  o.batch_size = positive(vm, "batch-size");
  o.threads = vm["threads"].as<int>();
  if (o.threads < 0)
    usage("--threads must be 0 (automatic) or positive, got " + std::to_string(o.threads));
  const std::string device = vm["device"].as<std::string>();
  bool known = false;
  for (const DeviceChoice c : {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda}) {
    if (to_string(c) == device) {
      o.device = c;
      known = true;
    }
  }
  if (!known) usage("--device must be one of auto, cpu, cuda, got '" + device + "'");
  return result;
}

std::vector<std::string> list_images(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    if (status.type() == fs::file_type::not_found) usage("no file or folder '" + input + "'");
    if (ec) usage("cannot read '" + input + "': " + ec.message());
    if (fs::is_regular_file(status)) {
      files.push_back(input);
      continue;
    }
    if (!fs::is_directory(status)) usage("'" + input + "' is neither a file nor a folder");
    std::vector<std::string> names;
    fs::directory_iterator it(input, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_regular_file(type_ec) && data::has_image_extension(it->path().filename().string()))
        names.push_back(it->path().filename().string());
    }
    if (ec) usage("cannot list folder '" + input + "': " + ec.message());
    if (names.empty())
      usage("folder '" + input + "' holds no image file (*.jpg, *.jpeg, *.png, *.gif, ...)");
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) files.push_back((fs::path(input) / name).string());
  }
  return files;
}

struct Predictor::State {
  model::ResNet50d model{nullptr};
  std::unique_ptr<model::FoldedBackbone> folded;
  data::Decoder decoder;
};

Predictor::Predictor(const std::string& model_path, c10::Device device)
    : device_(device), state_(std::make_unique<State>()) {
  if (const auto problem = input_file_problem(model_path)) usage("--model: " + *problem);
  std::optional<model::SafetensorsFile> file;
  try {
    file.emplace(model::SafetensorsFile::open(model_path));
  } catch (const Error& e) {
    usage("--model " + model_path + " is not a safetensors model: " + e.what());
  }
  card_ = read_model_card(*file);
  const Preprocessing& p = card_.preprocessing;
  // data::transform_eval normalises with these; a model asking for others is not this build's.
  for (int c = 0; c < 3; ++c)
    if (p.mean[c] != data::kMean[c] || p.std[c] != data::kStd[c])
      usage(model_path + ": its mean and std are not ImageNet's, which this pets_predict applies");
  const auto classes = static_cast<int64_t>(card_.labels.size());
  state_->model = model::ResNet50d(classes);
  model::LoadOptions strict;
  strict.resizable_head.clear();
  model::load_state_dict(*state_->model, *file, strict);
  state_->model->eval();
  state_->model->to_channels_last();
  state_->model->to(device_);
  // As evaluation runs it: BatchNorm folded into the convolutions.
  state_->folded = std::make_unique<model::FoldedBackbone>(*state_->model);
}

Predictor::~Predictor() = default;

std::vector<Prediction> Predictor::predict(const std::vector<std::string>& files, int top_k) {
  std::vector<Prediction> out(files.size());
  const int size = card_.preprocessing.image_size;
  const std::size_t per_image = 3 * static_cast<std::size_t>(size) * size;
  data::DecodeOptions decode;
  decode.max_side = card_.preprocessing.max_side;
  data::Batch batch;
  batch.h = batch.w = size;
  std::vector<std::size_t> readable;
  for (std::size_t i = 0; i < files.size(); ++i) {
    data::DecodeResult r = state_->decoder.decode_file(files[i], decode);
    if (!r.ok) {
      out[i].error = r.reason;
      continue;
    }
    batch.pixels.resize(batch.pixels.size() + per_image);
    data::transform_eval(r.image, size, batch.pixels.data() + batch.pixels.size() - per_image);
    readable.push_back(i);
  }
  if (readable.empty()) return out;
  batch.n = static_cast<int64_t>(readable.size());
  torch::NoGradGuard no_grad;
  const at::Tensor features =
      BackboneForward()(*state_->model, state_->folded.get(), batch_images(batch, device_));
  const at::Tensor probabilities = torch::softmax(state_->model->forward_head(features), 1);
  const auto [values, indices] = probabilities.topk(top_k, 1);
  const at::Tensor v = values.cpu().contiguous(), k = indices.cpu().contiguous();
  for (std::size_t r = 0; r < readable.size(); ++r) {
    Prediction& p = out[readable[r]];
    for (int j = 0; j < top_k; ++j)
      p.top.emplace_back(k[static_cast<int64_t>(r)][j].item<int64_t>(),
                         v[static_cast<int64_t>(r)][j].item<float>());
  }
  return out;
}

std::string prediction_line(const std::string& file, const Prediction& p,
                            const std::vector<std::string>& labels) {
  std::string line = file;
  for (const auto& [label, probability] : p.top) {
    char number[32];
    std::snprintf(number, sizeof number, "%.4f", probability);
    line += "  " + labels.at(static_cast<std::size_t>(label)) + "  " + number;
  }
  return line;
}

int run_prediction(const PredictOptions& options, const comm::MpiComm& mpi) {
  RankLog log(mpi.rank() == 0);
  const ThreadChoice threads = choose_threads(options.threads, mpi.local_size());
  if (!threads.warning.empty()) log.note("warning: " + threads.warning);
  torch::set_num_threads(threads.threads);
  const std::vector<std::string> files =
      agree_on_usage([&] { return list_images(options.inputs); });
  std::unique_ptr<Predictor> predictor = agree_on_usage([&] {
    auto p =
        std::make_unique<Predictor>(options.model, pick_device(options.device, mpi.local_rank()));
    if (options.top_k > static_cast<int>(p->card().labels.size()))
      usage("--top-k " + std::to_string(options.top_k) + ": the model has " +
            std::to_string(p->card().labels.size()) + " classes");
    return p;
  });
  const auto n = static_cast<int64_t>(files.size());
  const int64_t batch = options.batch_size;
  const int64_t batches = (n + batch - 1) / batch;
  std::vector<std::string> failed;
  // Round r: batch r * size + rank on each rank; gathered in rank order, that is input order.
  for (int64_t first = 0; first < batches; first += mpi.size()) {
    std::vector<std::string> mine;
    const int64_t j = first + mpi.rank();
    if (j < batches) {
      const std::vector<std::string> part(files.begin() + j * batch,
                                          files.begin() + std::min(n, (j + 1) * batch));
      const std::vector<Prediction> results = predictor->predict(part, options.top_k);
      for (std::size_t i = 0; i < part.size(); ++i)
        mine.push_back(results[i].error.empty()
                           ? "+" + prediction_line(part[i], results[i], predictor->card().labels)
                           : "-cannot read image " + part[i] + ": " + results[i].error);
    }
    for (const std::string& line : comm::allgather_strings(mine, mpi.get())) {
      if (line[0] == '+') {
        log.result(line.substr(1));
      } else {
        failed.push_back(line.substr(1));
        if (n > 1) log.note("warning: " + line.substr(1) + "; skipped");
      }
    }
  }
  if (failed.size() == 1 && n == 1) usage(failed.front());
  if (!failed.empty())
    usage(std::to_string(failed.size()) + " of " + std::to_string(n) +
          " images could not be read (named above); the others are classified");
  return kExitSuccess;
}

}  // namespace pets::train
