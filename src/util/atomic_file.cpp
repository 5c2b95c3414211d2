#include "pets/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "pets/util/error.hpp"

namespace pets {
namespace {

std::string errno_text() { return std::strerror(errno); }

void fsync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // Some filesystems do not allow opening folders; the rename still stands.
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::filesystem::path target(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) PETS_ERROR("cannot create '" + tmp + "': " + errno_text());
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      PETS_ERROR("cannot write '" + tmp + "' (" + std::to_string(written) + " of " +
                 std::to_string(contents.size()) + " bytes): " + why);
    }
    written += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const std::string sync_error = synced ? "" : errno_text();
  if (::close(fd) != 0 || !synced) {
    const std::string why = synced ? errno_text() : sync_error;
    ::unlink(tmp.c_str());
    PETS_ERROR("cannot flush '" + tmp + "': " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    PETS_ERROR("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
  fsync_folder(target.parent_path());
}

}  // namespace pets
