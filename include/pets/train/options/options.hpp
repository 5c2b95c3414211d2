#pragma once
/// \file
/// The command line and configuration file of pets_train (Boost.Program_options). Parsing is a
/// pure function of argv and the files it names, so it is tested without MPI; every problem
/// is a pets::UsageError that names the option.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pets/util/progress.hpp"

namespace pets::train {

/// Mixed-precision mode, as Accelerate's `mixed_precision`.
enum class MixedPrecision { kNo, kBf16, kFp16 };
/// BatchNorm of the frozen backbone: batch statistics (as the tutorial) or running statistics.
enum class BnMode { kTrain, kEval };
/// --unfreeze: which of the backbone's stages train besides the head, named by the first of them
/// (every later stage trains too): none (the tutorial's frozen backbone), layer4, layer3, layer2,
/// layer1, or all (the stem as well).
enum class Unfreeze { kNone, kLayer4, kLayer3, kLayer2, kLayer1, kAll };
/// The first of ResNet-50d's five stages (0 the stem, 1..4 layer1..layer4) that `value` trains;
/// 5 for none.
inline int first_trained_stage(Unfreeze value) { return 5 - static_cast<int>(value); }
/// Where the model runs: CUDA if present, or the named device.
enum class DeviceChoice { kAuto, kCpu, kCuda };
/// --resume: whether the run continues from a checkpoint in --out.
enum class ResumeMode {
  kNo,    ///< a new run: --out must hold no earlier run (unless --overwrite)
  kYes,   ///< continue from the latest checkpoint; an error when there is none to continue
  kAuto,  ///< continue when --out holds a checkpoint, start a new run when it holds no run (jobs
          ///< that requeue themselves)
};
/// Where the images are resized and normalised: by the loader on the CPU, or on the model's
/// device from uint8 crops (pets/train/input/input_pipeline.hpp); auto: the device when it is CUDA.
enum class InputChoice { kAuto, kCpu, kDevice };
/// On the device input path, whether every image of the store is held in the device's memory
/// (pets/train/input/resident_images.hpp), so that the loader stages no pixels: on (refused where
/// --input does not take the device input path: resident_path_refusal, checked by the run once
/// its device is known); off (each batch's crops staged and uploaded); auto: on CUDA when the
/// store fits (resident_fits, pets/train/input/input_pipeline.hpp).
enum class ResidentChoice { kAuto, kOn, kOff };

/// The keys of the batch-size options, which the run's messages also name ("--batch-size 4096
/// does not fit in the memory of cuda:0 ..."): one spelling for the parser and the messages.
inline constexpr char kBatchSizeKey[] = "batch-size";
inline constexpr char kEvalBatchSizeKey[] = "eval-batch-size";

/// Everything pets_train can be told. Defaults are the tutorial's where it has one; these
/// member initialisers are the only place they are written (--help and --write-config print them).
struct TrainOptions {
  std::string data;           ///< HDF5 file made by the preprocessing tool (required)
  int epochs = 5;             ///< passes over the training split
  int batch_size = 64;        ///< training images per rank per step
  int eval_batch_size = 128;  ///< evaluation images per rank per step
  int image_size = 224;       ///< side of the training crops and the evaluation resize
  /// OneCycle peak learning rates, one head each (a sweep: pets/train/step/train_step.hpp);
  /// Adam starts at max_lr/25. One value: the tutorial's single head.
  std::vector<double> max_lr = {3e-2};
  MixedPrecision mixed_precision = MixedPrecision::kNo;  ///< the tutorial's fp16 needs a GPU
  std::uint64_t seed = 42;                               ///< set_seed(seed)
  std::string pretrained;               ///< safetensors with timm's keys; empty: random init
  BnMode bn_mode = BnMode::kTrain;      ///< see BnMode
  Unfreeze unfreeze = Unfreeze::kNone;  ///< see Unfreeze
  /// The trained backbone's OneCycle peak lr as a fraction of the head's (Adam group of its own).
  double backbone_lr_ratio = 0.1;
  int unfreeze_epoch = 0;  ///< epochs of the head alone before --unfreeze's stages train
  DeviceChoice device = DeviceChoice::kAuto;
  InputChoice input = InputChoice::kAuto;           ///< see InputChoice
  ResidentChoice resident = ResidentChoice::kAuto;  ///< see ResidentChoice
  int threads = 0;         ///< CPU threads per rank; 0: the cores in the affinity mask
  int loader_threads = 0;  ///< loader worker threads per rank; 0: loader_workers' choice
  /// Deterministic algorithms only (cuDNN's, cuBLAS's fixed workspace; LibTorch refuses an
  /// operator that has none): two runs on one GPU give the same weights bit for bit.
  bool deterministic = false;
  std::string out = "runs/pets";                ///< checkpoints, metrics.jsonl, final model
  ProgressMode progress = ProgressMode::kAuto;  ///< see ProgressMode
  double progress_interval = 30;                ///< seconds between progress lines (kLines)
  std::string tensorboard;  ///< folder for TensorBoard event files (rank 0); empty: none
  ResumeMode resume = ResumeMode::kNo;  ///< continue from the latest checkpoint in `out`
  /// Start afresh in an `out` that holds a run, removing its files; with --write-config: replace
  /// an existing FILE (and then not written into it).
  bool overwrite = false;
  bool keep_best = false;  ///< also keep the best epoch's model as `out`/best.safetensors
  /// The newest complete checkpoints kept in `out`, besides the best epoch's (older ones are
  /// removed as newer ones are written). 0: every one while the backbone is frozen, 3 when
  /// --unfreeze trains it (its checkpoints are 180 to 280 MB each).
  int keep_checkpoints = 0;
  std::string config;        ///< the --config file read, if any (informational)
  std::string write_config;  ///< --write-config target; the program writes it and stops
};

/// What the command line asks for.
enum class Action {
  kTrain,        ///< run with `options`
  kHelp,         ///< print `help` and exit 0
  kWriteConfig,  ///< write `options` to options.write_config and exit 0
};

/// The result of parsing a command line.
struct ParseResult {
  Action action = Action::kTrain;
  TrainOptions options;
  /// The training options set on the command line or in the --config file ("batch-size"); the
  /// others are at their defaults. A resumed run takes those from its checkpoint.
  std::vector<std::string> given;
  std::string help;  ///< the --help text (always filled)
};

/// Parses `argv[1..argc)` and, if --config is given, that file; the command line wins over the
/// file. Options are spelled out: no abbreviation (`--epoch`) is taken for an option. Throws
/// pets::UsageError naming the option for: an unknown option or config key, a bad or
/// out-of-range value (--backbone-lr-ratio not positive, --unfreeze-epoch not below --epochs), a
/// sweep together with --unfreeze, a repeated option, a missing --data (unless --help,
/// --write-config or
/// --resume, which takes it from the checkpoint), an unreadable config file or one naming a
/// folder (a UTF-8 byte-order mark starting the config file is skipped), --resume together with
/// --overwrite (when training), and a --write-config FILE that must not be written
/// (write_config_problem). Does not touch the data file or the GPU (see check_paths, and
/// check_devices in pets/train/run/backend.hpp).
ParseResult parse_train_options(int argc, const char* const* argv);

/// The --help text: every option with its default.
std::string train_options_help();

/// A config file of every option with comments, readable by --config (the `accelerate config`
/// counterpart). Options left at an empty default are written commented out.
std::string format_config(const TrainOptions& options);

/// What forbids writing the --write-config file `options.write_config`, or "": its folder is
/// missing or not writable; it is a folder, a symbolic link, a FIFO, a device or anything but a
/// regular file; it is the run's own --data or --pretrained file (also under another name); it
/// is an existing file and --overwrite is not given.
std::string write_config_problem(const TrainOptions& options);

/// Writes format_config(options) to `path` atomically (pets::write_file_atomically), so a reader
/// never sees half a file; `overwrite` (which says to replace `path`) is written as false. Throws
/// pets::UsageError, one line naming --write-config, when the file cannot be written.
void write_config_file(const TrainOptions& options, const std::string& path);

/// Every option a run records, as text by key ("batch-size" -> "64"), as a config file holds
/// it: all training options but --out, --resume and --overwrite, which say how this start was
/// asked for.
std::map<std::string, std::string> recorded_option_values(const TrainOptions& options);

/// The keys of the options that are settings of a run ("epochs", "batch-size", "max-lr",
/// "mixed-precision", "seed", "pretrained", "bn-mode"): they change what the run computes, so a
/// resumed run keeps its own. The others say where and how one start of it runs.
std::vector<std::string> run_setting_keys();

/// The options `values` (recorded_option_values' form) give, every other one at its default,
/// parsed and checked as a config file's are. Throws pets::UsageError naming `source` and the key
/// for an unknown key or a bad value.
TrainOptions options_from_values(const std::map<std::string, std::string>& values,
                                 const std::string& source);

/// The checks of the paths the options name, made at start (before the model is built):
/// --data and --pretrained readable files, not folders; --out and --tensorboard folders that
/// exist or can be made and that take new files (tried for real, leaving nothing behind). Throws
/// pets::UsageError naming the option.
void check_paths(const TrainOptions& options);

/// --max-lr's values: one number, or a comma-separated list of them (a sweep). Throws
/// pets::UsageError naming --max-lr for an empty list or item, a value that does not parse or is
/// not a positive finite number, and a value given twice.
std::vector<double> parse_max_lr(const std::string& text);
/// --max-lr's text as a user types it: "3e-2", "1e-3,3e-2" (parse_max_lr reads it back exactly).
std::string max_lr_text(const std::vector<double>& values);

std::string to_string(MixedPrecision value);
std::string to_string(BnMode value);
std::string to_string(Unfreeze value);
std::string to_string(DeviceChoice value);
std::string to_string(ResumeMode value);
std::string to_string(InputChoice value);
std::string to_string(ResidentChoice value);

}  // namespace pets::train
