#include "pets/train/options/options.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include "pets/util/app.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {

namespace po = boost::program_options;

namespace {

[[noreturn]] void usage(const std::string& message) { throw UsageError(message); }

std::string text_of(int value) { return std::to_string(value); }
std::string text_of(double value) { return format_number(value); }
std::string text_of(bool value) { return value ? "true" : "false"; }
std::string text_of(const std::string& value) { return value; }
std::string text_of(const std::vector<double>& values) { return max_lr_text(values); }

/// One training option: its key, its help line and its value in `TrainOptions` as a user types
/// it. entries() is the one list of them: --help, the parser's defaults and the config file all
/// read it, so each default is written once, as TrainOptions' member initialiser.
struct Entry {
  const char* key;
  std::string help;
  std::string value;  ///< empty: unset (no default in --help; commented out in a config file)
  std::function<po::value_semantic*()> semantic;  ///< Boost's parser, `value` as its default
  /// A setting of the run (it changes what is computed): fixed for the run's life, so a resumed
  /// run keeps its own (resume_check.hpp). The others say how and where this start runs.
  bool fixed = false;
};

/// `entry` marked as one of a run's fixed settings.
Entry fixed(Entry entry) {
  entry.fixed = true;
  return entry;
}

/// An option of type T (int, double, std::string) whose value defaults to `value`, shown as
/// text_of(value) ("(=3e-2)", not "(=0.029999999999999999)").
template <typename T>
Entry valued(const char* key, const char* help, const T& value, const char* value_name = nullptr) {
  std::string text = text_of(value);
  return {key, help, text, [value, text, value_name] {
            po::typed_value<T>* semantic = po::value<T>()->default_value(value, text);
            return value_name != nullptr ? semantic->value_name(value_name) : semantic;
          }};
}

/// A string option without a default (a file that is required, or optional).
Entry unset(const char* key, const char* help, const std::string& value, const char* value_name) {
  return {key, help, value,
          [value_name] { return po::value<std::string>()->value_name(value_name); }};
}

/// A string value shown in --help as `shown` alone: Boost would write `[=yes|auto(=yes)] (=no)`
/// for --resume, its implicit value and its default, which the help text says in words.
class ShownValue : public po::typed_value<std::string> {
 public:
  explicit ShownValue(std::string shown)
      : po::typed_value<std::string>(nullptr), shown_(std::move(shown)) {}
  std::string name() const override { return shown_; }

