#pragma once
/// \file
/// Progress of a long loop, in one of two forms: a status line redrawn in place (for a terminal)
/// or plain lines written at a steady interval (for a file, a pipe, a Slurm log: under mpirun
/// rank 0's stderr is a pipe, where a redrawn line shows nothing until the end).

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

namespace pets {

/// How progress is shown (`pets_train --progress`).
enum class ProgressMode {
  kAuto,   ///< kBar on a terminal, kLines otherwise
  kBar,    ///< a line redrawn in place ("\r"), wherever the stream goes
  kLines,  ///< a plain line at a steady interval
  kNone,   ///< nothing
};

std::string to_string(ProgressMode mode);

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;

  /// Redraws on `stream` when `enabled` and `stream` is a terminal; elsewhere nothing.
  ProgressLine(std::FILE* stream, bool enabled);
  /// The same with the terminal test decided by the caller.
  ProgressLine(std::FILE* stream, bool enabled, bool terminal);
  /// `mode` on `stream` when `enabled` (kAuto decided by `terminal`, by default isatty(stream));
  /// kLines writes a line at the first draw() and then whenever `interval` has passed since the
  /// last line written (0: at every draw()).
  ProgressLine(std::FILE* stream, bool enabled, ProgressMode mode,
               std::chrono::duration<double> interval, std::optional<bool> terminal = std::nullopt);

  /// The form in use: kBar, kLines or kNone (never kAuto).
  ProgressMode mode() const { return mode_; }
  /// True when draw() can write anything.
  bool active() const { return mode_ != ProgressMode::kNone; }
  /// Shows `text`: kBar replaces the line ("\r" + text, padded so that it covers a longer
  /// line's tail); kLines writes "text\n" when the interval has passed at `now`.
  void draw(const std::string& text, Clock::time_point now = Clock::now());
  /// Wipes a redrawn line, so that the next output on this terminal (stdout or stderr) starts
  /// clean. Nothing to do for kLines.
  void clear();

 private:
  std::FILE* stream_;
  ProgressMode mode_;
  std::chrono::duration<double> interval_{0};
  std::optional<Clock::time_point> last_line_;
};

}  // namespace pets
