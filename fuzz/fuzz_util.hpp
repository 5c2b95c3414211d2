#pragma once
// Shared by the fuzz targets: an invariant check that crashes (so libFuzzer keeps the input),
// and a scratch file for the parsers that read from a path.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pets::fuzz {

/// A broken promise of the code under test: print it and abort, which libFuzzer reports as a
/// crash and saves the input for.
[[noreturn]] inline void invariant_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", what, file, line);
  std::abort();
}

/// One file per process, rewritten for every input: the store and config parsers take a path.
/// Under /dev/shm when it exists, so an input costs no disk I/O.
class ScratchFile {
 public:
  explicit ScratchFile(const char* tag) {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/pets_" + tag + "." + std::to_string(getpid());
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Replaces the file's contents with `data`.
  const std::string& write(const std::uint8_t* data, std::size_t size) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
      invariant_failed("cannot write the scratch file", __FILE__, __LINE__);
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pets::fuzz

#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) ::pets::fuzz::invariant_failed(#cond, __FILE__, __LINE__); \
  } while (0)
