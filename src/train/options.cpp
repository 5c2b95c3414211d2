#include "pets/train/options.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

namespace po = boost::program_options;

namespace {

[[noreturn]] void usage(const std::string& message) { throw UsageError(message); }

/// The options a config file may set: everything but --help, --config and --write-config.
po::options_description training_options() {
  const TrainOptions d;
  po::options_description o("Training options (also valid as `key = value` in a --config file)");
  // Defaults are given as text where Boost would print a double or enum badly.
  o.add_options()("data", po::value<std::string>()->value_name("FILE"),
                  "HDF5 data set written by pets_preprocess (required)")(
      "epochs", po::value<int>()->default_value(d.epochs), "passes over the training split")(
      "batch-size", po::value<int>()->default_value(d.batch_size),
      "training images per rank per step")("eval-batch-size",
                                           po::value<int>()->default_value(d.eval_batch_size),
                                           "evaluation images per rank per step")(
      "max-lr", po::value<double>()->default_value(d.max_lr, "3e-2"),
      "OneCycle peak learning rate (Adam starts at max-lr/25)")(
      "mixed-precision", po::value<std::string>()->default_value(to_string(d.mixed_precision)),
      "no | bf16 | fp16 (fp16 needs a CUDA device)")(
      "seed", po::value<std::string>()->default_value(std::to_string(d.seed)),
      "random seed (0 .. 2^64-1)")(
      "pretrained", po::value<std::string>()->value_name("FILE"),
      "ResNet-50d weights (safetensors, timm names); without it the backbone is random")(
      "bn-mode", po::value<std::string>()->default_value(to_string(d.bn_mode)),
      "train: frozen backbone's BatchNorm uses batch statistics (as the tutorial); "
      "eval: running statistics")(
      "device", po::value<std::string>()->default_value(to_string(d.device)),
      "auto | cpu | cuda (auto: CUDA device local_rank % count when present)")(
      "threads", po::value<int>()->default_value(d.threads),
      "CPU threads per rank; 0: the cores in the rank's affinity mask")(
      "out", po::value<std::string>()->default_value(d.out)->value_name("DIR"),
      "folder for checkpoints, metrics.jsonl and the final model")(
      "resume", po::bool_switch(), "continue from the latest complete checkpoint in --out");
  return o;
}

po::options_description general_options() {
  po::options_description o("General options");
  o.add_options()("help,h", po::bool_switch(), "print this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "read options from FILE; the command line overrides it")(
      "write-config", po::value<std::string>()->value_name("FILE"),
      "write every option's value to FILE as a commented config file, then exit");
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

std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  // from_chars refuses a sign, so "-1" cannot wrap around as lexical_cast<uint64_t> would.
  if (text.empty() || ec != std::errc() || ptr != end)
    usage("--seed must be an integer in 0 .. 2^64-1, got '" + text + "'");
  return value;
}

TrainOptions to_options(const po::variables_map& vm) {
  TrainOptions o;
  if (vm.count("data")) {
    o.data = vm["data"].as<std::string>();
    if (o.data.empty()) usage("--data must name a file");
  }
  o.epochs = positive(vm, "epochs");
  o.batch_size = positive(vm, "batch-size");
  o.eval_batch_size = positive(vm, "eval-batch-size");
  o.max_lr = vm["max-lr"].as<double>();
  if (!std::isfinite(o.max_lr) || o.max_lr <= 0)
    usage("--max-lr must be a positive number, got " + std::to_string(o.max_lr));
  o.mixed_precision = parse_enum(
      vm, "mixed-precision", {MixedPrecision::kNo, MixedPrecision::kBf16, MixedPrecision::kFp16});
  o.seed = parse_seed(vm["seed"].as<std::string>());
  if (vm.count("pretrained")) o.pretrained = vm["pretrained"].as<std::string>();
  o.bn_mode = parse_enum(vm, "bn-mode", {BnMode::kTrain, BnMode::kEval});
  o.device =
      parse_enum(vm, "device", {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda});
  o.threads = vm["threads"].as<int>();
  if (o.threads < 0)
    usage("--threads must be 0 (automatic) or positive, got " + std::to_string(o.threads));
  o.out = vm["out"].as<std::string>();
  if (o.out.empty()) usage("--out must name a folder");
  o.resume = vm["resume"].as<bool>();
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

std::string format_double(double value) {
  std::ostringstream s;
  s.precision(17);
  s << value;
  return s.str();
}

}  // namespace

std::string to_string(MixedPrecision value) {
  switch (value) {
    case MixedPrecision::kNo:
      return "no";
    case MixedPrecision::kBf16:
      return "bf16";
    case MixedPrecision::kFp16:
      return "fp16";
  }
  return "?";
}

std::string to_string(BnMode value) { return value == BnMode::kTrain ? "train" : "eval"; }

std::string to_string(DeviceChoice value) {
  switch (value) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "?";
}

std::string train_options_help() {
  po::options_description all;
  all.add(general_options()).add(training_options());
  std::ostringstream s;
  s << "Usage: pets_train --data FILE [options]\n"
       "Fine-tunes the classifier of a frozen ResNet-50d on the Oxford-IIIT Pet images; run it\n"
       "under mpirun for several ranks.\n\n"
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
    po::store(
        po::command_line_parser(argc, argv).options(command_line).positional(no_positionals).run(),
        vm);
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
    std::ifstream file(path, std::ios::binary);
    if (!file) usage("--config: cannot read '" + path + "': " + std::strerror(errno));
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
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
  if (!result.options.write_config.empty()) {
    result.action = Action::kWriteConfig;
  } else if (result.options.data.empty()) {
    usage("the option '--data' is required (see --help)");
  }
  return result;
}

std::string format_config(const TrainOptions& o) {
  std::ostringstream out;
  out << "# pets_train configuration: read it with `pets_train --config FILE`; options given on\n"
         "# the command line override the values here. Lines starting with '#' are comments.\n\n";
  add_entry(out, "data", o.data, "HDF5 data set written by pets_preprocess (required)");
  add_entry(out, "epochs", std::to_string(o.epochs), "passes over the training split (default 5)");
  add_entry(out, "batch-size", std::to_string(o.batch_size),
            "training images per rank per step (default 64)");
  add_entry(out, "eval-batch-size", std::to_string(o.eval_batch_size),
            "evaluation images per rank per step (default 128)");
  add_entry(out, "max-lr", format_double(o.max_lr), "OneCycle peak learning rate (default 3e-2)");
  add_entry(out, "mixed-precision", to_string(o.mixed_precision),
            "no | bf16 | fp16 (default no; fp16 needs a CUDA device)");
  add_entry(out, "seed", std::to_string(o.seed), "random seed (default 42)");
  add_entry(out, "pretrained", o.pretrained,
            "ResNet-50d weights, safetensors with timm names (default: none, random backbone)");
  add_entry(out, "bn-mode", to_string(o.bn_mode), "train | eval (default train)");
  add_entry(out, "device", to_string(o.device), "auto | cpu | cuda (default auto)");
  add_entry(out, "threads", std::to_string(o.threads),
            "CPU threads per rank, 0: the cores in the affinity mask (default 0)");
  add_entry(out, "out", o.out, "output folder (default runs/pets)");
  add_entry(out, "resume", o.resume ? "true" : "false",
            "continue from the latest checkpoint in out (default false)");
  return out.str();
}

void write_config_file(const TrainOptions& options, const std::string& path) {
  const std::string text = format_config(options);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) PETS_ERROR("cannot create '" + tmp + "': " + std::strerror(errno));
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      PETS_ERROR("cannot write '" + tmp + "': " + reason);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    PETS_ERROR("cannot flush '" + tmp + "': " + reason);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    PETS_ERROR("cannot rename '" + tmp + "' to '" + path + "': " + reason);
  }
}

void check_devices(const TrainOptions& options, int cuda_device_count) {
  const bool fp16 = options.mixed_precision == MixedPrecision::kFp16;
  if (fp16 && options.device == DeviceChoice::kCpu)
    usage("--mixed-precision fp16 runs on CUDA only, not with --device cpu; use bf16 or no");
  if (cuda_device_count > 0) return;
  if (options.device == DeviceChoice::kCuda)
    usage("--device cuda: no CUDA device is available to this build");
  if (fp16)
    usage("--mixed-precision fp16 needs a CUDA device and none is available; use bf16 or no");
}

}  // namespace pets::train
