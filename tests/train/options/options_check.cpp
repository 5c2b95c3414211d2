// A stand-in for pets_train's start-up: run_mpi_program + the option parser, printing the
// resolved options on rank 0. Hidden flags (removed before parsing) inject failures:
//   --fail-on-rank R                  a fault (pets::Error) on rank R while the others wait in
//                                     MPI_Barrier: the job must die quickly, naming rank R
//   --usage-error-on-rank R           a UsageError on rank R only, inside agree_on_usage: a clean
//                                     exit 2 with one message
//   --usage-error-outside-agreement R a UsageError on rank R only while the others wait in
//                                     MPI_Barrier (a bug): caught by the agreement timeout
#include <mpi.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pets/comm/program.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/run/backend.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace {

struct Injections {
  int fail_on_rank = -1;
  int usage_on_rank = -1;
  int usage_outside_on_rank = -1;
};

std::vector<const char*> strip_hidden_flags(int argc, char** argv, Injections& inject) {
  std::vector<const char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    int* target = nullptr;
    if (std::strcmp(argv[i], "--fail-on-rank") == 0) target = &inject.fail_on_rank;
    if (std::strcmp(argv[i], "--usage-error-on-rank") == 0) target = &inject.usage_on_rank;
    if (std::strcmp(argv[i], "--usage-error-outside-agreement") == 0)
      target = &inject.usage_outside_on_rank;
    if (target != nullptr && i + 1 < argc) {
      *target = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

int body(int argc, char** argv) {
  Injections inject;
  const std::vector<const char*> args = strip_hidden_flags(argc, argv, inject);
  int rank = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));

  if (inject.fail_on_rank >= 0 || inject.usage_outside_on_rank >= 0) {
    if (rank == inject.fail_on_rank) PETS_ERROR("injected fault");
    if (rank == inject.usage_outside_on_rank)
      throw pets::UsageError("injected usage error on rank " + std::to_string(rank) + " only");
    PETS_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // never completes: the failing rank is gone
  }

  const pets::train::ParseResult result = pets::agree_on_usage([&] {
    if (rank == inject.usage_on_rank)
      throw pets::UsageError("injected usage error (input unreadable on rank " +
                             std::to_string(rank) + ")");
    pets::train::ParseResult r =
        pets::train::parse_train_options(static_cast<int>(args.size()), args.data());
    if (r.action == pets::train::Action::kTrain)
      pets::train::check_devices(r.options, static_cast<int>(torch::cuda::device_count()));
    return r;
  });

  switch (result.action) {
    case pets::train::Action::kHelp:
      if (rank == 0) std::printf("%s", result.help.c_str());
      return pets::kExitSuccess;
    case pets::train::Action::kWriteConfig:
      pets::agree_on_usage([&] {
        if (rank == 0) pets::train::write_config_file(result.options, result.options.write_config);
      });
      if (rank == 0) std::printf("wrote %s\n", result.options.write_config.c_str());
      return pets::kExitSuccess;
    case pets::train::Action::kTrain:
      if (rank == 0) std::printf("%s", pets::train::format_config(result.options).c_str());
      return pets::kExitSuccess;
  }
  return pets::kExitFault;
}

}  // namespace

int main(int argc, char** argv) {
  pets::RunSettings settings;
  settings.usage_agreement_timeout = std::chrono::seconds(3);
  return pets::run_mpi_program(argc, argv, body, settings);
}
