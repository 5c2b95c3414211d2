#include "pets/train/options/debug_switches.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "pets/util/atomic_file.hpp"
#include "pets/util/error.hpp"

namespace pets::train {

DebugSwitches DebugSwitches::from_environment() {
  return from([](const char* name) -> const char* { return std::getenv(name); });
}

DebugSwitches DebugSwitches::from(const std::function<const char*(const char*)>& lookup) {
  DebugSwitches s;
  if (const char* spec = lookup("PETS_INJECT_FAULT")) s.inject_fault = parse_fault_spec(spec);
  s.unfolded = lookup("PETS_UNFOLDED") != nullptr;
  s.verify_ranks = lookup("PETS_VERIFY_RANKS") != nullptr;
  s.default_malloc = lookup("PETS_DEFAULT_MALLOC") != nullptr;
  s.native_batchnorm = lookup("PETS_NATIVE_BATCHNORM") != nullptr;
  s.native_conv = lookup("PETS_NATIVE_CONV") != nullptr;
  s.no_warm_up = lookup("PETS_NO_WARM_UP") != nullptr;
  if (const char* spec = lookup("PETS_PAUSE_WRITE")) s.pause_write = parse_write_pause(spec);
  if (const char* spec = lookup("PETS_PAUSE_STEP")) s.pause_step = parse_step_pause(spec);
  if (const char* spec = lookup("PETS_DUMP_STEPS")) s.dump_steps = parse_step_dump(spec);
  if (const char* seconds = lookup("PETS_PAUSE_EVAL")) {
    char* end = nullptr;
    const double v = std::strtod(seconds, &end);
    if (end != seconds && *end == 0 && v >= 0.0) s.pause_eval_seconds = v;
  }
  return s;
}

void apply_process_switches(const DebugSwitches& switches) {
  if (switches.pause_write)
    set_atomic_write_pause(switches.pause_write->file_name, switches.pause_write->seconds);
}

std::optional<WritePause> parse_write_pause(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  WritePause p;
  p.file_name = text.substr(0, colon);
  if (p.file_name.find('/') != std::string::npos) return std::nullopt;
  const std::string seconds = text.substr(colon + 1);
  char* end = nullptr;
  p.seconds = std::strtod(seconds.c_str(), &end);
  if (seconds.empty() || end == nullptr || *end != 0 || !(p.seconds >= 0.0)) return std::nullopt;
  return p;
}

std::optional<StepPause> parse_step_pause(const std::string& text) {
  long long step = -1;
  double seconds = -1.0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%lld:%lf%c", &step, &seconds, &extra) != 2 || step < 0 ||
      !(seconds >= 0.0))
    return std::nullopt;
  return StepPause{static_cast<std::int64_t>(step), seconds};
}

std::optional<StepDumpSpec> parse_step_dump(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  const std::string count = text.substr(colon + 1);
  char* end = nullptr;
  const long long steps = std::strtoll(count.c_str(), &end, 10);
  if (count.empty() || end == nullptr || *end != 0 || steps < 1) return std::nullopt;
  return StepDumpSpec{text.substr(0, colon), static_cast<std::int64_t>(steps)};
}

std::optional<FaultSpec> parse_fault_spec(const std::string& text) {
  char kind[16] = {0};
  int rank = -1;
  long long step = -1;
  if (std::sscanf(text.c_str(), "%15[a-z0-9]:%d:%lld", kind, &rank, &step) != 3)
    return std::nullopt;
  return FaultSpec{kind, rank, static_cast<std::int64_t>(step)};
}

bool inject_fault(const std::optional<FaultSpec>& fault, int rank, std::int64_t step) {
  if (!fault || fault->rank != rank || fault->step != step) return false;
  const std::string& k = fault->kind;
  std::fprintf(stderr, "injecting fault '%s' on rank %d at step %lld\n", k.c_str(), rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  if (k == "sigkill") std::raise(SIGKILL);
  if (k == "abort") std::abort();
  if (k == "exit1") std::exit(1);
  if (k == "exit0") std::exit(0);
  if (k == "throw") PETS_ERROR("injected fault at step " + std::to_string(step));
  return k == "skew";
}

}  // namespace pets::train
