#pragma once
/// \file
/// The console of a multi-rank program: one rank speaks (rank 0), the others are silent.
/// Results go to stdout as whole lines; notices, warnings and summaries to stderr; progress on
/// stderr as a line redrawn in place (wiped before any other line, so that lines never mix with
/// it) or as plain lines (ProgressLine).

#include <cstdio>
#include <string>

#include "pets/util/progress.hpp"

namespace pets {

class RankLog {
 public:
  /// Prints only when `enabled` (pass `rank == 0`); the progress line only when `err` is a
  /// terminal.
  explicit RankLog(bool enabled, std::FILE* out = stdout, std::FILE* err = stderr);
  /// The same with the terminal test decided by the caller.
  RankLog(bool enabled, std::FILE* out, std::FILE* err, bool terminal);
  /// Progress as `mode` says (ProgressLine), plain lines every `interval`.
  RankLog(bool enabled, ProgressMode mode, std::chrono::duration<double> interval,
          std::FILE* out = stdout, std::FILE* err = stderr);

  bool enabled() const { return enabled_; }
  /// One line on stdout (a result, what the user reads or parses).
  void result(const std::string& line);
  /// One line on stderr (a notice, a warning, a summary).
  void note(const std::string& line);
  /// Shows progress (ProgressLine::draw).
  void progress(const std::string& text) { progress_.draw(text); }

 private:
  bool enabled_;
  std::FILE* out_;
  std::FILE* err_;
  ProgressLine progress_;
};

}  // namespace pets
