#include "pets/util/log.hpp"

namespace pets {

RankLog::RankLog(bool enabled, std::FILE* out, std::FILE* err)
    : enabled_(enabled), out_(out), err_(err), progress_(err, enabled) {}

RankLog::RankLog(bool enabled, std::FILE* out, std::FILE* err, bool terminal)
    : enabled_(enabled), out_(out), err_(err), progress_(err, enabled, terminal) {}

RankLog::RankLog(bool enabled, ProgressMode mode, std::chrono::duration<double> interval,
                 std::FILE* out, std::FILE* err)
    : enabled_(enabled), out_(out), err_(err), progress_(err, enabled, mode, interval) {}

void RankLog::result(const std::string& line) {
  if (!enabled_) return;
  progress_.clear();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void RankLog::note(const std::string& line) {
  if (!enabled_) return;
  progress_.clear();
  std::fprintf(err_, "%s\n", line.c_str());
  std::fflush(err_);
}

}  // namespace pets
