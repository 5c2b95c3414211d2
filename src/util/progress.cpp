#include "pets/util/progress.hpp"

#include <unistd.h>

namespace pets {

namespace {

bool is_terminal(std::FILE* stream) { return ::isatty(::fileno(stream)) != 0; }

}  // namespace

std::string to_string(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::kAuto:
      return "auto";
    case ProgressMode::kBar:
      return "bar";
    case ProgressMode::kLines:
      return "lines";
    case ProgressMode::kNone:
      return "none";
  }
  return "?";
}

ProgressLine::ProgressLine(std::FILE* stream, bool enabled)
    : ProgressLine(stream, enabled, enabled && is_terminal(stream)) {}

ProgressLine::ProgressLine(std::FILE* stream, bool enabled, bool terminal)
    : stream_(stream), mode_(enabled && terminal ? ProgressMode::kBar : ProgressMode::kNone) {}

ProgressLine::ProgressLine(std::FILE* stream, bool enabled, ProgressMode mode,
                           std::chrono::duration<double> interval, std::optional<bool> terminal)
    : stream_(stream), mode_(ProgressMode::kNone), interval_(interval) {
  if (!enabled) return;
  if (mode == ProgressMode::kAuto)
    mode = terminal.value_or(is_terminal(stream)) ? ProgressMode::kBar : ProgressMode::kLines;
  mode_ = mode;
}

void ProgressLine::draw(const std::string& text, Clock::time_point now) {
  switch (mode_) {
    case ProgressMode::kBar:
      std::fprintf(stream_, "\r%s   ", text.c_str());
      break;
    case ProgressMode::kLines:
      if (last_line_ && now - *last_line_ < interval_) return;
      last_line_ = now;
      std::fprintf(stream_, "%s\n", text.c_str());
      break;
    case ProgressMode::kAuto:
    case ProgressMode::kNone:
      return;
  }
  std::fflush(stream_);
}

void ProgressLine::clear() {
  if (mode_ != ProgressMode::kBar) return;
  std::fprintf(stream_, "\r%-79s\r", "");
  std::fflush(stream_);
}

}  // namespace pets
