#include "pets/util/app.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options/cmdline.hpp>
#include <boost/program_options/errors.hpp>
#include <boost/program_options/options_description.hpp>
#include <boost/program_options/parsers.hpp>
#include <boost/program_options/positional_options.hpp>
#include <boost/program_options/variables_map.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <system_error>

#include "pets/util/error.hpp"

namespace pets {

namespace {

/// Reaches the substitutions of a Boost error (a protected member) through a derived class.
struct SubstitutionAccess : boost::program_options::error_with_option_name {
  static std::map<std::string, std::string>& of(boost::program_options::error_with_option_name& e) {
    return e.*(&SubstitutionAccess::m_substitutions);
  }
};

std::string in_quotes(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

/// "<what> '<path>': <errno's text>", errno read first.
std::string failed(const char* what, const std::filesystem::path& path) {
  const std::string why = std::strerror(errno);
  return what + in_quotes(path) + ": " + why;
}

/// `path` without a trailing separator ("runs/" is the folder "runs").
std::filesystem::path without_trailing_slash(std::filesystem::path path) {
  while (!path.has_filename() && path.has_parent_path() && path != path.root_path())
    path = path.parent_path();
  return path;
}

/// The folder holding `path` ("." for a bare name).
std::filesystem::path folder_of(const std::filesystem::path& path) {
  const std::filesystem::path parent = without_trailing_slash(path).parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

/// `path` itself if it exists, else the nearest folder above it that does; `st` is its stat.
std::filesystem::path nearest_existing(std::filesystem::path path, struct stat& st) {
  path = without_trailing_slash(path);
  while (::stat(path.c_str(), &st) != 0) {
    const std::filesystem::path up = folder_of(path);
    if (up == path) break;  // "/" or "." cannot be stat'ed: let the caller's next step say why
    path = up;
  }
  return path;
}

/// Ends a serial program with one line on stderr.
int print_error_line(const char* message, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message);
  std::fflush(stderr);
  return status;
}

}  // namespace

int run_program(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const UsageError& e) {
    return print_error_line(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return print_error_line(e.what(), kExitFault);
  } catch (...) {
    return print_error_line("unknown exception", kExitFault);
  }
}

std::optional<std::uint64_t> unsigned_number(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  // from_chars refuses a sign, so "-1" cannot wrap around.
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::uint64_t unsigned_option(const std::string& text, const std::string& option) {
  const std::optional<std::uint64_t> value = unsigned_number(text);
  if (!value) throw UsageError(option + " must be an integer in 0 .. 2^64-1, got '" + text + "'");
  return *value;
}

int command_line_style() {
  namespace style = boost::program_options::command_line_style;
  return style::default_style & ~style::allow_guessing;
}

bool parse_command_line(int argc, char** argv,
                        const boost::program_options::options_description& desc,
                        boost::program_options::variables_map& vm, const std::string& program) {
  namespace po = boost::program_options;
  try {
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(argc, argv)
                  .options(desc)
                  .positional(no_positionals)
                  .style(command_line_style())
                  .run(),
              vm);
    if (desc.find_nothrow("help", false) != nullptr && vm.count("help") != 0) {
      std::cout << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(program + ": " + program_options_message(e) + " (see --help)");
  }
  return true;
}

std::optional<std::string> input_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return failed("cannot read ", path);
  if (S_ISDIR(st.st_mode)) return in_quotes(path) + " is a folder, not a file";
  if (::access(path.c_str(), R_OK) != 0) return failed("cannot read ", path);
  return std::nullopt;
}

std::optional<std::string> output_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return in_quotes(path) + " is a folder, not a file";
  const std::filesystem::path folder = folder_of(path);
  const std::filesystem::path existing = nearest_existing(folder, st);
  if (existing != folder) {
    if (::stat(existing.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return in_quotes(existing) + " is a file, not a folder";
    return "no folder " + in_quotes(folder);
  }
  if (!S_ISDIR(st.st_mode)) return in_quotes(folder) + " is a file, not a folder";
  if (::access(folder.c_str(), W_OK | X_OK) != 0) return failed("cannot write in ", folder);
  return std::nullopt;
}

std::optional<std::string> output_folder_problem(const std::string& path) {
  struct stat st {};
  const std::filesystem::path target = without_trailing_slash(path);
  // The nearest part of the path that is there: a symbolic link to nothing cannot be made into
  // a folder (mkdir says only "File exists").
  for (std::filesystem::path p = target;; p = folder_of(p)) {
    if (::lstat(p.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode) && ::stat(p.c_str(), &st) != 0) {
        std::error_code ec;
        return in_quotes(p) + " is a symbolic link to " +
               in_quotes(std::filesystem::read_symlink(p, ec)) + ", which does not exist";
      }
      break;
    }
    if (folder_of(p) == p) break;
  }
  const std::filesystem::path existing = nearest_existing(target, st);
  if (::stat(existing.c_str(), &st) != 0) return failed("cannot make a folder in ", existing);
  if (!S_ISDIR(st.st_mode)) return in_quotes(existing) + " is a file, not a folder";
  std::string probe = (existing / ".pets-write-test-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr)
    return failed(existing == target ? "cannot write in " : "cannot make a folder in ", existing);
  ::rmdir(probe.c_str());
  return std::nullopt;
}

std::optional<std::string> slurm_single_rank_problem(int world_size) {
  const char* ntasks = std::getenv("SLURM_NTASKS");
  if (ntasks == nullptr || world_size != 1 || std::atoi(ntasks) <= 1 ||
      std::getenv("SLURM_STEP_ID") == nullptr)
    return std::nullopt;
  return "Slurm started " + std::string(ntasks) +
         " tasks but this MPI world has 1 rank: every task is running alone. Launch with "
         "`srun --mpi=pmix` (or mpirun inside the allocation)";
}

std::string program_options_message(const boost::program_options::error& e) {
  namespace po = boost::program_options;
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  if (named == nullptr) return e.what();
  // While Boost substitutes, each '%' of a user's value is a stand-in character, so no value
  // can hold a placeholder; the finished message gets its '%' back.
  constexpr char kStandIn = '\x1a';
  po::error_with_option_name copy(*named);
  for (auto& entry : SubstitutionAccess::of(copy))
    std::replace(entry.second.begin(), entry.second.end(), '%', kStandIn);
  std::string message = copy.what();
  std::replace(message.begin(), message.end(), kStandIn, '%');
  return message;
}

}  // namespace pets