 private:
  std::string shown_;
};

/// A string option that may also be given without a value, meaning `implicit` (`--resume`);
/// shown as `--key [=value_name]`.
Entry optional_value(const char* key, const char* help, const std::string& value,
                     const char* implicit, const char* value_name) {
  return {key, help, value, [value, implicit, value_name] {
            auto* semantic = new ShownValue(std::string("[=") + value_name + "]");
            return semantic->default_value(value)->implicit_value(implicit);
          }};
}

/// A flag: absent is false.
Entry flag(const char* key, const char* help, bool value) {
  return {key, help, text_of(value), [] { return po::bool_switch(); }};
}

/// Every training option with its value in `o`, in --help order. Enums and the seed are parsed
/// as strings by to_options (Boost would accept "-1" for an unsigned seed).
std::vector<Entry> entries(const TrainOptions& o) {
  std::vector<Entry> list = {
      unset("data",
            "HDF5 data set written by pets_preprocess (required, unless --resume takes it from "
            "the checkpoint)",
            o.data, "FILE"),
      fixed(valued("epochs", "passes over the training split", o.epochs)),
      fixed(valued(kBatchSizeKey, "training images per rank per step", o.batch_size)),
      valued(kEvalBatchSizeKey, "evaluation images per rank per step", o.eval_batch_size),
      fixed(valued("image-size",
                   "side in pixels of the square training crops and of the evaluation resize "
                   "(the tutorial's 224; at least 32)",
                   o.image_size)),
      fixed(valued("max-lr",
                   "OneCycle peak learning rate (Adam starts at max-lr/25); a comma-separated "
                   "list trains one head per value over one backbone pass (a sweep), the best on "
                   "held-out accuracy chosen",
                   text_of(o.max_lr))),
      fixed(valued("mixed-precision", "no | bf16 | fp16 (fp16 needs a CUDA device)",
                   to_string(o.mixed_precision))),
      fixed(valued("seed", "random seed (0 .. 2^64-1)", std::to_string(o.seed))),
      fixed(unset("pretrained",
                  "ResNet-50d weights (safetensors, timm names; data/fetch_weights.sh fetches "
                  "timm's); without it the backbone is random",
                  o.pretrained, "FILE")),
      fixed(valued("bn-mode",
                   "train: frozen backbone's BatchNorm uses batch statistics (as the tutorial); "
                   "eval: running statistics",
                   to_string(o.bn_mode))),
      fixed(valued("unfreeze",
                   "none | layer4 | layer3 | layer2 | layer1 | all: the backbone's stages that "
                   "train besides the head (layer3: layer3, layer4 and fc; all: the stem too); "
                   "none is the tutorial's frozen backbone",
                   to_string(o.unfreeze))),
      fixed(valued("backbone-lr-ratio",
                   "the trained backbone's learning rate as a fraction of the head's: its own "
                   "Adam group on the same OneCycle schedule, peak max-lr times this",
                   o.backbone_lr_ratio)),
      fixed(valued("unfreeze-epoch",
                   "epochs that train the head alone before --unfreeze's stages start training "
                   "(their Adam moments start then)",
                   o.unfreeze_epoch)),
      valued("device", "auto | cpu | cuda (auto: CUDA device local_rank % count when present)",
             to_string(o.device)),
      valued("input",
             "auto | cpu | device: where crops are resized and normalised (auto: on the device "
             "when it is CUDA, else by the CPU loader)",
             to_string(o.input)),
      valued("resident",
             "auto | on | off: on the device input path, hold every image of the store in the "
             "device's memory, so that the loader copies no pixels (auto: on CUDA when the store "
             "takes at most half of the memory free once the model is there)",
             to_string(o.resident)),
      valued("threads", "CPU threads per rank; 0: the cores in the rank's affinity mask",
             o.threads),
      valued("loader-threads",
             "loader worker threads per rank; 0: automatic (1 when the model is on the CPU; on "
             "a GPU the rank's cores but one, at most 4)",
             o.loader_threads),
      flag("deterministic",
           "deterministic algorithms only (cuDNN, cuBLAS): two runs with the same options on "
           "the same GPU give the same model bit for bit; slower on a GPU",
           o.deterministic),
      valued("out", "folder for checkpoints, metrics.jsonl and the final model", o.out, "DIR"),
      valued("progress",
             "auto | bar | lines | none (auto: a redrawn bar on a terminal, else plain lines)",
             to_string(o.progress)),
      valued("progress-interval",
             "seconds between plain progress lines (0: every step and evaluation batch)",
             o.progress_interval),
      unset("tensorboard",
            "write TensorBoard event files into DIR (loss, accuracy, lr, images/s per epoch and "
            "every --progress-interval; step: training steps done)",
            o.tensorboard, "DIR"),
      optional_value("resume",
                     "continue the run in --out from its latest complete checkpoint, with the "
                     "options it was started with (--data included); yes (--resume alone): "
                     "there must be one; auto: start a new run when --out holds none; default: "
                     "no (a new run). Options given must agree with the run's settings",
                     to_string(o.resume), "yes", "yes|auto"),
      flag("overwrite",
           "start a new run in an --out that holds an earlier run, removing that run's "
           "checkpoints, metrics.jsonl and model (other files stay); with --write-config: "
           "replace an existing FILE",
           o.overwrite),
      flag("keep-best",
           "also keep the model of the best epoch (highest accuracy, the first of equals) as "
           "best.safetensors in --out, written when an epoch becomes the best",
           o.keep_best),
      valued("keep-checkpoints",
             "the newest checkpoints kept in --out besides the best epoch's (older ones are "
             "removed as newer ones are written); 0: every one while the backbone is frozen "
             "(about 1 MB each), the newest 3 with --unfreeze (180 to 280 MB each)",
             o.keep_checkpoints, "N"),
  };
  // --resume's help names the fixed settings, from their marks above.
  std::string names;
  for (const Entry& e : list)
    if (e.fixed) names += std::string(names.empty() ? " (" : ", ") + "--" + e.key;
  for (Entry& e : list)
    if (std::string(e.key) == "resume") e.help += names + ")";
  return list;
}

/// The options a config file may set: everything but --help, --config and --write-config.
po::options_description training_options() {
  po::options_description o("Training options (also valid as `key = value` in a --config file)");
  for (const Entry& e : entries(TrainOptions{}))
    o.add_options()(e.key, e.semantic(), e.help.c_str());
  return o;
}

po::options_description general_options() {
  po::options_description o("General options");
  o.add_options()("help,h", po::bool_switch(), "print this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "read options from FILE; the command line overrides it (relative paths in FILE are "
      "taken from the current folder, not FILE's)")(
      "write-config", po::value<std::string>()->value_name("FILE"),
      "write every option's value to FILE as a commented config file, then exit (an existing "
      "FILE only with --overwrite; never the --data or --pretrained file)");
  return o;
}

int positive(const po::variables_map& vm, const char* name) {
  const int value = vm[name].as<int>();
  if (value <= 0)
    usage("--" + std::string(name) + " must be positive, got " + std::to_string(value));
  return value;
}

template <typename Enum, std::size_t N>
Enum parse_enum(const po::variables_map& vm, const char* name, const Enum (&values)[N]) {
  const std::string text = vm[name].as<std::string>();
  std::string choices;
  for (const Enum v : values) {
    if (to_string(v) == text) return v;
    choices += (choices.empty() ? "" : ", ") + to_string(v);
  }
  usage("--" + std::string(name) + " must be one of " + choices + ", got '" + text + "'");
}

/// --resume's value; a config file's `resume = true|false` (written as a flag before) too.
ResumeMode parse_resume(const std::string& text) {
  if (text == "no" || text == "false" || text == "off" || text == "0") return ResumeMode::kNo;
  if (text == "yes" || text == "true" || text == "on" || text == "1") return ResumeMode::kYes;
  if (text == "auto") return ResumeMode::kAuto;
  usage("--resume must be yes (also given alone), no or auto, got '" + text + "'");
}

TrainOptions to_options(const po::variables_map& vm) {
  TrainOptions o;
  if (vm.count("data")) {
    o.data = vm["data"].as<std::string>();
    if (o.data.empty()) usage("--data must name a file");
  }
  o.epochs = positive(vm, "epochs");
  o.batch_size = positive(vm, kBatchSizeKey);
  o.eval_batch_size = positive(vm, kEvalBatchSizeKey);
  o.image_size = vm["image-size"].as<int>();
  // ResNet-50d halves the input five times.
  if (o.image_size < 32)
    usage("--image-size must be at least 32, got " + std::to_string(o.image_size));
  o.max_lr = parse_max_lr(vm["max-lr"].as<std::string>());
  o.mixed_precision = parse_enum(
      vm, "mixed-precision", {MixedPrecision::kNo, MixedPrecision::kBf16, MixedPrecision::kFp16});
  o.seed = unsigned_option(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("pretrained")) o.pretrained = vm["pretrained"].as<std::string>();
  o.bn_mode = parse_enum(vm, "bn-mode", {BnMode::kTrain, BnMode::kEval});
  o.unfreeze = parse_enum(vm, "unfreeze",
                          {Unfreeze::kNone, Unfreeze::kLayer4, Unfreeze::kLayer3, Unfreeze::kLayer2,
                           Unfreeze::kLayer1, Unfreeze::kAll});
  o.backbone_lr_ratio = vm["backbone-lr-ratio"].as<double>();
  if (!std::isfinite(o.backbone_lr_ratio) || o.backbone_lr_ratio <= 0)
    usage("--backbone-lr-ratio must be a positive number, got " +
          format_number(o.backbone_lr_ratio));
  o.unfreeze_epoch = vm["unfreeze-epoch"].as<int>();
  if (o.unfreeze_epoch < 0 || o.unfreeze_epoch >= o.epochs)
    usage("--unfreeze-epoch must be at least 0 and below --epochs (" + std::to_string(o.epochs) +
          "), got " + std::to_string(o.unfreeze_epoch));
  // One backbone is shared by a sweep's heads: each head would need its own to train it.
  if (o.unfreeze != Unfreeze::kNone && o.max_lr.size() > 1)
    usage("--unfreeze " + to_string(o.unfreeze) + " trains the backbone, which a sweep's heads (" +
          "--max-lr " + max_lr_text(o.max_lr) +
          ") share: give one --max-lr value, or --unfreeze none");
  o.device =
      parse_enum(vm, "device", {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda});
  o.input = parse_enum(vm, "input", {InputChoice::kAuto, InputChoice::kCpu, InputChoice::kDevice});
  o.resident = parse_enum(vm, "resident",
                          {ResidentChoice::kAuto, ResidentChoice::kOn, ResidentChoice::kOff});
  o.threads = vm["threads"].as<int>();
  if (o.threads < 0)
    usage("--threads must be 0 (automatic) or positive, got " + std::to_string(o.threads));
  o.loader_threads = vm["loader-threads"].as<int>();
  if (o.loader_threads < 0)
    usage("--loader-threads must be 0 (automatic) or positive, got " +
          std::to_string(o.loader_threads));
  o.deterministic = vm["deterministic"].as<bool>();
  o.out = vm["out"].as<std::string>();
  if (o.out.empty()) usage("--out must name a folder");
  o.progress = parse_enum(
      vm, "progress",
      {ProgressMode::kAuto, ProgressMode::kBar, ProgressMode::kLines, ProgressMode::kNone});
  o.progress_interval = vm["progress-interval"].as<double>();
  if (!std::isfinite(o.progress_interval) || o.progress_interval < 0)
    usage("--progress-interval must be 0 or a positive number of seconds, got " +
          format_number(o.progress_interval));
  if (vm.count("tensorboard")) {
    o.tensorboard = vm["tensorboard"].as<std::string>();
    if (o.tensorboard.empty()) usage("--tensorboard must name a folder");
  }
  o.resume = parse_resume(vm["resume"].as<std::string>());
  o.overwrite = vm["overwrite"].as<bool>();
  o.keep_best = vm["keep-best"].as<bool>();
  o.keep_checkpoints = vm["keep-checkpoints"].as<int>();
  if (o.keep_checkpoints < 0)
    usage("--keep-checkpoints must be 0 (automatic) or positive, got " +
          std::to_string(o.keep_checkpoints));
  if (vm.count("config")) o.config = vm["config"].as<std::string>();
  if (vm.count("write-config")) o.write_config = vm["write-config"].as<std::string>();
  return o;
}

/// One `key = value` entry with its comment; `value` empty: written commented out.
void add_entry(std::ostringstream& out, const std::string& key, const std::string& value,
               const std::string& comment) {
  if (value.find_first_of("#\n\r") != std::string::npos)
    usage("--" + key + " value cannot be written to a config file ('#' or a line break): " + value);
  out << "# " << comment << "\n" << (value.empty() ? "# " : "") << key << " = " << value << "\n\n";
}

}  // namespace

std::string train_options_help() {
  po::options_description all;
  all.add(general_options()).add(training_options());
  std::ostringstream s;
  s << "Usage: pets_train --data FILE [options]        a new run\n"
       "       pets_train --resume --out DIR [options]  continue the run in DIR\n"
       "Fine-tunes ResNet-50d on the Oxford-IIIT Pet images: the classifier of a frozen backbone,\n"
       "or with --unfreeze the backbone's last stages too; run it under mpirun for several "
       "ranks.\n\n"
    << all;
  return s.str();
}

ParseResult parse_train_options(int argc, const char* const* argv) {
  po::options_description command_line;
  command_line.add(general_options()).add(training_options());
  po::variables_map vm;
  try {
    // Command line first: Boost keeps the first value stored, so it overrides the file.
    // An empty positional description makes a stray argument an error instead of ignored.
    const po::positional_options_description no_positionals;
    const po::parsed_options parsed = po::command_line_parser(argc, argv)
                                          .options(command_line)
                                          .positional(no_positionals)
                                          .style(command_line_style())
                                          .run();
    // Boost does not count a value-less `--resume` (its implicit value) as an occurrence.
    if (std::count_if(parsed.options.begin(), parsed.options.end(),
                      [](const po::option& o) { return o.string_key == "resume"; }) > 1)
      usage("option '--resume' cannot be specified more than once (see --help)");
    po::store(parsed, vm);
  } catch (const po::error& e) {
    usage(program_options_message(e) + " (see --help)");
  }

  ParseResult result;
  result.help = train_options_help();
  if (vm["help"].as<bool>()) {
    result.action = Action::kHelp;
    return result;
  }
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    if (const auto problem = input_file_problem(path)) usage("--config: " + *problem);
    std::ifstream file(path, std::ios::binary);
    if (!file) usage("--config: cannot read '" + path + "': " + std::strerror(errno));
    std::string text;
    try {
      // libstdc++'s filebuf throws on a read error (EIO) whatever the stream's exception mask.
      text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      usage("--config: cannot read '" + path + "': " + std::strerror(errno));
    }
    if (file.bad()) usage("--config: cannot read '" + path + "'");
    // Windows editors (Notepad, PowerShell's UTF8 encoding) start a file with a byte-order mark;
    // it is no part of the first key.
    constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
    if (text.compare(0, kByteOrderMark.size(), kByteOrderMark) == 0)
      text.erase(0, kByteOrderMark.size());
    // Boost keeps a carriage return as part of the value (an --out folder "runs\r"), which
    // --write-config then refuses: accept Windows line endings, refuse any other CR.
    for (std::size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at)) {
      if (at + 1 < text.size() && text[at + 1] != '\n')
        usage("config file '" + path + "': carriage return inside line " +
              std::to_string(1 + std::count(text.begin(), text.begin() + at, '\n')));
      text.erase(at, 1);
    }
    std::istringstream lines(text);
    try {
      po::store(po::parse_config_file(lines, training_options(), /*allow_unregistered=*/false), vm);
    } catch (const po::error& e) {
      usage("config file '" + path + "': " + program_options_message(e));
    }
  }
  po::notify(vm);
  result.options = to_options(vm);
  for (const Entry& e : entries(TrainOptions{}))
    if (vm.count(e.key) != 0 && !vm[e.key].defaulted()) result.given.emplace_back(e.key);
  const TrainOptions& o = result.options;
  if (!o.write_config.empty()) {
    if (const std::string problem = write_config_problem(o); !problem.empty())
      usage("--write-config " + o.write_config + ": " + problem);
    result.action = Action::kWriteConfig;
    return result;
  }
  if (o.overwrite && o.resume != ResumeMode::kNo)
    usage("--overwrite starts a new run and --resume continues one: give one of them");
  if (o.data.empty() && o.resume == ResumeMode::kNo)
    usage("the option '--data' is required (see --help)");
  return result;
}

