#include "pets/train/debug_switches.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>

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
  return s;
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
