#pragma once
/// \file
/// The console of a multi-rank program: one rank speaks (rank 0), the others are silent.
/// Results go to stdout as whole lines; notices, warnings and summaries to stderr; on a terminal,
/// a progress line on stderr is wiped before either, so that lines never mix with it.

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

  bool enabled() const { return enabled_; }
  /// One line on stdout (a result, what the user reads or parses).
  void result(const std::string& line);
  /// One line on stderr (a notice, a warning, a summary).
  void note(const std::string& line);
  /// Redraws the progress line (terminal only).
  void progress(const std::string& text) { progress_.draw(text); }

 private:
  bool enabled_;
  std::FILE* out_;
  std::FILE* err_;
  ProgressLine progress_;
};

}  // namespace pets