std::string format_config(const TrainOptions& o) {
  std::ostringstream out;
  out << "# pets_train configuration: read it with `pets_train --config FILE`; options given on\n"
         "# the command line override the values here. Lines starting with '#' are comments.\n"
         "# Relative paths are taken from the folder pets_train runs in, not from this file's.\n\n";
  const std::vector<Entry> values = entries(o);
  const std::vector<Entry> defaults = entries(TrainOptions{});
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string& d = defaults[i].value;
    add_entry(out, values[i].key, values[i].value,
              values[i].help + (d.empty() ? std::string() : " (default " + d + ")"));
  }
  return out.str();
}

void write_config_file(const TrainOptions& options, const std::string& path) {
  TrainOptions written = options;
  written.overwrite = false;  // it said to replace `path`, not to start runs over
  try {
    write_file_atomically(path, format_config(written));
  } catch (const FileWriteError& e) {
    usage("--write-config " + path + ": " + e.reason());
  }
}

std::map<std::string, std::string> recorded_option_values(const TrainOptions& options) {
  std::map<std::string, std::string> values;
  for (const Entry& e : entries(options)) {
    const std::string key = e.key;
    if (key != "out" && key != "resume" && key != "overwrite") values[key] = e.value;
  }
  return values;
}

TrainOptions options_from_values(const std::map<std::string, std::string>& values,
                                 const std::string& source) {
  const po::options_description description = training_options();
  po::variables_map vm;
  try {
    po::parsed_options parsed(&description);
    for (const auto& [key, value] : values)
      if (!value.empty()) parsed.options.emplace_back(key, std::vector<std::string>{value});
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    usage(source + ": " + program_options_message(e));
  }
  try {
    return to_options(vm);
  } catch (const UsageError& e) {
    usage(source + ": " + e.what());
  }
}

std::vector<std::string> run_setting_keys() {
  std::vector<std::string> keys;
  for (const Entry& e : entries(TrainOptions{}))
    if (e.fixed) keys.emplace_back(e.key);
  return keys;
}

}  // namespace pets::train
