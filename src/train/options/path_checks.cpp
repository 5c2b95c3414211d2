// The checks of the files and folders the options name: the --write-config target, and the
// --data, --pretrained, --out and --tensorboard paths a run starts with
// (pets/train/options/options.hpp).
#include <sys/stat.h>

#include <utility>

#include "pets/train/options/options.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

std::string write_config_problem(const TrainOptions& o) {
  const std::string& path = o.write_config;
  if (const auto problem = output_file_problem(path)) return *problem;
  struct stat target {};
  if (::lstat(path.c_str(), &target) != 0) return "";  // a new file
  if (S_ISLNK(target.st_mode))
    return "'" + path + "' is a symbolic link; name the file itself (or another file)";
  if (!S_ISREG(target.st_mode))
    return "'" + path + "' exists and is not a regular file (a FIFO, a device or a socket)";
  const std::pair<const char*, const std::string*> inputs[] = {{"--data", &o.data},
                                                               {"--pretrained", &o.pretrained}};
  for (const auto& [option, input] : inputs) {
    struct stat st {};
    if (!input->empty() && ::stat(input->c_str(), &st) == 0 && st.st_dev == target.st_dev &&
        st.st_ino == target.st_ino)
      return "it is the " + std::string(option) + " file of this run; name another file";
  }
  if (!o.overwrite) return "the file exists; replace it with --overwrite, or name another file";
  return "";
}

void check_paths(const TrainOptions& options) {
  if (const auto problem = input_file_problem(options.data))
    throw UsageError("--data: " + *problem);
  if (!options.pretrained.empty()) {
    if (const auto problem = input_file_problem(options.pretrained))
      throw UsageError("--pretrained: " + *problem);
  }
  if (const auto problem = output_folder_problem(options.out))
    throw UsageError("--out " + options.out + ": " + *problem);
  if (!options.tensorboard.empty()) {
    if (const auto problem = output_folder_problem(options.tensorboard))
      throw UsageError("--tensorboard " + options.tensorboard + ": " + *problem);
  }
}

}  // namespace pets::train
