// pets_train: frozen-backbone ResNet-50d fine-tuning on the preprocessed pets store, one process
// per rank (`mpirun -np N pets_train --data pets.h5`). Options: pets/train/options.hpp.
#include <mpi.h>

#include <cstdio>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/train/options.hpp"
#include "pets/train/trainer.hpp"

int main(int argc, char** argv) {
  return pets::run_mpi_program(argc, argv, [](int argc, char** argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const pets::train::ParseResult parsed = pets::train::parse_train_options(argc, argv);
    switch (parsed.action) {
      case pets::train::Action::kHelp:
        if (rank == 0) std::fputs(parsed.help.c_str(), stdout);
        return 0;
      case pets::train::Action::kWriteConfig:
        if (rank == 0) {
          pets::train::write_config_file(parsed.options, parsed.options.write_config);
          std::printf("wrote %s\n", parsed.options.write_config.c_str());
        }
        return 0;
      case pets::train::Action::kTrain:
        break;
    }
    // Wrong paths now, not after the model is built.
    pets::agree_on_usage([&] { pets::train::check_paths(parsed.options); });
    const pets::comm::MpiComm mpi;
    const pets::train::TrainResult result = pets::train::run_training(parsed.options, mpi);
    return result.preempted ? pets::train::kExitPreempted : 0;
  });
}
