#include "pets/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "pets/util/error.hpp"

namespace pets {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

const char kTempMark[] = ".tmp.";

/// This host's name as it goes into temporary names.
std::string host_tag() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "unknown-host";
  std::string tag(name);
  for (char& c : tag)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return tag;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

/// Whether process `pid` runs on this host (EPERM: it runs, as another user). A zombie (ended,
/// not yet reaped by its parent) writes nothing more: it does not run.
bool process_runs(long pid) {
  if (pid <= 0) return true;  // nothing to tell: keep
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;    // no /proc: trust kill()
  const std::size_t name_end = line.rfind(')');  // the state follows the name, which may hold ')'
  if (name_end == std::string::npos || name_end + 2 >= line.size()) return true;
  const char state = line[name_end + 2];
  return state != 'Z' && state != 'X';
}

std::mutex g_pause_mutex;
std::string g_pause_name;
double g_pause_seconds = 0.0;

/// The test pause (set_atomic_write_pause), signals notwithstanding: a stop signal must not cut
/// it short, as it would not cut a slow disk short.
void pause_if_asked(const std::string& path, const std::string& tmp) {
  double seconds = 0.0;
  {
    std::lock_guard<std::mutex> lock(g_pause_mutex);
    if (g_pause_name.empty() || fs::path(path).filename().string() != g_pause_name) return;
    seconds = g_pause_seconds;
  }
  std::fprintf(stderr, "pausing before renaming %s (test switch, %.1f s)\n", tmp.c_str(), seconds);
  std::fflush(stderr);
  struct timespec left {};
  left.tv_sec = static_cast<time_t>(seconds);
  left.tv_nsec = static_cast<long>((seconds - static_cast<double>(left.tv_sec)) * 1e9);
  while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

void fsync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // Some filesystems do not allow opening folders; the rename still stands.
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::filesystem::path target(path);
  const std::string tmp = atomic_temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw FileWriteError("cannot create '" + tmp + "': " + errno_text(), __FILE__, __LINE__);
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw FileWriteError("cannot write '" + tmp + "' (" + std::to_string(written) + " of " +
                               std::to_string(contents.size()) + " bytes): " + why,
                           __FILE__, __LINE__);
    }
    written += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const std::string sync_error = synced ? "" : errno_text();
  if (::close(fd) != 0 || !synced) {
    const std::string why = synced ? errno_text() : sync_error;
    ::unlink(tmp.c_str());
    throw FileWriteError("cannot flush '" + tmp + "': " + why, __FILE__, __LINE__);
  }
  pause_if_asked(path, tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw FileWriteError("cannot rename '" + tmp + "' to '" + path + "': " + why, __FILE__,
                         __LINE__);
  }
  fsync_folder(target.parent_path());
}

std::string atomic_temp_path(const std::string& path) {
  static const std::string host = host_tag();
  return path + kTempMark + host + "." + std::to_string(::getpid());
}

std::optional<TempFileName> parse_temp_name(const std::string& name) {
  const std::size_t mark = name.rfind(kTempMark);
  if (mark == std::string::npos || mark == 0) return std::nullopt;
  TempFileName t;
  t.target = name.substr(0, mark);
  const std::string rest = name.substr(mark + sizeof kTempMark - 1);
  const std::size_t dot = rest.rfind('.');
  const std::string pid = dot == std::string::npos ? rest : rest.substr(dot + 1);
  if (!all_digits(pid)) return std::nullopt;
  if (dot != std::string::npos) {
    t.host = rest.substr(0, dot);
    if (t.host.empty()) return std::nullopt;
  }
  t.pid = std::stol(pid);
  return t;
}

StaleTempReport remove_stale_temp_files(const std::string& folder,
                                        std::optional<fs::file_time_type> older_than) {
  StaleTempReport report;
  static const std::string here = host_tag();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::optional<TempFileName> t = parse_temp_name(entry.path().filename().string());
    if (!t || !entry.is_regular_file(ec)) continue;
    const std::string path = entry.path().string();
    std::string keep_why;
    if (t->host == here) {
      if (process_runs(t->pid)) keep_why = "process " + std::to_string(t->pid) + " still runs";
    } else {
      const std::string who =
          t->host.empty() ? "an older pets_train (no host in the name)" : "host " + t->host;
      std::error_code time_ec;
      const auto written = fs::last_write_time(entry.path(), time_ec);
      if (!older_than || time_ec || written >= *older_than)
        keep_why = "written by " + who +
                   ", which cannot be checked from here; remove it by hand "
                   "if no run writes this folder";
    }
    if (keep_why.empty()) {
      std::error_code rm_ec;
      if (fs::remove(entry.path(), rm_ec))
        report.removed.push_back(path);
      else if (rm_ec)
        keep_why = "cannot remove: " + rm_ec.message();
    }
    if (!keep_why.empty()) report.kept.push_back(path + " (" + keep_why + ")");
  }
  return report;
}

void set_atomic_write_pause(const std::string& file_name, double seconds) {
  std::lock_guard<std::mutex> lock(g_pause_mutex);
  g_pause_name = file_name;
  g_pause_seconds = seconds;
}

}  // namespace pets
