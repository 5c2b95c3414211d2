#pragma once
/// \file
/// Crash-safe file replacement: write to a temporary file beside the target, fsync it, rename it
/// over the target, fsync the folder. A reader sees the old file or the whole new one, never part.
/// The temporary file is `<target>.tmp.<host>.<pid>`: a writer killed before the rename leaves
/// it behind, and remove_stale_temp_files, at the next start, removes it once it can tell that
/// its writer is gone (same host, no such process).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pets/util/error.hpp"

namespace pets {

/// write_file_atomically's failure. what() is stamped with the source line and rank (a fault);
/// reason() is the bare "cannot create 'x': No such file or directory", for a caller that
/// reports it as bad input.
class FileWriteError : public Error {
 public:
  FileWriteError(const std::string& reason, const char* file, int line)
      : Error(stamp(reason, file, line)), reason_(reason) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

/// Writes `contents` to `path` atomically; throws FileWriteError naming the path on any failure
/// (the temporary file is removed, `path` is untouched).
void write_file_atomically(const std::string& path, const std::string& contents);

/// The temporary name write_file_atomically uses for `path` in this process:
/// `<path>.tmp.<host>.<pid>`, the host name reduced to [A-Za-z0-9._-].
std::string atomic_temp_path(const std::string& path);

/// A temporary file's name taken apart: `host` is empty for the older form `<target>.tmp.<pid>`
/// (no host recorded).
struct TempFileName {
  std::string target;  ///< the file it was to become (name only)
  std::string host;
  long pid = 0;
};

/// `name` (a file name, no folder) as write_file_atomically makes them, or nothing.
std::optional<TempFileName> parse_temp_name(const std::string& name);

/// What remove_stale_temp_files did with each temporary file in the folder.
struct StaleTempReport {
  std::vector<std::string> removed;  ///< paths removed: their writer is gone
  std::vector<std::string> kept;     ///< paths kept, each with the reason
};

/// Removes the temporary files of write_file_atomically in `folder` whose writer is gone: those
/// of this host whose process no longer runs. A file of another host (or of the older form,
/// without a host) cannot be checked from here: on a shared file system its writer may still run;
/// it is removed only when last modified before `older_than` (e.g. when the caller's lock on the
/// folder was taken), else kept and reported. Never throws for a file it cannot remove (reported
/// as kept).
StaleTempReport remove_stale_temp_files(
    const std::string& folder,
    std::optional<std::filesystem::file_time_type> older_than = std::nullopt);

/// Test switch (pets_train's PETS_PAUSE_WRITE): when a file named `file_name` is written, pause
/// `seconds` after its temporary file is complete and before the rename, with one line on stderr
/// first ("pausing before renaming ..."), so that a test can interrupt the writer there.
void set_atomic_write_pause(const std::string& file_name, double seconds);

}  // namespace pets
