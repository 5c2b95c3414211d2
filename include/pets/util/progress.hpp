#pragma once
/// \file
/// A status line redrawn in place on a terminal, for long loops. On anything but a terminal (a
/// file, a pipe, a Slurm log) it draws nothing, so logs hold whole lines only.

#include <cstdio>
#include <string>

namespace pets {

class ProgressLine {
 public:
  /// Draws on `stream` when `enabled` and `stream` is a terminal.
  ProgressLine(std::FILE* stream, bool enabled);
  /// The same with the terminal test decided by the caller.
  ProgressLine(std::FILE* stream, bool enabled, bool terminal);

  /// True when draw() and clear() write anything.
  bool active() const { return active_; }
  /// Replaces the line with `text` ("\r" + text, padded so that it covers a longer line's tail).
  void draw(const std::string& text);
  /// Wipes the line, so that the next output on this terminal (stdout or stderr) starts clean.
  void clear();

 private:
  std::FILE* stream_;
  bool active_;
};

}  // namespace pets
