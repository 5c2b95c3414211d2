#include "pets/util/progress.hpp"

#include <unistd.h>

namespace pets {

ProgressLine::ProgressLine(std::FILE* stream, bool enabled)
    : ProgressLine(stream, enabled, enabled && ::isatty(::fileno(stream)) != 0) {}

ProgressLine::ProgressLine(std::FILE* stream, bool enabled, bool terminal)
    : stream_(stream), active_(enabled && terminal) {}

void ProgressLine::draw(const std::string& text) {
  if (!active_) return;
  std::fprintf(stream_, "\r%s   ", text.c_str());
  std::fflush(stream_);
}

void ProgressLine::clear() {
  if (!active_) return;
  std::fprintf(stream_, "\r%-79s\r", "");
  std::fflush(stream_);
}

}  // namespace pets
