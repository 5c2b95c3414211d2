#pragma once
// The folder of the timm/PyTorch reference fixtures: $PETS_RESNET_FIXTURE, else
// tests/fixtures/resnet50d in the repository.
#include <cstdlib>
#include <string>

namespace pets::test {

inline std::string fixture_dir() {
  const char* env = std::getenv("PETS_RESNET_FIXTURE");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PETS_FIXTURE_DIR);
}

}  // namespace pets::test
