#include "pets/train/run/run_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "pets/train/state/checkpoint_names.hpp"
#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace pets::train {
namespace {

namespace fs = std::filesystem;

// The names of the files pets_train writes besides its checkpoints (checkpoint_names.hpp).
const char* const kResultNames[] = {"latest", "metrics.jsonl", "confusion.json",
                                    "model.safetensors", "best.safetensors"};

/// A checkpoint, or another rank's shard of one.
bool is_checkpoint_name(const std::string& name) {
  return parse_checkpoint_file_name(name) || parse_shard_file_name(name);
}

bool is_result_name(const std::string& name) {
  return std::find(std::begin(kResultNames), std::end(kResultNames), name) !=
         std::end(kResultNames);
}

/// The atomic writer's temporary of a checkpoint or a result (util/atomic_file.hpp).
bool is_temporary_name(const std::string& name) {
  const std::optional<TempFileName> temp = parse_temp_name(name);
  return temp && (is_checkpoint_name(temp->target) || is_result_name(temp->target));
}

std::string errno_text(int err) { return std::strerror(err); }

/// "pid 1234 on node1, started 2026-12-03 18:00:00 UTC, Slurm job 42": who holds the lock.
std::string holder_text() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  char when[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(when, sizeof when, "%F %T UTC", &utc);
  std::string text = "pid " + std::to_string(::getpid()) + " on " + host + ", started " + when;
  if (const char* job = std::getenv("SLURM_JOB_ID")) text += ", Slurm job " + std::string(job);
  return text;
}

/// The holder line of a lock file (empty when it cannot be read or is being written).
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string text(buf, static_cast<std::size_t>(n));
  text = text.substr(0, text.find('\n'));
  return text;
}

/// flock's answer on a file system without locks (Lustre without -o flock, some FUSE mounts).
bool locks_unsupported(int err) {
  return err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL;
}

}  // namespace

std::vector<std::string> RunFiles::all() const {
  std::vector<std::string> out = checkpoints;
  out.insert(out.end(), results.begin(), results.end());
  out.insert(out.end(), temporaries.begin(), temporaries.end());
  return out;
}

std::string RunFiles::describe() const {
  std::vector<std::string> parts = results;
  if (!checkpoints.empty())
    parts.push_back(checkpoints.size() == 1 ? checkpoints.front()
                                            : std::to_string(checkpoints.size()) + " checkpoints");
  if (!temporaries.empty())
    parts.push_back(std::to_string(temporaries.size()) + " unfinished temporary file" +
                    (temporaries.size() == 1 ? "" : "s"));
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text;
}

RunFiles find_run_files(const std::string& dir) {
  RunFiles files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_checkpoint_name(name))
      files.checkpoints.push_back(name);
    else if (is_result_name(name))
      files.results.push_back(name);
    else if (is_temporary_name(name))
      files.temporaries.push_back(name);
  }
  std::sort(files.checkpoints.begin(), files.checkpoints.end());
  std::sort(files.results.begin(), files.results.end());
  std::sort(files.temporaries.begin(), files.temporaries.end());
  return files;
}

RunFolder::RunFolder(const std::string& dir, ResumeMode resume, bool overwrite)
    : dir_(dir), lock_path_((fs::path(dir) / kRunLockName).string()) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (fs::exists(status) && !fs::is_directory(status))
    throw UsageError("--out " + dir + " is not a folder");
  if (!fs::exists(status) && resume == ResumeMode::kYes)
    throw UsageError("--resume: " + dir +
                     " does not exist, so there is no run to continue (a new run starts there "
                     "without --resume; --resume=auto continues one only where there is one)");
  lock();
  try {
    earlier_ = find_run_files(dir);
    if (resume == ResumeMode::kNo) {
      if (earlier_.holds_run() && !overwrite)
        throw UsageError("--out " + dir + " holds an earlier run (" + earlier_.describe() +
                         "): continue it with --resume, start over with --overwrite (removes "
                         "those files), or choose another --out");
    } else if (!earlier_.checkpoints.empty()) {
      resume_ = true;
    } else if (resume == ResumeMode::kAuto && !earlier_.holds_run()) {
      notices_.push_back("notice: --resume=auto: no run in " + dir + " yet; starting a new one");
    } else {
      throw UsageError("--resume: no checkpoint (ckpt-<step>.safetensors) in " + dir +
                       ", so there is nothing to continue" +
                       (earlier_.holds_run()
                            ? "; it holds " + earlier_.describe() + ": start over with --overwrite"
                            : "; without --resume a new run starts there"));
    }
  } catch (...) {
    release();
    throw;
  }
}

RunFolder::~RunFolder() { release(); }

void RunFolder::release() {
  if (fd_ < 0 && !created_) return;
  if (created_) {
    // Nothing but our lock file: the run wrote nothing, so leave no folder behind.
    std::error_code ec;
    bool only_lock = true;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename() != kRunLockName) only_lock = false;
    if (!ec && only_lock) {
      ::unlink(lock_path_.c_str());
      ::rmdir(dir_.c_str());
    }
  }
  if (fd_ >= 0) ::close(fd_);  // releases the lock
  fd_ = -1;
  created_ = false;
}

void RunFolder::lock() {
  // A run that ends removes a folder it created (above): the lock file another run opened just
  // before may then be gone, and a lock on it protects nothing. Such a lock is taken again.
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::error_code ec;
    if (fs::create_directories(dir_, ec)) created_ = true;
    if (ec) throw UsageError("--out " + dir_ + ": cannot create the folder: " + ec.message());
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw UsageError("--out " + dir_ + ": cannot write into the folder (" + lock_path_ +
                       "): " + errno_text(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const std::string holder = read_holder(fd);
        ::close(fd);
        throw UsageError("--out " + dir_ + " is in use by another pets_train run (" +
                         (holder.empty() ? std::string("holder unknown") : holder) +
                         "); wait for it to end, or choose another --out");
      }
      ::close(fd);
      if (!locks_unsupported(err))
        throw UsageError("--out " + dir_ + ": cannot lock " + lock_path_ + ": " + errno_text(err));
      notices_.push_back("warning: --out " + dir_ + ": the file system does not lock files (" +
                         errno_text(err) + "); nothing stops another run from writing there");
      return;
    }
    struct stat held = {};
    struct stat there = {};
    if (::fstat(fd, &held) == 0 && ::stat(lock_path_.c_str(), &there) == 0 &&
        held.st_dev == there.st_dev && held.st_ino == there.st_ino) {
      fd_ = fd;
      const std::string text = holder_text() + "\n";
      if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) < 0)
        notices_.push_back("warning: cannot record this run in " + lock_path_ + ": " +
                           errno_text(errno));
      return;
    }
    ::close(fd);
  }
  throw UsageError("--out " + dir_ + ": cannot lock " + lock_path_ +
                   ": it keeps being removed by another run");
}

std::size_t RunFolder::remove_earlier_run() {
  std::size_t removed = 0;
  for (const std::string& name : earlier_.all()) {
    const fs::path path = fs::path(dir_) / name;
    std::error_code ec;
    if (fs::remove(path, ec)) ++removed;
    if (ec) throw UsageError("--overwrite: cannot remove " + path.string() + ": " + ec.message());
  }
  earlier_ = RunFiles{};
  return removed;
}

}  // namespace pets::train
